"""The prior pass of a network run: each task's zero-trial schedule (`prior.prior_schedule`),
found before any round is measured, and the end of a budget (`end_reserve`).

Why first: a task's first round (16 trials of the search) ran slower than the prior's pick on
most of DenseNet-121's tasks, and its 10-minute build ran 0.93x OpenVINO where the prior alone
built 0.95x; with the pass first and each task's rounds started from its pick
(`TuneRun.start_from`), 0.99x (bench/README.md "The prior's picks first"). The pass sends its tasks
(8 or more) to worker processes (`prior_workers`).
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

__all__ = [
    "END_SECONDS",
    "END_SECONDS_PER_TASK",
    "END_SECONDS_PER_TUNED_TASK",
    "PriorPass",
    "end_reserve",
]

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
#: `10 + 0.2 + 0.35` kept 84 (the Zen 4's verify was 0.29-0.34 s for each such task). Since the
#: build compiles on every core and the verifies run in threads (Intel `rocketlake`, 2026-12-07),
#: the ends took DenseNet-121 (140 tasks, 58 tuned) 31 s with its verifies one after another (13.6
#: s of them), ResNet-50 (33, all tuned) 17 s, MobileNetV2 (32) 9 s, and `10 + 0.2 + 0.35` left
#: 11-26 s of the 10 minutes unspent: `5 + 0.1 + 0.2` keeps 31, 15 and 15.
END_SECONDS = 5.0
END_SECONDS_PER_TASK = 0.1
END_SECONDS_PER_TUNED_TASK = 0.2
#: The end of an int8 run against an fp32 one of as many tasks: its quantized kernels build and
#: verify slower. Intel `rocketlake`, ends (verify + build and timing): DenseNet-121 in int8 76 s
#: (139 tasks, 51 tuned; one build; its verifies one after another), RegNet-Y about 60, MobileNetV2
#: about 38 (their two builds halved); 2.6x the figures above keeps DenseNet-121 76 s.
END_FACTOR = {"int8": 2.6}


def end_reserve(n_tasks: int, n_tuned: int, precision: str = "fp32") -> float:
    """Seconds a budget leaves after its rounds for verifying, building, checking and timing a
    network of `n_tasks` tasks of which `n_tuned` were measured, its dense layers and
    convolutions in `precision`."""
    fp32 = END_SECONDS + END_SECONDS_PER_TASK * n_tasks + END_SECONDS_PER_TUNED_TASK * n_tuned
    return END_FACTOR.get(precision, 1.0) * fp32


class PriorPass:
    """The prior's schedules of a network's tasks (`run_all`, or one task at a time: `run`), the
    seconds they took (`seconds`). On a GPU it finds none, at no cost: the shipped prior knows CPU
    records only (an untuned GPU task gets TVM's default GPU schedule, dlight's)."""

    def __init__(
        self,
        workloads: Sequence[Any],
        target: Any,
        seed: int,
    ) -> None:
        from autosearch.backends.tvm.target import is_gpu

        self.workloads, self.target, self.seed = list(workloads), target, seed
        self.enabled = not is_gpu(target)
        self.traces: dict[int, str] = {}  # task -> trace, where the prior had a right schedule
        self.built: dict[int, list[Built]] = {}  # task -> the candidates a worker built, until timed
        self.passed: set[int] = set()  # tasks the pass has looked at (with or without a trace)
        self.seconds = 0.0  # all the pass has taken, loading the priors included
        self._ranker: Any = None

    def run_all(self, todo: Sequence[int], each: Callable[[int], None] | None = None) -> None:
        """`run` of every task in `todo` not yet passed, `each(i)` after each. The tasks go to worker
        processes first (`prior_workers`), which build the candidates timed beside each pick (or a
        task's loop nests, where it has no reduction); the timing follows here, alone."""
        from autosearch.networks.prior_workers import ranked_in_workers
        from autosearch.networks.verify import keep_reference

        todo = [i for i in todo if i not in self.passed]
        if self.enabled:

            def done(i: int, found: WorkerPick) -> None:
                self._record(i, found.pick)
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
        for i in todo:  # passed in this process: too few tasks for workers, or a task a worker left
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
            self._ranker = PriorRanker(self.target)
        with interrupts.deferred():
            trace = prior_schedule(self.workloads[i], self.target, self._ranker, self.seed)
        self._record(i, trace)
        self.seconds += time.perf_counter() - t0

    def _timed_built(self, i: int) -> None:
        """Task `i`'s worker pick against the candidates the worker built (`register_blocks.timed_built`)."""
        from autosearch.networks.register_blocks import timed_built

        with interrupts.deferred():
            trace = timed_built(self.workloads[i], self.target, self.traces.get(i), self.built.pop(i, []), self.seed)
        if trace is not None:
            self.traces[i] = trace

    def _record(self, i: int, trace: str | None) -> None:
        """Task `i` passed, with its prior trace (None: built untuned)."""
        self.passed.add(i)
        if trace is not None:
            self.traces[i] = trace
