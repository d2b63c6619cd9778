"""Register-blocked schedules of a tiled reduction (`networks.register_blocks`): their tiles, and
that they compute what the task computes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


def _matmul(m: int, k: int, n: int, transposed: bool = False):  # type: ignore[no-untyped-def]
    """A (m, k) x (k, n) product; `transposed`: another product of the same shapes, the weight
    read transposed (k == n)."""
    import tvm
    from tvm import te

    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * (b[j, r] if transposed else b[r, j]), axis=r), name="matmul")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c]).with_attr("tirx.noalias", True)})


def _tiles(sch) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """The schedule's SamplePerfectTile decisions in trace order."""
    from autosearch.backends.tvm.space import trace_json

    insts, decisions = json.loads(trace_json(sch))
    by_inst = {int(i): d for i, d in decisions}
    return [by_inst[i] for i, ins in enumerate(insts) if ins[0] == "SamplePerfectTile" and i in by_inst]


def test_a_matmul_gets_row_blocks_of_whole_registers_around_its_whole_reduction_and_computes_the_product() -> None:
    """49 rows x 64 columns over 256: with 16 lanes and 28 accumulators, a 2-register block has
    7 rows (49's largest divisor <= 14) and 32 columns innermost, a 4-register block 7 rows and
    64 columns; the reduction is one inner loop of 256 (beyond the design space's cap of 64); the
    2-register block comes in both loop orders, its row blocks outside its two column panels and
    inside each (the panel reused by every row block); each schedule builds and computes A @ B."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from autosearch.backends.tvm.build import fast_build
    from autosearch.networks.register_blocks import SPARE_REGISTERS, register_blocks

    mod = _matmul(49, 256, 64)
    target = tvm.target.Target({"kind": "llvm", "mcpu": "x86-64", "num-cores": 1})
    scheds = register_blocks(mod, target, 16, 28 + SPARE_REGISTERS)
    assert scheds
    inner = {tuple(t[-1] for t in _tiles(s)) for s in scheds}
    assert (7, 32, 256) in inner and (7, 64, 256) in inner
    for s in scheds:
        rows, cols, red = _tiles(s)
        assert rows in ([7, 1, 1, 7], [1, 7, 1, 7]) and cols[1:3] == [1, 1] and red == [1, 256]
    # 2 registers wide, the rows' blocks both outside the two column panels and inside each;
    # 4 registers wide is one panel (64 columns), so one order
    orders = {(tuple(rows), cols[-1]) for rows, cols, _ in map(_tiles, scheds)}
    assert ((1, 7, 1, 7), 32) in orders and ((7, 1, 1, 7), 32) in orders
    assert ((1, 7, 1, 7), 64) not in orders
    rng = np.random.default_rng(0)
    a, b = rng.random((49, 256), dtype=np.float32), rng.random((256, 64), dtype=np.float32)
    dev = tvm.cpu()
    for s in scheds:
        lib = fast_build(s.mod, target, None)
        shapes = [[int(d) for d in info.shape] for info in ArgInfo.from_entry_func(s.mod, remove_preproc=True)]
        assert shapes == [[49, 256], [256, 64], [49, 64]]
        out = tvm.runtime.tensor(np.zeros((49, 64), np.float32), dev)
        lib[lib.entry_name](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out)
        np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4)


@pytest.mark.parametrize(
    ("m", "n", "why"),
    [(49, 16, "16 columns take no 2 registers of 16 lanes"), (1, 64, "a single row has no row block")],
)
def test_no_register_block_where_the_columns_or_the_rows_do_not_allow_one(m: int, n: int, why: str) -> None:
    import tvm

    from autosearch.networks.register_blocks import register_blocks

    target = tvm.target.Target({"kind": "llvm", "mcpu": "x86-64", "num-cores": 1})
    assert register_blocks(_matmul(m, 64, n), target, 16, 32) == [], why


def test_a_task_with_no_reduction_has_no_register_block() -> None:
    import tvm
    from tvm import te

    from autosearch.networks.register_blocks import register_blocks

    a = te.placeholder((64, 64), name="A")
    c = te.compute((64, 64), lambda i, j: a[j, i] * 2.0, name="T")
    mod = tvm.IRModule({"main": te.create_prim_func([a, c])})
    target = tvm.target.Target({"kind": "llvm", "mcpu": "x86-64", "num-cores": 1})
    assert register_blocks(mod, target, 16, 32) == []


@pytest.mark.parametrize("built", [False, True], ids=["built-here", "built-by-a-worker-and-loaded"])
@pytest.mark.parametrize("packed", [False, True], ids=["plain-weight", "weight-packed-by-RewriteLayout"])
def test_a_prior_pass_pick_is_timed_against_the_register_blocks_and_the_chosen_one_computes_the_task(
    packed: bool, built: bool, tmp_path: Path
) -> None:
    """`timed_pick` with no prior pick returns one of the task's register blocks (its tiles the
    micro-kernel's, its row blocks outside the column panels or inside each), checked against the unscheduled task; where the task has no register block
    and no pick, none. A layout-free weight (a network's constant) is packed by
    `RewriteLayout` in every block, and the blocks are timed with the packed argument they are
    built for (timed with the plain one none ran, and none was picked). The same where a prior
    worker built and exported the blocks (`built_candidates`) and the pass loads and times them
    (`timed_built`)."""
    import tvm

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.register_blocks import built_candidates, timed_built, timed_pick
    from autosearch.networks.spatial import register_lanes
    from autosearch.networks.verify import schedule_matches
    from autosearch.workloads.module import ModuleWorkload

    target = host_target()
    lanes = register_lanes(target)
    if not lanes:
        pytest.skip("no SIMD registers known on this CPU")
    mod = _matmul(28, 128, 8 * lanes)  # two column blocks of every width: each block packs the weight
    if packed:
        mod = tvm.IRModule({"main": mod["main"].with_attr("layout_free_buffers", [1])})
    task = ModuleWorkload(name="net/matmul", ir_module=mod)

    def pick(task: ModuleWorkload) -> str | None:
        if not built:
            return timed_pick(task, target, None)
        made = built_candidates(task, target, None, (), str(tmp_path))
        assert all(Path(b.library).is_file() and b.verified for b in made)  # each checked where it was built
        assert len({b.library for b in made}) <= 1  # the task's candidates share one library
        return timed_built(task, target, None, made)

    trace = pick(task)
    assert trace is not None and schedule_matches(task, trace, target, 0)
    insts, decisions = json.loads(trace)
    assert any(ins[0] == "TransformLayout" for ins in insts) == packed
    by_inst = {int(i): d for i, d in decisions}
    tiles = [by_inst[i] for i, ins in enumerate(insts) if ins[0] == "SamplePerfectTile"]
    rows_outside, rows_in_panels = tiles[0][1:3] == [1, 1], tiles[0][0] == 1 and tiles[0][2] == 1
    assert tiles[-1] == [1, 128] and (rows_outside or rows_in_panels) and tiles[1][1:3] == [1, 1]
    narrow = ModuleWorkload(name="net/narrow", ir_module=_matmul(28, 64, lanes))
    assert pick(narrow) is None


def _batch_matmul(b: int, m: int, k: int, n: int):  # type: ignore[no-untyped-def]
    import tvm
    from tvm import te

    x = te.placeholder((b, m, k), name="X")
    y = te.placeholder((b, k, n), name="Y")
    r = te.reduce_axis((0, k), name="k")
    z = te.compute((b, m, n), lambda i, j, c: te.sum(x[i, j, r] * y[i, r, c], axis=r), name="matmul")
    return tvm.IRModule({"main": te.create_prim_func([x, y, z]).with_attr("tirx.noalias", True)})


def _attention_sketch(target: object) -> tuple:  # type: ignore[type-arg]
    """A window-attention batch matmul (49 columns: no register block) and its design space's
    first sketch, post-processed: a runner-up `timed_pick` can return."""
    from tvm.s_tir.schedule import Trace

    from autosearch.backends.tvm.space import TaskSpace, replay_postprocessed, trace_json

    mod = _batch_matmul(8, 49, 32, 49)
    space = TaskSpace(mod, target)
    sketch = json.loads(trace_json(space.spaces[0]))
    runner = replay_postprocessed(
        mod, space.context.space_generator.postprocs, lambda s: Trace.apply_json_to_schedule(sketch, s)
    )
    assert runner is not None
    return mod, runner


def test_unroll_variants_change_only_the_unroll_step_and_timed_pick_returns_one_that_computes_the_task() -> None:
    """A window-attention batch matmul (49 columns: no register block): `unroll_variants` of a
    post-processed pick are the pick with each other value of its unroll decision and nothing
    else changed; `timed_pick` returns the pick or one of them, checked against the task."""
    from tvm.s_tir.schedule import Trace

    from autosearch.backends.tvm.space import TaskSpace, replay_postprocessed, trace_json
    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.register_blocks import register_blocks, timed_pick, unroll_variants
    from autosearch.networks.spatial import register_lanes
    from autosearch.networks.verify import schedule_matches
    from autosearch.workloads.module import ModuleWorkload

    target = host_target()
    mod = _batch_matmul(8, 49, 32, 49)
    space = TaskSpace(mod, target)
    postprocs = space.context.space_generator.postprocs
    sketch = json.loads(trace_json(space.spaces[0]))
    picked = replay_postprocessed(mod, postprocs, lambda s: Trace.apply_json_to_schedule(sketch, s))
    assert picked is not None
    pick = trace_json(picked)
    assert register_blocks(mod, target, register_lanes(target), 32) == []

    def decisions(trace: str) -> dict[int, object]:
        insts, decs = json.loads(trace)
        end = next(i for i, ins in enumerate(insts) if ins[0] == "EnterPostproc")
        return {int(i): d for i, d in decs if int(i) < end}

    insts = json.loads(pick)[0]
    base = decisions(pick)
    changed: list[tuple[int, object]] = []
    for variant in unroll_variants(mod, postprocs, pick):
        diff = [(i, d) for i, d in decisions(trace_json(variant)).items() if base.get(i) != d]
        assert len(diff) == 1 and insts[diff[0][0]][0] == "SampleCategorical"
        changed.append(diff[0])
    (unroll,) = {i for i, _ in changed}
    assert sorted(v for _, v in changed) == [v for v in range(len(insts[unroll][2][0])) if v != base[unroll]]

    task = ModuleWorkload(name="net/attention", ir_module=mod)
    chosen = timed_pick(task, target, pick)
    assert chosen is not None and schedule_matches(task, chosen, target, 0)
    assert {i: d for i, d in decisions(chosen).items() if i != unroll} == {i: d for i, d in base.items() if i != unroll}


def test_timed_pick_chooses_among_the_priors_runners_up_and_checks_the_one_it_returns() -> None:
    """The schedules the prior ordered after its pick are candidates too (`prior.ranked_schedules`):
    with no pick and no register block (49 columns), `timed_pick` returns the runner-up given, as
    checked against the task; a runner-up whose trace does not apply is passed over."""

    from autosearch.backends.tvm.space import trace_json
    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.register_blocks import timed_pick
    from autosearch.networks.verify import schedule_matches
    from autosearch.workloads.module import ModuleWorkload

    target = host_target()
    mod, runner = _attention_sketch(target)
    task = ModuleWorkload(name="net/attention", ir_module=mod)
    chosen = timed_pick(task, target, None, 0, [trace_json(runner)])
    assert chosen == trace_json(runner) and schedule_matches(task, chosen, target, 0)
    assert timed_pick(task, target, None, 0, ["not a trace"]) is None


def test_a_worker_checks_each_candidate_with_its_packed_weight_and_leaves_out_one_that_computes_something_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`built_candidates` runs each candidate it built on the check's inputs, the layout-free
    weight packed as the candidate packs it (`verify.packed_matches`): the task's register blocks
    are offered checked, and a block of another product (the weight read transposed, the same
    shapes and the same kind of packing) is left out; the pass's timing picks one of those left
    without a check of its own, and it computes the task."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    import autosearch.networks.register_blocks as rb
    from autosearch.backends.tvm.target import host_target
    from autosearch.networks import verify
    from autosearch.networks.spatial import register_lanes
    from autosearch.workloads.module import ModuleWorkload

    target = host_target()
    lanes = register_lanes(target)
    if not lanes:
        pytest.skip("no SIMD registers known on this CPU")

    def packed(mod):  # type: ignore[no-untyped-def]
        return tvm.IRModule({"main": mod["main"].with_attr("layout_free_buffers", [1])})

    n = 8 * lanes
    task = ModuleWorkload(name="net/matmul", ir_module=packed(_matmul(28, n, n)))
    right = rb.candidates(task.mod(), target, None)
    wrong = rb.candidates(packed(_matmul(28, n, n, transposed=True)), target, None)
    assert right and wrong and all(verify.packed_layouts(sch) for sch, _ in right + wrong)
    real = rb.candidates
    monkeypatch.setattr(rb, "candidates", lambda *a: [right[0], wrong[0], right[1]])
    made = rb.built_candidates(task, target, None, (), str(tmp_path))
    assert [b.trace for b in made] == [rb._text(sch, False, None) for sch, _ in (right[0], right[1])]
    assert all(b.verified for b in made)
    monkeypatch.setattr(rb, "candidates", real)
    checks: list[str] = []
    monkeypatch.setattr(verify, "schedule_matches", lambda *a: checks.append(a[1]) or True)
    picked = rb.timed_built(task, target, None, made)
    assert picked in {b.trace for b in made} and checks == []  # checked where it was built, not again
    monkeypatch.undo()
    assert verify.schedule_matches(task, picked, target, 0)
    for (sch, _), computes_the_task in ((right[0], True), (wrong[0], False)):  # left out by the check
        ((library, function),) = rb._exported({0: sch.mod}, target, str(tmp_path)).values()
        takes = [tuple(int(x) for x in a.shape) for a in ArgInfo.from_entry_func(sch.mod, remove_preproc=True)]
        func = tvm.runtime.load_module(library)[function]
        assert verify.packed_matches(task, target, 0, sch, func, takes) is computes_the_task


def test_candidates_a_multi_function_build_refuses_are_built_one_library_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the one library of a task's candidates does not build (TVM refuses one of them),
    `built_candidates` builds each alone, and the pass times and checks those."""
    from autosearch.backends.tvm import build
    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.register_blocks import built_candidates, timed_built
    from autosearch.networks.spatial import register_lanes
    from autosearch.networks.verify import schedule_matches
    from autosearch.workloads.module import ModuleWorkload

    target = host_target()
    lanes = register_lanes(target)
    if not lanes:
        pytest.skip("no SIMD registers known on this CPU")
    real = build.fast_build

    def one_function_only(mod, target, params):  # type: ignore[no-untyped-def]
        if len(mod.functions) > 1:
            raise RuntimeError("refused")
        return real(mod, target, params)

    monkeypatch.setattr(build, "fast_build", one_function_only)
    task = ModuleWorkload(name="net/matmul", ir_module=_matmul(28, 128, 8 * lanes))
    made = built_candidates(task, target, None, (), str(tmp_path))
    assert len(made) >= 2 and len({b.library for b in made}) == len(made)
    trace = timed_built(task, target, None, made)
    assert trace in {b.trace for b in made} and schedule_matches(task, trace, target, 0)


def test_a_candidate_whose_build_runs_past_the_builders_cap_is_killed_and_the_others_decide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`timed_pick` builds its candidates in the builder pool's worker processes: a runner-up with
    every loop unrolled (614,656 bodies; three of its four loops alone took 94 s of LLVM in one
    process, Zen 4) is killed at the pool's cap, and the runner-up that builds is returned, long
    before that build would end.
    Built in the run's own process, such a pick held a 10-minute run for over ten minutes more."""
    import time

    from tvm import s_tir

    from autosearch.backends.tvm.build import PoolBuilder
    from autosearch.backends.tvm.space import trace_json
    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.register_blocks import timed_pick
    from autosearch.workloads.module import ModuleWorkload

    target = host_target()
    mod, runner = _attention_sketch(target)
    slow = s_tir.Schedule(mod)
    for loop in slow.get_loops(slow.get_sblock("matmul")):
        slow.unroll(loop)
    monkeypatch.setattr(PoolBuilder, "adaptive_timeout", lambda self, *a, **k: 3.0)
    task = ModuleWorkload(name="net/attention", ir_module=mod)
    t0 = time.perf_counter()
    chosen = timed_pick(task, target, None, 0, [trace_json(slow), trace_json(runner)])
    assert chosen == trace_json(runner)
    assert time.perf_counter() - t0 < 45.0


def test_a_packing_read_from_a_schedule_moves_every_weight_element_where_tvms_own_index_map_does() -> None:
    """The packing `verify.packed_layouts` reads from a register block's `RewriteLayout` block,
    applied in NumPy (`folding.moved`, as the worker's check packs the weight), puts every element
    where TVM's `IndexMap.map_tensor` puts it; a schedule that packs nothing has no packing."""
    import tvm

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.folding import moved
    from autosearch.networks.register_blocks import candidates
    from autosearch.networks.spatial import register_lanes
    from autosearch.networks.verify import packed_layouts

    target = host_target()
    lanes = register_lanes(target)
    if not lanes:
        pytest.skip("no SIMD registers known on this CPU")
    mod = _matmul(28, 64, 8 * lanes)
    packed = tvm.IRModule({"main": mod["main"].with_attr("layout_free_buffers", [1])})
    weight = np.random.default_rng(0).standard_normal((64, 8 * lanes)).astype("float32")
    for sch, _ in candidates(packed, target, None):
        ((at, index_map),) = packed_layouts(sch).items()  # type: ignore[union-attr]
        assert at == 1 and len(index_map.final_indices) == 3  # column panels of whole registers
        want = index_map.map_tensor(tvm.runtime.tensor(weight)).numpy()
        np.testing.assert_array_equal(moved(weight, index_map), want)
    assert all(packed_layouts(sch) == {} for sch, _ in candidates(mod, target, None))


@pytest.mark.parametrize(
    ("precision", "size", "rows"), [("bf16", 14, 7), ("int8", 14, 7), ("int8", 56, 7), ("bf16", 16, 4)]
)
def test_a_packed_convolution_gets_two_channel_blocks_times_a_row_of_pixels_that_computes_the_task(
    precision: str, size: int, rows: int
) -> None:
    """A network's 1x1 convolution in bf16 (int8) on `size` x `size` maps, 64 output channels: its
    register block is 2 output-channel blocks x `rows` pixels of a row, the largest odd divisor of
    the row within 32 registers less 2 x 8 (2 x 4) weight registers and 2 for the broadcasts (7 for
    bf16, 11 / 2 -> 7 for int8: on 56-wide maps 7, not 8, whose epilogue LLVM vectorized across
    pixels, 2-5x slower), else its largest divisor (16 in bf16: 4); the whole reduction inside,
    unrolled 16; each sketch's block compiles to the instruction, and where this CPU runs it,
    computes what the task computes. The fp32 network's convolution is no packed one (its blocks
    stay `blocked_decisions`')."""
    import torch
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from autosearch.backends.tvm.lowp import get_precision, precision_target
    from autosearch.backends.tvm.space import trace_json
    from autosearch.networks.graph import import_network
    from autosearch.networks.inputs import InputSpec
    from autosearch.networks.register_blocks import packed_conv_steps, register_blocks
    from autosearch.networks.verify import schedule_matches
    from conftest import host_runs

    target = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 1), torch.nn.ReLU()).eval()
    x = np.random.default_rng(0).random((1, 32, size, size), dtype=np.float32)
    graph = import_network("c1", net, [InputSpec("x", "float32", x.shape)], [x], target, precision=precision)
    (task,) = [w for w in graph.workloads if f"conv2d_NCHWc_{precision}" in w.name]
    mod = task.mod()
    steps = packed_conv_steps(mod)
    assert steps == (8 if precision == "bf16" else 4)  # a 16-channel input block a call
    scheds = register_blocks(mod, target, 16, 32)
    assert scheds
    for s in scheds:
        batch, channels, height, width, lanes, *reduction = _tiles(s)
        assert channels == [2, 1, 1, 2] and width == [size // rows, 1, 1, rows] and height == [size, 1, 1, 1]
        assert batch == lanes == [1, 1, 1, 1] and all(t[0] == 1 for t in reduction)
        insts, decisions = json.loads(trace_json(s))
        unrolls = [insts[i][2][0][d] for i, d in decisions if insts[i][0] == "SampleCategorical"]
        assert unrolls and set(unrolls) == {16}
    instruction = "vdpbf16ps" if precision == "bf16" else "vpdpbusd"
    built = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(scheds[0].mod)
    lib = tvm.compile(built, target=precision_target(get_precision(precision), target)).mod
    assert instruction in (lib.imports[0] if lib.imports else lib).inspect_source("asm")
    if host_runs(precision):
        assert all(schedule_matches(task, trace_json(s), target) for s in scheds)
    fp32 = [w for w in import_network("c1", net, [InputSpec("x", "float32", x.shape)], [x], target).workloads]
    assert all(packed_conv_steps(w.mod()) == 0 for w in fp32)
