"""A zero-trial schedule for a task with no reduction (element-wise, concatenation, layout moves),
chosen by timing: one loop nest, its innermost axis (a channel block, or 64 lanes of a wider axis)
one vector, run serially or in parallel over the rest, whichever ran faster here with its inputs
cold. A task a round reaches has the same loop nests measured beside its first round
(`networks.tune`, `TuneRun.measure_schedules`): its design space holds one form of it, which ran
5-10x slower than the loop nest on Swin-tiny's window partitions.

Why: the prior's picks for such tasks fuse every axis into one loop, split it into 64-lane vectors
and run them in parallel; the index arithmetic of the fused loop (a division and a remainder per
lane) gathers each lane's per-channel constant, and TVM's parallel region costs microseconds to
start on these VMs. DenseNet-121's pre-activation BatchNorm + ReLU tasks on NCHW16c tensors ran
3.5-26x slower from the prior's pick than as one serial loop nest with the channel block
vectorised, its concatenations 1.3-3.8x (20 tasks timed warm on a Zen 4, 4.86x summed;
`bench/spatial_tasks.py`, bench/README.md "DenseNet-121 with constants folded in NumPy, then
tasks with no reduction timed"). Which of the two forms wins depends on the tensor's size and
the machine, so both are built and timed.

An innermost axis that no whole register divides (ViT-base's 197 tokens, Swin's 49-position
windows) is left to LLVM's loop vectorizer in the same two nests: the prior's fused 64-lane form
of ViT-base's attention-score pad and mask add ran 0.53 and 0.37 ms a call in the network, the
nests 0.04-0.10 and 0.06-0.12 ms alone (Zen 4), and the whole network 4.7% faster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeVar

from autosearch.networks.built import ArgShape, Built, export_library

__all__ = [
    "built_args",
    "built_forms",
    "cold_seconds",
    "cold_timer",
    "fastest_cold",
    "has_timed_forms",
    "output_blocks",
    "register_lanes",
    "root_blocks",
    "seeded_tensors",
    "spatial_forms",
    "spatial_schedule",
    "warm_seconds",
]

K = TypeVar("K")

#: Longest innermost axis made one vector (16 floats of AVX-512 times 4, as MetaSchedule's rule).
MAX_VECTOR = 64


def _vector_lanes(extent: int, register_lanes: int) -> int:
    """The innermost axis's vector: the whole axis up to `MAX_VECTOR`, else its largest divisor
    that is a whole number of registers and at most `MAX_VECTOR` (96 -> 48, 384 -> 64)."""
    if extent <= MAX_VECTOR:
        return extent
    return max(v for v in range(register_lanes, MAX_VECTOR + 1, register_lanes) if extent % v == 0)


def spatial_forms(mod: Any, register_lanes: int) -> list[Any]:
    """The task's serial and parallel loop nests (schedules), or none where it has a reduction,
    a block that does not inline into the task's outputs, or an innermost axis shorter than a
    register; a task with several outputs has a nest for each (a channel shuffle's two halves); an
    innermost axis longer than `MAX_VECTOR` is split, its inner part the vector, and one that no
    whole register divides is left for LLVM to vectorize (module doc); and a task of one output
    whose two innermost axes are whole registers also gets them in tiles (`_tiled_nest`)."""
    from tvm import s_tir
    from tvm.s_tir import Schedule

    probe = Schedule(mod)
    blocks = root_blocks(probe)
    if not blocks or any(iv.iter_type != 0 for b in blocks for iv in probe.get(b).iter_vars):
        return []  # a reduction (or an opaque axis): the prior's design space decides
    try:
        serial, outputs = _outputs_inlined(mod)
    except s_tir.ScheduleError:
        return _tile_forms(mod, register_lanes)
    parallel, tiled = serial.copy(), serial.copy()  # each form from the inlined schedule, traces too
    forms = []
    for sch, in_parallel in ((serial, False), (parallel, True)):
        nests = [_loop_nest(sch, sch.get_sblock(name), register_lanes, in_parallel) for name in outputs]
        if any(nest is None for nest in nests):
            return []
        if all(nests):  # a serial nest has nothing to split off a loop of one axis: no parallel form
            forms.append(sch)
    if len(outputs) == 1 and _tiled_nest(tiled, tiled.get_sblock(outputs[0]), register_lanes):
        forms.append(tiled)
    return forms


def _outputs_inlined(mod: Any) -> tuple[Any, list[str]]:
    """A schedule of `mod` with every block but the task's outputs inlined into them, and the
    outputs' names; raises `ScheduleError` where a block does not inline."""
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    blocks = root_blocks(sch)
    outputs = output_blocks(sch, blocks)
    for block in blocks:
        if block not in outputs:
            sch.compute_inline(block)
    return sch, [sch.get(block).name_hint for block in outputs]


def _tiled_nest(sch: Any, block: Any, register_lanes: int) -> bool:
    """`block`'s two innermost axes split into register-square tiles, the tiles' rows inside them,
    the innermost axis the vector, in parallel over the outer axes; False (no such form) where
    either axis is not whole registers or there is no axis outside them.

    Why: a transpose (BERT-base's keys to 12 x 64 x 128) reads its input along the axis before the
    innermost one; a whole row of it strides over the map, a tile keeps the rows it reads in the L1
    cache. That task ran 59.7 us warm (49.8 cold) in its best loop nest and 15.4 (34.2) tiled
    16 x 16 (Intel `rocketlake`; bench/README.md "Transposes as tiles")."""
    loops = sch.get_loops(block)
    if len(loops) < 3:
        return False
    extents = [getattr(sch.get(loop).extent, "value", None) for loop in loops[-2:]]
    if not all(isinstance(e, int) and e >= register_lanes and e % register_lanes == 0 for e in extents):
        return False
    rows_out, rows_in = sch.split(loops[-2], [None, register_lanes])
    cols_out, cols_in = sch.split(loops[-1], [None, register_lanes])
    sch.reorder(rows_out, cols_out, rows_in, cols_in)
    outer = loops[:-2]
    sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    sch.vectorize(cols_in)
    return True


def root_blocks(sch: Any) -> list[Any]:
    """The blocks under the function's root block; none where it has no root (TVM's hand-written
    scans: RoBERTa's position-id `cumsum` is one opaque block with its loops inside, and asking
    for its root raised out of a 10-minute run)."""
    from tvm import s_tir

    try:
        return list(sch.get_child_blocks(sch.get_sblock("root")))
    except s_tir.ScheduleError:
        return []


def _tile_forms(mod: Any, register_lanes: int) -> list[Any]:
    """Serial and parallel nests of a task whose first block writes a tile an iteration (several
    stores: the Winograd output transform, an m x m tile a (tile, channel)) and so inlines into
    nothing: the element-wise blocks after it (bias, activation, residual add) computed under its
    loop over tiles and channel blocks, each on the tile just written, their innermost axis and
    the first block's channel lanes vectors. None where the first block's innermost axis is not
    whole registers or a block after it does not go under its loops.

    Why: left unscheduled, each block after it is a pass over the whole map; RegNet-Y's four such
    tasks ran 23-129 us a call in this form, 55-1,140 us as TVM's loops (Zen 4, warm)."""
    from tvm import s_tir
    from tvm.s_tir import Schedule

    forms = []
    for parallel in (False, True):
        sch = Schedule(mod)
        first, *rest = root_blocks(sch)
        loops = sch.get_loops(first)
        extent = getattr(sch.get(loops[-1]).extent, "value", None) if loops else None
        if len(loops) < 2 or not rest or not isinstance(extent, int) or extent % register_lanes:
            return []
        try:
            for block in rest:
                sch.reverse_compute_at(block, loops[-2])
            for block in (*rest, first):
                sch.vectorize(sch.get_loops(block)[-1])
        except s_tir.ScheduleError:
            return []
        if parallel:
            sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
        forms.append(sch)
    return forms


def output_blocks(sch: Any, blocks: list[Any]) -> list[Any]:
    """The blocks of `blocks` that write a buffer the task does not allocate (its outputs): the
    last, and each further output of a task with several (a channel shuffle's `split` writes two)."""
    inner = list(sch.get(sch.get_sblock("root")).alloc_buffers)  # the task's intermediates
    out = [b for b in blocks if not all(any(w.source.same_as(a) for a in inner) for w in sch.get(b).writes)]
    return out or blocks[-1:]


def _loop_nest(sch: Any, block: Any, register_lanes: int, parallel: bool) -> bool | None:
    """`block`'s loops as one nest, its innermost axis the vector (module doc), in parallel over
    the rest if `parallel`; None where the innermost axis is shorter than a register (no form),
    False where `parallel` and there is one loop only (no parallel form)."""
    loops = sch.get_loops(block)
    extent = getattr(sch.get(loops[-1]).extent, "value", None) if loops else None
    while isinstance(extent, int) and extent < register_lanes and len(loops) > 1:
        # a short innermost axis (a 14x14 or 7x7 feature map's rows) fused with the one before it
        loops = [*loops[:-2], sch.fuse(*loops[-2:])]
        extent = getattr(sch.get(loops[-1]).extent, "value", None)
    if not isinstance(extent, int) or extent < register_lanes:
        return None
    ragged = extent % register_lanes != 0  # ViT's 197 tokens: left to LLVM's loop vectorizer
    vector = extent if ragged else _vector_lanes(extent, register_lanes)
    if vector < extent:  # a wide innermost axis (a transformer's 384 or 3072 features): a vector of it
        loops = [*loops[:-1], *sch.split(loops[-1], [None, vector])]
    if parallel:
        if len(loops) < 2:
            return False
        sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
    if not ragged:
        sch.vectorize(loops[-1])
    return True


#: Timing of a form: repeats, and the least milliseconds of each (the forms run 10-300 us: a
#: repeat is tens of calls).
REPEAT, MIN_REPEAT_MS = 5, 2


def _random_args(func: Any) -> list[Any]:
    import tvm

    from autosearch.networks.verify import random_arrays

    return [tvm.runtime.tensor(a, tvm.cpu()) for a in random_arrays(func, 0)]


def _warm(lib: Any, name: str, args: list[Any]) -> float:
    import tvm

    timer = lib.time_evaluator(name, tvm.cpu(), number=1, repeat=REPEAT, min_repeat_ms=MIN_REPEAT_MS)
    return float(timer(*args).median)


#: Cold timing of a form: calls, each after the inputs but the first are flushed from the caches.
COLD_REPEAT = 12


def cold_seconds(lib: Any, name: str, args: list[Any], repeat: int = COLD_REPEAT) -> float:
    """Median seconds of `repeat` calls of `lib[name]`, each after the inputs but the first are
    flushed from the caches (as the rounds time a task)."""
    import tvm

    timer = lib.time_evaluator(
        name, tvm.cpu(), number=1, repeat=repeat, min_repeat_ms=0, f_preproc="cache_flush_cpu_non_first_arg"
    )
    return float(timer(*args).median)


#: Cold calls each candidate gets first (`fastest_cold`); those within `SCREEN_MARGIN` of the
#: fastest are timed again with `COLD_REPEAT`.
SCREEN_REPEAT = 3
SCREEN_MARGIN = 1.25


def fastest_cold(timers: Mapping[K, Callable[[int], float]]) -> list[tuple[float, K]]:
    """(seconds, key) of every candidate that ran, fastest first: each timed with `SCREEN_REPEAT`
    cold calls (`timers[key](repeat)`, e.g. `cold_seconds`), and those within `SCREEN_MARGIN` of
    the fastest again with `COLD_REPEAT`, their figure the second one (a candidate that does not
    run is left out; Ctrl-C is not swallowed).

    Why two steps: a prior-only build times every form of every task with no reduction and every
    candidate of every task with one, 12 cold calls each, and with the caches flushed before each
    call the flush costs more than most of these kernels (DenseNet-121: 1,081 timings, 32 s of its
    157 s prior pass, Intel `rocketlake`). A form 1.25x slower than the fastest over three cold
    calls is taken not to be the fastest over twelve, and the close ones get all twelve: three
    DenseNet-121 builds made so ran within 2% of two made without the screen, side by side
    (bench/README.md "DenseNet-121's compile: three cuts")."""
    from autosearch import interrupts

    screened: list[tuple[float, K]] = []
    for key, timer in timers.items():
        try:
            screened.append((timer(SCREEN_REPEAT), key))
        except Exception:  # a candidate that does not load or run: the others decide
            interrupts.check()
    if not screened:
        return []
    fastest = min(s for s, _ in screened)
    out: list[tuple[float, K]] = []
    for seconds, key in screened:
        if seconds <= SCREEN_MARGIN * fastest:
            try:
                seconds = timers[key](COLD_REPEAT)
            except Exception:
                interrupts.check()
                continue
        out.append((seconds, key))
    return sorted(out, key=lambda t: t[0])


def cold_timer(lib: Any, name: str, args: list[Any]) -> Callable[[int], float]:
    """`cold_seconds` of `lib[name]` on `args` for a given repeat (a `fastest_cold` timer)."""
    return lambda repeat: cold_seconds(lib, name, args, repeat)


def built_args(mod: Any, seed: int = 0) -> list[Any]:
    """Seeded inputs of `mod` as `build.fast_build` builds it: a weight that `RewriteLayout`
    packed is an argument of the packed shape (the PrimFunc's own parameter keeps the plain one)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return seeded_tensors(ArgInfo.from_entry_func(mod, remove_preproc=True), seed)


def seeded_tensors(infos: Any, seed: int = 0) -> list[Any]:
    """`verify.arrays_for(infos, seed)` as tensors on the CPU: a built function's timing inputs."""
    import tvm

    from autosearch.networks.verify import arrays_for

    return [tvm.runtime.tensor(a, tvm.cpu()) for a in arrays_for(infos, seed)]


def warm_seconds(mod: Any, target: Any) -> float:
    """Median seconds of a call of the built schedule on random inputs, caches warm (as inside
    a network, where the producer has just written its input)."""
    import tvm

    return _warm(tvm.compile(mod, target=target).jit(), "main", _random_args(mod["main"]))


def _lanes(register_bits: int) -> int:
    return max(1, register_bits // 32)  # float32 lanes; wider dtypes only divide it more often


def register_lanes(target: Any) -> int:
    """float32 lanes of the target's SIMD register; 0 where none is known (a GPU: no forms)."""
    from autosearch.search.registers import simd_bits

    bits = simd_bits(target)
    return _lanes(bits) if bits > 0 else 0


def has_timed_forms(workload: Any, register_bits: int) -> bool:
    """Whether `spatial_schedule` times forms of the task (it is of this kind) on this machine."""
    return register_bits > 0 and bool(spatial_forms(workload.mod(), _lanes(register_bits)))


def spatial_schedule(workload: Any, target: Any, register_bits: int, seed: int = 0) -> tuple[Any, float] | None:
    """The fastest of the task's serial and parallel forms (`spatial_forms`) and its unscheduled
    loops (an empty schedule: TVM's default) with its measured seconds, a form checked against the
    unscheduled task (`verify.built_matches`); None where the task is not of this kind (a
    reduction, an innermost axis shorter than a register with no axis to fuse it with), the forms
    do not build, or the fastest computes something else.

    Timed cold (`fastest_cold`: the inputs flushed from the caches before each call), as the rounds time
    a task: in a network a task often reads what was written many tasks before (DenseNet-121's
    concatenations read every earlier feature map), and timed warm the serial form won where the
    parallel one ran faster there: DenseNet-121 from the prior alone ran 1.4-6.6% faster in every
    timing process with the forms timed cold (bench/README.md "DenseNet-121's tasks with no
    reduction timed cold").

    Why one module: the forms and the unscheduled task are compiled and loaded together, and the
    check runs the form that was timed. Built one by one (two forms timed, then the pick and the
    reference compiled again for the check) DenseNet-121's 117 such tasks took 0.5 s each, nearly
    all of it LLVM's fixed cost per module (~80 ms a compile and load). A prior worker process
    builds and checks them instead (`built_forms`), and the pass only times them."""
    import tvm
    from tvm.s_tir import Schedule

    from autosearch import interrupts
    from autosearch.networks.verify import built_matches, call

    forms = spatial_forms(workload.mod(), _lanes(register_bits)) if register_bits > 0 else []
    if not forms:
        return None
    mod, names = _forms_module(workload, forms)
    try:
        lib = tvm.compile(mod, target=target).jit()
        args = _random_args(mod["reference"])
    except Exception:  # forms TVM does not build: the prior's design space decides
        interrupts.check()
        return None
    timed = fastest_cold({name: cold_timer(lib, name, args) for name in names})
    if not timed:  # forms TVM does not run: the prior's design space decides
        return None
    seconds, best = timed[0]
    if best == "reference":  # TVM's own loops ran fastest (a layout move of 8-lane blocks): kept as they are
        return Schedule(workload.mod()), seconds
    form, reference = lib[best], lib["reference"]
    if not built_matches(workload, target, seed, lambda a: call(form, a), lambda a: call(reference, a)):
        return None
    return forms[names.index(best) - 1], seconds


def _forms_module(workload: Any, forms: list[Any]) -> tuple[Any, list[str]]:
    """One IRModule of the task's unscheduled loops and each of its forms, and their functions'
    names: `reference`, then one a form in order."""
    import tvm

    funcs = {"reference": workload.mod()["main"], **{f"form{i}": f.mod["main"] for i, f in enumerate(forms)}}
    return tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()}), list(funcs)


def built_forms(workload: Any, target: Any, register_bits: int, seed: int, directory: str) -> list[Built]:
    """`spatial_schedule`'s forms and the unscheduled loops built into one shared library under
    `directory`, each form checked against the unscheduled loops there (one that computes
    something else is left out), as `built.Built` candidates for the run's process to
    time (`register_blocks.timed_built`); none where the task is not of this kind or its forms do
    not build (the prior's design space then decides).

    Why in a prior worker process: compiling and loading the forms was most of these tasks' time
    (DenseNet-121's 69: 47 s of its prior pass, on one core while the other stood idle; the
    timing alone is a tenth of it)."""
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from autosearch import interrupts
    from autosearch.backends.tvm.space import trace_json
    from autosearch.networks.verify import built_matches, call

    forms = spatial_forms(workload.mod(), _lanes(register_bits)) if register_bits > 0 else []
    if not forms:
        return []
    mod, names = _forms_module(workload, forms)
    try:
        path = export_library(tvm.compile(mod, target=target), directory)
        lib = tvm.runtime.load_module(path)
    except Exception:  # forms TVM does not build: the prior's design space decides
        interrupts.check()
        return []
    args = [ArgShape(tuple(int(x) for x in a.shape), str(a.dtype)) for a in ArgInfo.from_prim_func(mod["reference"])]
    reference = lib["reference"]
    out = [Built(trace_json(Schedule(workload.mod())), True, path, "reference", args)]
    for name, form in zip(names[1:], forms, strict=True):
        if built_matches(workload, target, seed, partial(call, lib[name]), partial(call, reference)):
            out.append(Built(trace_json(form), True, path, name, args))
    return out
