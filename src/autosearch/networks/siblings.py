"""Tasks of one loop structure lend each other their best schedules.

A network often holds many tasks that differ only in an extent: DenseNet-121 has 58 1x1
convolutions, one per input width, each its own task and each reached by a handful of rounds in
10 minutes. After a task's round, the best schedules of its siblings (tasks that write the same
shape by the same loops; the fastest per floating-point operation first) are measured on it too,
each tile split refitted to its loops (`backends.tvm.space.refitted`). Measured before it was built: on DenseNet-121's six 1x1
convolutions at 56x56 (16 trials each, a 10-minute run), a sibling's best ran 9-20% faster than
the task's own on four of them, and the group's time fell by 10% (bench/README.md, "Siblings")."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SiblingSchedules", "structure_key"]

#: Sibling schedules measured on a task after each of its rounds (the fastest siblings' bests not
#: yet tried on it).
OFFERS_PER_ROUND = 2


def structure_key(mod: Any) -> str:
    """A task's loop structure and output shape: its TVMScript with every number left out (extents,
    shapes and the digits of names) and the shape of what it writes, so that two tasks share it
    where only the sizes of what they read differ (a 1x1 convolution's input width).

    Why the output shape: with it left out, DenseNet-121's 1x1 convolutions at 56x56 were offered
    the tiles of those at 7x7 and 14x14 (the fastest per operation), and a sibling's schedule beat
    the task's own on 8 of 62 tasks; the schedules of one map size are the ones that carry over."""
    func = mod["main"]
    return re.sub(r"\d+", "#", mod.script(show_meta=False)) + repr(list(func.params[-1].ty.shape))


class SiblingSchedules:
    """Which siblings' schedules each task of a network has been offered (module doc)."""

    def __init__(self, workloads: Sequence[Any]) -> None:
        self.workloads = list(workloads)
        self.keys = [structure_key(w.mod()) for w in self.workloads]
        self.tried: dict[int, set[str]] = {}

    def offers(self, i: int, runs: Mapping[int, Any], postprocs: Any) -> list[Any]:
        """Schedules of task `i` from the best schedules of up to `OFFERS_PER_ROUND` siblings
        (`runs`: each reached task's run, its `result` holding its best so far) not yet offered
        to it, the fastest per operation first; those that do not apply to its loops are left out."""
        from autosearch.backends.tvm.space import refitted

        tried = self.tried.setdefault(i, set())
        donors = []
        for j, run in runs.items():
            best, latency = run.result.best_trace, run.result.best_latency
            if j == i or self.keys[j] != self.keys[i] or best is None or not latency or best in tried:
                continue
            donors.append(((self.workloads[j].flops or 0.0) / latency, j, best))
        out = []
        mod = self.workloads[i].mod()
        for _rate, j, trace in sorted(donors, key=lambda d: -d[0])[:OFFERS_PER_ROUND]:
            tried.add(trace)
            sch = refitted(self.workloads[j].mod(), trace, mod, postprocs)
            if sch is not None:
                out.append(sch)
        return out
