"""Search strategies of `tune`: one abstract `SearchStrategy` and its `StrategyFactory` (base.py),
one file per strategy, each holding the strategy and its factory (a frozen dataclass of the
strategy's own knobs: `EvolutionarySettings`, `DecisionSettings`, `GradientSettings`).

A new strategy is a new file here with a `SearchStrategy` subclass and its `StrategyFactory`
dataclass, plus its `--search` name in `search.assemble.STRATEGIES` (where a run is assembled).
"""

from __future__ import annotations

from autosearch.search.strategies.base import (
    Fallback,
    RandomDraws,
    SearchStrategy,
    StrategyFactory,
    Unsupported,
    design_space,
)
from autosearch.search.strategies.decision import DecisionSettings, DecisionStrategy
from autosearch.search.strategies.evolutionary import EvolutionarySettings, EvolutionaryStrategy, screen_picks
from autosearch.search.strategies.gradient import GradientSettings, GradientStrategy, PriorGradientStrategy

__all__ = [
    "DecisionSettings",
    "DecisionStrategy",
    "EvolutionarySettings",
    "EvolutionaryStrategy",
    "Fallback",
    "GradientSettings",
    "GradientStrategy",
    "PriorGradientStrategy",
    "RandomDraws",
    "SearchStrategy",
    "StrategyFactory",
    "Unsupported",
    "design_space",
    "screen_picks",
]
