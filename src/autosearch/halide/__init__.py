"""Halide Adams2019 side of autosearch, under the short name the quick start uses.

    from autosearch.halide import autosampler
    autosampler.retrain_cost_model("random", "random_pipeline", 2)

The implementation lives in `autosearch.backends.halide`; this package only re-exports it.
"""

from autosearch.halide import autosampler

__all__ = ["autosampler"]
