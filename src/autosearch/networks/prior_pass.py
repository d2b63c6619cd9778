"""The prior pass of a network run as a budgeted job: one task at a time, each timed, so the time
it needs is known from what it has cost on this network rather than guessed.

Why: a fixed reserve per task (4 s) was right for ResNet-50 on one machine and wrong elsewhere.
A Swin-style transformer's 124 tasks reserved eight minutes of a ten-minute budget, the pass
took 74 s, and the run ended three minutes early with the rest idle; on a slower CPU the same
reserve can run over. `PriorPass.reserve` sums an estimate per task: the measured mean of the
tasks of its kind (`scheduler.task_kind`: the operator, Relax's numbering dropped) already
passed, with a margin, and for a kind not yet timed the costliest kind's, at least the fixed
figure. Why by kind: the tasks the
rounds reach last, passed first, are the network's smallest, often layout conversions with
nothing to decide that pass in a fraction of a second; one mean over them once promised
MobileNetV2's 52 convolutions a few seconds, and the pass ran 200 s past the budget. The rounds
of `networks.tune` pass a task (the one the scheduler would reach last) whenever the time left
no longer covers the reserve, and measure again with whatever the estimate gives back. A pass
over many tasks at once (`run_all`: `--trials 0`, the tasks left after the rounds) sends the
tasks with a reduction to worker processes (`prior_workers`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from autosearch import interrupts

if TYPE_CHECKING:
    from autosearch.networks.built import Built
    from autosearch.networks.prior_workers import WorkerPick
    from autosearch.search.adapter import ModelAdapter

__all__ = [
    "END_SECONDS",
    "END_SECONDS_PER_TASK",
    "END_SECONDS_PER_TUNED_TASK",
    "PRIOR_SECONDS_PER_TASK",
    "PriorPass",
    "end_reserve",
]

#: Seconds a task is assumed to take the prior pass before one has been timed on this network.
PRIOR_SECONDS_PER_TASK = 4.0
#: Loading the two shipped priors (once a network), assumed until it has happened.
RANKER_SECONDS = 3.0
#: The measured mean of a kind is stretched by this much: tasks of one kind still differ in size.
MARGIN = 1.5
#: What the end of a run (verify, build, check, time) is given out of a budget: a fixed part, one
#: per task (the build and the output check grow with the graph) and one per task a round reached
#: (its chosen schedule is verified beside its unscheduled loops; a prior's was verified when the
#: pass chose it). Sized on the ends of the 10-minute runs on a 2-core Zen 4 (bench/results'
#: `time_breakdown`s, verify + build_and_time): DenseNet-121's 188 tasks 40-70 s (33-65 tuned),
#: MobileNetV3's 55 (all tuned) 20 s, MobileNetV2's 35 17 s, ShuffleNetV2's 34 12 s, ResNet-18's 18
#: 20-24 s, BERT-base's 20 25 s. The figures before (20 s + 0.8 s a task + 1 s a tuned task, from a
#: Zen 3 before the check's -O1 build and the network's one compile) reserved DenseNet-121 209 s
#: for 40, and its run ended with 148 s of the budget unspent. With the flattened concatenations
#: (134 tasks, 86-97 tuned) the ends took 75-88 s on the Zen 4 and 68 s on a Zen 5 (verify 0.41 s a
#: tuned task), RegNet-Y's 35 s, Swin-tiny's 49, ResNet-50's 21. On the Zen 5 `15 + 0.25 + 0.5`
#: kept DenseNet-121 118 s for 62-68 (every task a round reached counts: 134 with their timed forms);
#: `10 + 0.2 + 0.35` keeps 84 (the Zen 4's verify was 0.29-0.34 s for each such task).
END_SECONDS = 10.0
END_SECONDS_PER_TASK = 0.2
END_SECONDS_PER_TUNED_TASK = 0.35
#: The end of an int8 run against an fp32 one of as many tasks: its quantized kernels build and
#: verify slower. Intel `rocketlake`, ends (verify + build and timing) against the figures above:
#: DenseNet-121 in int8 76 s for 56 (139 tasks, 51 tuned; one build), RegNet-Y about 60 for 40,
#: MobileNetV2 about 38 for 29 (their two builds halved). DenseNet-121's 10 minutes in int8: 735 s
#: with 1x and two builds, 565 s with 2x and one (bench/README.md "int8 built once, inside its budget").
END_FACTOR = {"int8": 2.0}


def end_reserve(n_tasks: int, n_tuned: int, precision: str = "fp32") -> float:
    """Seconds a budget leaves after its rounds for verifying, building, checking and timing a
    network of `n_tasks` tasks of which `n_tuned` were measured, its dense layers and
    convolutions in `precision`."""
    fp32 = END_SECONDS + END_SECONDS_PER_TASK * n_tasks + END_SECONDS_PER_TUNED_TASK * n_tuned
    return END_FACTOR.get(precision, 1.0) * fp32


class PriorPass:
    """The prior's schedules of a network's tasks, found one task at a time (`run`), each timed.
    On a GPU it finds none and reserves nothing: the shipped prior knows CPU records only (an
    untuned GPU task gets TVM's default GPU schedule, dlight's), and reserving its time had left a
    2-minute ResNet-50 run on an H200 no round at all."""

    def __init__(
        self,
        workloads: Sequence[Any],
        target: Any,
        seed: int,
        learned: Callable[[], ModelAdapter | None] | None = None,
    ) -> None:
        from autosearch.backends.tvm.target import is_gpu
        from autosearch.search.scheduler import task_kind

        self.workloads, self.target, self.seed = list(workloads), target, seed
        #: The network's pooled prior, once it has learned enough to rank with (`search.pooled`).
        self.learned = learned
        self.kinds = [task_kind(wl.name) for wl in self.workloads]
        self.enabled = not is_gpu(target)
        self.traces: dict[int, str] = {}  # task -> trace, where the prior had a right schedule
        self.built: dict[int, list[Built]] = {}  # task -> the candidates a worker built, until timed
        self.passed: set[int] = set()  # tasks the pass has looked at (with or without a trace)
        self.pooled: set[int] = set()  # tasks ranked by the network's pooled prior, not the shipped ones
        self.task_seconds: dict[int, float] = {}
        self.seconds = 0.0  # all the pass has taken, loading the priors included
        self._ranker: Any = None

    def estimate(self, i: int) -> float:
        """Seconds task `i` is expected to take: the measured mean of its kind (stretched by
        `MARGIN`); for a kind not yet timed, the costliest kind's so far, at least
        `PRIOR_SECONDS_PER_TASK` (a slower CPU takes longer over every kind: MobileNetV2's
        convolutions took 8 s a task on a 2-core Zen 3, twice the fixed figure)."""
        means: dict[str, list[float]] = {}
        for j, s in self.task_seconds.items():
            means.setdefault(self.kinds[j], []).append(s)
        if self.kinds[i] in means:
            same = means[self.kinds[i]]
            return MARGIN * sum(same) / len(same)
        return max([PRIOR_SECONDS_PER_TASK, *(MARGIN * sum(v) / len(v) for v in means.values())])

    def reserve(self, todo: Sequence[int]) -> float:
        """Seconds the pass is expected to need for the tasks `todo` (0 on a GPU)."""
        if not self.enabled or not todo:
            return 0.0
        return (RANKER_SECONDS if self._ranker is None else 0.0) + sum(self.estimate(i) for i in todo)

    def run_all(self, todo: Sequence[int], each: Callable[[int], None] | None = None) -> None:
        """`run` of every task in `todo` not yet passed, `each(i)` after each. Where the shipped
        priors rank (not the pooled one, which lives in this process), the tasks go to worker
        processes first (`prior_workers`), which build the candidates timed beside each pick (or a
        task's loop nests, where it has no reduction); the timing follows here, alone."""
        from autosearch.networks.prior_workers import ranked_in_workers
        from autosearch.networks.verify import keep_reference

        todo = [i for i in todo if i not in self.passed]
        if self.enabled and (self.learned is None or self.learned() is None):

            def done(i: int, found: WorkerPick, seconds: float) -> None:
                self._record(i, found.pick, seconds)
                self.built[i] = found.built
                if found.reference is not None:
                    keep_reference(self.workloads[i], self.target, self.seed, found.reference)
                if each is not None:
                    each(i)

            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="autosearch-prior-") as directory:
                ranked_in_workers(self.workloads, todo, self.target, self.seed, done, directory)
                for i in todo:  # the candidates they built are timed here, alone, as `prior_schedule` times them
                    if i in self.passed:
                        self._timed_built(i)
            self.seconds += time.perf_counter() - t0
        for i in todo:  # passed in this process: no workers, the pooled prior, or a task a worker left
            if i not in self.passed:
                self.run(i)
                if each is not None:
                    each(i)

    def run(self, i: int) -> None:
        """Find task `i`'s prior schedule (`prior.prior_schedule`), timed; Ctrl-C waits for it."""
        from autosearch.networks.prior import PriorRanker, prior_schedule

        if i in self.passed:
            return
        t0 = time.perf_counter()
        if not self.enabled:
            self.passed.add(i)
            return
        if self._ranker is None:
            self._ranker = PriorRanker(self.target, self.learned)
        t1 = time.perf_counter()
        if self._ranker.pooled is not None:
            self.pooled.add(i)
        with interrupts.deferred():
            trace = prior_schedule(self.workloads[i], self.target, self._ranker, self.seed)
        t2 = time.perf_counter()
        self._record(i, trace, t2 - t1)
        self.seconds += t2 - t0

    def _timed_built(self, i: int) -> None:
        """Task `i`'s worker pick against the candidates the worker built (`register_blocks.timed_built`)."""
        from autosearch.networks.register_blocks import timed_built

        t0 = time.perf_counter()
        with interrupts.deferred():
            trace = timed_built(self.workloads[i], self.target, self.traces.get(i), self.built.pop(i, []), self.seed)
        if trace is not None:
            self.traces[i] = trace
        self.task_seconds[i] = self.task_seconds.get(i, 0.0) + time.perf_counter() - t0

    def _record(self, i: int, trace: str | None, seconds: float) -> None:
        """Task `i` passed in `seconds`, with its prior trace (None: built untuned)."""
        self.passed.add(i)
        self.task_seconds[i] = seconds
        if trace is not None:
            self.traces[i] = trace
