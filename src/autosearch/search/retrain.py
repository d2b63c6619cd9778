"""When a tuning run refits its model, and how: the results measured in this run (`RunResults`)
and the adaptive rule over them (`RetrainRule`).

Why a rule: retraining is a known large share of MetaSchedule's tuning time. Measured results are
buffered, and the model is retrained only when the buffered results number at least
`retrain_fraction` of what the model has already been trained on during this run (and at least
`min_new`). Only results measured in this run count: a model pretrained on many thousand
schedules would otherwise never adapt to the operator at hand. MetaSchedule's own XGBModel uses
the same rule with fraction 1/5.

How a retrain happens:
- a pretrained (or loaded) model whose class updates cheaply and keeps what pretraining learned
  (`CostModel.incremental`) gets `model.update(new results)`;
- a pretrained model without cheap updates is kept as it is (a refit on the run's few hundred
  results would forget pretraining);
- a fresh model (`--model xgb|mlp|lgbm-rank` without pretraining) is fitted from scratch on
  everything measured so far (a few hundred candidates at most: cheap), as TVM's XGBModel does.
Labels of new results are normalised by the best latency measured so far in their group, not
just within the new batch, so they stay on one scale across rounds.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autosearch.errors import InputError

if TYPE_CHECKING:
    from autosearch.models.base import CostModel
    from autosearch.training.dataset import Dataset

__all__ = ["RetrainRule", "RunResults", "learnable", "quiet_fit"]


@dataclass
class _Group:
    feats: list[np.ndarray] = field(default_factory=list)
    lats: list[float | None] = field(default_factory=list)

    @property
    def best(self) -> float | None:
        ok = [x for x in self.lats if x is not None]
        return min(ok) if ok else None


class RunResults:
    """The results measured in this run, by group: all of them (`groups`), and those no retrain
    has learned yet (`pending`). Why both: an incremental update learns the new ones, a fresh fit
    and the online model everything, and labels are scaled by the best of everything."""

    def __init__(self) -> None:
        self.groups: dict[str, _Group] = {}
        self.pending: dict[str, _Group] = {}

    @property
    def n_pending(self) -> int:
        return sum(len(g.lats) for g in self.pending.values())

    @property
    def n_seen(self) -> int:
        return sum(len(g.lats) for g in self.groups.values())

    def add(self, group: str, feats: Sequence[np.ndarray], latencies: Sequence[float | None]) -> None:
        """Record measured results (latency None, non-finite or <= 0: failed)."""
        if len(feats) != len(latencies):
            raise InputError(f"{len(feats)} feature matrices but {len(latencies)} latencies")
        for f, lat in zip(feats, latencies):
            ok = lat is not None and np.isfinite(lat) and lat > 0
            for store in (self.groups, self.pending):
                g = store.setdefault(group, _Group())
                g.feats.append(np.asarray(f, dtype=np.float32))
                g.lats.append(float(lat) if ok and lat is not None else None)

    def dataset(self, *, pending: bool) -> Dataset | None:
        """A Dataset of the pending (or all) results, labels normalised by each group's best
        latency so far; None where nothing can be learned."""
        from autosearch.training.dataset import Dataset

        groups = self.pending if pending else self.groups
        items = [(k, "tuning", g.feats, g.lats) for k, g in groups.items() if any(len(f) for f in g.feats)]
        if not items:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an all-failed group is dropped: nothing to learn from it
            try:
                ds = Dataset.from_groups(items)
            except InputError:
                return None
        for gi in ds.groups:
            best = self.groups[gi.workload_key].best
            lat = ds.latencies[gi.start : gi.stop]
            if best is not None:
                ds.labels[gi.start : gi.stop] = np.where(np.isfinite(lat), best / lat, 0.0)
        return ds


def learnable(ds: Dataset | None) -> bool:
    """Whether `ds` has a candidate and a successful measurement to learn from."""
    return ds is not None and bool(ds.n_candidates) and bool(np.any(ds.labels > 0))


def quiet_fit(model: CostModel, ds: Dataset) -> None:
    """`model.fit(ds)` without its progress lines (a run fits between rounds)."""
    with contextlib.redirect_stdout(io.StringIO()):
        model.fit(ds)


class RetrainRule:
    """Whether a run's model is due for a retrain, and the retrain itself (module docstring).

    fraction: retrain once the pending results number this share of what the model was trained
    on in this run; min_new: and at least this many. fresh_kind, fresh_kw: the model kind (and
    its hyper-parameters) fitted from scratch when the scorer has no pretrained model."""

    def __init__(
        self, fraction: float = 0.2, min_new: int = 1, *, fresh_kind: str, fresh_kw: dict[str, Any] | None = None
    ) -> None:
        if fraction < 0:
            raise InputError(f"retrain_fraction must be >= 0, got {fraction}")
        self.fraction = float(fraction)
        self.min_new = max(1, int(min_new))
        self.fresh_kind = fresh_kind
        self.fresh_kw = dict(fresh_kw or {})
        self.trained_on = 0  # results of this run the model has been trained on
        self.n_retrains = 0
        self.n_skipped = 0

    def due(self, results: RunResults) -> bool:
        """The adaptive rule: enough new results relative to what the model was trained on."""
        n = results.n_pending
        return n >= self.min_new and n >= self.fraction * self.trained_on

    def retrain(self, model: CostModel | None, pretrained: bool, results: RunResults) -> CostModel | None:
        """Retrain on `results` (clearing what is pending); the model to score with from now on."""
        n_new = results.n_pending
        if model is not None and pretrained and type(model).incremental:
            ds = results.dataset(pending=True)
            if ds is not None and learnable(ds):
                model.update(ds)
        else:
            ds = results.dataset(pending=False)
            if ds is None or not learnable(ds):
                results.pending.clear()
                return model
            if model is not None and pretrained:  # a pretrained model without cheap updates: refit on
                results.pending.clear()  # this run's data would forget pretraining, so keep it as it is
                return model
            from autosearch.models import make_model

            model = make_model(self.fresh_kind, **self.fresh_kw)
            quiet_fit(model, ds)
        self.trained_on += n_new
        self.n_retrains += 1
        results.pending.clear()
        return model
