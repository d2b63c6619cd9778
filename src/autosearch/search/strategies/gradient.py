"""`--search gradient`: gradient descent on relaxed schedule knobs (Felix-style, search/gradient).

Two strategies: `PriorGradientStrategy` descends the tuning model itself where it is a `tlp`
prior over trace-prefix tokens on a CPU (search/gradient/prior_descent.py; the prior learns the
run's measurements like under the decision search), and `GradientStrategy` descends a
differentiable model of the sketch's knobs of its own (search/gradient/optimize.py; the tuning
model does not learn: `learns` is False). `GradientSettings.make` picks one, and falls back to
the evolutionary search where the sketch does not relax.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autosearch.errors import AutosearchError, WorkloadError, one_line
from autosearch.search.explore import NoExploration
from autosearch.search.strategies.base import (
    Fallback,
    Link,
    RandomDraws,
    SearchStrategy,
    StrategyFactory,
    Unsupported,
    design_space,
)
from autosearch.search.strategies.decision import DecisionSettings, DecisionStrategy
from autosearch.search.strategies.evolutionary import EvolutionarySettings

__all__ = ["GradientSettings", "GradientStrategy", "PriorGradientStrategy"]


@dataclass(frozen=True)
class GradientSettings(StrategyFactory):
    """`--search gradient` and its fall-back chain: gradient descent on the tuning model itself
    where it is a `tlp` prior over trace-prefix tokens on a CPU (`PriorGradientStrategy`), else on
    a knob model of its own (`GradientStrategy`), else (a sketch that does not relax) `fallback`,
    the evolutionary search. Each step that gives way says why (`Fallback`)."""

    name = "gradient"
    explore: str = "none"
    fallback: EvolutionarySettings = field(default_factory=EvolutionarySettings)

    def __post_init__(self) -> None:
        self.check()

    def check_settings(self, settings: Any) -> None:
        self.fallback.check_settings(settings)

    def chain(self, scorer: Any, target: Any) -> list[Link]:
        from autosearch.search.gradient.prior_tokens import prior_reason

        # no sketch the decision space reads (a WorkloadError): the knob model's search may
        prior = [Link(PriorGradientStrategy, self, (WorkloadError,))] if prior_reason(scorer, target) is None else []
        return [*prior, Link(GradientStrategy, self, (Unsupported,)), *self.fallback.chain(scorer, target)]

    def gave_way(self, link: Link, workload: Any, settings: Any, exc: Exception) -> Fallback | None:
        if link.strategy is PriorGradientStrategy:  # the tuning model's own score was to be descended
            line = f"[yellow]{workload.name}: {one_line(exc)}; gradient search on its knob model[/]"
            return Fallback(workload.name, self.name, self.name, line)
        line = f"[yellow]gradient search cannot relax {workload.name}: {exc}; using evolutionary search[/]"
        return Fallback(workload.name, self.name, self.fallback.name, line)


class GradientStrategy(SearchStrategy):
    """Gradient-descent search over the relaxed knobs of the design space, ranked by its own
    differentiable model (`search.gradient.GradientSearch`): the tuning model would learn for
    nothing, so it does not, and no random controls are judged against it.

    Raises `Unsupported` where the workload's sketches do not relax (`search.gradient.relax_reason`)
    or a structure only reading the replays can refuse; a workload without a design space raises
    its `WorkloadError`. settings: `TuneSettings` (seed, eps_greedy)."""

    kind = "gradient"
    learns = False
    knobs = GradientSettings

    def _start(self, workload: Any, target: Any) -> None:
        from autosearch.search.gradient import GradientSearch, relax_reason

        scorer, settings = self.scorer, self.settings
        self.policy = NoExploration()
        self.context, self.spaces = design_space(workload, target, settings, None)
        reason = relax_reason(self.spaces)
        if reason is not None:
            raise Unsupported(reason)
        try:  # the search keeps a knob model of its own: the tuning model is not differentiable in the knobs
            self.search = GradientSearch(
                self.context, self.spaces, model=scorer, seed=settings.seed, eps_greedy=settings.eps_greedy
            )
        except AutosearchError as exc:  # a structure only reading the replays can refuse
            raise Unsupported(one_line(exc)) from None
        self.draws = RandomDraws(self.context, self.spaces, settings.seed)

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

    @classmethod
    def _own_options(cls, options: StrategyFactory | None) -> StrategyFactory:
        """The decision search's knobs (its sketches and bookkeeping), with the gradient search's
        exploration (`options`: a `GradientSettings`)."""
        return DecisionSettings(explore=(options if options is not None else GradientSettings()).explore)

    def _search(self) -> Any:
        from autosearch.search.gradient.prior_descent import PriorGradientSearch

        search = PriorGradientSearch(self.context, self.spaces, self.draws, self.scorer, self.settings)
        search.policy = self.policy
        return search
