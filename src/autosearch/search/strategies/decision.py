"""`--search decision`: evolution over decision vectors, scored without building schedules
(search/decision_search.py holds the search; this is its `SearchStrategy` and its factory,
`DecisionSettings`). Needs a trained model that reads `trace-prefix-tokens`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autosearch.errors import WorkloadError, one_line
from autosearch.search.strategies.base import Fallback, Link, RandomDraws, SearchStrategy, StrategyFactory, design_space
from autosearch.search.strategies.evolutionary import EvolutionarySettings

__all__ = ["DecisionSettings", "DecisionStrategy"]


@dataclass(frozen=True)
class DecisionSettings(StrategyFactory):
    """`--search decision`: the decision search's knobs, and its factory.

    population: vectors scored per sketch and generation (at least 1024 are); genetic_num_iters:
    generations a round. fallback: the evolutionary search that measures a workload the decision
    search cannot read. by_name: the decision search was asked for by name (`--search decision`),
    so a workload it cannot read is an error, except a network's task with nothing to decide
    (`TuneSettings.fixed_spaces`), whose one scheduled form the fallback still measures; False where
    `--search auto` chose it (then every such workload falls back)."""

    name = "decision"
    explore: str = "none"
    population: int = 256
    genetic_num_iters: int = 3
    fallback: EvolutionarySettings = field(default_factory=EvolutionarySettings)
    by_name: bool = True

    def __post_init__(self) -> None:
        self.check()

    def check_settings(self, settings: Any) -> None:
        self.fallback.check_settings(settings)

    def check_scorer(self, scorer: Any) -> None:
        from autosearch.search.decision_search import check_decision_model

        check_decision_model(scorer)

    def chain(self, scorer: Any, target: Any) -> list[Link]:
        return [Link(DecisionStrategy, self, (WorkloadError,)), *self.fallback.chain(scorer, target)]

    def gave_way(self, link: Link, workload: Any, settings: Any, exc: Exception) -> Fallback | None:
        if self.by_name and not settings.fixed_spaces:
            return None
        line = f"[yellow]{workload.name}: {one_line(exc)}; using evolutionary search[/]"
        return Fallback(workload.name, self.name, self.fallback.name, line, counted=True)


class DecisionStrategy(SearchStrategy):
    """Evolutionary search over decision vectors (`decision_search.DecisionSearch`); random
    controls are uniform draws, warm-start seeds become parents."""

    kind = "decision"
    knobs = DecisionSettings
    options: DecisionSettings

    def _start(self, workload: Any, target: Any) -> None:
        self.context, self.spaces = design_space(workload, target, self.settings, None)
        self.draws = RandomDraws(self.context, self.spaces, self.settings.seed)
        self.search = self._search()

    def _search(self) -> Any:
        from autosearch.search.decision_search import DecisionSearch

        return DecisionSearch(
            self.context, self.spaces, self.draws, self.scorer, self.settings, self.options, policy=self.policy
        )

    def propose(self, n: int) -> list[Any]:
        return self.search.propose(n)

    def seed(self, rows: list[Any]) -> list[tuple[Any, Any]]:
        pairs = super().seed(rows)
        self.search.adopt([c for _, c in pairs], [r.median for r, _ in pairs])
        return pairs

    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        self.search.notify(candidates, measured)
