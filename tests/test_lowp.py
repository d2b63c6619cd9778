"""Low precision (`--precision bf16|int8`): the packed dense workloads, the CPU-feature refusal, the
tensorized design space (compiled for a CPU that has the instructions, whatever this host is), and,
where this CPU has them, the kernels and a bf16 network run against NumPy and PyTorch."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autosearch.errors import InputError, TargetError, WorkloadError
from conftest import fresh_process, host_runs, native_target

ZNVER4 = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}  # AVX512_BF16 and AVX512_VNNI
ZNVER3 = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}  # AVX2 only


def _host_flags() -> set[str]:
    from autosearch.hostinfo import cpu_flags

    return cpu_flags() or set()


needs_bf16 = pytest.mark.skipif(not host_runs("bf16"), reason="this CPU, as LLVM names it, has no AVX512_BF16")
needs_vnni = pytest.mark.skipif(not host_runs("int8"), reason="this CPU, as LLVM names it, has no AVX512_VNNI")


def _target(spec: dict) -> object:
    import tvm

    return tvm.target.Target(spec)


def test_a_dense_workload_gets_a_packed_low_precision_counterpart_and_others_are_refused() -> None:
    from autosearch.workloads import get_workload
    from autosearch.workloads.lowp import split_precision, with_precision

    dense = get_workload("bert/dense/128x768/768")
    bf16 = with_precision(dense, "bf16")
    assert bf16.name == "bert/dense/128x768/768@bf16" and bf16.params["op"] == "dense_bf16"
    text = bf16.mod().script()
    assert '(48, 384, 16, 2), "bfloat16"' in text and '"float32"' in text
    int8 = with_precision(dense, "int8")
    assert '(48, 192, 16, 4), "int8"' in int8.mod().script() and '"uint8"' in int8.mod().script()
    # the name resolves again (a record names its workload), to the same program
    assert get_workload(bf16.name).key == bf16.key != dense.key
    assert split_precision("a/b@int8") == ("a/b", "int8") and split_precision("a@b") == ("a@b", None)
    assert with_precision(dense, "fp32") is dense
    with pytest.raises(WorkloadError, match="covers dense layers"):
        with_precision(get_workload("resnet50/conv2d_nhwc/1x56x56x64/k3s1p1/64"), "bf16")
    with pytest.raises(WorkloadError, match="blocks of 16 outputs"):
        with_precision(get_workload("resnet50/dense/1x2048/1000"), "bf16")  # 1000 outputs: not whole blocks


def test_a_precision_the_target_cpu_lacks_is_refused_in_one_line_naming_the_feature() -> None:
    from autosearch.backends.tvm.lowp import get_precision, precision_target

    with pytest.raises(TargetError, match=r"needs avx512bf16, which the target CPU znver3 lacks") as exc:
        precision_target(get_precision("bf16"), _target(ZNVER3), measured_here=False)
    assert "\n" not in str(exc.value)
    with pytest.raises(TargetError, match="needs avx512vnni"):
        precision_target(get_precision("int8"), _target(ZNVER3), measured_here=False)
    znver4 = _target(ZNVER4)
    assert precision_target(get_precision("bf16"), znver4, measured_here=False) is znver4  # compiles for it
    assert precision_target(get_precision("fp32"), _target(ZNVER3)) is not None
    with pytest.raises(TargetError, match="unknown precision 'fp16'"):
        get_precision("fp16")
    if "avx512_bf16" not in _host_flags():  # measured here: this CPU must run them too
        with pytest.raises(TargetError, match="this machine's CPU lacks"):
            precision_target(get_precision("bf16"), znver4, measured_here=True)


def test_a_cpu_whose_flags_have_the_instructions_but_whose_llvm_name_lacks_them_gets_them_on_its_own_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A VM reporting an older CPU model than its flags (an Intel Xeon with AMX that LLVM names
    rocketlake): its own target (no --target given) gets the instructions its flags list, AMX's
    tiles included where listed; a target given by name is refused with the one to give, in one
    line under `one_line`'s 200 characters."""
    from autosearch.backends.tvm import lowp
    from autosearch.errors import one_line

    monkeypatch.setattr(lowp, "cpu_flags", lambda: {"avx512f", "avx512_bf16", "avx512_vnni"})
    bf16 = lowp.get_precision("bf16")
    with pytest.raises(TargetError, match="this CPU has it but LLVM names it znver3") as exc:
        lowp.precision_target(bf16, _target(ZNVER3), measured_here=True)
    assert one_line(exc.value) == str(exc.value) and '"mcpu":"sapphirerapids","num-cores":2' in str(exc.value)
    own = lowp.precision_target(bf16, _target(ZNVER3), measured_here=True, native=True)
    assert list(own.attrs["mattr"]) == ["+avx512bf16"] and not lowp.uses_tiles(own)
    assert str(own.attrs["mcpu"]) == "znver3" and int(own.attrs["num-cores"]) == 2
    monkeypatch.setattr(lowp, "cpu_flags", lambda: {"avx512f", "avx512_bf16", "amx_tile", "amx_bf16"})
    own = lowp.precision_target(bf16, _target(ZNVER3), measured_here=True, native=True)
    assert lowp.uses_tiles(own) and lowp.precision_target(bf16, own, measured_here=True) is own
    monkeypatch.setattr(lowp, "cpu_flags", lambda: {"avx512f"})  # neither has it: the plain refusal
    with pytest.raises(TargetError, match="use --precision fp32"):
        lowp.precision_target(bf16, _target(ZNVER3), measured_here=True, native=True)
    sapphire = _target({**ZNVER4, "mcpu": "sapphirerapids"})
    monkeypatch.setattr(lowp, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})  # a target with tiles, a CPU without
    with pytest.raises(TargetError, match="needs amx_tile, amx_bf16, which this machine's CPU lacks"):
        lowp.precision_target(bf16, sapphire, measured_here=True)


def _sampled_schedules(name: str | Any, target: object, n: int = 4) -> list:
    """`n` schedules sampled from the design space of a registry workload (or of a module)."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.intrinsics import register_tensor_intrinsics
    from autosearch.backends.tvm.lowp import space_generator
    from autosearch.workloads import get_workload

    register_tensor_intrinsics(target)  # as tuning does: not every target's intrinsics (~30 s)

    mod = get_workload(name).mod() if isinstance(name, str) else name
    ctx = ms.TuneContext(
        mod=mod, target=target, space_generator=space_generator(mod, target), search_strategy="replay-trace"
    )
    spaces = ctx.generate_design_space()
    assert spaces and all("meta_schedule.auto_tensorize" in s.mod.script() for s in spaces)
    ctx.pre_tuning(max_trials=n, num_trials_per_iter=n, design_spaces=spaces)
    return [c.sch for c in ctx.generate_measure_candidates()]


@pytest.mark.parametrize(("precision", "instruction"), [("bf16", "vdpbf16ps"), ("int8", "vpdpbusd")])
def test_every_low_precision_design_space_is_tensorized_and_compiles_to_the_instruction(
    precision: str, instruction: str
) -> None:
    """Every design space tiles around the intrinsic (none falls back to fp32 arithmetic, which the
    search once preferred), and every sampled schedule compiles, vectorized loops around the
    kernel included, to code that runs the CPU's dot-product instruction."""
    import tvm

    target = _target(ZNVER4)
    schedules = _sampled_schedules(f"bert/dense/128x768/768@{precision}", target)
    assert len(schedules) == 4
    for sch in schedules:
        lib = tvm.compile(sch.mod, target=target).mod
        asm = (lib.imports[0] if lib.imports else lib).inspect_source("asm")
        assert instruction in asm
    fp32 = _target(ZNVER4)
    from autosearch.backends.tvm.lowp import space_generator
    from autosearch.workloads import get_workload

    assert space_generator(get_workload("bert/dense/128x768/768").mod(), fp32) == "post-order-apply"
    # a bf16 program whose weight is not packed for the instruction keeps MetaSchedule's own space
    from tvm import te

    a = te.placeholder((32, 64), "bfloat16", name="a")
    b = te.placeholder((64, 48), "bfloat16", name="b")
    r = te.reduce_axis((0, 64), name="r")
    c = te.compute((32, 48), lambda i, j: te.sum(a[i, r].astype("float32") * b[r, j].astype("float32"), axis=r))
    plain = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    assert space_generator(plain, fp32) == "post-order-apply"


SAPPHIRERAPIDS = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}
needs_tiles = pytest.mark.skipif(
    not {"amx_tile", "amx_bf16"} <= _host_flags() or not host_runs("bf16"), reason="this CPU has no AMX bf16 tiles"
)


def _packed_bf16_dense(m: int, k: int, n: int) -> Any:
    import tvm

    from autosearch.workloads.lowp import _build_packed_dense

    return tvm.IRModule({"main": _build_packed_dense(m, k, n, "bf16")})


@pytest.mark.parametrize(("size", "intrin"), [((128, 768, 768), "2x2x24_whole"), ((48, 96, 80), "1x1x3_whole")])
def test_a_bf16_dense_layer_on_a_cpu_with_amx_tiles_around_the_tile_kernel_and_compiles_to_tdpbf16ps(
    size: tuple[int, int, int], intrin: str
) -> None:
    """On a target with AMX every schedule of a packed bf16 dense layer is tiled around the tile
    kernel (two tiles a side where the sizes are multiples of 32, the whole reduction a call where
    it is one of the kernel's step counts) and compiles to the tile multiply."""
    import tvm

    from autosearch.backends.tvm.lowp import kernel_of, module_precision

    target = _target(SAPPHIRERAPIDS)
    mod = _packed_bf16_dense(*size)
    assert kernel_of(mod, module_precision(mod), target).intrin == f"autosearch_amx_bf16_{intrin}"
    assert kernel_of(mod, module_precision(mod), _target(ZNVER4)).intrin == "autosearch_dot_16x2_bf16"
    for sch in _sampled_schedules(mod, target, n=2):
        assert f"autosearch_amx_bf16_{intrin}" in str(sch.trace)
        lib = tvm.compile(sch.mod, target=target).mod
        asm = (lib.imports[0] if lib.imports else lib).inspect_source("asm")
        assert "tdpbf16ps" in asm and "ldtilecfg" in asm


def test_a_networks_bf16_dense_layers_keep_their_batch_axis_on_amx_tiles_and_go_to_rows_without() -> None:
    """A transformer's linear layers on (batch, tokens, features): on AMX tiles no reshape to rows,
    so the bias and GELU fuse into the dense task, whose schedules compile to `tdpbf16ps`; without
    AMX they are reshaped to rows as before (`vdpbf16ps`)."""
    import tvm

    from autosearch.networks.graph import import_network
    from autosearch.networks.inputs import InputSpec

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).eval()
    x = np.random.default_rng(0).standard_normal((1, 32, 64)).astype("float32")
    names = {}
    for spec in (ZNVER4, SAPPHIRERAPIDS):
        g = import_network("mlp", net, [InputSpec("x", "float32", x.shape)], [x], _target(spec), precision="bf16")
        names[spec["mcpu"]] = [wl.name for wl in g.workloads if "dense_packed_bf16" in wl.name]
        if spec is SAPPHIRERAPIDS:
            mod = next(wl for wl in g.workloads if "gelu" in wl.name).mod()
            sch = _sampled_schedules(mod, _target(spec), n=1)[0]
            lib = tvm.compile(sch.mod, target=_target(spec)).mod
            assert "tdpbf16ps" in (lib.imports[0] if lib.imports else lib).inspect_source("asm")
    assert len(names["sapphirerapids"]) == 2 and any("gelu" in n for n in names["sapphirerapids"]), names
    assert len(names["znver4"]) == 2 and not any("gelu" in n for n in names["znver4"]), names


@needs_tiles
def test_the_amx_tile_kernels_compute_bf16_dense_layers_on_this_cpu() -> None:
    """The tile kernel's sums, on whole tiles and on one tile a side, a call over the whole sum
    (its sums start at zero in the tiles, no init pass) and over a fifth of it (5 calls, the sums
    zeroed in memory first), against float64 NumPy on the same bf16 operands: each schedule's
    output within fp32 rounding of the exact sums, the output's memory NaN before the call."""
    import ml_dtypes
    import tvm

    target = native_target("bf16")
    rng = np.random.default_rng(1)
    dev = tvm.cpu()
    for m, k, n in ((64, 256, 96), (48, 96, 80), (32, 160, 32)):
        a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        w = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
        want = a.astype(np.float64) @ w.astype(np.float64).T
        for sch in _sampled_schedules(_packed_bf16_dense(m, k, n), target, n=2):
            assert ("_whole" in str(sch.trace)) == (k != 160)
            out = tvm.runtime.tensor(np.full((m, n), np.nan, "float32"), dev)
            tvm.compile(sch.mod, target=target)["main"](
                tvm.runtime.tensor(a, dev), tvm.runtime.tensor(_packed(w, 2), dev), out
            )
            assert np.max(np.abs(out.numpy() - want)) <= 1e-5 * np.max(np.abs(want)), (m, k, n)


def _packed(w: np.ndarray, pairs: int) -> np.ndarray:
    n, k = w.shape
    return np.ascontiguousarray(w.reshape(n // 16, 16, k // pairs, pairs).transpose(0, 2, 1, 3))


@needs_bf16
@needs_vnni
def test_the_tensorized_kernels_compute_the_dense_layer_on_this_cpu() -> None:
    import ml_dtypes
    import tvm

    target = native_target("bf16")
    rng = np.random.default_rng(0)
    m, k, n = 128, 768, 768
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    want = a.astype(np.float64) @ w.astype(np.float64).T
    a8 = rng.integers(0, 256, (m, k), dtype=np.uint8)
    w8 = rng.integers(-128, 128, (n, k), dtype=np.int8)
    want8 = a8.astype(np.int64) @ w8.astype(np.int64).T
    dev = tvm.cpu()
    for precision, args, out_dtype, expected in (
        ("bf16", [a, _packed(w, 2)], "float32", want),
        ("int8", [a8, _packed(w8, 4)], "int32", want8),
    ):
        for sch in _sampled_schedules(f"bert/dense/128x768/768@{precision}", target, n=2):
            out = tvm.runtime.tensor(np.zeros((m, n), out_dtype), dev)
            tvm.compile(sch.mod, target=target)["main"](*[tvm.runtime.tensor(x, dev) for x in args], out)
            got = out.numpy().astype(np.float64)
            assert np.max(np.abs(got - expected)) <= 1e-5 * np.max(np.abs(expected)), precision


def test_a_networks_constant_weight_matmuls_become_packed_bf16_dense_layers() -> None:
    import tvm
    from tvm import relax

    from autosearch.networks.lowp import bf16_dense_layers

    rng = np.random.default_rng(0)
    w_ok = relax.const(rng.standard_normal((64, 32)).astype("float32"))
    w_odd = relax.const(rng.standard_normal((64, 24)).astype("float32"))  # 24 outputs: not whole blocks
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 8, 64), "float32"))
    y = relax.Var("y", relax.TensorType((8, 64), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            a = bb.emit(relax.op.matmul(x, w_ok))
            b = bb.emit(relax.op.matmul(y, w_odd))
            c = bb.emit(relax.op.matmul(y, relax.op.permute_dims(y)))  # two activations: stays fp32
            out = bb.emit_output(relax.Tuple([a, b, c]))
        bb.emit_func_output(out)
    mod, count = bf16_dense_layers(bb.get())
    assert count == 1
    text = mod.script()
    assert text.count("R.matmul") == 2 and "dense_packed_bf16" in text and '"bfloat16"' in text
    assert isinstance(mod, tvm.IRModule)


def test_a_networks_blocked_convolutions_become_packed_bf16_convolutions() -> None:
    import tvm
    from tvm import relax

    from autosearch.backends.tvm.lowp import module_precision
    from autosearch.networks.lowp import bf16_convolutions
    from autosearch.workloads.lowp import pack_conv_weight

    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 2, 8, 8, 16), "float32"))  # 32 channels, NCHW16c
    w = relax.const(rng.standard_normal((2, 32, 3, 3, 16)).astype("float32"))  # OIHW16o
    w8 = relax.const(rng.standard_normal((4, 32, 1, 1, 8)).astype("float32"))  # 8-channel output blocks
    wg = relax.const(rng.standard_normal((2, 16, 3, 3, 16)).astype("float32"))  # two groups
    blocked = {"data_layout": "NCHW16c", "kernel_layout": "OIHW16o", "out_layout": "NCHW16c"}
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.conv2d(x, w, padding=1, **blocked))
            b = bb.emit(relax.op.nn.conv2d(x, w8, data_layout="NCHW16c", kernel_layout="OIHW8o", out_layout="NCHW8c"))
            c = bb.emit(relax.op.nn.conv2d(x, wg, padding=1, groups=2, **blocked))
            out = bb.emit_output(relax.Tuple([a, b, c]))
        bb.emit_func_output(out)
    mod, count = bf16_convolutions(bb.get())
    assert count == 1
    text = mod.script()
    assert text.count("R.nn.conv2d") == 2 and "conv2d_NCHWc_bf16" in text and '"bfloat16"' in text
    task = tvm.IRModule({"main": mod["conv2d_NCHWc_bf16"]})
    assert module_precision(task).name == "bf16"  # tuned in the tensorized design space
    # the packed weight: (O/16, I/16, KH, KW, 16/2, 16, 2)
    packed_shape = ", ".join(f"T.int64({v})" for v in (2, 2, 3, 3, 8, 16, 2))
    assert f'B: T.Buffer(({packed_shape}), "bfloat16")' in task.script()
    # the packing: output lane o, input channel c = block * 16 + 2 * p + q at window position (y, x)
    weight = rng.standard_normal((2, 32, 3, 3, 16)).astype("float32")
    packed = pack_conv_weight(weight, 16, 2)
    assert packed[1, 1, 2, 0, 3, 5, 1] == weight[1, 16 + 2 * 3 + 1, 2, 0, 5]


def _bf16_output_task() -> object:
    """A task whose output is bf16: fp32 sums of products, rounded (a convolution with its cast)."""
    from tvm import te

    from autosearch.workloads.base import Workload

    def build() -> object:
        a = te.placeholder((8, 256), "float32", name="a")
        b = te.placeholder((256, 16), "float32", name="b")
        r = te.reduce_axis((0, 256), name="r")
        c = te.compute((8, 16), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
        d = te.compute((8, 16), lambda i, j: c[i, j].astype("bfloat16"), name="d")
        return te.create_prim_func([a, b, d])

    return Workload(name="test/bf16_out", family="test", params={}, _builder=build)


def test_a_bf16_output_one_rounding_step_away_passes_the_schedule_check_and_a_wrong_one_does_not() -> None:
    """A bf16 output rounds each fp32 sum: a schedule that sums in another order lands some sums on
    the neighbouring bf16 value (2^-8 of it). That passes, at the top of the output's scale too; a
    wrong result does not."""
    import ml_dtypes

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks import verify

    task = _bf16_output_task()
    target = host_target()
    reference = verify.built_matches(task, target, 0, lambda arrays: verify._run(task.mod(), target, arrays))
    assert reference  # the unscheduled task against itself
    _, want = verify._REFERENCES[(task.key, str(target), 0)]
    assert want[2].dtype == ml_dtypes.bfloat16

    def one_step_away(arrays: list[np.ndarray]) -> list[np.ndarray]:
        out = want[2].astype(np.float32)
        top = np.unravel_index(np.argmax(np.abs(out)), out.shape)  # the largest: its step is the largest
        bits = want[2].view(np.uint16).copy()
        bits[top] += 1  # the next bf16 value away from zero
        return [arrays[0], arrays[1], bits.view(ml_dtypes.bfloat16)]

    def wrong(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return [arrays[0], arrays[1], want[2][::-1].copy()]

    assert verify.buffer_rtol(want[2].dtype) == verify.BF16_RTOL > verify.buffer_rtol(np.dtype("float32"))
    assert verify.built_matches(task, target, 0, one_step_away)
    assert not verify.built_matches(task, target, 0, wrong)


def test_the_output_check_holds_each_precision_to_its_own_tolerance() -> None:
    from autosearch.networks.check import PRECISION_RTOL, compare_outputs

    expected = [np.linspace(-1.0, 1.0, 100)]
    off = [expected[0] + 5e-3]  # what OpenVINO's bf16 BERT is off by
    assert not compare_outputs(off, expected, PRECISION_RTOL["fp32"]).ok
    check = compare_outputs(off, expected, PRECISION_RTOL["bf16"])
    assert check.ok and "tolerance 2e-02" in check.describe()
    assert not compare_outputs([expected[0] + 0.1], expected, PRECISION_RTOL["bf16"]).ok


def _tune_model_bf16(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    body: str,
    input_spec: str,
    precision: str = "bf16",
    extra: Sequence[str] = (),
) -> tuple[dict, str]:
    """`tune-model --trials 0 --precision bf16` (or `precision`; `extra` arguments) on the model
    `make_model()` returns (`body`, its code after `torch.manual_seed(0)`): the JSON summary and
    what it printed to stderr."""
    import json

    from autosearch.cli import main

    (tmp_path / "net.py").write_text(f"import torch\ndef make_model():\n    torch.manual_seed(0)\n{body}")
    argv = ["tune-model", f"{tmp_path / 'net.py'}:make_model", "--input", input_spec, "--trials", "0", *extra]
    try:
        main([*argv, "--precision", precision, "--db", str(tmp_path / "n.db"), "--json"])
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err[-2000:]
    captured = capsys.readouterr()
    return json.loads(captured.out[captured.out.index("{") :]), captured.err


def _tune_model_int8(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, input_spec: str, samples: np.ndarray
) -> tuple[dict, str]:
    """`_tune_model_bf16` in int8, calibrated on every sample of `samples` but the last, checked on
    the last (`--calibration`, `--check-input`)."""
    np.save(tmp_path / "calibration.npy", samples[:-1])
    np.save(tmp_path / "check.npy", samples[-1])
    files = ["--calibration", str(tmp_path / "calibration.npy"), "--check-input", str(tmp_path / "check.npy")]
    return _tune_model_bf16(capsys, tmp_path, body, input_spec, precision="int8", extra=files)


@needs_bf16
@pytest.mark.usefixtures("no_pytorch_timing")
def test_tune_model_builds_a_bf16_network_that_matches_pytorch_within_its_tolerance(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    s, _ = _tune_model_bf16(
        capsys,
        tmp_path,
        "    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).eval()\n",
        "x:float32:16,64",
    )
    assert s["precision"] == "bf16" and s["output_matches"], s
    assert sum("dense_packed_bf16" in t["name"] for t in s["tasks"]) == 2, [t["name"] for t in s["tasks"]]
    assert 0 < s["relative_err"] < 2e-2


@needs_bf16
@pytest.mark.integration
@pytest.mark.usefixtures("no_pytorch_timing")
def test_a_rebuild_from_the_store_in_a_fresh_process_takes_the_stored_tensorized_schedules(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`tune-model --trials 0 --db STORE` after a tuned bf16 run builds each packed dense task with
    the store's best, not the prior's, in a process where nothing was tuned (the tensorized traces
    replay only once the tile or dot-product intrinsics are registered)."""
    import json

    body = (
        "    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)).eval()\n"
    )
    first, _ = _tune_model_bf16(capsys, tmp_path, body, "x:float32:16,64", extra=["--trials", "16"])
    tuned = {t["name"] for t in first["tasks"] if "dense_packed_bf16" in t["name"] and t["trials"]}
    assert tuned, first["tasks"]
    proc = fresh_process(
        *("tune-model", f"{tmp_path / 'net.py'}:make_model", "--input", "x:float32:16,64", "--trials", "0"),
        *("--precision", "bf16", "--db", str(tmp_path / "n.db"), "--json"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads(proc.stdout[proc.stdout.index("{") :])
    built = {t["name"]: t["built_with"] for t in again["tasks"] if t["name"] in tuned}
    assert set(built) == tuned and set(built.values()) == {"tuned (earlier run)"}, built


_ATTENTION = """    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(64, 192)

        def forward(self, x):
            q, k, v = self.qkv(x).reshape(1, 32, 3, 2, 32).permute(2, 0, 3, 1, 4)
            scores = torch.softmax(q @ k.transpose(-1, -2) / 32 ** 0.5, dim=-1)
            return (scores @ v).transpose(1, 2).reshape(1, 32, 64)

    return Attention().eval()
"""


@needs_tiles
@pytest.mark.integration  # a whole tune-model run on tiles: 35-47 s on 2 cores, `make test-integration`
@pytest.mark.usefixtures("no_pytorch_timing")
def test_tune_model_on_amx_tiles_takes_an_attentions_matmuls_to_bf16_and_matches_pytorch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """On AMX tiles the scores (q by k transposed) and the weighted sum (scores by v), matmuls of
    two activations, are packed bf16 products too; the output within bf16's tolerance."""
    s, _ = _tune_model_bf16(capsys, tmp_path, _ATTENTION, "x:float32:1,32,64")
    names = [t["name"] for t in s["tasks"]]
    # the two products have one shape here (2 heads of 32 x 32 by 32 x 32): one task, called twice
    assert sum(t["weight"] for t in s["tasks"] if "attention_packed_bf16" in t["name"]) == 2, names
    assert sum("dense_packed_bf16" in n for n in names) == 1, names
    assert s["output_matches"] and 0 < s["relative_err"] < 2e-2, s


def test_an_attentions_matmuls_stay_float32_where_the_tiles_do_not_divide_them() -> None:
    """Only products whose rows and columns are whole tiles (16) are taken, their sums padded to
    whole tile steps (32) where that adds at most a quarter: 24 tokens are not; a matmul by a
    constant is the dense layers'."""
    import tvm
    from tvm import relax

    from autosearch.networks.lowp import bf16_attention_matmuls

    def module(tokens: int) -> tvm.IRModule:
        bb = relax.BlockBuilder()
        q = relax.Var("q", relax.TensorType((2, tokens, 32), "float32"))
        k = relax.Var("k", relax.TensorType((2, 32, tokens), "float32"))
        with bb.function("main", [q, k]):
            with bb.dataflow():
                w = relax.const(np.ones((tokens, 16), "float32"))
                s = bb.emit(relax.op.matmul(q, k))
                out = bb.emit_output(relax.op.matmul(s, w))
            bb.emit_func_output(out)
        return bb.get()

    taken, n = bf16_attention_matmuls(module(32))
    assert n == 1 and "attention_packed_bf16" in taken.script()
    kept, n = bf16_attention_matmuls(module(24))
    assert n == 0 and "attention_packed_bf16" not in kept.script()


def test_an_activation_packed_as_bf16_words_is_the_dense_layers_weight_layout() -> None:
    """The right operand of an attention's product, packed as 32-bit words (two rows' bf16 a word)
    and viewed as bf16, is bit for bit the (..., N/16, K/2, 16, 2) layout of the operand's bf16
    values (round to nearest even, as `astype` rounds), the layout the tile kernel reads."""
    import ml_dtypes
    import tvm
    from tvm import relax

    from autosearch.networks.lowp import _te_bf16_pairs

    y = np.random.default_rng(0).standard_normal((2, 64, 32)).astype("float32")
    bb = relax.BlockBuilder()
    arg = relax.Var("y", relax.TensorType(y.shape, "float32"))
    with bb.function("main", [arg]):
        with bb.dataflow():
            words = bb.emit_te(_te_bf16_pairs, arg)
            out = bb.emit_output(relax.op.memory.view(words, [2, 2, 32, 16, 2], "bfloat16"))
        bb.emit_func_output(out)
    vm = relax.VirtualMachine(relax.build(bb.get(), target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(y)).numpy().view("uint16")
    want = y.astype(ml_dtypes.bfloat16).reshape(2, 32, 2, 2, 16).transpose(0, 3, 1, 4, 2).view("uint16")
    np.testing.assert_array_equal(got, want)


_CONVNET = (
    "    return torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1, stride=2), torch.nn.ReLU(),\n"
    "                               torch.nn.Conv2d(32, 32, 1), torch.nn.ReLU(),\n"
    "                               torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU()).eval()\n"
)


def test_a_networks_convolutions_go_to_bf16_with_vdpbf16ps_and_stay_float32_on_amx_tiles() -> None:
    """`vdpbf16ps` does twice fp32's products a cycle on a Zen 4 or 5, none more on AMX's Intel
    CPUs (ResNet-50's bf16 convolutions ran slower than its fp32 ones there): a convnet's blocked
    convolutions become packed bf16 ones for a `znver4` target and stay float32 for a
    `sapphirerapids` one."""
    import tvm

    from autosearch.networks.graph import import_network
    from autosearch.networks.inputs import InputSpec

    torch = pytest.importorskip("torch")
    namespace: dict[str, Any] = {"torch": torch}
    exec("def make():\n" + _CONVNET, namespace)  # the test's own model source
    net = namespace["make"]()
    x = np.random.default_rng(0).standard_normal((1, 16, 28, 28)).astype("float32")
    counts = {}
    for spec in (ZNVER4, SAPPHIRERAPIDS):
        target = tvm.target.Target(spec)
        g = import_network("convnet", net, [InputSpec("x", "float32", x.shape)], [x], target, precision="bf16")
        counts[spec["mcpu"]] = sum("conv2d_NCHWc_bf16" in wl.name for wl in g.workloads)
    assert counts == {"znver4": 2, "sapphirerapids": 0}, counts


# integration: a whole tune-model run in bf16 from the prior (~21 s on 2 cores)
@pytest.mark.integration
@needs_bf16
@pytest.mark.skipif(
    {"amx_tile", "amx_bf16"} <= _host_flags(), reason="on AMX tiles a network's convolutions stay float32"
)
@pytest.mark.usefixtures("no_pytorch_timing")
def test_tune_model_builds_a_convnet_in_bf16_with_tensorized_convolutions_and_winograd_that_match_pytorch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    s, err = _tune_model_bf16(
        capsys, tmp_path, _CONVNET, "x:float32:1,16,28,28"
    )  # 14 x 14 maps after the strided one: 7 x 7 ones stay direct
    assert s["precision"] == "bf16" and s["output_matches"], s
    names = [t["name"] for t in s["tasks"]]
    assert sum("conv2d_NCHWc_bf16" in n for n in names) == 2, names  # the strided 3x3 and the 1x1
    assert any("winograd_output" in n for n in names), names  # the stride-1 3x3: float32 Winograd
    assert 0 < s["relative_err"] < 2e-2
    assert "Tensorize failed" not in err  # a schedule that inlined the padding is refused quietly


def test_tune_refuses_a_precision_for_an_operator_it_does_not_cover(capsys: pytest.CaptureFixture[str]) -> None:
    from autosearch.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["tune", "resnet50/conv2d_nhwc/1x56x56x64/k3s1p1/64", "--precision", "bf16"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "covers dense layers" in err[0]


def test_every_sampled_schedule_of_a_networks_bf16_1x1_convolution_links_its_micro_kernel() -> None:
    """A network's 1x1 convolution in bf16 has no padding block, so the first block of its
    schedules is the weight's layout rewrite, which the builder removes
    (`RemoveWeightLayoutRewriteBlock`): the micro-kernel's IR, attached there, went with it, the
    library called an undefined `autosearch_dpbf16_16x2`, and loading it killed the runner's worker
    (154 of a 10-minute ResNet-50 run's 666 measurements). Every sampled schedule, built as the
    builder builds it, now runs the instruction with no call left to the kernel's symbol."""
    import torch
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from autosearch.backends.tvm.lowp import module_precision, space_generator
    from autosearch.networks.graph import import_network
    from autosearch.networks.inputs import InputSpec

    target = _target(ZNVER4)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 1), torch.nn.ReLU()).eval()
    x = np.random.default_rng(0).random((1, 32, 14, 14), dtype=np.float32)
    graph = import_network("c1", net, [InputSpec("x", "float32", x.shape)], [x], target, precision="bf16")
    (task,) = [w for w in graph.workloads if module_precision(w.mod()).name == "bf16"]
    mod = task.mod()
    ctx = ms.TuneContext(
        mod=mod, target=target, space_generator=space_generator(mod, target), search_strategy="replay-trace"
    )
    spaces = ctx.generate_design_space()
    ctx.pre_tuning(max_trials=12, num_trials_per_iter=12, design_spaces=spaces)
    schedules = [c.sch for c in ctx.generate_measure_candidates()]
    built = [RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod) for sch in schedules]
    assert built and all("pragma_import_llvm" in m.script() for m in built)  # the kernel's IR kept
    lib = tvm.compile(built[0], target=target).mod
    asm = (lib.imports[0] if lib.imports else lib).inspect_source("asm")
    assert "vdpbf16ps" in asm and "autosearch_dpbf16_16x2" not in asm  # inlined, no call left


def test_an_activation_range_maps_onto_uint8_with_zero_exact_and_weights_per_channel_onto_int8() -> None:
    from autosearch.networks.lowp import activation_quantization, weight_quantization

    assert activation_quantization(0.0, 2.55) == pytest.approx((0.01, 0))  # after a ReLU: all 256 steps
    scale, zero = activation_quantization(-1.0, 1.0)
    assert scale == pytest.approx(2 / 255) and zero == 128  # zero is the integer step 128: padding exact
    assert activation_quantization(0.5, 2.0) == pytest.approx((2 / 255, 0))  # widened to hold 0
    assert activation_quantization(0.0, 0.0) == (1.0, 0)  # a dead input: no division by zero
    w = np.zeros((2, 4, 3, 3, 16), dtype=np.float32)
    w[0, 1, 2, 0, 3], w[1, 0, 0, 0, 5], w[1, 2, 1, 1, 5] = -0.5, 2.0, 1.0
    q, scales = weight_quantization(w)
    assert q.dtype == np.int8 and scales.shape == (2, 16)
    assert q[0, 1, 2, 0, 3] == -127 and scales[0, 3] == pytest.approx(0.5 / 127)  # each channel's peak: 127
    assert q[1, 0, 0, 0, 5] == 127 and q[1, 2, 1, 1, 5] == 64 and scales[1, 5] == pytest.approx(2 / 127)
    assert scales[0, 0] == 1.0 and not q[0, :, :, :, 0].any()  # an all-zero channel


def _blocked_convolutions_module() -> object:
    """x (NCHW16c, 32 channels) scaled and shifted, then a padded 3x3 convolution (one group: int8),
    a depthwise one (int8 reads its input as uint8) and one into 8-channel blocks (stays fp32)."""
    from tvm import relax

    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 2, 8, 8, 16), "float32"))
    w = relax.const(rng.standard_normal((2, 32, 3, 3, 16)).astype("float32"))
    w8 = relax.const(rng.standard_normal((4, 32, 1, 1, 8)).astype("float32"))
    wd = relax.const(rng.standard_normal((2, 1, 3, 3, 16)).astype("float32"))
    blocked = {"data_layout": "NCHW16c", "kernel_layout": "OIHW16o", "out_layout": "NCHW16c"}
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(
                relax.op.subtract(relax.op.multiply(x, relax.const(np.float32(3.0))), relax.const(np.float32(1.0)))
            )
            a = bb.emit(relax.op.nn.conv2d(s, w, padding=1, **blocked))
            b = bb.emit(relax.op.nn.conv2d(s, w8, data_layout="NCHW16c", kernel_layout="OIHW8o", out_layout="NCHW8c"))
            c = bb.emit(relax.op.nn.conv2d(s, wd, padding=1, groups=32, **blocked))
            out = bb.emit_output(relax.Tuple([a, b, c]))
        bb.emit_func_output(out)
    return bb.get()


def test_calibration_observes_the_input_range_of_each_convolution_int8_computes() -> None:
    """The observers run in a real untuned build of the graph: the two convolutions int8 takes (the
    one-group and the depthwise one) get the exact range of their input (3x - 1) over every sample,
    the one it leaves is not observed; a NaN in a later sample (after finite ranges) is refused,
    naming the sample."""
    import tvm

    from autosearch.networks.calibration import input_ranges
    from autosearch.networks.graph import untuned_build
    from autosearch.networks.lowp import int8_candidate

    rng = np.random.default_rng(1)
    x = rng.random((1, 2, 8, 8, 16), dtype=np.float32)
    wide = 2.0 * rng.random((1, 2, 8, 8, 16), dtype=np.float32) - 0.5  # a second sample widens both ends
    target = tvm.target.Target("llvm")
    with target:
        one = input_ranges(_blocked_convolutions_module(), int8_candidate, [[x]], untuned_build(target))
        both = input_ranges(_blocked_convolutions_module(), int8_candidate, [[x], [wide]], untuned_build(target))
    s, w = 3.0 * x - 1.0, 3.0 * wide - 1.0
    assert len(one) == 2 and one[0] == one[1] == pytest.approx((s.min(), s.max()), rel=1e-6)
    assert both[0] == pytest.approx((min(s.min(), w.min()), max(s.max(), w.max())), rel=1e-6)
    assert both[0][0] < one[0][0] and both[0][1] > one[0][1]
    wide[0, 0, 0, 0, 0] = np.nan
    with target, pytest.raises(InputError, match="non-finite .* on calibration sample 1"):
        input_ranges(_blocked_convolutions_module(), int8_candidate, [[x], [wide]], untuned_build(target))


def test_an_observer_changes_no_value_of_the_graph_it_observes() -> None:
    """A flip reads its input back to front: given the observed tensor's storage for its output
    (the memory planner frees a tensor after its last reader, the observer), it overwrote what it
    still had to read. The observed graph, built untuned and run, computes what the plain one
    does, and the range after the flip is the flipped tensor's."""
    import tvm
    from tvm import relax

    from autosearch.networks.calibration import input_ranges
    from autosearch.networks.graph import untuned_build

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((64,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.multiply(x, relax.const(np.float32(2.0))))
            f = bb.emit(relax.op.flip(a, axis=0))
            out = bb.emit_output(relax.op.negative(f))
        bb.emit_func_output(out)
    mod = bb.get()
    xs = np.linspace(-1.0, 3.0, 64, dtype=np.float32)
    target = tvm.target.Target("llvm")
    built: list = []

    def build(probe: object) -> object:
        built.append(untuned_build(target)(probe))
        return built[-1]

    with target:
        chosen = lambda call: str(call.op.name) in ("relax.flip", "relax.negative")  # noqa: E731
        ranges = input_ranges(mod, chosen, [[xs]], build)
        got = relax.VirtualMachine(built[0], tvm.cpu())["main"](tvm.runtime.tensor(xs)).numpy()
    np.testing.assert_array_equal(got, -(2.0 * xs)[::-1])
    assert ranges == [pytest.approx((-2.0, 6.0)), pytest.approx((-2.0, 6.0))]


def test_a_samples_file_is_read_as_samples_of_each_input_and_bad_files_fail_in_one_line(tmp_path: Path) -> None:
    from autosearch.networks.inputs import InputSpec, load_samples

    image = InputSpec("x", "float32", (1, 3, 4, 4))
    rng = np.random.default_rng(0)
    stacked = rng.random((5, 1, 3, 4, 4))  # float64: cast to the input's dtype
    np.save(tmp_path / "stacked.npy", stacked)
    np.save(tmp_path / "batch.npy", stacked[:, 0])  # five images on the batch axis of a batch-1 input
    np.save(tmp_path / "one.npy", stacked[0])
    for name, count in [("stacked", 5), ("batch", 5), ("one", 1)]:
        samples = load_samples([str(tmp_path / f"{name}.npy")], [image])
        assert len(samples) == count and all(len(s) == 1 for s in samples)
        assert samples[0][0].dtype == np.float32 and samples[0][0].shape == image.shape
        np.testing.assert_allclose(samples[-1][0], stacked[count - 1], rtol=1e-6)
    ids = InputSpec("ids", "int64", (1, 8))
    np.save(tmp_path / "ids.npy", np.arange(16).reshape(2, 1, 8))
    np.save(tmp_path / "two.npy", stacked[:2])
    pairs = load_samples([f"ids={tmp_path / 'ids.npy'}", f"x={tmp_path / 'two.npy'}"], [image, ids])
    assert len(pairs) == 2 and [a.dtype for a in pairs[1]] == [np.float32, np.int64]  # in the inputs' order
    np.testing.assert_array_equal(pairs[1][1], np.arange(8, 16).reshape(1, 8))
    with pytest.raises(InputError, match="different sample counts .x 5, ids 2"):
        load_samples([f"ids={tmp_path / 'ids.npy'}", f"x={tmp_path / 'batch.npy'}"], [image, ids])
    bad_nan = stacked.copy()
    bad_nan[3, 0, 0, 0, 0] = np.nan
    np.save(tmp_path / "nan.npy", bad_nan)
    np.save(tmp_path / "shape.npy", stacked[:, :, :2])
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(tmp_path / "ints.npy", np.zeros((2, 1, 3, 4, 4), dtype=np.int32))
    np.savez(tmp_path / "archive.npz", x=stacked)
    (tmp_path / "corrupt.npy").write_bytes(b"\x93NUMPY garbage")
    cases = [
        (["nan.npy"], [image], "non-finite"),
        (["shape.npy"], [image], "holds shape 5x1x2x4x4; expected N x 1x3x4x4"),
        (["objects.npy"], [image], "cannot read .* as a .npy array"),
        (["ints.npy"], [image], "holds int32 values; the input is float32"),
        (["archive.npz"], [image], "an .npz archive"),
        (["corrupt.npy"], [image], "cannot read"),
        (["missing.npy"], [image], "cannot read"),
        (["one.npy"], [image, ids], "the model has 2 inputs"),
        (["y=one.npy"], [image], "NAME one of x"),
        ([f"x={tmp_path / 'one.npy'}"], [image, ids], "no samples for input ids"),
    ]
    for items, specs, message in cases:
        with pytest.raises(InputError, match=message):
            load_samples([i if "=" in i else str(tmp_path / i) for i in items], specs)


def test_a_networks_blocked_convolution_becomes_an_int8_one_padded_with_its_zero_point() -> None:
    import tvm

    from autosearch.backends.tvm.lowp import module_precision
    from autosearch.networks.lowp import int8_layers

    mod, count = int8_layers(_blocked_convolutions_module(), [(-1.0, 2.0), (-1.0, 2.0)])
    assert count == 2
    text = mod.script()
    assert text.count("R.nn.conv2d") == 1 and "conv2d_NCHWc_int8" in text and '"uint8"' in text
    assert "depthwise_conv2d_NCHWc_uint8" in text  # the depthwise one reads the uint8 copy itself
    # the fp32 convolution reads the input dequantized from its uint8 copy: one cast to uint8, one
    # back (and the int8 one's sums to float32)
    casts = re.findall(r"R\.astype\(\w+, dtype=\"(\w+)\"\)", text)
    assert sorted(casts) == ["float32", "float32", "uint8"], casts
    task = tvm.IRModule({"main": mod["conv2d_NCHWc_int8"]})
    assert module_precision(task).name == "int8"  # tuned in the VNNI design space
    packed_shape = ", ".join(f"T.int64({v})" for v in (2, 2, 3, 3, 4, 16, 4))  # (O/16, I/16, KH, KW, 16/4, 16, 4)
    assert f'T.Buffer(({packed_shape}), "int8")' in task.script()
    assert "T.uint8(85)" in task.script()  # the padding: zero's step, round(1 / (3 / 255))
    with pytest.raises(RuntimeError, match="3 calibrated"):
        int8_layers(_blocked_convolutions_module(), [(-1.0, 2.0), (-1.0, 2.0), (0.0, 1.0)])


def _stem_module(w: np.ndarray) -> object:
    """x (NCHW, 3 channels: no block divides them) shifted to signed values, then a padded,
    strided 7x7 convolution into NCHW16c by `w` (OIHW16o), as `layouts` leaves a ResNet's stem."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 12, 12), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(relax.op.subtract(x, relax.const(np.float32(0.25))))
            y = bb.emit(
                relax.op.nn.conv2d(
                    s, relax.const(w), strides=2, padding=3, kernel_layout="OIHW16o", out_layout="NCHW16c"
                )
            )
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def test_an_rgb_stem_becomes_an_int8_convolution_of_four_channels_within_its_quantization_steps() -> None:
    """The 3-channel stem reads its channels as one block of four (the fourth zero, and its weights
    zero), padded spatially with the zero point, in a real untuned build: it matches the same
    rounded operands convolved in float64 (the packed weight is (O/16, 1, KH, KW, 1, 16, 4))."""
    import torch
    import tvm

    from autosearch.networks.calibration import input_ranges
    from autosearch.networks.graph import untuned_build
    from autosearch.networks.lowp import activation_quantization, int8_candidate, int8_layers, weight_quantization

    rng = np.random.default_rng(6)
    w = rng.standard_normal((2, 3, 7, 7, 16)).astype("float32")  # 32 outputs, OIHW16o
    x = rng.random((1, 3, 12, 12), dtype=np.float32)
    target = tvm.target.Target("llvm")
    with target:
        ranges = input_ranges(_stem_module(w), int8_candidate, [[x]], untuned_build(target))
        assert ranges == [pytest.approx(((x - 0.25).min(), (x - 0.25).max()), rel=1e-6)]
        mod, count = int8_layers(_stem_module(w), ranges)
        assert count == 1
        task = mod["conv2d_NCHWc_int8"].script()
        packed = ", ".join(f"T.int64({v})" for v in (2, 1, 7, 7, 1, 16, 4))
        assert f'T.Buffer(({packed}), "int8")' in task, task
        got = tvm.relax.VirtualMachine(untuned_build(target)(mod), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()

    def conv(data: np.ndarray, weight_oihwo: np.ndarray) -> np.ndarray:
        oihw = torch.from_numpy(weight_oihwo.transpose(0, 4, 1, 2, 3).reshape(32, 3, 7, 7).astype(np.float64))
        y = torch.nn.functional.conv2d(torch.from_numpy(data.astype(np.float64)), oihw, stride=2, padding=3).numpy()
        return y.reshape(1, 2, 16, 6, 6).transpose(0, 1, 3, 4, 2)  # NCHW16c

    s = x - 0.25
    scale, zero_point = activation_quantization(float(s.min()), float(s.max()))
    assert 50 < zero_point < 70  # inside the range (about a quarter of it): the padding must hold it
    s_steps = (np.clip(np.round(s / scale) + zero_point, 0, 255) - zero_point) * scale
    wq, w_scale = weight_quantization(w)
    # the same rounded operands in float64: the int8 kernel's sums are exact, so only float32's
    # rescaling differs (a wrong zero point or padding is off by ~the weights' sum, ~1)
    emulated = conv(s_steps, wq * w_scale.reshape(2, 1, 1, 1, 16))
    np.testing.assert_allclose(got, emulated, atol=1e-4 * np.abs(emulated).max())
    assert np.abs(got - conv(s, w)).max() > 1e-3  # quantized: not the float32 convolution


def test_a_depthwise_convolution_in_int8_reads_the_uint8_copy_padded_with_its_zero_point() -> None:
    """The depthwise convolution reads its input's uint8 copy (a quarter of the bytes) and sums in
    float32: in a real untuned build it matches the input rounded to its uint8 steps convolved in
    float64 by the float weight, the padding zero (a padding of 0 in uint8 steps instead of the
    zero point, inside the range here, would be off at the image's border by ~60 steps x the
    weights)."""
    import torch
    import tvm

    from autosearch.networks.calibration import input_ranges
    from autosearch.networks.graph import untuned_build
    from autosearch.networks.lowp import activation_quantization, int8_candidate, int8_layers

    rng = np.random.default_rng(8)
    w = rng.standard_normal((2, 1, 3, 3, 16)).astype("float32")
    x = rng.random((1, 2, 9, 9, 16), dtype=np.float32)
    target = tvm.target.Target("llvm")
    with target:
        depthwise = _grouped_module(w, 32, chunks=2)  # 32 channels in 32 groups
        ranges = input_ranges(depthwise, int8_candidate, [[x]], untuned_build(target))
        mod, count = int8_layers(depthwise, ranges)
        assert count == 1 and "R.nn.conv2d" not in mod.script()
        assert '"uint8"' in mod["depthwise_conv2d_NCHWc_uint8"].script()
        got = tvm.relax.VirtualMachine(untuned_build(target)(mod), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()

    def depthwise(data: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(data.transpose(0, 1, 4, 2, 3).reshape(1, 32, 9, 9).astype(np.float64))
        oihw = torch.from_numpy(w.transpose(0, 4, 1, 2, 3).reshape(32, 1, 3, 3).astype(np.float64))
        y = torch.nn.functional.conv2d(t, oihw, stride=2, padding=1, groups=32).numpy()
        return y.reshape(1, 2, 16, 5, 5).transpose(0, 1, 3, 4, 2)  # NCHW16c

    s = x - 0.25
    scale, zero_point = activation_quantization(float(s.min()), float(s.max()))
    assert 50 < zero_point < 70  # inside the range: the padding must hold it
    steps = np.clip(np.round(s / scale) + zero_point, 0, 255)
    emulated = depthwise((steps - zero_point) * scale)
    np.testing.assert_allclose(got, emulated, atol=1e-4 * np.abs(emulated).max())
    assert np.abs(got - depthwise(s)).max() > 1e-3  # quantized: not the float32 convolution


def _grouped_module(w: np.ndarray, groups: int, chunks: int = 4) -> object:
    """x (NCHW16c, `chunks` x 16 channels) shifted to signed values, then a padded, strided 3x3
    convolution of `groups` groups by `w` (OIHW16o: (C_out/16, channels/groups, 3, 3, 16)), as
    `layouts` blocks RegNet's grouped convolutions (and, one group a channel, MobileNet's
    depthwise ones)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, chunks, 9, 9, 16), "float32"))
    blocked = {"data_layout": "NCHW16c", "kernel_layout": "OIHW16o", "out_layout": "NCHW16c"}
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(relax.op.subtract(x, relax.const(np.float32(0.25))))
            y = bb.emit(relax.op.nn.conv2d(s, relax.const(w), strides=2, padding=1, groups=groups, **blocked))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def test_a_grouped_convolution_of_whole_channel_blocks_becomes_an_int8_one_that_reads_only_its_groups_blocks() -> None:
    """Two groups of 32 channels (two 16-channel blocks each) into 32 outputs a group: the int8
    convolution's packed weight holds one group's input blocks, and in a real untuned build it
    matches the same rounded operands convolved group by group in float64; a convolution reading
    every group's input, or the wrong group's, is off by the weights' scale. Groups of 8 channels
    (no whole 16-channel block) stay float32."""
    import torch
    import tvm

    from autosearch.backends.tvm.lowp import module_precision
    from autosearch.networks.calibration import input_ranges
    from autosearch.networks.graph import untuned_build
    from autosearch.networks.lowp import activation_quantization, int8_candidate, int8_layers, weight_quantization

    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 32, 3, 3, 16)).astype("float32")  # 64 outputs in 2 groups of 32 inputs
    x = rng.random((1, 4, 9, 9, 16), dtype=np.float32)
    target = tvm.target.Target("llvm")
    with target:
        ranges = input_ranges(_grouped_module(w, 2), int8_candidate, [[x]], untuned_build(target))
        mod, count = int8_layers(_grouped_module(w, 2), ranges)
        assert count == 1
        task = tvm.IRModule({"main": mod["conv2d_NCHWc_int8"]})
        assert module_precision(task).name == "int8"
        packed = ", ".join(f"T.int64({v})" for v in (4, 2, 3, 3, 4, 16, 4))  # (O/16, I/groups/16, KH, KW, 16/4, 16, 4)
        assert f'T.Buffer(({packed}), "int8")' in task.script()
        got = tvm.relax.VirtualMachine(untuned_build(target)(mod), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        eights = _grouped_module(rng.standard_normal((4, 8, 3, 3, 16)).astype("float32"), 8)
        assert int8_layers(eights, [])[1] == 0

    def nchwc(data: np.ndarray) -> np.ndarray:
        return data.transpose(0, 1, 4, 2, 3).reshape(1, 64, 9, 9)

    def conv(data: np.ndarray, weight_oihwo: np.ndarray, groups: int) -> np.ndarray:
        oihw = weight_oihwo.transpose(0, 4, 1, 2, 3).reshape(64, 32, 3, 3).astype(np.float64)
        if groups == 1:  # every output reads all 64 inputs: the group's weights tiled over both
            oihw = np.concatenate([oihw, oihw], axis=1)
        t = torch.from_numpy(nchwc(data).astype(np.float64))
        y = torch.nn.functional.conv2d(t, torch.from_numpy(oihw), stride=2, padding=1, groups=groups).numpy()
        return y.reshape(1, 4, 16, 5, 5).transpose(0, 1, 3, 4, 2)  # NCHW16c

    s = x - 0.25
    scale, zero_point = activation_quantization(float(s.min()), float(s.max()))
    s_steps = (np.clip(np.round(s / scale) + zero_point, 0, 255) - zero_point) * scale
    wq, w_scale = weight_quantization(w)
    weights = wq * w_scale.reshape(4, 1, 1, 1, 16)
    emulated = conv(s_steps, weights, 2)
    np.testing.assert_allclose(got, emulated, atol=1e-4 * np.abs(emulated).max())
    assert np.abs(got - conv(s, w, 2)).max() > 1e-3  # quantized: not the float32 convolution
    swapped = np.concatenate([s_steps[:, 2:], s_steps[:, :2]], axis=1)  # each group reading the other's blocks
    for wrong in (conv(s_steps, weights, 1), conv(swapped, weights, 2)):
        assert np.abs(got - wrong).max() > 0.1 * np.abs(emulated).max()


def _dense_layers_module(w: np.ndarray, w_odd: np.ndarray) -> object:
    """x (1, 8, 32), signed, times `w` (32 x 48: int8) and times `w_odd` (32 x 40: 40 outputs are
    no whole 16-lane blocks, so it stays fp32 and reads x dequantized), and a matmul of two
    activations (fp32)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 32), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            s = bb.emit(
                relax.op.subtract(relax.op.multiply(x, relax.const(np.float32(2.0))), relax.const(np.float32(1.0)))
            )
            a = bb.emit(relax.op.matmul(s, relax.const(w)))
            b = bb.emit(relax.op.matmul(s, relax.const(w_odd)))
            c = bb.emit(relax.op.matmul(s, relax.op.permute_dims(s, [0, 2, 1])))
            out = bb.emit_output(relax.Tuple([a, b, c]))
        bb.emit_func_output(out)
    return bb.get()


def test_a_networks_dense_layer_becomes_an_int8_one_that_computes_it_within_its_quantization_step() -> None:
    """Calibrated on the input it is run on, the int8 dense layer (u8 activations with a zero
    point, per-output-channel int8 weights, int32 sums, the zero point's share taken off) is within
    a few quantization steps of the float32 product in a real untuned build; the fp32 matmul that
    reads the same input reads it dequantized, within half a step of each input."""
    import tvm

    from autosearch.backends.tvm.lowp import module_precision
    from autosearch.networks.calibration import input_ranges
    from autosearch.networks.graph import untuned_build
    from autosearch.networks.lowp import int8_candidate, int8_layers

    rng = np.random.default_rng(4)
    w, w_odd = rng.standard_normal((32, 48)).astype("float32"), rng.standard_normal((32, 40)).astype("float32")
    x = rng.random((1, 8, 32), dtype=np.float32)
    target = tvm.target.Target("llvm")
    with target:
        ranges = input_ranges(_dense_layers_module(w, w_odd), int8_candidate, [[x]], untuned_build(target))
        assert ranges == [pytest.approx(((2 * x - 1).min(), (2 * x - 1).max()), rel=1e-6)]  # the int8 one only
        mod, count = int8_layers(_dense_layers_module(w, w_odd), ranges)
        assert count == 1
        text = mod.script()
        assert "dense_packed_int8" in text and text.count("R.matmul") == 2
        task = tvm.IRModule({"main": mod["dense_packed_int8"]})
        assert module_precision(task).name == "int8"  # tuned in the VNNI design space
        assert (
            'T.Buffer((T.int64(3), T.int64(8), T.int64(16), T.int64(4)), "int8")' in task.script()
        )  # (N/16, K/4, 16, 4)
        vm = tvm.relax.VirtualMachine(untuned_build(target)(mod), tvm.cpu())
        a, b, c = (o.numpy() for o in vm["main"](tvm.runtime.tensor(x)))
    s = 2 * x - 1
    step = (s.max() - s.min()) / 255  # one input step; the weights' is each channel's peak / 127
    bound = step * np.abs(w).sum(axis=0) + np.abs(s).sum(axis=-1, keepdims=True) * np.abs(w).max(axis=0) / 127
    assert (np.abs(a - s @ w) <= bound).all() and np.abs(a - s @ w).max() > 0  # quantized, and within its steps
    assert np.abs(b - s @ w_odd).max() <= 0.5 * step * np.abs(w_odd).sum(axis=0).max() + 1e-5
    np.testing.assert_allclose(c, s @ s.transpose(0, 2, 1), atol=step * 32)


# integration: a tune-model run in int8 with its prior pass and a measured round (~25 s)
@pytest.mark.integration
@needs_vnni
@pytest.mark.usefixtures("no_pytorch_timing")
def test_tune_model_builds_a_transformer_mlp_in_int8_with_vnni_dense_layers_that_match_pytorch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A pre-norm MLP block (LayerNorm, Linear 64 -> 128, GELU, Linear 128 -> 64, residual add):
    both Linear layers in int8 on VNNI, calibrated on 8 samples and checked on a 9th."""
    samples = np.random.default_rng(5).standard_normal((9, 16, 64)).astype(np.float32)
    s, err = _tune_model_int8(
        capsys,
        tmp_path,
        "    class Block(torch.nn.Module):\n"
        "        def __init__(self):\n"
        "            super().__init__()\n"
        "            self.norm = torch.nn.LayerNorm(64)\n"
        "            self.up = torch.nn.Linear(64, 128)\n"
        "            self.down = torch.nn.Linear(128, 64)\n"
        "        def forward(self, x):\n"
        "            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))\n"
        "    return Block().eval()\n",
        "x:float32:16,64",
        samples,
    )
    assert s["precision"] == "int8" and s["output_matches"] and s["calibration_samples"] == 8, s
    names = [t["name"] for t in s["tasks"]]
    assert sum("dense_packed_int8" in n for n in names) == 2, names
    assert 0 < s["relative_err"] < 2e-2, s["relative_err"]
    assert "Tensorize failed" not in err


# integration: a tune-model run in int8 with its prior pass and a measured round (~40 s)
@pytest.mark.integration
@needs_vnni
@pytest.mark.usefixtures("no_pytorch_timing")
def test_tune_model_builds_a_convnet_in_int8_with_vnni_convolutions_that_match_pytorch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Signed inputs (a zero point inside the range: a calibration set of 16 normal samples, the
    checked input a 17th; with 3 the held-out one outran the calibrated ranges: 1.1e-1 of scale) through padded, strided and 1x1 convolutions and a residual add that
    reads its input dequantized: a wrong padding value or zero-point correction is off by ~the
    input's scale, far past this. The check ran on the given input: its output's scale is PyTorch's
    on that input."""
    import torch

    samples = np.random.default_rng(3).standard_normal((17, 1, 16, 14, 14)).astype(np.float32)
    s, err = _tune_model_int8(
        capsys,
        tmp_path,
        "    class Block(torch.nn.Module):\n"
        "        def __init__(self):\n"
        "            super().__init__()\n"
        "            self.a = torch.nn.Conv2d(16, 32, 3, padding=1, stride=2)\n"
        "            self.b = torch.nn.Conv2d(32, 32, 1)\n"
        "            self.c = torch.nn.Conv2d(32, 32, 3, padding=1)\n"
        "        def forward(self, x):\n"
        "            y = torch.relu(self.a(x))\n"
        "            return torch.relu(self.c(self.b(y)) + y)\n"
        "    return Block().eval()\n",
        "x:float32:1,16,14,14",
        samples,
    )
    assert s["precision"] == "int8" and s["output_matches"] and s["calibration_samples"] == 16, s
    namespace: dict = {}
    exec(compile((tmp_path / "net.py").read_text(), "net.py", "exec"), namespace)  # the test's own model file
    with torch.no_grad():
        scale = float(namespace["make_model"]()(torch.from_numpy(samples[16])).abs().max())
    assert s["output_scale"] == pytest.approx(scale, rel=1e-6)
    names = [t["name"] for t in s["tasks"]]
    assert sum("conv2d_NCHWc_int8" in n for n in names) == 3, names  # every one, the 3x3s direct
    assert not any("winograd" in n for n in names), names
    assert 0 < s["relative_err"] < 2e-2, s["relative_err"]
    assert "Tensorize failed" not in err


# integration: a whole tune-model run in int8, calibrated and tuned (~13 s on 2 cores)
@pytest.mark.integration
@needs_vnni
@pytest.mark.usefixtures("no_pytorch_timing")
def test_tune_model_builds_an_rgb_stem_in_int8_as_a_tuned_vnni_convolution_that_matches_pytorch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """ResNet's stem (7x7, stride 2, 3 channels read as one block of four) through tune-model in
    int8: tuned, tensorized and checked on a held-out 9th sample (its error 2.4e-2 of scale; a wrong kernel is off by ~1)."""
    samples = np.random.default_rng(7).standard_normal((9, 1, 3, 32, 32)).astype(np.float32)
    s, err = _tune_model_int8(
        capsys,
        tmp_path,
        "    return torch.nn.Sequential(torch.nn.Conv2d(3, 32, 7, stride=2, padding=3), torch.nn.ReLU()).eval()\n",
        "x:float32:1,3,32,32",
        samples,
    )
    assert s["precision"] == "int8" and s["output_matches"] and s["calibration_samples"] == 8, s
    names = [t["name"] for t in s["tasks"]]
    assert sum("conv2d_NCHWc_int8" in n for n in names) == 1 and not any("NCHW_NCHWc" in n for n in names), names
    assert 0 < s["relative_err"] < 4e-2, s["relative_err"]
    assert "Tensorize failed" not in err


@needs_vnni
def test_int8_leaves_a_3x3_convolution_it_cannot_take_to_winograd_and_takes_the_others_direct() -> None:
    """A 3x3 convolution whose output is no whole 16-lane block (24 channels: NCHW8c) stays float32,
    so it keeps the fp32 build's Winograd; the 32-channel one computes in int8, direct. (Without
    Winograd, PP-OCRv4's two 96 -> 24 head convolutions ran 5.5 and 6.8 ms direct in int8's build.)"""
    import torch

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.graph import import_network
    from autosearch.networks.inputs import InputSpec

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 24, 3, padding=1)
    ).eval()
    x = np.random.default_rng(0).random((1, 16, 14, 14), dtype=np.float32)
    graph = import_network("c3", net, [InputSpec("x", "float32", x.shape)], [x], host_target(), precision="int8")
    names = [w.name for w in graph.workloads]
    assert sum("conv2d_NCHWc_int8" in n for n in names) == 1, names
    assert any("winograd" in n for n in names), names


@pytest.mark.parametrize(("precision", "steps", "instruction"), [("int8", 4, "vpdpbusd"), ("bf16", 8, "vdpbf16ps")])
def test_a_networks_convolution_sums_a_whole_channel_block_a_kernel_call(
    precision: str, steps: int, instruction: str
) -> None:
    """The convolutions' kernel runs one instruction for each `depth` channels of a 16-channel block
    and loads and stores its 16 sums once a call (one step a call stored them every instruction);
    the dense layers keep the one-step kernel. Compiled for a CPU with the instructions. A grouped
    convolution of two 16-channel groups is tensorized alike in int8 (bf16 leaves it to Winograd)."""
    import torch
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from autosearch.backends.tvm.lowp import get_precision, kernel_of, space_generator
    from autosearch.networks.graph import import_network
    from autosearch.networks.inputs import InputSpec
    from autosearch.workloads import get_workload
    from autosearch.workloads.lowp import with_precision

    target = _target(ZNVER4)
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 1), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1, groups=2)
    ).eval()
    x = np.random.default_rng(0).random((1, 16, 14, 14), dtype=np.float32)
    graph = import_network("c1", net, [InputSpec("x", "float32", x.shape)], [x], target, precision=precision)
    mods = [w.mod() for w in graph.workloads if f"conv2d_NCHWc_{precision}" in w.name]
    assert len(mods) == (2 if precision == "int8" else 1), [w.name for w in graph.workloads]
    dense = with_precision(get_workload("bert/dense/128x768/768"), precision).mod()
    assert kernel_of(dense, get_precision(precision)).steps == 1
    for mod in mods:
        kernel = kernel_of(mod, get_precision(precision))
        assert kernel.steps == steps and kernel.intrin.endswith(f"_x{steps}")
        assert kernel.ir().count("call <16 x") == steps and kernel.ir().count("store ") == 1
        ctx = ms.TuneContext(
            mod=mod, target=target, space_generator=space_generator(mod, target), search_strategy="replay-trace"
        )
        ctx.pre_tuning(max_trials=4, num_trials_per_iter=4, design_spaces=ctx.generate_design_space())
        schedules = [c.sch for c in ctx.generate_measure_candidates()]
        assert schedules and all(kernel.symbol in s.mod.script() for s in schedules)  # tensorized with it
        built = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(schedules[0].mod)
        lib = tvm.compile(built, target=target).mod
        asm = (lib.imports[0] if lib.imports else lib).inspect_source("asm")
        assert instruction in asm and kernel.symbol not in asm  # inlined
