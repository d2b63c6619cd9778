"""Gradient-descent schedule search (Felix) on MetaSchedule design spaces.

sketch.py     the knobs of a design space (tile factors, categorical choices), relaxed and rounded
structure.py  the sketch's loop structure as functions of the knobs (read from concrete replays)
features.py   per-block features as differentiable PyTorch functions of the knobs
concrete.py   the same quantities measured on concrete schedules by TVM's analyses (the reference)
model.py      an MLP on those features with a rank loss (JSON + safetensors)
optimize.py   Adam on the relaxed knobs, rounding, dedup: `GradientSearch` (propose / observe)
"""

from __future__ import annotations

from autosearch.search.gradient.sketch import relax_reason

__all__ = ["relax_reason"]
