"""Where a tuning run is assembled: `--model`, `--search` and `--explore` become the typed
`(StrategyFactory, Scorer)` pair that `tune()` and `tune_network()` take.

Why one place: the choices depend on each other. `--search auto` runs what the model was made
for on the target (`model_spec.auto_search`: the decision search for a trace-prefix-tokens prior
on a CPU, else the evolutionary search); `--explore auto` spends random controls only where a
trained prior never saw the target's device and the search is not the decision search (whose own
random vectors explore, and controls made it slower there, bench/README.md "The decision search
as tune's default"); and a prior that never saw the device warns once, naming what the search
does about it. Past this module nothing asks a model or a search its kind: the loop calls the
strategy's and the scorer's methods.

To add a search strategy: a `SearchStrategy` and its `StrategyFactory` dataclass in
`search/strategies/`, and its `--search` name in `STRATEGIES` (with its knobs in `choose_strategy`).
To add a scorer: a `Scorer` subclass (search/scorer.py) and its `--model` value in
`model_spec.make_scorer`.

`explore="control"` (search/explore.py) lets a trained prior lead the search only as far as it
proves right on random controls; it does nothing for TVM's own models. On a CPU the prior never
saw, its picks led the search astray and the controls found faster schedules (bench/HISTORY.md),
while where it is right the controls cost trials.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autosearch.errors import InputError
from autosearch.search.explore import EXPLORE_MODES
from autosearch.search.model_spec import auto_search, knows_device, make_scorer, warn_unknown_device
from autosearch.search.pooled import TaskScorers, task_scorers
from autosearch.search.scorer import Scorer
from autosearch.search.strategies import (
    DecisionSettings,
    EvolutionarySettings,
    GradientSettings,
    StrategyFactory,
)

__all__ = [
    "SEARCHES",
    "STRATEGIES",
    "assemble",
    "assemble_network",
    "check_search",
    "choose_strategy",
    "network_explore",
    "resolve_search",
    "warn_new_device",
]

#: The strategies `--search` names (besides `auto`): name -> factory class.
STRATEGIES: dict[str, type[StrategyFactory]] = {
    "evolutionary": EvolutionarySettings,
    "gradient": GradientSettings,
    "decision": DecisionSettings,
}
#: `--search` values.
SEARCHES = ("auto", *STRATEGIES)


def check_search(search: str) -> None:
    """Refuse a `--search` value that names no strategy (one line)."""
    if search not in SEARCHES:
        raise InputError(f"--search must be one of {', '.join(SEARCHES)}, got {search!r}")


def _check_choices(search: str, explore: str) -> None:
    """Refuse a bad `--search` or `--explore` before a model loads or warns (one line)."""
    check_search(search)
    if explore != "auto" and explore not in EXPLORE_MODES:
        raise InputError(f"--explore must be one of auto, {', '.join(EXPLORE_MODES)}, got {explore!r}")


def resolve_search(search: str, scorer: Scorer, target: Any = None) -> str:
    """The strategy `search` names for `scorer` on `target`: `auto` is what the scorer's model was
    made for (`model_spec.auto_search`); other values are kept."""
    _check_choices(search, "auto")
    return auto_search(scorer.extractor, target) if search == "auto" else search


def _decision_like(search: str, scorer: Scorer, target: Any) -> bool:
    """Whether `search` (resolved) works over the decision search's sketches, exploring alike: the
    decision search, and the gradient search on a prefix prior (a CPU)."""
    return search == "decision" or (search == "gradient" and auto_search(scorer.extractor, target) == "decision")


def warn_new_device(scorer: Scorer, search: str, target: Any) -> bool:
    """One warning line where the scorer's trained model never saw `target`'s device, naming what
    `search` (resolved) does about it; True if it warned."""
    if target is None or not scorer.trained:
        return False
    return warn_unknown_device(scorer.model, target, decision=_decision_like(search, scorer, target))


def choose_strategy(
    scorer: Scorer,
    search: str = "auto",
    explore: str = "auto",
    *,
    target: Any = None,
    warn: bool = True,
    population: int = 256,
    genetic_num_iters: int = 3,
    screen: int = 0,
) -> StrategyFactory:
    """The strategy factory of `--search` and `--explore` for `scorer` on `target` (`auto`
    resolved as the module docstring says), with the strategies' own knobs: population and
    genetic_num_iters (the evolutionary and the decision search's), screen (the evolutionary
    search's first round). `warn`: say it (one line) where a trained model never saw the device."""
    _check_choices(search, explore)
    runs = resolve_search(search, scorer, target)
    if warn:
        warn_new_device(scorer, runs, target)
    if explore == "auto":
        new_device = scorer.trained and target is not None and knows_device(scorer.model, target) is False
        explore = "control" if new_device and not _decision_like(runs, scorer, target) else "none"
    evolutionary = EvolutionarySettings(
        explore=explore, population=population, genetic_num_iters=genetic_num_iters, screen=screen
    )
    if runs == "decision":
        return DecisionSettings(
            explore=explore,
            population=population,
            genetic_num_iters=genetic_num_iters,
            fallback=evolutionary,
            by_name=search != "auto",
        )
    if runs == "gradient":
        return GradientSettings(explore=explore, fallback=evolutionary)
    return evolutionary


def assemble(
    model: str,
    search: str = "auto",
    explore: str = "auto",
    *,
    target: Any = None,
    seed: int = 0,
    warn: bool = True,
    timer: Callable[[str], Any] | None = None,
    retrain_fraction: float = 0.2,
    online_warmup: int = 16,
    online_gain: float = 1.0,
    population: int = 256,
    genetic_num_iters: int = 3,
    screen: int = 0,
) -> tuple[StrategyFactory, Scorer]:
    """`--model`, `--search`, `--explore` (and the knobs of `choose_strategy` and
    `model_spec.make_scorer`) as the `(strategy, scorer)` pair `tune()` takes; a bad value fails
    in one line before anything is measured."""
    _check_choices(search, explore)  # before a model loads or warns
    EvolutionarySettings(population=population, genetic_num_iters=genetic_num_iters, screen=screen)
    scorer = make_scorer(
        model,
        seed=seed,
        timer=timer,
        retrain_fraction=retrain_fraction,
        target=target,
        online_warmup=online_warmup,
        online_gain=online_gain,
    )
    strategy = choose_strategy(
        scorer,
        search,
        explore,
        target=target,
        warn=warn,
        population=population,
        genetic_num_iters=genetic_num_iters,
        screen=screen,
    )
    return strategy, scorer


def network_explore(search: str) -> str:
    """`--explore` of a network's measured rounds: random controls under the evolutionary search (a
    task gets few trials, so a prior wrong about it costs its whole budget, and the controls made
    ResNet-18 end to end faster), `tune`'s own rule otherwise (the decision search explores by its
    random vectors; controls made it slower)."""
    return "control" if search == "evolutionary" else "auto"


def assemble_network(
    model: str, search: str = "auto", *, target: Any = None, seed: int = 0
) -> tuple[StrategyFactory, TaskScorers]:
    """`tune-model`'s `--model` and `--search` as what `tune_network` takes: the strategy every task
    runs (its exploration `network_explore`'s), and the task scorers (`search.pooled`: a fresh
    scorer per task, each learning its own task's measurements, pooled where the prior updates in
    place). The model is loaded once here, so that a bad `--model`, or one the search cannot score
    with, fails before the network imports; the first task's scorer says (one line) where the
    device is new to it."""
    scorer = make_scorer(model, seed=seed, target=target)
    runs = resolve_search(search, scorer, target)
    strategy = choose_strategy(scorer, runs, network_explore(runs), target=target, warn=False)
    strategy.check_scorer(scorer)
    warned: list[bool] = []

    def task_scorer() -> Scorer:
        fresh = make_scorer(model, seed=seed, target=target)
        if not warned:
            warn_new_device(fresh, runs, target)
        warned.append(True)
        return fresh

    return strategy, task_scorers(task_scorer, pool=scorer)  # the pool: the network's own copy
