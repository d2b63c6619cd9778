"""Any autosearch cost model inside MetaSchedule's search, as a `PyCostModel`.

`ModelAdapter` holds the logic (pure Python + NumPy, testable without TVM): score feature
matrices, collect measured results, and decide when to retrain. `ms_cost_model(adapter)` wraps it
in MetaSchedule's `PyCostModel` interface (predict = extract PerStoreFeature + score; update =
extract + observe), so it plugs into `ms.tune_tir`, `TuneContext.pre_tuning` or our own loop.

Adaptive retraining (retraining is a known large share of MetaSchedule tuning time): measured
results are buffered, and the model is retrained only when the buffered results number at least
`retrain_fraction` of what the model has already been trained on during this run (and at least
`min_new`). Only results measured in this run count: a model pretrained on 10k schedules would
otherwise never adapt to the operator at hand. MetaSchedule's own XGBModel uses the same rule
with fraction 1/5.

How a retrain happens:
- a pretrained (or loaded) model whose kind supports cheap incremental training (`mlp`, `xgb`,
  `lgbm-rank`, `tvm-mlp`) gets `model.update(new results)`;
- a fresh model (`--model xgb|mlp` without pretraining) is fitted from scratch on everything
  measured so far (a few hundred candidates at most: cheap), as TVM's XGBModel does.
Labels of new results are normalised by the best latency measured so far in their group, not
just within the new batch, so they stay on one scale across rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from autosearch.errors import InputError

__all__ = ["INCREMENTAL_KINDS", "ModelAdapter", "check_extractor", "group_key", "ms_cost_model"]

#: Model kinds whose `update()` is a cheap incremental step that keeps what pretraining learned.
INCREMENTAL_KINDS = frozenset({"mlp", "xgb", "lgbm-rank", "tvm-mlp"})


def check_extractor(model: Any, extractor: tuple[str, str], n_features: int) -> None:
    """Refuse a model trained on other features than the ones tuning extracts (one line)."""
    got = tuple(getattr(model, "extractor", ()) or ())
    if got and got != tuple(extractor):
        raise InputError(
            f"the model was trained on features {':'.join(got)} but tuning extracts {':'.join(extractor)}: "
            "retrain it on this extractor"
        )
    width = getattr(model, "n_features", None)
    if width is not None and int(width) != n_features:
        raise InputError(f"the model expects {width} features per row but {':'.join(extractor)} gives {n_features}")


@dataclass
class _Group:
    feats: list[np.ndarray] = field(default_factory=list)
    lats: list[float | None] = field(default_factory=list)

    @property
    def best(self) -> float | None:
        ok = [x for x in self.lats if x is not None]
        return min(ok) if ok else None


class ModelAdapter:
    """Scores candidates with an autosearch `CostModel` and retrains it adaptively.

    model: a trained CostModel (pretrained / loaded), or None with `kind` to train one from
    scratch on the results of this run (until then, scores are random: pure exploration).
    timer: optional `section(name)` context-manager factory (a TimeBreakdown's `section`).
    """

    def __init__(
        self,
        model: Any = None,
        *,
        kind: str | None = None,
        model_kw: dict[str, Any] | None = None,
        retrain_fraction: float = 0.2,
        min_new: int = 1,
        seed: int = 0,
        timer: Callable[[str], Any] | None = None,
    ) -> None:
        if model is None and kind is None:
            raise InputError("ModelAdapter needs a trained model or a model kind to train from scratch")
        if retrain_fraction < 0:
            raise InputError(f"retrain_fraction must be >= 0, got {retrain_fraction}")
        self.model = model
        self.kind = kind or getattr(model, "kind", "?")
        self.model_kw = dict(model_kw or {})
        self.pretrained = model is not None
        self.retrain_fraction = float(retrain_fraction)
        self.min_new = max(1, int(min_new))
        self.rng = np.random.default_rng(seed)
        self.timer = timer
        self.groups: dict[str, _Group] = {}
        self.pending: dict[str, _Group] = {}
        self.trained_on = 0  # results of this run the model has been trained on
        self.n_retrains = 0
        self.n_skipped = 0

    # -- helpers -----------------------------------------------------------------------------
    def _section(self, name: str) -> Any:
        if self.timer is None:
            from contextlib import nullcontext

            return nullcontext()
        return self.timer(name)

    @property
    def n_pending(self) -> int:
        return sum(len(g.lats) for g in self.pending.values())

    @property
    def n_seen(self) -> int:
        return sum(len(g.lats) for g in self.groups.values())

    def should_retrain(self) -> bool:
        """The adaptive rule: enough new results relative to what the model was trained on."""
        n = self.n_pending
        return n >= self.min_new and n >= self.retrain_fraction * self.trained_on

    # -- scoring -----------------------------------------------------------------------------
    def score(self, feats: Sequence[np.ndarray]) -> np.ndarray:
        """float64 score per candidate (higher = faster); always finite."""
        from autosearch.models.base import FeatureBatch

        n = len(feats)
        if n == 0:
            return np.zeros(0, dtype=np.float64)
        if self.model is None:
            return self.rng.uniform(size=n)
        with self._section("predict"):
            scores = np.asarray(self.model.predict(FeatureBatch.from_list(list(feats))), dtype=np.float64)
        bad = ~np.isfinite(scores)
        if bad.any():  # candidates without stores score below everything else
            floor = scores[~bad].min() - 1.0 if (~bad).any() else 0.0
            scores = np.where(bad, floor, scores)
        return scores

    # -- learning ----------------------------------------------------------------------------
    def observe(self, group: str, feats: Sequence[np.ndarray], latencies: Sequence[float | None]) -> bool:
        """Record measured results (latency None = failed); retrain if the rule says so."""
        if len(feats) != len(latencies):
            raise InputError(f"{len(feats)} feature matrices but {len(latencies)} latencies")
        for f, lat in zip(feats, latencies):
            ok = lat is not None and np.isfinite(lat) and lat > 0
            for store in (self.groups, self.pending):
                g = store.setdefault(group, _Group())
                g.feats.append(np.asarray(f, dtype=np.float32))
                g.lats.append(float(lat) if ok else None)
        if not self.should_retrain():
            self.n_skipped += 1
            return False
        with self._section("update"):
            self._retrain()
        return True

    def _dataset(self, groups: dict[str, _Group]) -> Any:
        """A Dataset of these groups, labels normalised by each group's best latency so far."""
        from autosearch.training.dataset import Dataset

        items = [(k, "tuning", g.feats, g.lats) for k, g in groups.items() if any(len(f) for f in g.feats)]
        if not items:
            return None
        import warnings

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

    def _retrain(self) -> None:
        n_new = self.n_pending
        incremental = self.model is not None and self.pretrained and self.kind in INCREMENTAL_KINDS
        if incremental:
            ds = self._dataset(self.pending)
            if ds is not None and ds.n_candidates and np.any(ds.labels > 0):
                self.model.update(ds)
        else:
            ds = self._dataset(self.groups)
            if ds is None or not ds.n_candidates or not np.any(ds.labels > 0):
                self.pending.clear()
                return
            if self.model is None or not self.pretrained:
                from autosearch.models import make_model

                kw = dict(self.model_kw)
                model = make_model(self.kind, **kw)
            else:  # a pretrained model without cheap updates: refit on this run's data would forget
                model = self.model  # pretraining, so keep it as it is
                self.pending.clear()
                return
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):
                model.fit(ds)
            self.model = model
        self.trained_on += n_new
        self.n_retrains += 1
        self.pending.clear()


def group_key(mod: Any) -> str:
    """The group of a TuneContext's module: its structural hash, as 16 hex digits."""
    import tvm_ffi

    return f"{int(tvm_ffi.structural_hash(mod)) & 0xFFFF_FFFF_FFFF_FFFF:016x}"


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

    from autosearch.backends.tvm.features import extract_features

    @derived_object
    class AutosearchCostModel(PyCostModel):
        """MetaSchedule face of a ModelAdapter."""

        def __init__(self, adapter: ModelAdapter) -> None:
            super().__init__()
            self.adapter = adapter

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
                feats = extract_features(context, list(candidates))
            self.adapter.observe(group_key(context.mod), feats, [_median(r.run_secs) for r in results])

        def predict(self, context: Any, candidates: Any) -> np.ndarray:
            with self.adapter._section("features"):
                feats = extract_features(context, list(candidates))
            return self.adapter.score(feats)

    _CLASS = AutosearchCostModel
    return _CLASS


def ms_cost_model(adapter: ModelAdapter) -> Any:
    """The adapter as a MetaSchedule `PyCostModel` (usable in `ms.tune_tir(cost_model=...)`)."""
    return _ms_class()(adapter)
