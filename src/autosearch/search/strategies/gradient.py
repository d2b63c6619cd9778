"""`--search gradient`: gradient descent on relaxed schedule knobs (Felix-style, search/gradient).

Two strategies: `PriorGradientStrategy` descends the tuning model itself where it is a `tlp`
prior over trace-prefix tokens on a CPU (search/gradient/prior_descent.py; the prior learns the
run's measurements like under the decision search), and `GradientStrategy` descends a
differentiable model of the sketch's knobs of its own (search/gradient/optimize.py; the tuning
model does not learn: `learns` is False). `strategies.make_strategy` picks one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autosearch.search.explore import NoExploration
from autosearch.search.strategies.base import RandomDraws, SearchStrategy
from autosearch.search.strategies.decision import DecisionStrategy

__all__ = ["GradientStrategy", "PriorGradientStrategy"]


class GradientStrategy(SearchStrategy):
    """Gradient-descent search over the relaxed knobs of the design space, ranked by its own
    differentiable model (`search.gradient.GradientSearch`): the tuning model would learn for
    nothing, so it does not, and no random controls are judged against it.

    context, spaces: the TuneContext and its design spaces (built by the caller, which checked
    that they relax: `search.gradient.relax_reason`); model: the `TuneModel` (its `GradientSearch`
    keeps a knob model of its own); settings: `TuneSettings` (seed, eps_greedy)."""

    kind = "gradient"
    learns = False

    def __init__(
        self, context: Any, spaces: list[Any], model: Any, settings: Any, *, timer: Callable[[str], Any] | None = None
    ) -> None:
        from autosearch.search.gradient import GradientSearch

        super().__init__(model, settings, timer=timer)
        self.policy = NoExploration()
        self.context, self.spaces = context, spaces
        self.search = GradientSearch(
            self.context,
            self.spaces,
            model=model,
            seed=settings.seed,
            eps_greedy=settings.eps_greedy,
        )
        self.draws = RandomDraws(context, spaces, settings.seed)

    def propose(self, n: int) -> list[Any]:
        return self.draws.claim(list(self.search.propose(n)), n) if n > 0 else []

    def seed(self, rows: list[Any]) -> list[tuple[Any, Any]]:
        pairs = super().seed(rows)
        self.search.observe([c for _, c in pairs], [r.median for r, _ in pairs])
        return pairs

    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        import numpy as np

        self.search.observe(candidates, [float(np.median(r.latencies)) if r.status == "ok" else None for r in measured])

    def learn(self, group: str, candidates: list[Any], measured: list[Any], feats: Any, controls: list[bool]) -> None:
        pass  # its own model learned in `notify`

    def learn_seeds(self, group: str, pairs: list[tuple[Any, Any]]) -> None:
        pass


class PriorGradientStrategy(DecisionStrategy):
    """Gradient search (Felix) on the tuning model itself, a `tlp` prior over trace-prefix tokens:
    the decision search's sketches and bookkeeping, candidates from Adam on the prior's score of
    relaxed decision vectors (search/gradient/prior_descent). The prior learns the run's
    measurements as under the decision search (the loop's scorer update)."""

    kind = "gradient"

    def _search(self, adapter: Any) -> Any:
        from autosearch.search.gradient.prior_descent import PriorGradientSearch

        search = PriorGradientSearch(self.context, self.spaces, self.draws, adapter, self.settings)
        search.policy = self.policy
        return search
