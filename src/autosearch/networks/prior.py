"""Zero-trial schedules: every task of a network built from what the shipped prior ranks best.

Why: a network has 20-60 tasks and a budget of minutes; before this, every task the budget did not
reach was built from TVM's unscheduled loops (a ResNet-50 convolution 100-250 ms untuned, 1-5 ms
tuned), so the network ran 12-30x slower than PyTorch after six minutes (issue 47). The prefix
prior (`pretrained-prefix`) scores decision vectors without building schedules (~20k a second), so
each task's best-scored vector among the decision search's first round (1024 vectors a sketch,
evolved three times) is the network's starting schedule, measured or not; tuning then only has to
improve on it. A smaller pass (256 vectors, evolved once) took 21 s instead of 58 s on ResNet-18's
17 tasks but built it 1.24x slower (46.5 vs 37.5 ms, AMD Zen 5, 2 cores; bench/README.md "Whole
models against PyTorch"). A task whose design space has nothing to decide gets
its one scheduled form (parallelised and vectorised by MetaSchedule's rules).
"""

from __future__ import annotations

from typing import Any

from autosearch.errors import WorkloadError

__all__ = ["PRIOR_MODEL", "prior_schedule", "prior_scorer"]

#: The model the zero-trial pass ranks with: the one that carries to unseen operators.
PRIOR_MODEL = "pretrained-prefix"


def prior_scorer(target: Any) -> Any:
    """The prior's scorer (an adapter that scores decision vectors), loaded once per network."""
    from autosearch.search.model_spec import make_cost_model

    return make_cost_model(PRIOR_MODEL, target=target, warn=False, search="decision").adapter


#: Best-scored candidates tried in order until one computes what the unscheduled task computes.
CANDIDATES = 4


def prior_schedule(workload: Any, target: Any, scorer: Any, seed: int = 0) -> str | None:
    """The trace (JSON text) of the task's best-scored schedule that the post-processors accept and
    that computes what the task computes (`verify.schedule_matches`), or None where MetaSchedule
    offers no design space for it or none of the `CANDIDATES` best is right (TVM then builds it
    untuned)."""
    from autosearch.backends.tvm.space import trace_json
    from autosearch.search.decision_search import DecisionSearch
    from autosearch.search.strategies.base import RandomDraws, design_space
    from autosearch.search.tune import TuneSettings

    settings = TuneSettings(trials=1, trials_per_round=1, seed=seed, fixed_spaces=True, eps_greedy=0.0)
    try:
        ctx, spaces = design_space(workload, target, settings, None)
    except WorkloadError:
        return None
    draws = RandomDraws(ctx, spaces, seed)
    from autosearch.networks.verify import schedule_matches

    try:
        picks = DecisionSearch(ctx, spaces, draws, scorer, settings).propose(CANDIDATES)
    except WorkloadError:  # nothing to decide (or no sketch it can read): the space's own schedule
        picks = draws.draw(1)
    for pick in picks:  # best-scored first
        trace = trace_json(pick.sch)
        if schedule_matches(workload, trace, target, seed):
            return trace
    return None
