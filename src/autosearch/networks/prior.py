"""Zero-trial schedules: every task a network run does not measure is built from what the shipped
priors rank best.

Why: a network has 20-60 tasks and a budget of minutes; before this, every task the budget did not
reach was built from TVM's unscheduled loops (a ResNet-50 convolution some hundred times slower
untuned than tuned), so the network ran many times slower than PyTorch after six minutes (issue 47).

How (`PriorRanker`): the prefix prior (`pretrained-prefix`) scores decision vectors without
building schedules (~20k a second), so the decision search's first round (1024 vectors a sketch,
evolved three times; a task of many sketches shares 4,096: `SHARED_POPULATION`) shortlists its `SHORTLIST` best-scored schedules; the feature prior
(`ORDER_MODEL`: the `pretrained` recipe on every CPU's stores, PerStoreFeature of each built
schedule: the loop nest as it will run) orders that shortlist. Each task's best-ordered schedule that computes what the task computes is its
starting schedule. Why two models: the prefix prior's first pick was often much slower than the
best of its shortlist on ResNet-50 convolutions; the feature prior's pick among the same
shortlist built ResNet-50 and MobileNetV2 faster (weighted task latencies, picks measured side by
side; `bench/prior_ranking.py`, bench/README.md "Zero-trial schedules"); the sum of the two ranks
did worse than the feature prior alone. Schedules with a vector longer
than one SIMD register but not a whole number of them go last (`search.registers`): on
ViT-base the feature prior's pick for the Q/K/V projections had 24-float vectors, which LLVM
builds lane by lane on AVX-512, and ran many times slower than the shortlist's best; the rule
built ViT-base, ConvNext-tiny and MobileNetV2 faster and ResNet-18 about as fast (a stricter rule
that also moves vectors shorter than a register did no better overall; same picks measured side
by side, bench/README.md "Zero-trial schedules"). A smaller first round (256 vectors, evolved
once) took well under half the time on ResNet-18's tasks but built it slower. A task whose
design space has nothing to decide gets its one scheduled form (parallelised and vectorised by
MetaSchedule's rules).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autosearch.errors import WorkloadError
from autosearch.search.adapter import ModelAdapter

__all__ = [
    "PRIOR_MODEL",
    "SHARED_POPULATION",
    "SHORTLIST",
    "PriorRanker",
    "prior_schedule",
    "ranked_schedule",
    "ranked_schedules",
]

#: The model that shortlists: it scores decision vectors, unbuilt, and carries to unseen operators.
PRIOR_MODEL = "pretrained-prefix"
#: The model that orders the shortlist, from the built schedules' loop-nest features: the
#: `pretrained` recipe trained on every CPU's stores (MODEL_CARD_order.md; package data, no
#: `--model` name). On ResNet-18's shortlists on a Zen 3 (a model none of its data holds) its picks
#: summed 45.7 ms against `pretrained`'s 76.2 (the best of each shortlist: 35.8; bench/README.md
#: "On a CPU the shipped priors never saw").
ORDER_MODEL = str(Path(__file__).resolve().parent.parent / "pretrained" / "order")
#: Schedules the prefix prior passes to the feature prior.
SHORTLIST = 32
#: Vectors a generation of the first round holds over all of a task's sketches: a task of up to
#: four keeps 1,024 a sketch, one of more shares these (`decision_search.sketch_population`).
SHARED_POPULATION = 4096
#: Best-ordered candidates tried in order until one computes what the unscheduled task computes.
CANDIDATES = 4
#: Best-ordered schedules after the pick, timed beside it (`register_blocks.timed_pick`).
RUNNERS_UP = 2


class PriorRanker:
    """The two shipped priors, loaded once per network: one shortlists, the other orders."""

    def __init__(self, target: Any) -> None:
        from autosearch.backends.tvm.target import physical_cores
        from autosearch.search.registers import simd_bits

        self.shortlister = _prior(PRIOR_MODEL, target)
        # it scores on every physical core: nothing else of the run works during the pass (2
        # threads took MobileNetV2's depthwise tasks' first round from 7.5 s to 4.8 s on Zen 3)
        self.shortlister.score_threads = physical_cores()
        self.orderer = _prior(ORDER_MODEL, target)
        self.simd_bits = simd_bits(target)

    def order(self, context: Any, picks: Sequence[Any]) -> list[Any]:
        """`picks` (built schedules) fastest-first: those whose vectors fill whole registers
        (`registers.whole_register_vectors`) first, each part by the orderer; ties keep their order."""
        from tvm.s_tir.meta_schedule import MeasureCandidate
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        if len(picks) < 2:
            return list(picks)
        cands = [MeasureCandidate(p.sch, ArgInfo.from_entry_func(p.sch.mod, remove_preproc=True)) for p in picks]
        scores = np.asarray(self.orderer.score(self.orderer.features(context, cands)), dtype=np.float64)
        return [picks[i] for i in self.rank(picks, scores)]

    def rank(self, picks: Sequence[Any], scores: np.ndarray) -> np.ndarray:
        """Indices of `picks` best-first, given their feature-prior `scores`: whole-register
        vectors first, then by score; ties keep their order."""
        from autosearch.search.registers import whole_register_vectors

        whole = np.array([whole_register_vectors(p.sch, self.simd_bits) for p in picks])
        return np.lexsort((-np.asarray(scores), ~whole))


def _prior(name: str, target: Any) -> ModelAdapter:
    """A shipped prior as the scorer that scores it (a `ModelAdapter`)."""
    from autosearch.search.model_spec import make_scorer

    scorer = make_scorer(name, target=target)
    assert isinstance(scorer, ModelAdapter)  # a shipped prior is one of our models
    return scorer


def prior_schedule(workload: Any, target: Any, ranker: PriorRanker, seed: int = 0) -> str | None:
    """The trace (JSON text) of the task's zero-trial schedule: for a task with no reduction and a
    channel block innermost, its timed loop nest (`spatial.spatial_schedule`), else the best-ranked
    pick of its design space (`ranked_schedules`) or, where one timed faster, a runner-up, an
    unroll variant or a register block (`register_blocks.timed_pick`); in every case one that
    computes what the task computes (`verify`). None: TVM builds the task untuned."""
    from autosearch.backends.tvm.space import trace_json
    from autosearch.networks.register_blocks import timed_pick
    from autosearch.networks.spatial import spatial_schedule

    found = spatial_schedule(workload, target, ranker.simd_bits, seed)
    if found is not None:
        return trace_json(found[0])
    pick, runners_up = ranked_schedules(workload, target, ranker, seed)
    return timed_pick(workload, target, pick, seed, runners_up)


def ranked_schedule(workload: Any, target: Any, ranker: PriorRanker, seed: int = 0) -> str | None:
    """The trace of the task's best-ranked schedule that the post-processors accept and that
    computes what the task computes, or None where MetaSchedule offers no design space for it or
    none of the `CANDIDATES` best is right."""
    return ranked_schedules(workload, target, ranker, seed)[0]


def ranked_schedules(workload: Any, target: Any, ranker: PriorRanker, seed: int = 0) -> tuple[str | None, list[str]]:
    """`ranked_schedule`'s pick and the traces of the `RUNNERS_UP` schedules ordered after it
    (not checked: `register_blocks.timed_pick` checks the one it chooses).

    Why: the orderer's first is often far from the shortlist's best on a CPU it never saw.
    ConvNeXt-tiny's 7x7 depthwise convolution (96 x 56 x 56) was picked at 1.84 ms a call where
    most of its first round's 16 schedules ran 0.29-0.49 ms (Zen 5)."""
    from autosearch.backends.tvm.space import trace_json
    from autosearch.networks.verify import schedule_matches
    from autosearch.search.decision_search import DecisionSearch
    from autosearch.search.strategies import DecisionSettings, RandomDraws, design_space
    from autosearch.search.tune import TuneSettings

    settings = TuneSettings(trials=1, trials_per_round=1, seed=seed, fixed_spaces=True, eps_greedy=0.0)
    try:
        ctx, spaces = design_space(workload, target, settings, None)
    except WorkloadError:
        return None, []
    draws = RandomDraws(ctx, spaces, seed)
    try:
        search = DecisionSearch(
            ctx, spaces, draws, ranker.shortlister, settings, DecisionSettings(), shared=SHARED_POPULATION
        )
        picks = ranker.order(ctx, search.propose(SHORTLIST))
    except WorkloadError:  # nothing to decide (or no sketch it can read): the space's own schedule
        picks = draws.draw(1)
    for k, pick in enumerate(picks[:CANDIDATES]):
        trace = trace_json(pick.sch)
        if schedule_matches(workload, trace, target, seed):
            return trace, [trace_json(p.sch) for p in picks[k + 1 : k + 1 + RUNNERS_UP]]
    return None, []
