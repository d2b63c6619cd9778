"""`--search decision`: evolution over decision vectors, scored without building schedules
(search/decision_search.py holds the search; this is its `SearchStrategy`). Needs a trained model
that reads `trace-prefix-tokens`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autosearch.search.strategies.base import RandomDraws, SearchStrategy, design_space

__all__ = ["DecisionStrategy"]


class DecisionStrategy(SearchStrategy):
    """Evolutionary search over decision vectors (`decision_search.DecisionSearch`); random
    controls are uniform draws, warm-start seeds become parents."""

    kind = "decision"

    def __init__(
        self, workload: Any, target: Any, model: Any, settings: Any, *, timer: Callable[[str], Any] | None = None
    ) -> None:
        super().__init__(model, settings, timer=timer)
        self.context, self.spaces = design_space(workload, target, settings, None)
        self.draws = RandomDraws(self.context, self.spaces, settings.seed)
        self.search = self._search(model.adapter)

    def _search(self, adapter: Any) -> Any:
        from autosearch.search.decision_search import DecisionSearch

        return DecisionSearch(self.context, self.spaces, self.draws, adapter, self.settings, policy=self.policy)

    def propose(self, n: int) -> list[Any]:
        return self.search.propose(n)

    def seed(self, rows: list[Any]) -> list[tuple[Any, Any]]:
        pairs = super().seed(rows)
        self.search.adopt([c for _, c in pairs], [r.median for r, _ in pairs])
        return pairs

    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        self.search.notify(candidates, measured)
