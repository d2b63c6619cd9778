"""The deployment-runtime arms of `bench/network.py` (`autosearch.networks.runtimes`): a small
PyTorch model exported to ONNX runs through ONNX Runtime and OpenVINO f32 with the output checked
against eager, a failing runtime is its arm's one-line reason, and the one harness times every arm
(ours, a Relax VM build, included) interleaved round by round with a median per arm."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load_script

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime", reason="the [bench] extra (onnxruntime) is not installed")
pytest.importorskip("openvino", reason="the [bench] extra (openvino) is not installed")

from autosearch.networks import runtimes  # noqa: E402
from autosearch.networks.inputs import example_arrays, parse_inputs  # noqa: E402

SPECS = parse_inputs(["x:float32:4,16"])


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    arrays = example_arrays(SPECS, 0)
    with torch.no_grad():
        expected = [net(torch.from_numpy(arrays[0])).numpy()]
    return net, arrays, expected


@pytest.fixture(scope="module")
def arms(tiny, tmp_path_factory):
    net, arrays, expected = tiny
    return runtimes.runtime_arms(net, SPECS, arrays, expected, 1, tmp_path_factory.mktemp("onnx"))


def test_onnxruntime_and_openvino_f32_match_eager(arms, tiny):
    by = {a.name: a for a in arms}
    assert set(by) == {runtimes.ONNXRUNTIME, runtimes.OPENVINO_F32, runtimes.OPENVINO_DEFAULT}
    _, _, expected = tiny
    for name in (runtimes.ONNXRUNTIME, runtimes.OPENVINO_F32):
        arm = by[name]
        assert arm.error is None and arm.call is not None, arm.error
        assert arm.ok, arm.check
        assert arm.exporter == "torchscript"
        got = np.asarray(arm.call()[0])  # a real call, not the stored verdict
        assert np.abs(got - expected[0]).max() <= 1e-5 * np.abs(expected[0]).max()
    assert by[runtimes.OPENVINO_F32].precision == "f32"
    # the default arm reads back what OpenVINO chose (bf16 on AMX/AVX512_BF16 CPUs, f32 elsewhere)
    assert by[runtimes.OPENVINO_DEFAULT].precision in {"f32", "bf16", "f16"}


def test_a_model_no_runtime_can_read_is_each_arms_one_line_reason(tiny, tmp_path):
    net, arrays, expected = tiny
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not an onnx model")
    out = runtimes.runtime_arms(net, SPECS, arrays, expected, 1, tmp_path, onnx_path=bad)
    assert [a.name for a in out] == [runtimes.ONNXRUNTIME, runtimes.OPENVINO_F32, runtimes.OPENVINO_DEFAULT]
    for arm in out:
        assert arm.call is None and arm.latency is None
        assert arm.error and "\n" not in arm.error


def test_a_mismatching_output_is_not_ok(tiny, arms):
    _, _, expected = tiny
    wrong = [e + 1.0 for e in expected]
    arm = runtimes.build_arm("wrong", lambda: (lambda: [wrong[0]], None), expected)
    assert arm.ok is False and "MISMATCH" in (arm.check or "")
    table = {
        runtimes.ONNXRUNTIME: {"latency": 2.0, "ok": True},
        runtimes.OPENVINO_F32: {"latency": 1.0, "ok": False},  # fast but wrong: never the baseline
        runtimes.OPENVINO_DEFAULT: {"latency": 0.5, "ok": True},  # maybe bf16: never the fp32 baseline
        "ours": {"latency": 0.1, "ok": True},
    }
    assert runtimes.best_fp32_baseline(table) == (runtimes.ONNXRUNTIME, 2.0)


def _relax_add_one():
    """A one-operator Relax build, the kind of executable ours is."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.add(x, relax.const(1.0, "float32")))
        bb.emit_func_output(y)
    return tvm.compile(bb.get(), target="llvm")


def test_the_harness_interleaves_every_arm_and_returns_a_median_each(arms, tiny):
    net, arrays, expected = tiny
    eager = runtimes.eager_arm(net, arrays, expected)
    assert eager.ok
    x = np.random.default_rng(0).random((4, 8), dtype=np.float32)
    ours = runtimes.tvm_arm("ours", _relax_add_one(), [x], [x + 1.0])
    assert ours.ok, ours.error or ours.check
    order: list[str] = []

    def recorder(name, fn):
        def call():
            order.append(name)
            return fn()

        return call

    calls = {a.name: recorder(a.name, a.call) for a in [eager, *arms, ours] if a.call}
    med = runtimes.interleaved_medians(calls, rounds=3, min_round_s=0.01)
    assert set(med) == set(calls) and all(v > 0 for v in med.values())
    # each round runs every arm in turn (one untimed call and then its timed loop), in the same order
    runs = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    assert runs == list(calls) * 3


def test_the_median_is_of_rounds_at_least_min_round_s_long():
    now = [0.0]
    per_call = iter([0.001] * 1000)

    def clock():
        return now[0]

    def call():
        now[0] += next(per_call)

    med = runtimes.interleaved_medians({"a": call}, rounds=2, min_round_s=0.05, clock=clock)
    assert med["a"] == pytest.approx(0.001)
    # 2 rounds of (1 untimed + >= 50 timed) calls
    assert 1000 - sum(1 for _ in per_call) >= 2 * 51


def test_an_openvino_error_is_told_by_its_reason_not_by_the_source_line_that_raised_it(tmp_path) -> None:
    """OpenVINO heads its messages with "Exception from <file>:<line>:" per level; the bench's
    one-line reason showed only that (EfficientNet-B0's arm: "Exception from .../core.cpp:84:")."""
    import openvino as ov

    from autosearch.errors import one_line

    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08not an onnx model")
    with pytest.raises(Exception) as caught:
        ov.Core().read_model(str(bad))
    line = one_line(caught.value)
    assert "Exception from" not in line and "Unable to read the model" in line
    assert one_line(RuntimeError("compile failed:\n  the reason\n  backtrace")) == "compile failed: the reason"


def test_a_model_openvino_cannot_convert_names_the_operator_and_why(tmp_path) -> None:
    """transformers' EfficientNet pools with an AvgPool2d whose kernel (its width, 1280) exceeds
    the 7x7 map, which PyTorch takes with ceil_mode and OpenVINO's ONNX frontend refuses; the
    arm's reason names the operator, not the source lines of OpenVINO that raised it."""
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), torch.nn.AvgPool2d(16, ceil_mode=True)).eval()
    specs = parse_inputs(["x:float32:1,3,7,7"])
    arrays = example_arrays(specs, 0)
    with torch.no_grad():
        expected = [net(torch.from_numpy(arrays[0])).numpy()]
    out = {a.name: a for a in runtimes.runtime_arms(net, specs, arrays, expected, 1, tmp_path)}
    assert out[runtimes.ONNXRUNTIME].ok, out[runtimes.ONNXRUNTIME].error  # the model itself runs
    reason = out[runtimes.OPENVINO_F32].error or ""
    assert "OpenVINO cannot convert AveragePool" in reason and "Exception from" not in reason, reason


def test_onnxruntime_int8_quantizes_the_model_statically_and_is_held_to_the_int8_tolerance(tiny, tmp_path):
    """The int8 arm runs the model `quantize_static` wrote (QDQ), not the float one: its output
    differs from eager by int8 rounding, within the int8 tolerance, and it says it computes in int8."""
    from autosearch.networks.check import PRECISION_RTOL

    net, arrays, expected = tiny
    out = {a.name: a for a in runtimes.runtime_arms(net, SPECS, arrays, expected, 1, tmp_path, int8=True)}
    arm = out[runtimes.ONNXRUNTIME_INT8]
    assert arm.error is None and arm.call is not None, arm.error
    assert arm.precision == "int8" and (tmp_path / "model.int8.onnx").is_file()
    assert arm.ok and 1e-6 < arm.relative_err < PRECISION_RTOL["int8"], arm.check
    got = np.asarray(arm.call()[0])
    assert np.abs(got - expected[0]).max() > 1e-5 * np.abs(expected[0]).max()  # not the float model


def test_onnxruntime_int8_calibrates_on_the_set_it_is_given(tiny, tmp_path):
    """Calibrated on a set ten times wider than the input, the int8 steps are ten times coarser:
    the error on the input grows (the arm read the set, not the input)."""
    net, arrays, expected = tiny
    own = runtimes.runtime_arms(net, SPECS, arrays, expected, 1, tmp_path / "own", int8=True)[-1]
    wide = [[10.0 * arrays[0]], [-10.0 * arrays[0]]]
    coarse = runtimes.runtime_arms(net, SPECS, arrays, expected, 1, tmp_path / "wide", int8=True, calibration=wide)[-1]
    assert own.name == coarse.name == runtimes.ONNXRUNTIME_INT8 and own.call and coarse.call, (own.error, coarse.error)
    assert coarse.relative_err > 3 * own.relative_err, (coarse.relative_err, own.relative_err)


def test_compare_runtimes_runs_and_checks_every_arm_on_the_arrays_given(tmp_path):
    """`arrays` replaces the random example inputs: eager's output is checked against the model's
    output on them (a scale 100x the random input's)."""
    (tmp_path / "net.py").write_text(
        "import torch\ndef make():\n    torch.manual_seed(0)\n    return torch.nn.Linear(16, 8).eval()\n"
    )
    given = [100.0 * example_arrays(SPECS, 5)[0]]
    arms = runtimes.compare_runtimes(
        f"{tmp_path / 'net.py'}:make",
        SPECS,
        threads=1,
        work=tmp_path,
        arrays=given,
        compile_arm=False,
        runtimes=False,
        rounds=1,
        min_round_s=0.01,
    )
    eager = arms[runtimes.EAGER]
    assert eager.ok and eager.latency and eager.latency > 0
    torch.manual_seed(0)
    with torch.no_grad():
        scale = float(torch.nn.Linear(16, 8)(torch.from_numpy(given[0])).abs().max())
    assert f"scale {scale:.2e}" in eager.check, eager.check


def test_a_build_given_to_the_benchmark_is_checked_at_the_precision_its_manifest_records(tmp_path) -> None:
    """`bench/network.py --build LABEL=DIR`: a bf16 build is held to bf16's tolerance (read from
    its `model.json`), not fp32's (it showed as wrong at 5e-3); ours tuned in the run at the run's
    precision; TVM's own builds (of the fp32 graph) at fp32; a folder without a manifest at the
    run's precision."""
    import json

    bench = load_script("bench/network.py", "bench_network")
    built, bare = tmp_path / "bf16", tmp_path / "bare"
    built.mkdir()
    bare.mkdir()
    (built / "model.json").write_text(json.dumps({"summary": {"precision": "bf16"}}))
    elsewhere = {"built_elsewhere": True}
    assert bench.build_precision("before", str(built / "model.so"), elsewhere, "fp32") == "bf16"
    assert bench.build_precision("before", str(bare / "model.so"), elsewhere, "int8") == "int8"
    assert bench.build_precision("ours 10 min", "x.so", {}, "bf16") == "bf16"
    assert bench.build_precision("tvm tune_relax", "x.so", {}, "bf16") == "fp32"
