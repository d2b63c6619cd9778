"""The names search strategies had before issue 46 (`search.strategies` now holds them, one file
per strategy): kept only while callers written against them remain; new code imports
`autosearch.search.strategies`."""

from __future__ import annotations

from autosearch.search.strategies import (
    DecisionStrategy as DecisionSource,
)
from autosearch.search.strategies import (
    EvolutionaryStrategy as EvolutionarySource,
)
from autosearch.search.strategies import (
    GradientStrategy as GradientSource,
)
from autosearch.search.strategies import (
    PriorGradientStrategy as PriorGradientSource,
)
from autosearch.search.strategies import (
    RandomDraws,
    screen_picks,
)
from autosearch.search.strategies import (
    SearchStrategy as CandidateSource,
)
from autosearch.search.strategies import (
    make_strategy as make_source,
)

__all__ = [
    "CandidateSource",
    "DecisionSource",
    "EvolutionarySource",
    "GradientSource",
    "PriorGradientSource",
    "RandomDraws",
    "make_source",
    "screen_picks",
]
