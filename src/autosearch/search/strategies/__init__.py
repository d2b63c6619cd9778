"""Search strategies of `tune`: one abstract `SearchStrategy` (base.py), one file per strategy, and
`make_strategy`, the one place a `--search` value becomes a strategy.

A new strategy is a new file here with a `SearchStrategy` subclass, plus one branch in
`make_strategy`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autosearch.errors import AutosearchError, WorkloadError, one_line
from autosearch.search.strategies.base import RandomDraws, SearchStrategy, design_space
from autosearch.search.strategies.decision import DecisionStrategy
from autosearch.search.strategies.evolutionary import EvolutionaryStrategy, screen_picks
from autosearch.search.strategies.gradient import GradientStrategy, PriorGradientStrategy

__all__ = [
    "DecisionStrategy",
    "EvolutionaryStrategy",
    "GradientStrategy",
    "PriorGradientStrategy",
    "RandomDraws",
    "SearchStrategy",
    "design_space",
    "make_strategy",
    "screen_picks",
]


def make_strategy(
    workload: Any,
    target: Any,
    model: Any,
    settings: Any,
    *,
    console: Any = None,
    timer: Callable[[str], Any] | None = None,
) -> SearchStrategy:
    """The settings' search strategy (`auto`: `TuneModel.search`). `gradient` descends the tuning
    model itself where it is a `tlp` prior over trace-prefix tokens on a CPU
    (`PriorGradientStrategy`), else its own knob model (`GradientStrategy`); a sketch that gradient
    search cannot relax falls back to evolutionary search alone, with the reason, and so does a
    workload the decision search cannot read where `auto` chose it. `timer`: the run's
    `TimeBreakdown.section`."""
    from autosearch.search.model_spec import resolve_search

    search = resolve_search(settings.search, model)
    if search == "gradient":
        from autosearch.search.gradient import relax_reason
        from autosearch.search.gradient.prior_tokens import prior_reason

        if prior_reason(model, target) is None:  # the tuning model's own score is descended
            try:
                return PriorGradientStrategy(workload, target, model, settings, timer=timer)
            except WorkloadError as exc:  # no sketch the decision space reads: the knob model's search may
                if console is not None:
                    console.print(f"[yellow]{workload.name}: {one_line(exc)}; gradient search on its knob model[/]")
        ctx, spaces = design_space(workload, target, settings, None)
        reason = relax_reason(spaces)
        if reason is None:
            try:
                return GradientStrategy(ctx, spaces, model, settings, timer=timer)
            except AutosearchError as exc:  # a structure only reading the replays can refuse
                reason = one_line(exc)
        if console is not None:
            console.print(
                f"[yellow]gradient search cannot relax {workload.name}: {reason}; using evolutionary search[/]"
            )
    if search == "decision":
        try:
            return DecisionStrategy(workload, target, model, settings, timer=timer)
        except WorkloadError as exc:
            # Asked for by name: say why it cannot run. But a network's task with nothing to decide
            # (`fixed_spaces`) still has its one scheduled form measured, by the evolutionary strategy.
            if settings.search != "auto" and not settings.fixed_spaces:
                raise
            if console is not None:
                console.print(f"[yellow]{workload.name}: {one_line(exc)}; using evolutionary search[/]")
    return EvolutionaryStrategy(workload, target, model, settings, timer=timer)
