"""`networks.spatial`: a task with no reduction gets a timed loop nest with its channel block one
vector; a convolution is left to the prior's design space."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
tvm_ffi = pytest.importorskip("tvm_ffi")
torch = pytest.importorskip("torch")

from autosearch.backends.tvm.target import host_target  # noqa: E402
from autosearch.networks.graph import import_network  # noqa: E402
from autosearch.networks.inputs import InputSpec  # noqa: E402
from autosearch.search.registers import simd_bits  # noqa: E402


def _graph() -> object:
    """A stem, then a pre-activation BatchNorm + ReLU before a 1x1 convolution, concatenated with
    its input (a DenseNet layer), then a 1x1 convolution: between the convolutions every tensor in
    a blocked layout, channels whole blocks of every register's lanes."""

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 64, 3, padding=1)
            self.bn, self.conv = torch.nn.BatchNorm2d(64), torch.nn.Conv2d(64, 32, 1, bias=False)
            self.out = torch.nn.Conv2d(96, 32, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.stem(x)
            return self.out(torch.cat([y, self.conv(torch.relu(self.bn(y)))], 1))

    torch.manual_seed(0)
    net = Layer().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-1, 1), net.bn.running_var.uniform_(0.5, 2)
    x = np.random.default_rng(0).random((1, 3, 14, 14), dtype=np.float32)
    return import_network("layer", net, [InputSpec("x", "float32", x.shape)], [x], host_target())


def _vector_nest_output(sch: object, data: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The one block of `sch` has a 64-lane vector innermost; its output on `data`, built here."""
    (block,) = sch.get_child_blocks(sch.get_sblock("root"))  # type: ignore[attr-defined]
    loops = [sch.get(lp) for lp in sch.get_loops(block)]  # type: ignore[attr-defined]
    assert int(loops[-1].kind) == 2 and int(loops[-1].extent) == 64  # ForKind.VECTORIZED
    lib = tvm.compile(sch.mod, target=host_target()).jit()  # type: ignore[attr-defined]
    out = tvm.runtime.tensor(np.zeros(shape, "float32"))
    lib["main"](tvm.runtime.tensor(data), out)
    return out.numpy()


def test_a_task_with_no_reduction_gets_one_vector_a_channel_block_and_a_convolution_none() -> None:
    """The BatchNorm + ReLU task and the concatenation: each loop nest vectorizes exactly the
    innermost axis (the channel block, a whole number of registers) and has no 64-lane fused loop;
    the timed choice is one of those nests or the unscheduled loops, and computes what the task
    computes; the convolution is no task of this kind."""
    from autosearch.backends.tvm.space import trace_json
    from autosearch.networks.spatial import spatial_forms, spatial_schedule
    from autosearch.networks.verify import schedule_matches

    target = host_target()
    bits = simd_bits(target)
    if bits <= 0:
        pytest.skip("no SIMD registers known on this CPU")
    graph = _graph()
    names = [w.name for w in graph.workloads]  # type: ignore[attr-defined]
    spatial = [w for w in graph.workloads if "fused_multiply" in w.name or "concatenate" in w.name]  # type: ignore[attr-defined]
    conv = next(w for w in graph.workloads if "conv2d_NCHWc" in w.name)  # type: ignore[attr-defined]
    assert len(spatial) == 2, names
    for task in spatial:
        forms = spatial_forms(task.mod(), bits // 32)
        assert len(forms) == 2, task.name  # serial and parallel
        for sch in forms:
            (block,) = sch.get_child_blocks(sch.get_sblock("root"))
            loops = [sch.get(lp) for lp in sch.get_loops(block)]
            vectorized = [lp for lp in loops if int(lp.kind) == 2]  # ForKind.VECTORIZED
            assert vectorized == [loops[-1]]
            assert len(loops) in (2, 5)  # serial: N, C, H, W, c; parallel: one fused loop + the vector
            assert int(loops[-1].extent) % (bits // 32) == 0 and int(loops[-1].extent) <= 64
        found = spatial_schedule(task, target, bits)
        assert found is not None, task.name
        sch, seconds = found
        assert 0 < seconds < 1e-2
        mods = [f.mod for f in forms] + [task.mod()]  # a nest, or TVM's own loops
        assert any(tvm_ffi.structural_equal(sch.mod, m) for m in mods)
        assert schedule_matches(task, trace_json(sch), target)
    assert spatial_schedule(conv, target, bits) is None
    assert spatial_schedule(spatial[0], target, 0) is None  # no registers known (a GPU): no rule


def test_the_prior_pass_builds_a_task_with_no_reduction_from_the_timed_form() -> None:
    """`prior.prior_schedule` returns the spatial form's trace for such a task (its loop nest,
    not a design-space pick: one vectorized loop over the channel block)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from autosearch.networks.prior import PriorRanker, prior_schedule

    target = host_target()
    bits = simd_bits(target)
    if bits <= 0:
        pytest.skip("no SIMD registers known on this CPU")
    graph = _graph()
    task = next(w for w in graph.workloads if "relu" in w.name and "conv" not in w.name)  # type: ignore[attr-defined]
    trace = prior_schedule(task, target, PriorRanker(target))
    assert trace is not None
    sch = Schedule(task.mod())
    Trace.apply_json_to_schedule(json.loads(trace), sch)
    (block,) = sch.get_child_blocks(sch.get_sblock("root"))
    loops = [sch.get(lp) for lp in sch.get_loops(block)]
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    block_lanes = int(ArgInfo.from_prim_func(task.mod()["main"])[-1].shape[-1])  # the channel block
    assert int(loops[-1].kind) == 2  # vectorized
    # the channel block alone is the vector, serial (N, C, H, W, c) or parallel (one fused loop, c);
    # the design space's pick fused every axis into 64-lane vectors
    assert int(loops[-1].extent) == block_lanes and len(loops) in (2, 5)


def test_a_worker_builds_and_checks_the_forms_and_leaves_out_one_that_computes_something_else(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`built_forms` (a prior worker's half): the unscheduled loops and every form in one library,
    each form run there against the unscheduled loops; a form of another computation (x * 3 where
    the task computes x * 2, same shapes) is left out, and the pass's timing (`timed_built`) picks
    one of those left, which computes what the task computes."""
    from tvm import te, tirx

    import autosearch.networks.spatial as spatial
    from autosearch.backends.tvm.space import trace_json
    from autosearch.networks.register_blocks import timed_built
    from autosearch.networks.verify import schedule_matches
    from autosearch.workloads.module import ModuleWorkload

    def module(scale: float) -> object:
        x = te.placeholder((8, 4, 32), "float32", name="x")
        y = te.compute((8, 4, 32), lambda i, j, k: tirx.max(x[i, j, k] * scale, 0.0), name="y")
        return tvm.IRModule({"main": te.create_prim_func([x, y])})

    target = host_target()
    if simd_bits(target) <= 0:
        pytest.skip("no SIMD registers known on this CPU")
    task = ModuleWorkload(name="scale", ir_module=module(2.0), family="network")
    right = spatial.spatial_forms(task.mod(), 16)
    wrong = spatial.spatial_forms(module(3.0), 16)
    assert len(right) == len(wrong) == 2
    monkeypatch.setattr(spatial, "spatial_forms", lambda mod, lanes: [right[0], wrong[1]])
    built = spatial.built_forms(task, target, 512, 0, str(tmp_path))
    assert [b.function for b in built] == ["reference", "form0"]  # the wrong form is not offered
    assert all(b.verified for b in built) and built[1].trace == trace_json(right[0])
    assert built[0].args[0].shape == (8, 4, 32)
    picked = timed_built(task, target, None, built)
    assert picked in {b.trace for b in built} and schedule_matches(task, picked, target)
    monkeypatch.setattr(spatial, "spatial_forms", lambda mod, lanes: [])
    assert spatial.built_forms(task, target, 512, 0, str(tmp_path)) == []  # not of this kind: the design space's


def test_an_innermost_axis_wider_than_a_vector_is_split_and_its_inner_part_vectorized() -> None:
    """A transformer's element-wise task over 384 features (a GELU's shape): the forms vectorize a
    64-lane inner part of the feature axis (384 = 6 x 64), and compute what the task computes."""
    from tvm import te, tirx

    from autosearch.networks.spatial import spatial_forms

    x = te.placeholder((49, 384), "float32", name="x")
    y = te.compute((49, 384), lambda i, j: tirx.max(x[i, j] * 2.0, 0.0), name="y")
    mod = tvm.IRModule({"main": te.create_prim_func([x, y])})
    forms = spatial_forms(mod, 16)
    assert len(forms) == 2  # serial and parallel
    data = np.random.default_rng(0).standard_normal((49, 384)).astype("float32")
    for sch in forms:
        np.testing.assert_allclose(_vector_nest_output(sch, data, (49, 384)), np.maximum(data * 2.0, 0.0))


def test_a_transpose_gets_a_form_in_register_square_tiles_that_computes_it() -> None:
    """Attention's keys, (128, 768) to 12 x 64 x 128 and scaled: beside the serial and parallel
    nests a third form splits the two innermost axes into 16 x 16 tiles, the innermost one the
    vector, parallel over the heads, and computes the task; a task whose innermost axes are not
    whole registers (49 x 384 above) gets no such form."""
    from tvm import te

    from autosearch.networks.spatial import spatial_forms

    x = te.placeholder((128, 768), "float32", name="x")
    y = te.compute((12, 64, 128), lambda h, d, t: x[t, h * 64 + d] * 0.125, name="keys")
    mod = tvm.IRModule({"main": te.create_prim_func([x, y])})
    forms = spatial_forms(mod, 16)
    assert len(forms) == 3
    tiled = forms[2]
    (block,) = tiled.get_child_blocks(tiled.get_sblock("root"))
    loops = [tiled.get(lp) for lp in tiled.get_loops(block)]
    assert [int(lp.extent) for lp in loops] == [12, 4, 8, 16, 16]
    assert int(loops[0].kind) == 1 and int(loops[-1].kind) == 2  # ForKind.PARALLEL, VECTORIZED
    data = np.random.default_rng(0).standard_normal((128, 768)).astype("float32")
    lib = tvm.compile(tiled.mod, target=host_target()).jit()
    out = tvm.runtime.tensor(np.zeros((12, 64, 128), "float32"))
    lib["main"](tvm.runtime.tensor(data), out)
    np.testing.assert_allclose(out.numpy(), data.reshape(128, 12, 64).transpose(1, 2, 0) * 0.125, rtol=1e-6)


def test_an_innermost_axis_shorter_than_a_register_is_fused_with_the_one_before_it() -> None:
    """An innermost axis of 7 (a 7x7 feature map's rows; 7 < 16 lanes) is fused with the axis
    before it (384 x 7 = 2,688, a 64-lane vector of it), and the nest computes what the task
    computes; a task of one short axis alone has nothing to fuse and gets no form."""
    from tvm import te

    from autosearch.networks.spatial import spatial_forms

    x = te.placeholder((49, 384), "float32", name="x")
    short = te.compute((49, 384, 7), lambda i, j, k: x[i, j] * 2.0 + k, name="s")
    forms = spatial_forms(tvm.IRModule({"main": te.create_prim_func([x, short])}), 16)
    assert len(forms) == 2
    data = np.random.default_rng(0).standard_normal((49, 384)).astype("float32")
    for sch in forms:
        want = data[:, :, None] * 2.0 + np.arange(7, dtype="float32")
        np.testing.assert_allclose(_vector_nest_output(sch, data, (49, 384, 7)), want)
    one = te.placeholder((7,), "float32", name="one")
    alone = te.compute((7,), lambda k: one[k] * 2.0, name="alone")
    assert spatial_forms(tvm.IRModule({"main": te.create_prim_func([one, alone])}), 16) == []


def test_a_channel_shuffle_with_two_outputs_gets_a_nest_for_each_half() -> None:
    """ShuffleNetV2's concatenate + reshape + transpose + reshape + split (two outputs, which no
    block inlines into): its intermediates are inlined and each half gets its own nest; both
    halves come out as the shuffle computes them."""
    from tvm import te

    from autosearch.networks.spatial import spatial_forms

    a = te.placeholder((1, 8, 4, 20), "float32", name="a")
    b = te.placeholder((1, 8, 4, 20), "float32", name="b")
    cat = te.compute((1, 16, 4, 20), lambda n, c, h, w: te.if_then_else(c < 8, a[n, c, h, w], b[n, c - 8, h, w]))
    # the shuffle: channel c of the output reads channel (c % 2) * 8 + c // 2 of the concatenation
    shuf = te.compute((1, 16, 4, 20), lambda n, c, h, w: cat[n, (c % 2) * 8 + c // 2, h, w], name="shuffle")
    lo = te.compute((1, 8, 4, 20), lambda n, c, h, w: shuf[n, c, h, w], name="lo")
    hi = te.compute((1, 8, 4, 20), lambda n, c, h, w: shuf[n, c + 8, h, w], name="hi")
    forms = spatial_forms(tvm.IRModule({"main": te.create_prim_func([a, b, lo, hi])}), 16)
    assert len(forms) == 2
    rng = np.random.default_rng(0)
    da, db = (rng.standard_normal((1, 8, 4, 20)).astype("float32") for _ in range(2))
    whole = np.concatenate([da, db], 1)[:, [(c % 2) * 8 + c // 2 for c in range(16)]]
    for sch in forms:
        assert len(sch.get_child_blocks(sch.get_sblock("root"))) == 2  # the two halves, nothing else
        lib = tvm.compile(sch.mod, target=host_target()).jit()
        outs = [tvm.runtime.tensor(np.zeros((1, 8, 4, 20), "float32")) for _ in range(2)]
        lib["main"](tvm.runtime.tensor(da), tvm.runtime.tensor(db), *outs)
        np.testing.assert_array_equal(outs[0].numpy(), whole[:, :8])
        np.testing.assert_array_equal(outs[1].numpy(), whole[:, 8:])


def test_an_innermost_axis_no_register_divides_gets_loop_nests_left_to_llvm_to_vectorize() -> None:
    """ViT-base's attention scores padded from 197 to 200 rows (197, prime, the innermost axis):
    a serial and a parallel nest, nothing fused into the innermost axis and no explicit vector
    (LLVM's loop vectorizer takes it), computing what the task computes."""
    from tvm import te, tirx

    from autosearch.networks.spatial import spatial_forms

    x = te.placeholder((3, 197, 197), "float32", name="x")
    y = te.compute((3, 200, 197), lambda h, i, j: tirx.if_then_else(i < 197, x[h, tirx.min(i, 196), j], 0.0), name="y")
    forms = spatial_forms(tvm.IRModule({"main": te.create_prim_func([x, y])}), 16)
    assert len(forms) == 2
    data = np.random.default_rng(0).standard_normal((3, 197, 197)).astype("float32")
    expected = np.pad(data, ((0, 0), (0, 3), (0, 0)))
    for sch in forms:
        (block,) = sch.get_child_blocks(sch.get_sblock("root"))
        loops = [sch.get(lp) for lp in sch.get_loops(block)]
        assert int(loops[-1].extent) == 197 and all(int(lp.kind) != 2 for lp in loops)  # none VECTORIZED
        lib = tvm.compile(sch.mod, target=host_target()).jit()
        out = tvm.runtime.tensor(np.zeros((3, 200, 197), "float32"))
        lib["main"](tvm.runtime.tensor(data), out)
        np.testing.assert_array_equal(out.numpy(), expected)


def test_a_network_builds_and_computes_with_a_task_kept_as_tvms_own_loops() -> None:
    """Where the unscheduled loops ran fastest `spatial_schedule` keeps an empty schedule: committed
    as the tasks' records (as a prior's trace is) the network builds with them, and its output
    matches the network built with no record at all."""
    from tvm import relax
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.space import trace_json
    from autosearch.networks.check import compare_outputs, flatten_outputs
    from autosearch.networks.graph import build_network
    from autosearch.networks.tune import _commit

    target = host_target()
    graph = _graph()
    database = ms.database.MemoryDatabase()
    spatial = [w for w in graph.workloads if "fused_multiply" in w.name or "concatenate" in w.name]  # type: ignore[attr-defined]
    assert spatial
    for task in spatial:
        empty = trace_json(Schedule(task.mod()))
        assert not json.loads(empty)[0]  # no instruction
        _commit(database, task, empty, 1e-5, target)
    assert len(database) == len(spatial)
    x = tvm.runtime.tensor(np.random.default_rng(0).random((1, 3, 14, 14), dtype=np.float32))

    def outputs(db: object) -> list[np.ndarray]:
        return flatten_outputs(relax.VirtualMachine(build_network(graph, db, target), tvm.cpu())["main"](x))

    got = outputs(database)
    assert np.isfinite(got[0]).all() and got[0].shape == (1, 32, 14, 14)
    assert compare_outputs(got, outputs(ms.database.MemoryDatabase())).ok


def test_a_kernel_with_no_root_block_gets_no_forms_and_no_error() -> None:
    """TVM's `cumsum` legalizes to one opaque block with its loops inside and no root block
    (RoBERTa's position ids): the loop-nest, tile and row-reduction forms and the register blocks
    each find nothing to do instead of raising (it had ended a 10-minute RoBERTa run)."""
    from tvm import relax

    from autosearch.networks.register_blocks import register_blocks
    from autosearch.networks.row_reductions import row_reduction_forms
    from autosearch.networks.spatial import root_blocks, spatial_forms

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 128), "int32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.cumsum(x, axis=1, dtype="int64")))
        bb.emit_func_output(out)
    with host_target():  # TVM's library dispatch writes the scan (it has no legalization)
        legal = relax.backend.DispatchSortScan()(bb.get())
    scan = next(f for f in legal.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    mod = tvm.IRModule({"main": scan.with_attr("global_symbol", "main")})
    assert root_blocks(tvm.s_tir.Schedule(mod)) == []
    assert spatial_forms(mod, 16) == [] and row_reduction_forms(mod, 16) == []
    assert register_blocks(mod, host_target(), 16, 32) == []


def test_fastest_cold_times_again_only_the_candidates_close_to_the_fastest() -> None:
    """Three cold calls each first; a candidate within 1.25x of the fastest is timed again with
    twelve and ranked by that figure, one past it keeps its first figure and is not timed again,
    and one that does not run is left out."""
    from autosearch.networks.spatial import COLD_REPEAT, SCREEN_REPEAT, fastest_cold

    figures = {
        "a": {SCREEN_REPEAT: 1.0, COLD_REPEAT: 1.1},
        "b": {SCREEN_REPEAT: 1.2, COLD_REPEAT: 0.9},
        "c": {SCREEN_REPEAT: 2.0},
    }
    calls: list[tuple[str, int]] = []

    def timer(key: str) -> Callable[[int], float]:
        def run(repeat: int) -> float:
            calls.append((key, repeat))
            if key == "broken":
                raise RuntimeError("does not run")
            return figures[key][repeat]

        return run

    timed = fastest_cold({k: timer(k) for k in ("a", "b", "c", "broken")})
    assert timed == [(0.9, "b"), (1.1, "a"), (2.0, "c")]
    assert ("c", COLD_REPEAT) not in calls and ("a", COLD_REPEAT) in calls and ("b", COLD_REPEAT) in calls
