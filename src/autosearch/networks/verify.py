"""A task's schedule checked against the task's own unscheduled loops before a network is built with it.

Why: MetaSchedule measures how fast a schedule runs, never what it computes, and some schedules of
some sketches compute something else. MobileNetV2's prior-only build was wrong (relative error 0.28)
because two tasks (`fused_conv2d..._add_tir_clip_pad`: a convolution whose padded output feeds the
next depthwise convolution) ran a schedule whose result differed by up to 4.2 on outputs of scale
6 from the same task unscheduled (bench/README.md "Whole models against PyTorch"). A network must never be
built with such a schedule, however fast it measured: each chosen schedule is compiled, run on seeded
random inputs beside the unscheduled task, and refused where any output differs by more than
`check.RTOL` of its scale (a bf16 buffer: `BF16_RTOL`; an 8-bit one: `INT8_RTOL`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from autosearch import interrupts
from autosearch.networks.check import RTOL, compare_outputs
from autosearch.networks.folding import index_copies, moved

__all__ = [
    "BF16_RTOL",
    "INT8_RTOL",
    "arrays_for",
    "buffer_rtol",
    "built_matches",
    "call",
    "keep_reference",
    "packed_layouts",
    "packed_matches",
    "random_arrays",
    "reference_of",
    "schedule_matches",
]

#: A bf16 buffer's tolerance: 2^-7 of its scale, its last bit at the top of the scale. A schedule
#: that sums in another order rounds some fp32 sums to the neighbouring bf16 value; every tuned
#: schedule of three of ResNet-50's bf16 convolutions was refused at `RTOL`, and the tasks were
#: built with TVM's unscheduled loops (130 ms each). A wrong schedule is off by the scale itself.
BF16_RTOL = 2.0**-7


#: An 8-bit integer buffer's tolerance (an int8 network's activation, quantized in the epilogue of
#: the operator before): one step of a signed byte at the top of its scale. The float sums before
#: the rounding differ in their last bits between schedules, so some values land one step apart; a
#: wrong schedule is off by the scale itself.
INT8_RTOL = 1.0 / 127


def buffer_rtol(dtype: Any) -> float:
    """The check's tolerance for a buffer of `dtype` (relative to its scale)."""
    return {"bfloat16": BF16_RTOL, "uint8": INT8_RTOL, "int8": INT8_RTOL}.get(str(dtype), RTOL)


def random_arrays(func: Any, seed: int) -> list[np.ndarray]:
    """Seeded inputs for every buffer of a PrimFunc: normal floats, 0/1 booleans and indices."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return arrays_for(ArgInfo.from_prim_func(func), seed)


def arrays_for(infos: Any, seed: int) -> list[np.ndarray]:
    """Seeded arrays of the shapes and dtypes of `infos` (MetaSchedule `TensorInfo`s): a built
    schedule's arguments where they differ from its PrimFunc's (a weight packed by `RewriteLayout`)."""
    rng = np.random.default_rng(seed)
    out = []
    for a in infos:
        shape, dtype = tuple(int(x) for x in a.shape), str(a.dtype)
        if "float" in dtype:
            out.append(rng.standard_normal(shape).astype(dtype))
        elif dtype == "bool":
            out.append(rng.integers(0, 2, shape).astype(bool))
        else:  # indices (a gather's ids): small non-negative values stay in range
            out.append(rng.integers(0, 2, shape).astype(dtype))
    return out


#: LLVM's optimisation level of the check's builds. Why not the network's (-O3): what the check
#: catches is a schedule that computes something else, which the scheduled TIR decides, not LLVM's
#: optimisations; -O1 built a tuned MobileNetV2 convolution in 1.7 s where -O3 took 4.2 s (Zen 3),
#: and every task's check is part of each prior-only compile.
CHECK_OPT_LEVEL = 1


def _run(mod: Any, target: Any, arrays: list[np.ndarray]) -> list[np.ndarray]:
    import tvm

    lib = tvm.compile(mod, target=tvm.target.Target({**target.export(), "opt-level": CHECK_OPT_LEVEL}))
    return call(lib["main"], arrays)


def call(func: Any, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Every buffer after one call of a built function on copies of `arrays`."""
    import tvm

    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a.copy(), dev) for a in arrays]
    func(*args)
    return [a.numpy() for a in args]


#: The unscheduled task's run: its inputs, and every buffer after its call.
Reference = tuple[list[np.ndarray], list[np.ndarray]]

#: The unscheduled task's run per (task, target, seed): a task is verified in the prior pass and
#: again when its tuned schedule is chosen; its reference is compiled and run once.
_REFERENCES: dict[tuple[str, str, int], Reference] = {}

Run = Callable[[list[np.ndarray]], list[np.ndarray]]


def _key(workload: Any, target: Any, seed: int) -> tuple[str, str, int]:
    return workload.key, str(target), seed


def reference_of(workload: Any, target: Any, seed: int) -> Reference | None:
    """The unscheduled task's run, where this process has run it (`built_matches`); None where it
    has not."""
    return _REFERENCES.get(_key(workload, target, seed))


def keep_reference(workload: Any, target: Any, seed: int, reference: Reference) -> None:
    """`reference` (another process's `reference_of` the same task) kept as this process's.

    Why: a prior worker process checks its pick against the unscheduled task; the run's process
    then checks the candidate that timed fastest (`register_blocks.timed_built`) against the same
    task, and compiling and running the unscheduled loops again there took DenseNet-121's prior
    pass 5.5 s, on one core while the other stood idle."""
    _REFERENCES.setdefault(_key(workload, target, seed), reference)


def _reference(workload: Any, target: Any, seed: int, run: Run | None) -> Reference:
    key = _key(workload, target, seed)
    if key not in _REFERENCES:
        arrays = random_arrays(workload.mod()["main"], seed)
        _REFERENCES[key] = (arrays, run(arrays) if run is not None else _run(workload.mod(), target, arrays))
    return _REFERENCES[key]


def built_matches(workload: Any, target: Any, seed: int, run: Run, reference: Run | None = None) -> bool:
    """Whether `run` (one call of a built schedule of the task: arrays in, every buffer after it
    out, e.g. `call`) computes what the unscheduled task computes, within `RTOL` of each buffer's
    scale. `reference` runs the unscheduled task where it has not been run yet; a caller that
    builds it in the same module as its schedules saves a compile (`spatial.spatial_schedule`)."""
    try:
        arrays, want = _reference(workload, target, seed, reference)
        got = run(arrays)
    except Exception:  # a schedule that does not even build or run is no schedule to build with
        interrupts.check()  # ... unless TVM's compiler turned a Ctrl-C into its own error
        return False
    return all(compare_outputs([g], [w], buffer_rtol(w.dtype)).ok for g, w in zip(got, want))  # each on its scale


def schedule_matches(workload: Any, trace: str, target: Any, seed: int = 0) -> bool:
    """Whether the task scheduled by `trace` computes what the unscheduled task computes (every
    buffer after one call on seeded random inputs, within `RTOL` of its scale). True on a GPU
    target, which this machine may not be able to run (the network's own output check remains).

    The target's tensor intrinsics are registered first: a tensorized trace replays only with
    them, and a `--trials 0` rebuild from a store (nothing tuned in its process) had built every
    bf16 / int8 task with the prior's schedule instead of its stored best."""
    from autosearch.backends.tvm.intrinsics import register_tensor_intrinsics
    from autosearch.backends.tvm.space import replayed
    from autosearch.backends.tvm.target import is_gpu

    if is_gpu(target):
        return True
    register_tensor_intrinsics(target)
    sch = replayed(workload.mod(), trace)
    if sch is None:  # a trace that does not apply is no schedule to build with
        return False
    return built_matches(workload, target, seed, lambda arrays: _run(sch.mod, target, arrays))


def packed_layouts(sch: Any) -> dict[int, Any] | None:
    """Each argument that schedule `sch` packs (a `RewriteLayout` block: a copy of a layout-free
    weight into a blocked buffer), by position, with the `IndexMap` of its packing; None where a
    packing is not such a copy."""
    from autosearch.backends.tvm.lowp import LAYOUT_REWRITE

    copies = index_copies(sch.mod["main"], lambda block: LAYOUT_REWRITE in block.annotations)
    return None if copies is None else {c.source: c.index_map for c in copies}


def packed_matches(
    workload: Any, target: Any, seed: int, sch: Any, func: Any, takes: list[tuple[int, ...]]
) -> bool | None:
    """Whether `func` (schedule `sch` built without its packing blocks, as the builder builds it,
    its arguments of the shapes `takes`) computes what the unscheduled task computes: called on
    the check's seeded inputs, each layout-free weight packed as `sch` packs it (`packed_layouts`).
    None where this cannot tell (a packing it cannot read).

    Why: a prior worker checks every candidate it built with the object code it built
    (`register_blocks.built_candidates`), where the run's process had rebuilt the fastest one
    with its packing to check it, one core busy while the other stood idle (13.5 s of
    EfficientNet-B0's prior-only compile on an Intel `rocketlake`)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    layouts = packed_layouts(sch)
    plain = [tuple(int(x) for x in a.shape) for a in ArgInfo.from_prim_func(workload.mod()["main"])]
    if layouts is None or len(plain) != len(takes):
        return None
    shapes = [tuple(int(x) for x in layouts[k].map_shape(list(s))) if k in layouts else s for k, s in enumerate(plain)]
    if shapes != [tuple(t) for t in takes]:
        return None

    def pack(a: np.ndarray, k: int) -> np.ndarray:
        out = moved(a, layouts[k])
        if out is None:
            raise ValueError("a packing outside integer arithmetic")  # the candidate is not offered
        return out

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        after = call(func, [pack(a, k) if k in layouts else a for k, a in enumerate(arrays)])
        return [arrays[k] if k in layouts else a for k, a in enumerate(after)]

    return built_matches(workload, target, seed, run)
