"""Where a built network spends its time: each task's seconds in a run of the whole network.

Why: a task's measured latency (cache-flushed, alone) says how fast its schedule is, not how much
of the network it costs, and a task built from the prior has no measured latency at all, so a
user could not tell which task a slow prior-only build should spend its minutes on. Timing every
kernel call of real runs of the built network (Relax VM instrumentation: a callback before and
after each call, no rebuild) answers both, with the caches as the network leaves them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["task_seconds"]


#: What the build calls a task's function whose weight layout its schedule rewrote (Relax's
#: `SplitLayoutRewritePreproc`: the rewrite goes to the constants, the kernel is renamed). Counted
#: as "other", DenseNet-121's 3x3 convolutions (18 of its 42 ms) showed as time outside every task.
PREPACKED = "_prepacked"


def _task_of_function(mod: Any, tasks: Sequence[Any]) -> dict[str, str]:
    """{PrimFunc name in `mod`: its task's name}: equal functions share one MetaSchedule task
    (extract_tasks merges them and counts them in its weight), found by structural hash."""
    import tvm_ffi
    from tvm import IRModule, tirx

    by_hash = {int(tvm_ffi.structural_hash(t.dispatched[0])): t.task_name for t in tasks}
    out = {}
    for gv, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            h = int(tvm_ffi.structural_hash(IRModule({"main": func.with_attr("global_symbol", "main")})))
            if h in by_hash:
                out[gv.name_hint] = by_hash[h]
    return out


def task_seconds(executable: Any, dev: Any, args: Sequence[Any], graph: Any, rounds: int = 5) -> dict[str, float]:
    """{task name: seconds it takes one run of the network} (all its calls summed, median over
    `rounds` runs after a warm-up), and "other" for every call that is no task (the VM's
    allocations and shape checks, library calls). Timing a call adds a few microseconds to it."""
    from tvm import relax

    names = _task_of_function(graph.mod, graph.tasks)
    vm = relax.VirtualMachine(executable, dev)
    started: dict[str, float] = {}
    spent: dict[str, float] = {}

    def instrument(_func: Any, symbol: str, before: bool, _ret: Any, *_args: Any) -> int:
        if before:
            started[symbol] = time.perf_counter()
        else:
            dev.sync()
            key = names.get(symbol) or names.get(symbol.removesuffix(PREPACKED), "other")
            spent[key] = spent.get(key, 0.0) + time.perf_counter() - started.pop(symbol, time.perf_counter())
        return 0  # VMInstrumentReturnKind.NO_OP: run the call as usual

    vm.set_instrument(instrument)
    vm["main"](*args)
    per_round: list[dict[str, float]] = []
    for _ in range(max(1, rounds)):
        spent.clear()
        vm["main"](*args)
        per_round.append(dict(spent))
    keys = {k for r in per_round for k in r}
    return {k: float(np.median([r.get(k, 0.0) for r in per_round])) for k in sorted(keys)}
