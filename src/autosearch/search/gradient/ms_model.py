"""The gradient cost model as a MetaSchedule `PyCostModel`, so evolutionary search can use it.

Why: the comparison gradient search vs evolutionary search must hold the cost model fixed. Here
a candidate's features are the same symbolic ones, evaluated at the decisions of its trace (its
sketch found by canonical trace matching); a candidate of no known sketch scores lowest.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from autosearch.search.gradient.data import SketchSet
from autosearch.search.gradient.model import GradientCostModel, Group
from autosearch.search.gradient.sketch import Decisions, to_json

__all__ = ["gradient_ms_cost_model"]

_CLASS: Any = None


def _features(sset: SketchSet, candidates: Any) -> tuple[list[int | None], dict[int, list[tuple[int, Decisions]]]]:
    where: list[int | None] = []
    per: dict[int, list[tuple[int, Decisions]]] = {}
    for i, c in enumerate(candidates):
        hit = sset.match(to_json(c.sch.trace), strict=False)
        where.append(None if hit is None else hit[0])
        if hit is not None:
            per.setdefault(hit[0], []).append((i, hit[1]))
    return where, per


def gradient_ms_cost_model(model: GradientCostModel, sset: SketchSet, update_epochs: int = 10) -> Any:
    """A PyCostModel scoring MetaSchedule candidates with `model` on `sset`'s features."""
    global _CLASS
    if _CLASS is None:
        from tvm.ir.utils import derived_object
        from tvm.s_tir.meta_schedule.cost_model import PyCostModel

        @derived_object
        class GradientMSCostModel(PyCostModel):
            """MetaSchedule face of a GradientCostModel."""

            def __init__(self, model: GradientCostModel, sset: SketchSet, update_epochs: int) -> None:
                super().__init__()
                self.model, self.sset, self.update_epochs = model, sset, update_epochs
                self.rows: dict[int, list[tuple[Decisions, float | None]]] = {}

            def load(self, path: str) -> None:
                self.model = GradientCostModel.load(path)

            def save(self, path: str) -> None:
                self.model.save(path)

            def predict(self, context: Any, candidates: Any) -> np.ndarray:
                cands = list(candidates)
                _, per = _features(self.sset, cands)
                out = np.full(len(cands), np.nan)
                for s, items in per.items():
                    out[[i for i, _ in items]] = self.model.predict(
                        self.sset.fns[s].of_decisions([d for _, d in items])
                    )
                low = np.nanmin(out) - 1.0 if np.isfinite(out).any() else 0.0
                return np.where(np.isfinite(out), out, low)

            def update(self, context: Any, candidates: Any, results: Any) -> None:
                cands = list(candidates)
                _, per = _features(self.sset, cands)
                for s, items in per.items():
                    for i, d in items:
                        secs = results[i].run_secs
                        lat = float(np.median([float(x) for x in secs])) if secs else None
                        self.rows.setdefault(s, []).append((d, lat))
                groups = [
                    Group(
                        f"run/{s}",
                        self.sset.fns[s].of_decisions([r[0] for r in rows]).to(torch.float32),
                        [r[1] for r in rows],
                    )
                    for s, rows in self.rows.items()
                    if len(rows) >= 2 and any(r[1] is not None for r in rows)
                ]
                if groups:
                    self.model.update(groups, epochs=self.update_epochs)

        _CLASS = GradientMSCostModel
    return _CLASS(model, sset, update_epochs)
