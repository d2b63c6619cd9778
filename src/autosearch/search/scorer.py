"""What the tuning loop asks of a cost model: a `Scorer` predicts and updates, nothing else.

Two kinds: `search.adapter.ModelAdapter` (our models: a prior, one fitted on the run, or a blend)
and `NativeScorer` (TVM's own cost models, `--model tvm-xgb|random`, which learn through
MetaSchedule's `CostModel.update`). Exploration is not the scorer's: it is a policy of the search
strategy (`search.explore.Exploration`) that the strategy hands in where it matters (the
MetaSchedule face of the scorer, and `learn`, which judges a round before the model learns it).
`tune()` talks to every scorer the same way; nothing asks which kind it holds. What a scorer can
do is stated by its class (`scores_decision_vectors`) and its attributes (`trained`, `extractor`,
`model`), never probed with `getattr`: a strategy that needs a capability checks that attribute.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

__all__ = ["NativeScorer", "Scorer", "runner_results"]


def runner_results(measured: list[Any]) -> list[Any]:
    """Our `MeasureResult`s as MetaSchedule's `RunnerResult`s (what its cost models and search read)."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    return [
        RunnerResult(r.latencies if r.status == "ok" else None, None if r.status == "ok" else (r.error or r.status))
        for r in measured
    ]


class Scorer(ABC):
    """A cost model in the tuning loop."""

    #: Retrains (or incremental updates) of the model during the run.
    n_retrains: int = 0
    #: What a run reports as its model and writes into every record's source (the `--model` value).
    label: str = ""
    #: What the scorer's model reads of a candidate, an extractor's (name, version); () where the
    #: scorer is TVM's own model, whose features are its own business.
    extractor: tuple[str, ...] = ()
    #: The autosearch `CostModel` it scores with (None: TVM's own, or one not fitted yet).
    model: Any = None
    #: Whether it scores decision vectors of a `DecisionSpace` without building schedules
    #: (`score_space`): what the decision search and the gradient search on the prior need.
    scores_decision_vectors: ClassVar[bool] = False

    @property
    @abstractmethod
    def trained(self) -> bool:
        """Whether it scores from knowledge (a prior, or a model already fitted): screening the
        first round and random controls judged against it need one."""

    def attach(self, timer: Callable[[str], Any] | None, threads: int) -> None:
        """The run's timer (`TimeBreakdown.section`) and the cores to score on."""
        return None  # nothing by default

    @property
    def online_share(self) -> float | None:
        """The online model's share of the blended score (history's `online_weight`), or None."""
        return None

    def store_features(self, context: Any, candidates: list[Any]) -> list[np.ndarray]:
        """PerStoreFeature of the candidates, for the store (cached where the scorer caches them)."""
        from autosearch.features.per_store import extract_features

        return extract_features(context, candidates)

    @abstractmethod
    def ms_cost_model(self, policy: Any) -> Any:
        """The scorer as MetaSchedule's `CostModel` (what its evolutionary search ranks with),
        scoring through the exploration `policy`."""

    @abstractmethod
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
        """Learn a measured round (`controls` marks the random controls); `policy` judges it first."""

    def learn_seeds(self, context: Any, group: str, candidates: list[Any], latencies: list[float | None]) -> None:
        """Learn stored schedules a run starts from (a warm start) as evidence."""
        return None  # nothing by default

    def screen_scores(self, context: Any, candidates: list[Any]) -> np.ndarray:
        """The model's own scores of candidates, without exploration (screening the first round)."""
        raise NotImplementedError(f"{type(self).__name__} does not screen")


class NativeScorer(Scorer):
    """TVM's own cost model (`XGBModel`, `RandomModel`): MetaSchedule's evolutionary search ranks
    with it directly, and it learns through its own `update`."""

    def __init__(self, cost_model: Any, label: str = "") -> None:
        self.cost_model, self.label = cost_model, label

    @property
    def trained(self) -> bool:
        return False  # nothing before the run: no screening, no controls judged against it

    def ms_cost_model(self, policy: Any) -> Any:
        return self.cost_model

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
        self.cost_model.update(context, candidates, runner_results(measured))
