"""Schedules a network's rounds measure on a task beside its search: the role, and the fused
consumer moved to the other tile level.

After each round of a task, every `RoundOffer` of the run names schedules of that task written from
what the rounds have found so far (`networks.siblings.SiblingSchedules`: the best schedules of
tasks of the same loops; `ConsumerLevels`: the task's own best with its fused consumer moved), and
the round's runner measures them as trials of the task (`TuneRun.measure_schedules`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = ["ConsumerLevels", "RoundOffer"]


class RoundOffer(Protocol):
    """Schedules of task `i` to measure after its round (`form`: their `extra.form` in the store)."""

    form: str

    def offers(self, i: int, runs: Mapping[int, Any], postprocs: Any) -> list[Any]: ...


class ConsumerLevels:
    """Each task's best schedule so far with its fused element-wise consumer at the other tile
    level (`backends.tvm.space.consumer_moved`), measured once per best.

    Why: MetaSchedule fuses a reduction's consumer after the outer or the middle spatial tiles,
    as two sketches searched apart; a 10-minute run gives a task a few rounds, and the tiles found
    best on one level are seldom tried on the other. Moved on the 10-minute bests of ResNet-50 and
    DenseNet-121 (Intel `rocketlake`, cold), it ran up to 1.37x faster on some tasks, within a few
    per cent on most and slower on a few (bench/README.md, "The fused consumer at the other tile
    level"): measured, so the rounds keep what runs faster."""

    form = "consumer-level"

    def __init__(self, workloads: Sequence[Any]) -> None:
        self.workloads = list(workloads)
        self.tried: dict[int, set[str]] = {}

    def offers(self, i: int, runs: Mapping[int, Any], postprocs: Any) -> list[Any]:
        """Task `i`'s best (`runs[i].result.best_trace`) with its consumer moved, unless that best
        or the schedule it moves to was offered or made so before; none where it fuses none."""
        from autosearch.backends.tvm.space import consumer_moved, trace_json

        run = runs.get(i)
        best = None if run is None else run.result.best_trace
        tried = self.tried.setdefault(i, set())
        if best is None or best in tried:
            return []
        tried.add(best)
        sch = consumer_moved(self.workloads[i].mod(), best, postprocs)
        if sch is None:
            return []
        tried.add(trace_json(sch))  # once it is the best, moving it back gives the schedule it came from
        return [sch]
