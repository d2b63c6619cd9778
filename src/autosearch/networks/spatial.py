"""A zero-trial schedule for a task with no reduction (element-wise, concatenation, layout moves),
chosen by timing: one loop nest, its innermost axis (a channel block) one vector, run serially or
in parallel over the rest, whichever ran faster here.

Why: the prior's picks for such tasks fuse every axis into one loop, split it into 64-lane vectors
and run them in parallel; the index arithmetic of the fused loop (a division and a remainder per
lane) gathers each lane's per-channel constant, and TVM's parallel region costs microseconds to
start on these VMs. DenseNet-121's pre-activation BatchNorm + ReLU tasks on NCHW16c tensors ran
3.5-26x slower from the prior's pick than as one serial loop nest with the channel block
vectorised, its concatenations 1.3-3.8x (20 tasks timed warm on a Zen 4, 4.86x summed;
`bench/spatial_tasks.py`, bench/README.md "DenseNet-121 with constants folded in NumPy, then
tasks with no reduction timed"). Which of the two forms wins depends on the tensor's size and
the machine, so both are built and timed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["spatial_forms", "spatial_schedule", "warm_seconds"]

#: Longest innermost axis made one vector (16 floats of AVX-512 times 4, as MetaSchedule's rule).
MAX_VECTOR = 64


def spatial_forms(mod: Any, register_lanes: int) -> list[Any]:
    """The task's serial and parallel loop nests (schedules), or none where it has a reduction,
    a block that does not inline into the last, or an innermost axis no whole register divides."""
    from tvm import s_tir
    from tvm.s_tir import Schedule

    forms = []
    for parallel in (False, True):
        sch = Schedule(mod)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        if not blocks or any(iv.iter_type != 0 for b in blocks for iv in sch.get(b).iter_vars):
            return []  # a reduction (or an opaque axis): the prior's design space decides
        try:
            for block in blocks[:-1]:
                sch.compute_inline(block)
        except s_tir.ScheduleError:
            return []
        loops = sch.get_loops(blocks[-1])
        extent = getattr(sch.get(loops[-1]).extent, "value", None) if loops else None
        if not isinstance(extent, int) or extent % register_lanes or extent > MAX_VECTOR:
            return []
        if parallel:
            if len(loops) < 2:
                continue
            sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
        sch.vectorize(loops[-1])
        forms.append(sch)
    return forms


def warm_seconds(mod: Any, target: Any) -> float:
    """Median seconds of a call of the built schedule on random inputs, caches warm (as inside
    a network, where the producer has just written its input)."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    args = [
        tvm.runtime.tensor(rng.standard_normal([int(s) for s in a.shape]).astype(str(a.dtype)), dev)
        for a in ArgInfo.from_prim_func(mod["main"])
    ]
    lib = tvm.compile(mod, target=target).jit()
    return float(lib.time_evaluator("main", dev, number=1, repeat=7, min_repeat_ms=5)(*args).median)


def spatial_schedule(workload: Any, target: Any, register_bits: int) -> tuple[Any, float] | None:
    """The faster of the task's serial and parallel forms (`spatial_forms`) with its measured seconds,
    or None where the task is not of this kind (a reduction, an axis no register divides) or no
    form builds."""
    if register_bits <= 0:
        return None
    lanes = max(1, register_bits // 32)  # float32 lanes; wider dtypes only divide it more often
    timed = []
    for sch in spatial_forms(workload.mod(), lanes):
        try:
            timed.append((warm_seconds(sch.mod, target), sch))
        except Exception:  # a form TVM does not build: the other, or the prior's design space
            continue
    if not timed:
        return None
    seconds, best = min(timed, key=lambda t: t[0])
    return best, seconds
