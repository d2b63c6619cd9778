"""A `ModelAdapter` as MetaSchedule's `PyCostModel` (`ms_cost_model`), so any autosearch cost
model plugs into `ms.tune_tir`, `TuneContext.pre_tuning` or MetaSchedule's evolutionary search.

Why apart from the adapter: this is the one piece that needs TVM (its `PyCostModel` class is
built on first use), while the adapter's logic is Python and NumPy and is tested without TVM.
predict = extract the adapter's features + score through the exploration policy; update =
extract + `observe`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from autosearch.errors import InputError

__all__ = ["group_key", "ms_cost_model"]


class ModelAdapter(Protocol):
    """What the face reads of a `search.adapter.ModelAdapter` (a Protocol, so that the adapter,
    which hands itself to `ms_cost_model`, is not imported back)."""

    model: Any
    pretrained: bool
    featurize: Callable[[Any, Sequence[Any]], list[np.ndarray]] | None

    def _section(self, name: str) -> Any: ...

    def observe(
        self,
        group: str,
        feats: Sequence[np.ndarray],
        latencies: Sequence[float | None],
        verdict: tuple[float, float] | None = None,
    ) -> bool: ...


def group_key(mod: Any) -> str:
    """The group of a TuneContext's module: its structural key (16 hex digits)."""
    from autosearch.workloads.base import structural_key

    return structural_key(mod)


def _median(run_secs: Any) -> float | None:
    if not run_secs:
        return None
    vals = [float(getattr(x, "value", x)) for x in run_secs]
    return float(np.median(vals)) if vals else None


_CLASS: Any = None


def _ms_class() -> Any:
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.cost_model import PyCostModel

    from autosearch.features.per_store import extract_features

    @derived_object
    class AutosearchCostModel(PyCostModel):
        """MetaSchedule face of a ModelAdapter."""

        def __init__(self, adapter: ModelAdapter, policy: Any) -> None:
            super().__init__()
            self.adapter, self.policy = adapter, policy

        def load(self, path: str) -> None:
            from autosearch.models import load_model

            self.adapter.model = load_model(path)
            self.adapter.pretrained = True

        def save(self, path: str) -> None:
            if self.adapter.model is None:
                raise InputError("the model has not been trained yet: nothing to save")
            self.adapter.model.save(path)

        def update(self, context: Any, candidates: Any, results: Any) -> None:
            with self.adapter._section("features"):
                feats = (self.adapter.featurize or extract_features)(context, list(candidates))
            self.adapter.observe(group_key(context.mod), feats, [_median(r.run_secs) for r in results])

        def predict(self, context: Any, candidates: Any) -> np.ndarray:
            with self.adapter._section("features"):
                feats = (self.adapter.featurize or extract_features)(context, list(candidates))
            return self.policy.score(self.adapter, feats)

    _CLASS = AutosearchCostModel
    return _CLASS


def ms_cost_model(adapter: ModelAdapter, policy: Any = None) -> Any:
    """The adapter as a MetaSchedule `PyCostModel` (usable in `ms.tune_tir(cost_model=...)`),
    scoring through the exploration `policy` (default: none)."""
    from autosearch.search.explore import NoExploration

    return _ms_class()(adapter, policy or NoExploration())
