"""The one interface of a tuning search (`SearchStrategy`), its factory (`StrategyFactory`), and
what every strategy shares.

MetaSchedule's shape: a strategy proposes a round's candidates (`propose(n)`), draws random
controls (`draw(k)`), is told what they measured (`notify`) and is closed at the end (`close`).
`tune()` drives every strategy the same way and asks it nothing about its kind: what differs is
in the strategy's own methods and attributes (`learns`: whether the tuning model learns the
run's measurements; `n_controls`: its exploration policy's share of random controls; `learn`:
the scorer's update, judged first by the policy).

`tune()` is given a `StrategyFactory`, not a strategy: a strategy is made per workload (its design
space is the workload's). Each strategy file holds its factory, a frozen dataclass of the
strategy's own knobs (`EvolutionarySettings`, `DecisionSettings`, `GradientSettings`) whose
`chain` names the strategies to try (gradient -> knob model -> evolutionary; decision ->
evolutionary), each `Link` giving way on a typed error where the workload does not suit it, and
`gave_way` the note it leaves; `make`, the same for every factory, walks the chain.
`TuneSettings` (search/tune.py) holds only what every strategy uses.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from autosearch.errors import AutosearchError, InputError, WorkloadError, one_line
from autosearch.search.explore import EXPLORE_MODES, Exploration, make_exploration

__all__ = [
    "Fallback",
    "Link",
    "RandomDraws",
    "SearchStrategy",
    "StrategyFactory",
    "Unsupported",
    "design_space",
    "mod_hash",
    "nothing_to_decide",
    "replay_rows",
]


class Unsupported(AutosearchError):
    """A strategy that cannot search this workload (the reason, one line): its factory falls back
    to the next strategy of its chain."""


@dataclass(frozen=True)
class Fallback:
    """A workload searched by another strategy than the one asked for: `asked` (the `--search`
    value) gave way to `used`; `line` says why, as `tune` prints it. `counted`: a task outside the
    decision space (a network's reshape or transpose has nothing to decide), which `tune-model`
    counts in one line instead of printing each."""

    workload: str
    asked: str
    used: str
    line: str
    counted: bool = False


class StrategyFactory(ABC):
    """A `--search` value resolved: the strategy's own knobs (a frozen dataclass subclass) and
    `make`, which builds the strategy of one workload (the first of its `chain` that takes it).
    `explore`: the exploration policy the strategy runs (`--explore` with `auto` resolved: "none"
    or "control")."""

    #: The `--search` value it runs (what a run reports).
    name: ClassVar[str] = ""
    explore: str

    def check(self) -> None:
        """Refuse bad knobs in one line (called where the factory is made)."""
        if self.explore not in EXPLORE_MODES:
            raise InputError(f"--explore must be one of auto, {', '.join(EXPLORE_MODES)}, got {self.explore!r}")

    def check_settings(self, settings: Any) -> None:
        """Refuse knobs that do not fit the run's `TuneSettings` (one line)."""
        return None

    def check_scorer(self, scorer: Any) -> None:
        """Refuse a scorer the strategy cannot score with (one line), before any work."""
        return None

    @abstractmethod
    def chain(self, scorer: Any, target: Any) -> list[Link]:
        """The strategies `make` tries for a workload, in order: the last never gives way."""

    def gave_way(self, link: Link, workload: Any, settings: Any, exc: Exception) -> Fallback | None:
        """The note of `link` giving way to the next (`exc`: why); None where it may not, and the
        error stands. Only a factory whose chain has a link that gives way is asked."""
        return None

    def make(
        self,
        workload: Any,
        target: Any,
        scorer: Any,
        settings: Any,
        *,
        timer: Callable[[str], Any] | None = None,
        fallbacks: list[Fallback] | None = None,
    ) -> SearchStrategy:
        """The workload's strategy: the first link of `chain` that takes it; a fallback taken on
        the way is appended to `fallbacks`."""
        links = self.chain(scorer, target)
        for link in links[:-1]:
            try:
                return link.strategy(workload, target, scorer, settings, link.options, timer=timer)
            except link.gives_way as exc:
                note = self.gave_way(link, workload, settings, exc)
                if note is None:
                    raise
                if fallbacks is not None:
                    fallbacks.append(note)
        last = links[-1]
        return last.strategy(workload, target, scorer, settings, last.options, timer=timer)


class Link(NamedTuple):
    """One strategy of a factory's fall-back chain (`StrategyFactory.chain`): made as
    `strategy(workload, target, scorer, settings, options, timer=)`; an exception of `gives_way`
    hands the workload to the next link."""

    strategy: Callable[..., SearchStrategy]
    options: StrategyFactory
    gives_way: tuple[type[Exception], ...] = ()


def replay_rows(context: Any, rows: list[Any]) -> list[tuple[Any, Any]]:
    """(row, MeasureCandidate) of stored schedules (trace replay); rows whose trace no longer
    applies are skipped, so the pairs keep each candidate with its own row."""
    from autosearch.features.per_store import candidate_from_trace

    out = []
    for r in rows:
        try:
            out.append((r, candidate_from_trace(context.mod, r.schedule)))
        except Exception:  # a trace from another TVM version: not a seed, not an error
            continue
    return out


def mod_hash(mod: Any) -> int:
    import tvm_ffi

    return int(tvm_ffi.structural_hash(mod))


class RandomDraws:
    """Schedules sampled uniformly from the design spaces, as MetaSchedule's ReplayTrace does: a
    sketch's trace replayed with every decision sampled afresh, then the postprocessors (a
    schedule they reject is drawn again). Never one already proposed or measured in this run."""

    def __init__(self, context: Any, spaces: list[Any], seed: int) -> None:
        import numpy as np

        self.context, self.rng = context, np.random.default_rng([seed, 0x5EED])
        self.traces = [s.trace.simplified(remove_postproc=True) for s in spaces]
        self.postprocs = list(context.space_generator.postprocs)
        self.seen: set[int] = set()

    def fresh(self, candidate: Any) -> bool:
        return mod_hash(candidate.sch.mod) not in self.seen

    def mark(self, candidates: list[Any]) -> None:
        for c in candidates:
            self.seen.add(mod_hash(c.sch.mod))

    def claim(self, candidates: list[Any], limit: int) -> list[Any]:
        """Up to `limit` of the candidates not yet proposed or measured in this run, now marked seen."""
        out: list[Any] = []
        for c in candidates:
            if len(out) >= limit:
                break
            h = mod_hash(c.sch.mod)
            if h not in self.seen:
                self.seen.add(h)
                out.append(c)
        return out

    def draw(self, k: int, tries: int = 8, mark: bool = True) -> list[Any]:
        """Up to k fresh schedules; `mark=False` leaves them free to be proposed later (screening
        draws many and measures few: the rest must not be barred from the search)."""
        return list(self.draw_keyed(k, tries, mark).values())

    def draw_keyed(self, k: int, tries: int = 8, mark: bool = True) -> dict[int, Any]:
        """`draw`, keyed by each schedule's structural hash (in the order drawn): each sketch's
        trace replayed with its decisions dropped, so that the replay samples them afresh."""
        from tvm.s_tir.schedule import Trace

        out: dict[int, Any] = {}
        misses = 0  # draws in a row that gave nothing new: a small space is spent, stop asking
        for _ in range(max(0, k) * tries):
            if len(out) >= k or misses >= 128:
                break
            misses += 1
            trace = self.traces[int(self.rng.integers(len(self.traces)))]
            drawn = self._replayed(Trace(trace.insts, {}), int(self.rng.integers(1, 2**31 - 1)))
            if drawn is None:  # a sampled decision the sketch cannot take: draw again
                continue
            h, cand = drawn
            if h in self.seen or h in out:
                continue
            misses = 0
            out[h] = cand
        if mark:
            self.seen.update(out)
        return out

    def each_sketch(self) -> list[Any]:
        """Each sketch's trace replayed once, as it was sampled, and post-processed (`claim` takes
        those not yet proposed or measured). A space with nothing to decide has no other schedule
        (`draw` would replay it up to 128 times to learn that)."""
        out: list[Any] = []
        for trace in self.traces:
            drawn = self._replayed(trace, None)
            if drawn is not None:
                out.append(drawn[1])
        return out

    def _replayed(self, trace: Any, seed: int | None) -> tuple[int, Any] | None:
        """(structural hash, MeasureCandidate) of `trace` replayed (a decision it lacks sampled with
        `seed`) and post-processed; None where the sketch refuses a decision."""
        from tvm.s_tir.meta_schedule import MeasureCandidate
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        from autosearch.backends.tvm.space import replay_postprocessed

        sch = replay_postprocessed(
            self.context.mod,
            self.postprocs,
            lambda s: trace.apply_to_schedule(s, remove_postproc=True),
            seed=seed,
        )
        if sch is None:
            return None
        return mod_hash(sch.mod), MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def nothing_to_decide(spaces: list[Any]) -> bool:
    """Whether no design space (a MetaSchedule `Schedule`) samples a decision: each is one schedule."""
    return not any(len(sch.trace.decisions) > 0 for sch in spaces)


def design_space(workload: Any, target: Any, settings: Any, strategy: Any) -> tuple[Any, list[Any]]:
    """(TuneContext, design spaces) of the workload; one with nothing to decide is refused unless
    `settings.fixed_spaces` (then its spaces' single schedule is what the search measures)."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.intrinsics import register_tensor_intrinsics
    from autosearch.backends.tvm.lowp import space_generator
    from autosearch.backends.tvm.space import generate_spaces

    register_tensor_intrinsics(target)
    mod = workload.mod()
    ctx = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator=space_generator(mod, target),
        search_strategy=strategy,
        task_name=workload.name,
        rand_state=settings.seed,
        num_threads=max(1, os.cpu_count() or 1),
    )
    try:
        spaces = generate_spaces(ctx)
    except Exception as exc:
        raise WorkloadError(f"MetaSchedule cannot build a design space for {workload.name}: {one_line(exc)}") from None
    if not spaces or (nothing_to_decide(spaces) and not settings.fixed_spaces):
        raise WorkloadError(
            f"{workload.name} has no tunable design space on {target.kind.name}: "
            "MetaSchedule offers no schedule decision to search over"
        )
    return ctx, spaces


class SearchStrategy(ABC):
    """A tuning search: where a round's candidates come from, and what it learns from their results.

    Every strategy is made as `Strategy(workload, target, scorer, settings, options, timer=)`:
    scorer: the tuning model (`search.scorer.Scorer`); settings: the run's `TuneSettings`; options:
    its own factory (`StrategyFactory`: its knobs and exploration; `knobs()`, their defaults, where
    none is given). What is the same for every strategy is done here; the workload's own search
    is set up by its `_start`, called last. context: the TuneContext
    (features and TVM's own cost models read it); kind: the `--search` value it runs (what a run
    reports, fallbacks included); policy: its exploration (`search.explore.Exploration`); draws:
    the run's `RandomDraws` (uniform draws and the record of what was proposed or measured)."""

    kind: str = ""
    #: Whether the tuning model learns the run's measurements (`learn`); a strategy with a model
    #: of its own (the knob gradient search) says False and its `learn` does nothing.
    learns: bool = True
    context: Any
    draws: RandomDraws

    #: The factory of its knobs, made with their defaults where a strategy is made without options.
    knobs: ClassVar[type[StrategyFactory]]

    def __init__(
        self,
        workload: Any,
        target: Any,
        scorer: Any,
        settings: Any,
        options: StrategyFactory | None = None,
        *,
        timer: Callable[[str], Any] | None = None,
    ) -> None:
        self.scorer = scorer
        self.settings = settings
        self.options = self._own_options(options)
        self.policy: Exploration = make_exploration(self.options.explore, settings.seed, trained=self.scorer.trained)
        self._timer = timer
        self._start(workload, target)

    @classmethod
    def _own_options(cls, options: StrategyFactory | None) -> StrategyFactory:
        """The knobs it runs with: those given, else `knobs`' defaults."""
        return options if options is not None else cls.knobs()

    @abstractmethod
    def _start(self, workload: Any, target: Any) -> None:
        """The workload's search set up (its design space, draws and search), after what every
        strategy shares (scorer, settings, options, policy, timer)."""

    def section(self, name: str) -> Any:
        """A timed section of the run's breakdown (nothing without a timer)."""
        return self._timer(name) if self._timer is not None else nullcontext()

    @abstractmethod
    def propose(self, n: int) -> list[Any]:
        """Up to n new candidates, none proposed or measured before in this run."""

    def draw(self, k: int) -> list[Any]:
        """Up to k random controls (uniform draws from the design space)."""
        return self.draws.draw(k)

    @property
    def postprocs(self) -> list[Any]:
        """The post-processors every schedule of this task goes through (its design space's)."""
        return self.draws.postprocs

    def n_controls(self, n: int) -> int:
        """How many of a round of n are random controls (the exploration policy's share)."""
        return self.policy.controls(n)

    @property
    def explore_state(self) -> float | None:
        """What the exploration policy decided for the next round (history's `explore`)."""
        return self.policy.state

    @abstractmethod
    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        """What the candidates measured (`MeasureResult`s), for the search itself."""

    def learn(self, group: str, candidates: list[Any], measured: list[Any], feats: Any, controls: list[bool]) -> None:
        """The tuning model learns a measured round (`feats`: its PerStoreFeature, as stored)."""
        self.scorer.learn(self.context, group, candidates, measured, feats, controls, self.policy)

    def seed(self, rows: list[Any]) -> list[tuple[Any, Any]]:
        """Stored schedules (store rows, fastest first) the search starts from; returns the
        (row, candidate) pairs that replay. Marked seen: never proposed again."""
        pairs = replay_rows(self.context, rows)
        self.draws.mark([c for _, c in pairs])
        return pairs

    def learn_seeds(self, group: str, pairs: list[tuple[Any, Any]]) -> None:
        """The tuning model learns the seeds as evidence (where it learns at all)."""
        if pairs:
            self.scorer.learn_seeds(self.context, group, [c for _, c in pairs], [r.median for r, _ in pairs])

    def close(self) -> None:
        """End of the run: release what the search holds."""
        return None  # nothing by default
