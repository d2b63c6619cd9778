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
  `lgbm-rank`, `tvm-mlp`, `tlp`) gets `model.update(new results)`;
- a fresh model (`--model xgb|mlp` without pretraining) is fitted from scratch on everything
  measured so far (a few hundred candidates at most: cheap), as TVM's XGBModel does.
Labels of new results are normalised by the best latency measured so far in their group, not
just within the new batch, so they stay on one scale across rounds.

Prior + online model (`online="xgb"`, CLI `--model pretrained+xgb`): a pretrained prior knows
operators in general but adapts slowly to the one at hand; a model fitted from scratch on the
run's own measurements (what MetaSchedule's XGBModel is) knows only this operator. Once
`online_warmup` results are measured, an online model is refitted at every retrain, and the score
is a blend of both (each z-normalised over the measured candidates). The blend weight follows
which of the two ordered the newest results better before either had seen them (the last three
retrains): it starts at 0.5 and moves to whichever model predicts the run's fresh measurements,
by `online_gain` x the accuracy gap. Defaults 16 and 1 (were 32 and 5): with the online model
from the second round and a weight that moves 0.1 per 0.1 of accuracy gap, 1.128x faster
schedules at 64 trials on an AMD Zen 4, six workloads x 3 seeds, interleaved (bench/README.md);
the rounds blended near 0.5 were the best ones, and a weight thrown to 0 or 1 by one noisy
judgement of 16 results the worst.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from autosearch.errors import InputError
from autosearch.search.scorer import Scorer

__all__ = [
    "INCREMENTAL_KINDS",
    "ONLINE_FIT_OPTIONS",
    "ONLINE_KINDS",
    "ModelAdapter",
    "check_extractor",
    "group_key",
    "ms_cost_model",
]

#: Model kinds whose `update()` is a cheap incremental step that keeps what pretraining learned.
INCREMENTAL_KINDS = frozenset({"mlp", "xgb", "lgbm-rank", "tvm-mlp", "tlp"})
#: Model kinds that can be fitted from scratch on a run's results (fresh or online models).
ONLINE_KINDS = ("xgb", "mlp", "lgbm-rank")
#: Hyper-parameters an online model of each kind is refitted with. XGBoost: one thread, since a few
#: hundred rows are fitted and its OpenMP threads spin when another process holds a core
#: (measured: 256 candidates, 0.7 s with 1 thread, 14 s with 2 in that case).
ONLINE_FIT_OPTIONS: dict[str, dict[str, Any]] = {"xgb": {"nthread": 1}, "mlp": {}, "lgbm-rank": {}}


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


class ModelAdapter(Scorer):
    """Scores candidates with an autosearch `CostModel` and retrains it adaptively (a `Scorer`:
    it predicts and updates; exploration is the search strategy's policy, search/explore.py).

    model: a trained CostModel (pretrained / loaded), or None with `kind` to train one from
    scratch on the results of this run (until then, scores are random: pure exploration).
    timer: optional `section(name)` context-manager factory (a TimeBreakdown's `section`).
    online: with a trained `model`, the kind of a model fitted from scratch on this run's results
    once `online_warmup` are measured, and blended with `model` (see the module docstring);
    `online_gain` sets how fast the blend weight follows the two models' held-back accuracy.
    score_threads: torch threads for scoring decision vectors (`score_space`); `tune` sets the
    machine's physical cores, since nothing else of the run works while the search scores.
    """

    scores_decision_vectors: ClassVar[bool] = True

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
        online: str | None = None,
        online_warmup: int = 16,
        online_gain: float = 1.0,
    ) -> None:
        if model is None and kind is None:
            raise InputError("ModelAdapter needs a trained model or a model kind to train from scratch")
        if online is not None and (model is None or online not in ONLINE_KINDS):
            raise InputError(
                f"an online model needs a trained prior and a kind among {', '.join(ONLINE_KINDS)}, got {online!r}"
            )
        if online is not None and online_warmup < 2:
            raise InputError(f"the online warm-up must be at least 2 results (one pair to order), got {online_warmup}")
        if online is not None and not (np.isfinite(online_gain) and online_gain > 0):
            raise InputError(f"the online blend's gain must be a number > 0, got {online_gain}")
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
        self.seed = seed
        self.score_threads = 1
        self.online_kind = online
        self.online_warmup = int(online_warmup)
        #: How far the blend weight moves from 0.5 per unit of held-back pairwise accuracy the
        #: online model has over the prior (clipped to [0, 1]).
        self.online_gain = float(online_gain)
        self.online_model: Any = None
        self.online_weight = 0.0
        self._norm: tuple[tuple[float, float], tuple[float, float]] = ((0.0, 1.0), (0.0, 1.0))
        self.held_back: list[tuple[float, float]] = []  # (prior, online) pairwise accuracy on unseen results
        #: What the model reads, computed for MetaSchedule candidates (search.featurize); set by
        #: `model_spec.make_scorer`. Default: PerStoreFeature.
        self.extractor: tuple[str, ...] = ("per-store-feature", "tvm-0.27")
        self.featurize: Callable[[Any, Sequence[Any]], list[np.ndarray]] | None = None

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

    @property
    def trained(self) -> bool:
        return self.model is not None

    @property
    def online_share(self) -> float | None:
        return self.online_weight if self.online_model is not None else None

    def should_retrain(self) -> bool:
        """The adaptive rule: enough new results relative to what the model was trained on."""
        n = self.n_pending
        return n >= self.min_new and n >= self.retrain_fraction * self.trained_on

    # -- scoring -----------------------------------------------------------------------------
    def score(self, feats: Sequence[np.ndarray]) -> np.ndarray:
        """float64 score per candidate (higher = faster); always finite. A model fitted on the run
        alone scores at random until its first fit (pure exploration)."""
        if len(feats) == 0:
            return np.zeros(0, dtype=np.float64)
        if self.model is None:
            return self.rng.uniform(size=len(feats))
        return self.model_scores(feats)

    def score_spread(self, feats: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
        """`score` and, for an ensemble, its members' spread (None otherwise)."""
        scores = self.score(feats)
        members = getattr(self.model, "predict_members", None)
        if not len(feats) or not callable(members) or getattr(self.model, "members", 1) <= 1:
            return scores, None
        from autosearch.training.batch import FeatureBatch

        with self._section("predict"):
            spread = np.asarray(members(FeatureBatch.from_list(list(feats))), dtype=np.float64).std(axis=0)
        return scores, spread

    def score_space(self, space: Any, x: np.ndarray) -> np.ndarray:
        """`score` of decision vectors `x` of a `features.decision_space.DecisionSpace`. A model
        with `predict_space_members` (tlp) scores them from its tables without tokens (the same
        scores, several times faster); the online model, if it blends in, reads the tokens."""
        return self._score_space(space, x, spread=False)[0]

    def score_space_spread(self, space: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """`score_space` and the ensemble members' spread (None for one model)."""
        return self._score_space(space, x, spread=True)

    def _score_space(self, space: Any, x: np.ndarray, *, spread: bool) -> tuple[np.ndarray, np.ndarray | None]:
        fast = getattr(self.model, "predict_space_members", None)
        if not callable(fast) or not len(x):
            tokens = list(space.tokens(x))
            return self.score_spread(tokens) if spread else (self.score(tokens), None)
        with self._section("predict"):
            members = np.asarray(fast(space, x, threads=self.score_threads), dtype=np.float64)
        online = self._predict_online(list(space.tokens(x))) if self._online_blends else None
        scores = self._blend(members.mean(axis=0), online)
        return scores, (members.std(axis=0) if spread and len(members) > 1 else None)

    def score_parts(self, feats: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """The prior's and the online model's scores, each alone ({} without an online model)."""
        if self.online_model is None or self.model is None:
            return {}
        from autosearch.training.batch import FeatureBatch

        batch = FeatureBatch.from_list(list(feats))
        return {
            "prior": np.asarray(self.model.predict(batch), dtype=np.float64),
            "online": np.asarray(self.online_model.predict(batch), dtype=np.float64),
        }

    def model_scores(self, feats: Sequence[np.ndarray]) -> np.ndarray:
        """The prior's (or the prior + online blend's) scores, finite, without exploration."""
        from autosearch.training.batch import FeatureBatch

        with self._section("predict"):
            batch = FeatureBatch.from_list(list(feats))
            scores = np.asarray(self.model.predict(batch), dtype=np.float64)
        return self._blend(scores, self._predict_online(batch) if self._online_blends else None)

    @property
    def _online_blends(self) -> bool:
        return self.online_model is not None and self.online_weight > 0

    def _predict_online(self, feats: Any) -> np.ndarray:
        from autosearch.training.batch import FeatureBatch

        batch = feats if isinstance(feats, FeatureBatch) else FeatureBatch.from_list(list(feats))
        with self._section("predict"):
            return np.asarray(self.online_model.predict(batch), dtype=np.float64)

    def _blend(self, scores: np.ndarray, online: np.ndarray | None) -> np.ndarray:
        """The prior's scores blended with the online model's (when it blends in), with non-finite
        scores moved below every finite one."""
        if online is not None:
            w = self.online_weight
            (mp, sp), (mo, so) = self._norm
            with np.errstate(invalid="ignore"):
                scores = (1.0 - w) * (scores - mp) / sp + w * (online - mo) / so
        bad = ~np.isfinite(scores)
        if bad.any():  # candidates without stores score below everything else
            floor = scores[~bad].min() - 1.0 if (~bad).any() else 0.0
            scores = np.where(bad, floor, scores)
        return scores

    # -- in the tuning loop (`Scorer`) ------------------------------------------------------
    def attach(self, timer: Callable[[str], Any] | None, threads: int) -> None:
        self.timer, self.score_threads = timer, threads

    def features(self, context: Any, candidates: Sequence[Any]) -> list[np.ndarray]:
        """What the model reads of the candidates (its extractor's features)."""
        from autosearch.features.per_store import extract_features

        with self._section("features"):
            return (self.featurize or extract_features)(context, list(candidates))

    def store_features(self, context: Any, candidates: list[Any]) -> list[np.ndarray]:
        """PerStoreFeature for the store: the model's cache of them already holds what the search scored."""
        from autosearch.search.featurize import FeatureCache

        if isinstance(self.featurize, FeatureCache):
            return self.featurize(context, candidates)
        return super().store_features(context, candidates)

    def ms_cost_model(self, policy: Any) -> Any:
        return ms_cost_model(self, policy)

    def screen_scores(self, context: Any, candidates: list[Any]) -> np.ndarray:
        from autosearch.features.per_store import extract_features

        return self.model_scores((self.featurize or extract_features)(context, candidates))

    def learn(
        self,
        context: Any,
        group: str,
        candidates: list[Any],
        measured: list[Any],
        store_feats: list[np.ndarray],
        controls: list[bool],
        policy: Any,
    ) -> None:
        from autosearch.features.per_store import EXTRACTOR

        lats = [float(np.median(r.latencies)) if r.status == "ok" else None for r in measured]
        if self.featurize is not None and tuple(self.extractor) != EXTRACTOR:
            feats = self.features(context, candidates)
        else:
            feats = store_feats
        policy.judge(self, group, feats, lats, controls)
        self.observe(group, feats, lats, verdict=policy.verdict())

    def learn_seeds(self, context: Any, group: str, candidates: list[Any], latencies: list[float | None]) -> None:
        self.observe(group, self.features(context, candidates), latencies)

    # -- learning ----------------------------------------------------------------------------
    def observe(
        self,
        group: str,
        feats: Sequence[np.ndarray],
        latencies: Sequence[float | None],
        verdict: tuple[float, float] | None = None,
    ) -> bool:
        """Record measured results (latency None = failed); retrain if the rule says so.
        `verdict`: (prior, online) accuracy on random controls from the exploration policy
        (`Exploration.verdict`), which the online blend then follows."""
        if len(feats) != len(latencies):
            raise InputError(f"{len(feats)} feature matrices but {len(latencies)} latencies")
        for f, lat in zip(feats, latencies):
            ok = lat is not None and np.isfinite(lat) and lat > 0
            for store in (self.groups, self.pending):
                g = store.setdefault(group, _Group())
                g.feats.append(np.asarray(f, dtype=np.float32))
                g.lats.append(float(lat) if ok and lat is not None else None)
        if not self.should_retrain():
            self.n_skipped += 1
            return False
        with self._section("update"):
            self._retrain(verdict)
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

    def _retrain(self, verdict: tuple[float, float] | None = None) -> None:
        if self.online_model is not None:
            self._judge_online(verdict)
        self._retrain_model()
        if self.online_kind is not None and self.n_seen >= self.online_warmup:
            self._fit_online()

    def _judge_online(self, verdict: tuple[float, float] | None = None) -> None:
        """Which of prior and online model orders the new results (unseen by both) better. With
        random controls, their verdict on the controls decides (the model's own picks are a
        biased sample: a prior wrong about the fast region can order its favourites well)."""
        from autosearch.training.metrics import pairwise_accuracy

        if verdict is not None:
            a, b = verdict
            self.held_back.append((a, b))
            self.online_weight = float(np.clip(0.5 + self.online_gain * (b - a), 0.0, 1.0))
            return

        ds = self._dataset(self.pending)
        accs = []
        for gi in ds.groups if ds is not None else []:
            idx = np.arange(gi.start, gi.stop)
            idx = idx[np.isfinite(ds.latencies[idx])]  # successful results only
            if idx.size < 2:
                continue
            batch, lats = ds.batch(idx), ds.latencies[idx]
            a = pairwise_accuracy(np.asarray(self.model.predict(batch), dtype=np.float64), lats)
            b = pairwise_accuracy(np.asarray(self.online_model.predict(batch), dtype=np.float64), lats)
            if np.isfinite(a) and np.isfinite(b):
                accs.append((a, b))
        if not accs:
            return
        self.held_back.append((float(np.mean([a for a, _ in accs])), float(np.mean([b for _, b in accs]))))
        recent = np.array(self.held_back[-3:])
        gap = recent[:, 1].mean() - recent[:, 0].mean()
        self.online_weight = float(np.clip(0.5 + self.online_gain * gap, 0.0, 1.0))

    def _fit_online(self) -> None:
        """Refit the online model from scratch on everything measured; renew both score scales."""
        import contextlib
        import io

        from autosearch.models import make_model

        ds = self._dataset(self.groups)
        if ds is None or not ds.n_candidates or not np.any(ds.labels > 0):
            return
        assert self.online_kind is not None  # should_retrain() is False without an online model
        model = make_model(self.online_kind, seed=self.seed, **ONLINE_FIT_OPTIONS[self.online_kind])
        with contextlib.redirect_stdout(io.StringIO()):
            model.fit(ds)
        batch = ds.batch(np.flatnonzero(np.isfinite(ds.latencies)))  # the measured (successful) candidates

        def stats(m: Any) -> tuple[float, float]:
            v = np.asarray(m.predict(batch), dtype=np.float64)
            v = v[np.isfinite(v)]
            sd = float(v.std()) if v.size else 0.0
            return (float(v.mean()) if v.size else 0.0, sd if sd > 1e-12 else 1.0)

        self._norm = (stats(self.model), stats(model))
        if self.online_model is None:
            self.online_weight = 0.5  # no evidence yet either way
        self.online_model = model

    def _retrain_model(self) -> None:
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
                model = make_model(str(self.kind), **kw)
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
