"""Register-blocked schedules of a task's tiled reduction (a matmul, a convolution), measured beside
its first round.

A task's design-space sketch tiles its reduction block (`SSRSRS`: outer, middle and inner spatial
tiles around two reduction levels). `register_blocks` takes that sketch and fixes its tiles to the
form of a BLAS micro-kernel: the innermost tile one block of rows times whole SIMD registers of
the vectorized axis (as many accumulators as the registers hold, less a few for the operands),
the whole reduction as the loop around it, everything else outer and parallel, unrolled.

Why: MetaSchedule's design space caps every innermost tile factor at 64, the reduction's too, and
the micro-kernel form needs a long inner reduction. Swin-tiny's 49-row MLP matmul (49x3072 by
3072x768, Zen 5, one process, timed side by side): the search's best after 48 trials ran 263
GFLOP/s; the same sketch with 7 rows x 32 floats innermost ran 99 GFLOP/s with an inner reduction
of 64, 342 with 256 and 397 with the whole 3072. On ViT-base's 208-row MLP matmul the 13 x 32
form ran 471-473 GFLOP/s against the 700-trial best's 444-449. No sketch the search can write
reaches it, so it is measured as a trial of the task (`TuneRun.measure_schedules`) and built
where it is the fastest, as `networks.spatial`'s loop nests are.

Each block comes in two loop orders: its row blocks around all the column panels, and
inside each panel (`blocked_decisions`' `rows_in_panels`). Why: with the rows outside, every row
block reads the whole weight again; BERT-base's FFN matmuls (128 x 768 x 3072, a 9.4 MB weight)
ran 144 GFLOP/s so on an Intel `rocketlake` (2 cores, timed cold), 282 with each 768 x 32 panel
read once and reused by the 16 row blocks (the 10-minute run's best: 304); BERT-base from the prior
alone went from 0.65x to 0.91x OpenVINO f32 (bench/README.md "Register blocks in panels").

A bf16 or int8 convolution tensorized with its channel-block kernel (`backends.tvm.lowp`: one call
sums a 16-channel output block of one pixel over an input block) has no vector axis left to block:
its register block is `CHANNEL_BLOCK_WIDTH` output blocks times a row of pixels
(`channel_block_decisions`), the whole reduction around it, the weights of a step in registers.
Why: on ResNet-50's 23 bf16 convolutions after 10 minutes of rounds (Zen 4; the run's inner tiles
held up to 56 sums) the blocks ran faster on 21, the network's sum of their calls 18.66 -> 15.30
ms, timed side by side
(bench/README.md "bf16 convolutions in register blocks").
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from autosearch import interrupts
from autosearch.networks.built import ArgShape, Built, export_library

__all__ = [
    "built_candidates",
    "candidates",
    "channel_block_decisions",
    "packed_conv_steps",
    "register_blocks",
    "simd_registers",
    "timed_built",
    "timed_pick",
    "unroll_variants",
]

#: The tiling structure of MetaSchedule's CPU multi-level tiling: the sketches this module reads.
STRUCTURE = "SSRSRS"
#: Registers kept free of accumulators: the vector operand, the broadcast, the addresses' spill.
SPARE_REGISTERS = 4
#: A packed convolution's register block: output-channel blocks (a register of sums each) side by
#: side; every instruction's weight register is read by a row of pixels. Its explicit unroll step:
#: the block's calls unrolled, not the reduction around them (512 ran 3-10% slower on 5 of 7
#: of ResNet-50's bf16 convolutions, level on two; Zen 4).
CHANNEL_BLOCK_WIDTH = 2
CHANNEL_BLOCK_UNROLL = 16
#: Registers a packed convolution's block keeps free of sums and weights: the broadcast operands.
CHANNEL_BLOCK_SPARE = 2


def simd_registers(target: Any) -> int:
    """Vector registers of the target's widest SIMD unit: 32 with AVX-512, else 16 (AVX2, NEON)."""
    from autosearch.search.registers import simd_bits

    return 32 if simd_bits(target) >= 512 else 16


def register_blocks(mod: Any, target: Any, lanes: int, registers: int, space: Any = None) -> list[Any]:
    """Post-processed register-blocked schedules of `mod`'s `SSRSRS` sketches (see the module doc):
    for the first sketch 2 and 4 registers wide, for each other one 2; none where the task has no
    such sketch, its innermost spatial axis takes no 2 registers of `lanes` (a convolution's
    16-channel block: 1-register-wide blocks of RegNet-Y's convolutions ran 15-50% slower than
    their tuned schedules), or the post-processors refuse it. `space`: the task's `TaskSpace`, where
    the caller has it."""
    from tvm.s_tir.schedule import Trace

    from autosearch.backends.tvm.space import replay_postprocessed, trace_json

    if lanes <= 0 or registers <= SPARE_REGISTERS:
        return []
    if space is None:
        space = _task_space(mod, target)
    if space is None:
        return []
    postprocs = space.context.space_generator.postprocs
    steps = packed_conv_steps(mod)
    out: list[Any] = []
    seen: set[str] = set()
    for sketch in space.spaces:
        insts, decisions = json.loads(trace_json(sketch))
        if steps:
            sums = registers - CHANNEL_BLOCK_WIDTH * steps - CHANNEL_BLOCK_SPARE
            forms = [channel_block_decisions(insts, decisions, CHANNEL_BLOCK_WIDTH, sums)]
        else:
            forms = [
                blocked_decisions(insts, decisions, lanes, width, registers - SPARE_REGISTERS, panels)
                for width, panels in itertools.product((2, 4) if not out else (2,), (False, True))
            ]
        for chosen in forms:
            key = json.dumps(chosen)
            if chosen is None or key in seen:
                continue
            seen.add(key)
            sch = replay_postprocessed(
                mod, postprocs, lambda s, d=chosen, i=insts: Trace.apply_json_to_schedule([i, d], s)
            )
            if sch is not None:
                out.append(sch)
    return out


def packed_conv_steps(mod: Any) -> int:
    """Instructions a call of `mod`'s channel-block kernel runs (`backends.tvm.lowp.kernel_of`: a
    bf16 or int8 convolution's input block over the instruction's depth); 0 where `mod` is no packed
    convolution."""
    from autosearch.backends.tvm.lowp import kernel_of, module_precision

    precision = module_precision(mod)
    if precision.intrin is None:
        return 0
    steps = int(kernel_of(mod, precision).steps)
    return steps if steps > 1 else 0


def _task_space(mod: Any, target: Any) -> Any:
    """The task's `TaskSpace`, None where MetaSchedule has none for it."""
    from autosearch.backends.tvm.space import NoDesignSpace, TaskSpace
    from autosearch.errors import WorkloadError

    try:
        return TaskSpace(mod, target)
    except (NoDesignSpace, WorkloadError):
        return None


def unroll_variants(mod: Any, postprocs: Any, trace: str) -> list[Any]:
    """Post-processed schedules of `trace` (a schedule of `mod`) with every other value of its
    explicit-unroll decision, all else as it is.

    Why: the shipped priors order schedules by their loop nests and barely by the unroll step;
    on Swin-tiny's window-attention batch matmuls (192 x 49 x 49, reduction 32; Zen 5) the
    prior's pick ran 2,075 us with unroll 16 and 428 us with 512, its tiles unchanged, and its
    six best-ranked schedules all ran ~2,000 us (its 49-lane vectors unrolled or not)."""
    from tvm.s_tir.schedule import Trace

    from autosearch.backends.tvm.space import replay_postprocessed

    insts, decisions = json.loads(trace)
    end = next((i for i, ins in enumerate(insts) if ins[0] == "EnterPostproc"), len(insts))
    insts = insts[:end]
    by_inst = {int(i): d for i, d in decisions if int(i) < end}
    out: list[Any] = []
    for i in _unroll_steps(insts, by_inst):
        for value in range(len(insts[i][2][0])):
            if value == by_inst[i]:
                continue
            chosen = [[k, value if k == i else d] for k, d in sorted(by_inst.items())]
            sch = replay_postprocessed(mod, postprocs, lambda s, c=chosen: Trace.apply_json_to_schedule([insts, c], s))
            if sch is not None:
                out.append(sch)
    return out


def candidates(mod: Any, target: Any, trace: str | None, runners_up: Sequence[str] = ()) -> list[tuple[Any, bool]]:
    """What `timed_pick` times, as (schedule, whether it is the prior's checked pick): the pick
    (`trace`; None: it has none) first, each other unroll step of it (`unroll_variants`), the
    schedules the prior ordered after it (`runners_up`, `prior.ranked_schedules`), the task's
    register blocks and its row reductions (`row_reductions`). None (an empty list) where the
    task has none but the pick, and for a bf16 or int8 task (its micro-kernel does not link in a
    build loaded in the run's process)."""
    from autosearch.backends.tvm.lowp import module_precision
    from autosearch.backends.tvm.space import replayed
    from autosearch.networks.row_reductions import row_reduction_forms
    from autosearch.networks.spatial import register_lanes

    if module_precision(mod).name != "fp32":
        # a bf16/int8 task's dot-product kernel is linked into its build as LLVM IR; a build here,
        # loaded in this process, failed to resolve the kernel's symbol and crashed the process
        return []
    space = _task_space(mod, target)
    if space is None:
        return []
    lanes = register_lanes(target)
    others = register_blocks(mod, target, lanes, simd_registers(target), space) + row_reduction_forms(mod, lanes)
    if trace is not None:
        others += unroll_variants(mod, space.context.space_generator.postprocs, trace)
    others += [sch for sch in (replayed(mod, text) for text in runners_up) if sch is not None]
    if not others:
        return []
    out = [(sch, False) for sch in others]
    picked = replayed(mod, trace) if trace is not None else None
    if picked is not None:
        out.insert(0, (picked, True))
    return out


def timed_pick(
    workload: Any, target: Any, trace: str | None, seed: int = 0, runners_up: Sequence[str] = ()
) -> str | None:
    """The trace of the fastest of the task's `candidates` (the prior's pick `trace`, its unroll
    steps, `runners_up`, register blocks), built and timed here with the inputs cold
    (`spatial.cold_seconds`, as the rounds time; a weight that `RewriteLayout` packs is timed
    packed, as the network builds it), that computes what the task computes (`verify`); `trace`
    where there is nothing to time. For a network built from the prior alone
    (`networks.prior.prior_schedule`; the pass's worker processes build theirs: `timed_built`).

    The candidates are built in the builder pool's worker processes, killed past the pool's build
    cap (`PoolBuilder.adaptive_timeout`), as the rounds build theirs: built here, one pick (a
    global mean of a 640x640 text detector, after 10 minutes of rounds) held LLVM for over ten
    minutes past the run's budget, uninterruptible."""
    import tvm

    from autosearch.backends.tvm.build import pool_builder
    from autosearch.networks.spatial import built_args, cold_timer, fastest_cold

    cands = candidates(workload.mod(), target, trace, runners_up)
    builder = pool_builder()
    results = builder.build([_Candidate(sch) for sch, _ in cands], target, timeout=builder.adaptive_timeout())
    timers: dict[int, Callable[[int], float]] = {}
    for k, ((sch, _), result) in enumerate(zip(cands, results, strict=True)):
        if result.artifact_path is None:  # a candidate TVM does not build in time: the others decide
            continue
        try:
            lib = tvm.runtime.load_module(result.artifact_path)
            timers[k] = cold_timer(lib, lib.entry_name, built_args(sch.mod, seed))
        except Exception:  # one that does not load: the others decide
            interrupts.check()
        finally:
            shutil.rmtree(os.path.dirname(result.artifact_path), ignore_errors=True)
    timed = fastest_cold(timers)
    return _fastest_right(workload, target, trace, timed, lambda k: (_text(*cands[k], trace), cands[k][1]), seed)


class _Candidate(NamedTuple):
    """A schedule as `PoolBuilder.build` takes one (it reads `.sch.mod`)."""

    sch: Any


def built_candidates(
    workload: Any, target: Any, trace: str | None, runners_up: Sequence[str], directory: str, seed: int = 0
) -> list[Built]:
    """The task's `candidates`, built and exported under `directory` (`_exported`) and each
    checked here with the code built (`verify.packed_matches`; one that computes something else is
    left out, one it cannot check is left to the run's process): in a prior worker process, so
    that the run's own process only times them (`timed_built`).

    Why: building them was most of `timed_pick` (EfficientNet-B0's 360 candidates: 55 s of its
    95, Zen 5), on one core while the other stood idle; the workers build while they rank."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from autosearch.networks.verify import packed_matches

    cands = candidates(workload.mod(), target, trace, runners_up)
    libraries = _exported({k: sch.mod for k, (sch, _) in enumerate(cands)}, target, directory)
    loaded: dict[str, Any] = {}
    out: list[Built] = []
    for k, (sch, checked) in enumerate(cands):
        if k not in libraries:  # a candidate TVM does not build: the others decide
            continue
        path, function = libraries[k]
        infos = ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
        args = [ArgShape(tuple(int(x) for x in a.shape), str(a.dtype)) for a in infos]
        right: bool | None = checked or None
        if not checked:
            try:
                if path not in loaded:
                    loaded[path] = tvm.runtime.load_module(path)
                right = packed_matches(workload, target, seed, sch, loaded[path][function], [a.shape for a in args])
            except Exception:  # a library that does not load here: the run's process decides
                interrupts.check()
        if right is not False:
            out.append(Built(_text(sch, checked, trace), bool(right), path, function, args))
    return out


def _exported(mods: dict[int, Any], target: Any, directory: str) -> dict[int, tuple[str, str]]:
    """(shared library, function) of each of `mods` built: one library holding every one as its
    own function, or where TVM refuses one of them, one library each (those it builds).

    Why one: linking a library is a compiler run (~0.08 s against a build's ~0.15 s on Zen 5); a
    task's five or six candidates share one link."""
    import tvm

    from autosearch.backends.tvm.build import fast_build

    if len(mods) > 1:
        names = {k: f"candidate{k}" for k in mods}
        together = tvm.IRModule({names[k]: m["main"].with_attr("global_symbol", names[k]) for k, m in mods.items()})
        try:
            path = export_library(fast_build(together, target, None), directory)
            return {k: (path, names[k]) for k in mods}
        except Exception:  # one TVM refuses: each alone below
            interrupts.check()
    out: dict[int, tuple[str, str]] = {}
    for k, m in mods.items():
        try:
            lib = fast_build(m, target, None)
            out[k] = (export_library(lib, directory), lib.entry_name)
        except Exception:
            interrupts.check()
    return out


def timed_built(workload: Any, target: Any, trace: str | None, built: Sequence[Built], seed: int = 0) -> str | None:
    """`timed_pick` of candidates a worker built (`built_candidates`): each loaded and timed here,
    alone; the fastest that computes what the task computes, `trace` where none was built."""
    import tvm

    from autosearch.networks.spatial import cold_timer, fastest_cold, seeded_tensors

    libraries: dict[str, Any] = {}
    timers: dict[int, Callable[[int], float]] = {}
    for k, b in enumerate(built):
        try:
            if b.library not in libraries:
                libraries[b.library] = tvm.runtime.load_module(b.library)
            timers[k] = cold_timer(libraries[b.library], b.function, seeded_tensors(b.args, seed))
        except Exception:  # a library that does not load: the others decide
            interrupts.check()
    timed = fastest_cold(timers)
    return _fastest_right(workload, target, trace, timed, lambda k: (built[k].trace, built[k].verified), seed)


def _text(sch: Any, checked: bool, trace: str | None) -> str:
    """A candidate's trace: the prior's pick's own text (`trace`), else the schedule's."""
    from autosearch.backends.tvm.space import trace_json

    return trace if checked and trace is not None else trace_json(sch)


def _fastest_right(
    workload: Any,
    target: Any,
    fallback: str | None,
    timed: list[tuple[float, int]],
    trace_of: Callable[[int], tuple[str, bool]],
    seed: int,
) -> str | None:
    """The trace of the fastest of `timed` ((seconds, candidate)) that computes what the task
    computes (a checked pick is not checked again), else `fallback`."""
    from autosearch.networks.verify import schedule_matches

    for _, k in sorted(timed):
        text, checked = trace_of(k)
        if checked or schedule_matches(workload, text, target, seed):
            return text
    return fallback


def blocked_decisions(
    insts: list[Any], decisions: list[Any], lanes: int, width: int, accumulators: int, rows_in_panels: bool = False
) -> list[Any] | None:
    """A sketch's decisions ([instruction, decision] pairs) with its first `SSRSRS` block tiled as
    a micro-kernel `width` registers wide (`lanes` each) and as many rows as `accumulators` allow;
    None where the sketch has no such block, the innermost spatial axis takes no such width, or
    no other spatial axis gives 2 rows or more. `rows_in_panels`: the row blocks loop inside each
    column panel (the rows' outer tile one level in) rather than around all of them, so that a
    panel of the weight (the whole reduction x `width` registers) is read once from memory and
    reused by every row block, as a BLAS loops; None where there is one panel or one row block."""
    block = _tiled_block(insts, decisions)
    if block is None:
        return None
    by_inst, spatial, reduction, extent = block
    vector = spatial[-1]
    v = width * lanes
    if extent[vector] % v:
        return None
    rows = next((i for i in reversed(spatial[:-1]) if extent[i] > 1), None)
    if rows is None:
        return None
    r = _largest_divisor(extent[rows], accumulators // width)
    if r < 2:
        return None
    if rows_in_panels and (extent[rows] == r or extent[vector] == v):
        return None  # one row block or one panel: the same loops as the other order
    unroll = {i: len(insts[i][2][0]) - 1 for i in _unroll_steps(insts, by_inst)}  # the most the sketch offers
    return _micro_kernel(
        by_inst, spatial, reduction, extent, {vector: v, rows: r}, unroll, rows if rows_in_panels else None
    )


def channel_block_decisions(insts: list[Any], decisions: list[Any], width: int, accumulators: int) -> list[Any] | None:
    """A packed convolution's sketch decisions with its `SSRSRS` block tiled as a register block:
    `width` output-channel blocks (the kernel's 16 sums each) times a row's pixels that
    `accumulators` sums allow (`_block_pixels`: an odd count where the row has one), the whole
    reduction around it, unrolled `CHANNEL_BLOCK_UNROLL`; None where the sketch is not a packed
    convolution's (spatial axes batch, channel blocks, rows, columns, the kernel's lanes), its
    channel blocks take no such width or a row gives no 2 pixels."""
    block = _tiled_block(insts, decisions)
    if block is None:
        return None
    by_inst, spatial, reduction, extent = block
    if len(spatial) != 5 or extent[spatial[4]] != 1:
        return None
    channels, pixels = spatial[1], spatial[3]
    if extent[channels] % width:
        return None
    r = _block_pixels(extent[pixels], accumulators // width)
    if r < 2:
        return None
    unroll = {}
    for i in _unroll_steps(insts, by_inst):
        values = [int(v) for v in insts[i][2][0]]
        if CHANNEL_BLOCK_UNROLL in values:
            unroll[i] = values.index(CHANNEL_BLOCK_UNROLL)
    return _micro_kernel(by_inst, spatial, reduction, extent, {channels: width, pixels: r}, unroll, None)


def _tiled_block(
    insts: list[Any], decisions: list[Any]
) -> tuple[dict[int, Any], list[int], list[int], dict[int, int]] | None:
    """The first `SSRSRS` block of a sketch: its decisions by instruction, its spatial and its
    reduction tile instructions, and each one's extent; None where the sketch has none with at
    least two spatial axes and a reduction."""
    start = next((i for i, ins in enumerate(insts) if _tiling(ins) == STRUCTURE), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(insts)) if _tiling(insts[i]) is not None), len(insts))
    by_inst = {int(i): d for i, d in decisions}
    spatial: list[int] = []
    reduction: list[int] = []
    for i in range(start, end):
        ins = insts[i]
        if ins[0] == "SamplePerfectTile" and i in by_inst:
            n = int(ins[2][0])
            (spatial if n == 4 else reduction if n == 2 else []).append(i)
    if len(spatial) < 2 or not reduction:
        return None
    return by_inst, spatial, reduction, {i: _product(by_inst[i]) for i in spatial + reduction}


def _micro_kernel(
    by_inst: dict[int, Any],
    spatial: list[int],
    reduction: list[int],
    extent: dict[int, int],
    inner: dict[int, int],
    unroll: dict[int, int],
    in_panels: int | None,
) -> list[Any]:
    """The decisions with each spatial axis's `inner` extent (1 where not given) innermost and the
    rest outermost, the reduction whole inside, the `unroll` steps ({instruction: choice});
    `in_panels`: that axis's outer tile one level in."""
    chosen = dict(by_inst)
    for i in spatial:
        k = inner.get(i, 1)
        chosen[i] = [extent[i] // k, 1, 1, k]
    if in_panels is not None:
        k = inner[in_panels]
        chosen[in_panels] = [1, extent[in_panels] // k, 1, k]
    for i in reduction:
        chosen[i] = [1, extent[i]]
    chosen.update(unroll)
    return [[i, chosen[i]] for i in sorted(chosen)]


def _block_pixels(width: int, most: int) -> int:
    """Pixels of a row in a packed convolution's register block: the largest odd divisor (from 3)
    of the row's `width` within `most`, else its largest divisor. Why odd: with 8 pixels LLVM
    vectorizes the fused epilogue across the block's pixels (a gather of each lane's sums) instead
    of along the 16 lanes, and 4 ran slow too; ResNet-50's five int8 convolutions on 56x56 maps
    ran 2.1-5.3x slower with 8 pixels than with 7, and 1.5-5.5x slower with 4 (Zen 4;
    bench/README.md "bf16 convolutions in register blocks")."""
    odd = max((d for d in range(3, most + 1, 2) if width % d == 0), default=0)
    return odd or _largest_divisor(width, most)


def _largest_divisor(n: int, most: int) -> int:
    """The largest divisor of `n` that is at most `most` (1 where none is larger)."""
    return max((d for d in range(1, most + 1) if n % d == 0), default=1)


def _unroll_steps(insts: list[Any], by_inst: dict[int, Any]) -> list[int]:
    """The instructions sampling the explicit-unroll step."""
    return [
        i
        for i in range(len(insts))
        if insts[i][0] == "SampleCategorical" and i in by_inst and _annotates_unroll(insts, i)
    ]


def _tiling(ins: list[Any]) -> str | None:
    """The tiling structure an `Annotate` instruction sets, else None."""
    if ins[0] != "Annotate" or not ins[2] or ins[2][0] != "meta_schedule.tiling_structure":
        return None
    value = ins[1][1] if len(ins[1]) > 1 else None
    return value.strip('"') if isinstance(value, str) else None


def _annotates_unroll(insts: list[Any], i: int) -> bool:
    """Whether the categorical sampled at `i` is the explicit-unroll annotation's value."""
    out = insts[i][3][0] if insts[i][3] else None
    return any(
        ins[0] == "Annotate" and out in ins[1] and ins[2] and "unroll" in str(ins[2][0]) for ins in insts[i + 1 : i + 3]
    )


def _product(factors: Any) -> int:
    p = 1
    for f in factors:
        p *= int(f)
    return p
