"""Any autosearch cost model as the tuning loop's `Scorer` (`ModelAdapter`): it scores candidates
with a trained prior, a model fitted on the run alone, or a prior blended with one, and learns the
run's measurements.

Why one class over three pieces: the loop needs one object that predicts and updates, while the
concerns behind it change apart. This module scores (feature matrices, and decision vectors from
a model's tables where its class `scores_decision_vectors`); `search.retrain` decides when the
model is refitted and how (`RetrainRule` over the run's `RunResults`); `search.online_blend`
holds the model fitted on the run that a `PRIOR+KIND` prior is blended with (`OnlineBlend`);
`search.ms_face` is its MetaSchedule `PyCostModel` face (`ms_cost_model`), the one piece that
needs TVM. What a model can do is stated by its class (`CostModel.incremental`, `members`,
`scores_decision_vectors`), never probed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from autosearch.errors import InputError
from autosearch.search.online_blend import ONLINE_KINDS, OnlineBlend
from autosearch.search.retrain import RetrainRule, RunResults
from autosearch.search.scorer import Scorer

if TYPE_CHECKING:
    from autosearch.models.base import CostModel

__all__ = ["ModelAdapter", "check_extractor"]


def check_extractor(model: CostModel, extractor: tuple[str, str], n_features: int) -> None:
    """Refuse a model trained on other features than the ones tuning extracts (one line)."""
    got = tuple(model.extractor or ())
    if got and got != tuple(extractor):
        raise InputError(
            f"the model was trained on features {':'.join(got)} but tuning extracts {':'.join(extractor)}: "
            "retrain it on this extractor"
        )
    width = model.n_features
    if width is not None and int(width) != n_features:
        raise InputError(f"the model expects {width} features per row but {':'.join(extractor)} gives {n_features}")


class ModelAdapter(Scorer):
    """Scores candidates with an autosearch `CostModel` and retrains it adaptively (a `Scorer`:
    it predicts and updates; exploration is the search strategy's policy, search/explore.py).

    model: a trained CostModel (pretrained / loaded), or None with `kind` to train one from
    scratch on the results of this run (until then, scores are random: pure exploration).
    model_kw: that fresh model's hyper-parameters. retrain_fraction, min_new: the retrain rule
    (`search.retrain.RetrainRule`). timer: optional `section(name)` context-manager factory (a
    TimeBreakdown's `section`). online: with a trained `model`, the kind of a model fitted from
    scratch on this run's results once `online_warmup` are measured, and blended with `model`;
    `online_gain` sets how fast the blend weight follows the two models' held-back accuracy
    (`search.online_blend.OnlineBlend`). score_threads: torch threads for scoring decision vectors
    (`score_space`); `tune` sets the machine's physical cores, since nothing else of the run works
    while the search scores.
    """

    scores_decision_vectors: ClassVar[bool] = True

    def __init__(
        self,
        model: CostModel | None = None,
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
        if online is not None and model is None:
            raise InputError(
                f"an online model needs a trained prior and a kind among {', '.join(ONLINE_KINDS)}, got {online!r}"
            )
        #: The model fitted on the run that the prior is blended with (None: the model alone).
        self.online = (
            OnlineBlend(online, warmup=online_warmup, gain=online_gain, seed=seed) if online is not None else None
        )
        fresh_kind = kind or (model.kind if model is not None else "")
        self.rule = RetrainRule(retrain_fraction, min_new, fresh_kind=fresh_kind, fresh_kw=model_kw)
        self.results = RunResults()
        self.model = model
        self.pretrained = model is not None
        self.rng = np.random.default_rng(seed)
        self.timer = timer
        self.score_threads = 1
        #: What the model reads, computed for MetaSchedule candidates (search.featurize); set by
        #: `model_spec.make_scorer`. Default: PerStoreFeature.
        self.extractor: tuple[str, ...] = ("per-store-feature", "tvm-0.27")
        self.featurize: Callable[[Any, Sequence[Any]], list[np.ndarray]] | None = None
        #: A network's pooled scorer that learns what this one observes too (`search.pooled`).
        self.shares_with: ModelAdapter | None = None

    def _section(self, name: str) -> Any:
        if self.timer is None:
            from contextlib import nullcontext

            return nullcontext()
        return self.timer(name)

    @property
    def trained(self) -> bool:
        return self.model is not None

    @property
    def online_share(self) -> float | None:
        return self.online.share if self.online is not None else None

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
        if not len(feats) or self.model is None or self.model.members <= 1:
            return scores, None
        from autosearch.training.batch import FeatureBatch

        with self._section("predict"):
            members = self.model.predict_members(FeatureBatch.from_list(list(feats)))
            spread = np.asarray(members, dtype=np.float64).std(axis=0)
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
        if self.model is None or not type(self.model).scores_decision_vectors or not len(x):
            tokens = list(space.tokens(x))
            return self.score_spread(tokens) if spread else (self.score(tokens), None)
        with self._section("predict"):
            members = np.asarray(
                self.model.predict_space_members(space, x, threads=self.score_threads), dtype=np.float64
            )
        online = self._predict_online(list(space.tokens(x))) if self._online_blends else None
        scores = self._blend(members.mean(axis=0), online)
        return scores, (members.std(axis=0) if spread and len(members) > 1 else None)

    def score_parts(self, feats: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """The prior's and the online model's scores, each alone ({} without an online model)."""
        if self.online is None or self.online.model is None or self.model is None:
            return {}
        from autosearch.training.batch import FeatureBatch

        batch = FeatureBatch.from_list(list(feats))
        return {"prior": np.asarray(self.model.predict(batch), dtype=np.float64), "online": self.online.predict(batch)}

    def model_scores(self, feats: Sequence[np.ndarray]) -> np.ndarray:
        """The prior's (or the prior + online blend's) scores, finite, without exploration."""
        from autosearch.training.batch import FeatureBatch

        assert self.model is not None  # `score` answers at random before a fresh model's first fit
        with self._section("predict"):
            batch = FeatureBatch.from_list(list(feats))
            scores = np.asarray(self.model.predict(batch), dtype=np.float64)
        return self._blend(scores, self._predict_online(batch) if self._online_blends else None)

    @property
    def _online_blends(self) -> bool:
        return self.online is not None and self.online.blends

    def _predict_online(self, feats: Any) -> np.ndarray:
        from autosearch.training.batch import FeatureBatch

        assert self.online is not None  # callers ask `_online_blends` first
        batch = feats if isinstance(feats, FeatureBatch) else FeatureBatch.from_list(list(feats))
        with self._section("predict"):
            return self.online.predict(batch)

    def _blend(self, scores: np.ndarray, online: np.ndarray | None) -> np.ndarray:
        """The prior's scores blended with the online model's (when it blends in), with non-finite
        scores moved below every finite one."""
        if online is not None and self.online is not None:
            scores = self.online.mix(scores, online)
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
        from autosearch.search.ms_face import ms_cost_model

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
        self.results.add(group, feats, latencies)
        if self.shares_with is not None:
            self.shares_with.observe(group, feats, latencies)
        if not self.rule.due(self.results):
            self.rule.n_skipped += 1
            return False
        with self._section("update"):
            if self.online is not None and self.model is not None:
                self.online.judge(self.model, self.results, verdict)
            self.model = self.rule.retrain(self.model, self.pretrained, self.results)
            self.n_retrains = self.rule.n_retrains
            if self.online is not None and self.model is not None:
                self.online.fit(self.model, self.results)
        return True
