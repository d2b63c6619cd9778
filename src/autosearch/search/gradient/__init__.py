"""Gradient-descent schedule search (Felix) on MetaSchedule design spaces.

sketch.py     the knobs of a design space (tile factors, categorical choices), relaxed and rounded
structure.py  the sketch's loop structure as functions of the knobs (read from concrete replays)
features.py   per-block features as differentiable PyTorch functions of the knobs
concrete.py   the same quantities measured on concrete schedules by TVM's analyses (the reference)
model.py      an MLP on those features with a rank loss (JSON + safetensors)
data.py       training groups from a store's traces; the relaxable sketches of a workload
pretrain.py   pretraining on a store (`python -m autosearch.search.gradient.pretrain`)
optimize.py   Adam on the relaxed knobs, rounding, dedup: `GradientSearch` (propose / observe)

On the tuning model itself (a `tlp` prior over trace-prefix tokens, `--model pretrained-prefix`):
prior_tokens.py   the prefix tokens as a torch function of a sketch's relaxed knobs (exact at integral points)
prior_descent.py  Adam on the prior's score over the decision search's sketches: `PriorGradientSearch`
"""

from __future__ import annotations

from typing import Any

from autosearch.search.gradient.sketch import relax_reason

__all__ = ["GradientSearch", "relax_reason"]


def __getattr__(name: str) -> Any:  # GradientSearch imports torch: only when asked for
    if name == "GradientSearch":
        from autosearch.search.gradient.optimize import GradientSearch

        return GradientSearch
    raise AttributeError(name)
