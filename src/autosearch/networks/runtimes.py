"""The deployment runtimes a user would otherwise ship a model with, and one harness that times
them beside ours: PyTorch eager, `torch.compile` (inductor), ONNX Runtime (CPU provider, every
graph optimisation) and OpenVINO (f32 forced, and its default precision), all from the same model,
on the same inputs and threads, each output checked against PyTorch relative to its scale
(`autosearch.networks.check`).

Why one harness for every arm: a ratio of two figures taken by two different timers (TVM's
`time_evaluator` in C++, a PyTorch loop in Python, `tune-model`'s own end-to-end figure) measures
the timers as much as the systems. `interleaved_medians` times every arm alike: a Python loop of
calls for at least `MIN_ROUND_S` a round, `ROUNDS` rounds with the arms interleaved round by round
(a slow phase of the machine then hits every arm, not one), the median round per arm.

Why OpenVINO twice: on a CPU with AVX512_BF16 or AMX OpenVINO runs float32 models in bfloat16 by
default, which is a different computation; the f32 arm forces `INFERENCE_PRECISION_HINT=f32` and is
the one compared as a float32 baseline, the default arm is reported beside it with the precision
read back from the compiled model.

Why the arms run in a fresh process (`compare_runtimes_isolated`): a tuning process keeps TVM's
and XGBoost's thread pools alive, and PyTorch timed beside them measures the contention
(`autosearch.reference.run_isolated`). A fresh process that loads every arm, ours as an exported
library, times all of them as a user would run each, and still interleaves them. Every runtime
there gets the same thread count (PyTorch's intra-op threads, ONNX Runtime's and OpenVINO's thread
settings, TVM's runtime pool); one untimed call opens each round so the previous arm's pool has
gone idle before the clock starts.

A model that cannot be exported or compiled (an operator the ONNX exporter lacks, inductor
failing) makes that arm a one-line reason, never a failure of the comparison.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autosearch.errors import one_line
from autosearch.networks.check import PRECISION_RTOL, RTOL, compare_outputs, flatten_outputs
from autosearch.networks.inputs import InputSpec

__all__ = [
    "EAGER",
    "FP32_BASELINES",
    "MIN_ROUND_S",
    "ONNXRUNTIME",
    "ONNXRUNTIME_INT8",
    "OPENVINO_DEFAULT",
    "OPENVINO_F32",
    "ROUNDS",
    "TORCH_COMPILE",
    "Arm",
    "best_fp32_baseline",
    "build_arm",
    "compare_runtimes",
    "compare_runtimes_isolated",
    "eager_arm",
    "export_onnx",
    "interleaved_medians",
    "onnx_quantized",
    "onnxruntime_arm",
    "onnxruntime_int8_arm",
    "openvino_arm",
    "runtime_arms",
    "set_threads",
    "torch_compile_arm",
    "tvm_arm",
]

#: Rounds of the interleaved harness and the shortest round: short enough for a benchmark of a few
#: models, long enough that a round of a millisecond model is hundreds of calls.
ROUNDS = 7
MIN_ROUND_S = 0.3

EAGER = "PyTorch eager"
TORCH_COMPILE = "torch.compile"
ONNXRUNTIME = "ONNX Runtime"
ONNXRUNTIME_INT8 = "ONNX Runtime int8"
OPENVINO_F32 = "OpenVINO f32"
OPENVINO_DEFAULT = "OpenVINO default"
#: The arms a float32 comparison takes its best baseline from: never OpenVINO's default, which may
#: compute in bfloat16.
FP32_BASELINES = (EAGER, TORCH_COMPILE, ONNXRUNTIME, OPENVINO_F32)

#: ONNX opset of the TorchScript exporter: one every ONNX Runtime and OpenVINO release here reads.
OPSET = 17


@dataclass
class Arm:
    """One system under the harness. `call` runs the model once on the example inputs (None when the
    arm could not be set up: `error` says why, in one line); `check` is the output check against
    PyTorch, `ok` its verdict; `setup_s` the export and compile seconds; `precision` what the
    runtime computes in, where it chooses; `latency` the harness's median seconds a call;
    `exporter` the ONNX exporter an ONNX-fed arm's model came from; `relative_err` the output's
    largest error relative to its scale (low precisions are compared by it)."""

    name: str
    call: Callable[[], Any] | None = None
    check: str | None = None
    ok: bool | None = None
    error: str | None = None
    setup_s: float | None = None
    precision: str | None = None
    latency: float | None = None
    exporter: str | None = None
    relative_err: float | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("call")
        return d


def build_arm(
    name: str,
    setup: Callable[[], tuple[Callable[[], Any], str | None]],
    expected: Sequence[np.ndarray] | None,
    rtol: float | None = None,
) -> Arm:
    """An arm from `setup` (returning the call and the precision, or raising): set up, called once,
    its output checked against `expected` within `rtol` of its scale (None: the tolerance of the
    precision the arm computes in, so OpenVINO's default bf16 is held to what a bf16 build is;
    skipped when `expected` is None). Any exception becomes `error`."""
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call, precision = setup()
            out = call()  # a lazy runtime (inductor) compiles here: counted in setup_s
    except Exception as exc:
        return Arm(name, error=f"{type(exc).__name__}: {one_line(exc)}")
    arm = Arm(name, call=call, setup_s=time.perf_counter() - t0, precision=precision)
    if expected is not None:
        try:
            tol = rtol if rtol is not None else PRECISION_RTOL.get(precision or "", RTOL)
            check = compare_outputs(flatten_outputs(out), list(expected), tol)
            arm.check, arm.ok, arm.relative_err = check.describe(), check.ok, check.relative_err
        except Exception as exc:
            arm.check, arm.ok = f"cannot compare outputs: {one_line(exc)}", False
    return arm


def set_threads(threads: int) -> None:
    """This process's PyTorch and TVM kernels run on `threads` threads (ONNX Runtime and OpenVINO
    take theirs at session creation). Call it before the first kernel: TVM's pool never grows."""
    import torch
    import tvm  # noqa: F401  (registers the runtime's thread-pool function)

    from autosearch.backends.tvm.target import set_runtime_threads

    torch.set_num_threads(threads)
    set_runtime_threads(threads)


def _torch_inputs(arrays: Sequence[np.ndarray]) -> list[Any]:
    import torch

    return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]


def eager_arm(net: Any, arrays: Sequence[np.ndarray], expected: Sequence[np.ndarray] | None) -> Arm:
    """PyTorch eager, no autograd."""
    import torch

    xs = _torch_inputs(arrays)

    def setup() -> tuple[Callable[[], Any], str | None]:
        def call() -> Any:
            with torch.inference_mode():
                return net(*xs)

        return call, "f32"

    return build_arm(EAGER, setup, expected)


def torch_compile_arm(net: Any, arrays: Sequence[np.ndarray], expected: Sequence[np.ndarray] | None) -> Arm:
    """`torch.compile` (inductor, default mode); its compile time is the first call's, in `setup_s`."""
    import torch

    xs = _torch_inputs(arrays)

    def setup() -> tuple[Callable[[], Any], str | None]:
        compiled = torch.compile(net)

        def call() -> Any:
            with torch.no_grad():
                return compiled(*xs)

        return call, "f32"

    return build_arm(TORCH_COMPILE, setup, expected)


def export_onnx(net: Any, arrays: Sequence[np.ndarray], path: str | Path, names: Sequence[str] | None = None) -> str:
    """`net` written to `path` as ONNX by `torch.onnx.export`; returns the exporter that succeeded.

    The TorchScript exporter (`dynamo=False`, opset `OPSET`) first: it exports the zoo's models
    without the extra `onnxscript` package and in about half the time; the dynamo exporter (torch's
    default, needs `onnxscript`) second, for a model the first cannot trace. Both failing raises
    the first exporter's error."""
    import torch

    xs = tuple(_torch_inputs(arrays))
    kw: dict[str, Any] = {"input_names": list(names)} if names else {}
    with _quiet():
        try:
            torch.onnx.export(net, xs, str(path), dynamo=False, opset_version=OPSET, **kw)
            return "torchscript"
        except Exception as first:
            try:
                import onnxscript  # noqa: F401
            except ImportError:
                raise first from None
            try:
                program = torch.onnx.export(net, xs, dynamo=True, verbose=False, **kw)
                if program is None:
                    raise first from None
                program.save(str(path))
                return "dynamo"
            except Exception:
                raise first from None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporters' chatter (warnings, the TorchScript graph its C++ prints at a failure, the
    dynamo exporter's registration log) dropped: the arm's one-line reason says what matters."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo")]
    levels = [lg.level for lg in loggers]
    saved: list[tuple[int, int]] = []
    sys.stdout.flush()
    sys.stderr.flush()
    for fd in (1, 2):
        try:
            saved.append((fd, os.dup(fd)))
        except OSError:
            continue
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd, _ in saved:
            os.dup2(null, fd)
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        os.close(null)
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _feeds(names: Sequence[str], specs: Sequence[InputSpec], arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays by the ONNX graph's input names: by name where every name is an input's, else by
    position (a graph that kept fewer inputs than the model takes drops the unused ones by name)."""
    by_name = {s.name: a for s, a in zip(specs, arrays)}
    if all(n in by_name for n in names):
        return {n: by_name[n] for n in names}
    return dict(zip(names, arrays))


def onnxruntime_arm(
    onnx_path: str | Path,
    specs: Sequence[InputSpec],
    arrays: Sequence[np.ndarray],
    expected: Sequence[np.ndarray] | None,
    threads: int,
) -> Arm:
    """ONNX Runtime's CPU provider, every graph optimisation, `threads` intra-op threads, one
    inter-op thread (the graph runs in order, as the other runtimes run it)."""

    def setup() -> tuple[Callable[[], Any], str | None]:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
        feeds = _feeds([i.name for i in sess.get_inputs()], specs, arrays)
        return (lambda: sess.run(None, feeds)), "f32"

    return build_arm(ONNXRUNTIME, setup, expected)


def onnx_quantized(onnx_path: str | Path, feeds: Sequence[Mapping[str, np.ndarray]]) -> Path:
    """The model at `onnx_path` quantized as ONNX Runtime's docs show for a CPU, written beside it
    (`.int8.onnx`): `quantize_static`, QDQ, int8 weights per channel, uint8 activations, min/max
    ranges over the calibration `feeds` (input name -> array, one a sample)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Samples(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([dict(f) for f in feeds])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.feeds, None)

    quantized = Path(onnx_path).with_suffix(".int8.onnx")
    with _quiet():
        quantize_static(
            str(onnx_path),
            str(quantized),
            Samples(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
    return quantized


def onnxruntime_int8_arm(
    onnx_path: str | Path,
    specs: Sequence[InputSpec],
    arrays: Sequence[np.ndarray],
    expected: Sequence[np.ndarray] | None,
    threads: int,
    calibration: Sequence[Sequence[np.ndarray]] | None = None,
) -> Arm:
    """ONNX Runtime on the model quantized as its docs show for a CPU: `quantize_static` (QDQ, int8
    weights per channel, uint8 activations, min/max ranges) calibrated on the `calibration` samples
    (None: the inputs `arrays`), as `tune-model --precision int8` calibrates; then
    `onnxruntime_arm`'s session on the quantized model."""

    def setup() -> tuple[Callable[[], Any], str | None]:
        import onnxruntime as ort

        names = [i.name for i in ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).get_inputs()]
        samples = [arrays] if calibration is None else calibration
        quantized = onnx_quantized(onnx_path, [_feeds(names, specs, sample) for sample in samples])
        session = onnxruntime_arm(quantized, specs, arrays, None, threads)
        if session.call is None:
            raise RuntimeError(f"the quantized model: {session.error}")
        return session.call, "int8"

    return build_arm(ONNXRUNTIME_INT8, setup, expected)


def _openvino_conversion_failure(message: str) -> str | None:
    """The operators OpenVINO's ONNX frontend could not convert and the last reason it gave, from
    its conversion report (None for any other error). Why: the report's first lines are the source
    lines that raised it; the operator ("Conversion is failed for: AveragePool-17") and the reason
    (EfficientNet-B0's pooler is an AvgPool whose kernel, 1280, exceeds its 7x7 input, which PyTorch
    accepts with ceil_mode) come last."""
    mark = "-- Conversion is failed for:"
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    at = [i for i, line in enumerate(lines) if line.startswith(mark)]
    if not at:
        return None
    failed = [lines[i][len(mark) :].strip() for i in at]
    details = [line for line in lines[: at[0]] if not line.startswith(("Summary", "--", "While validating"))]
    why = details[-1] if details else ""
    return f"OpenVINO cannot convert {', '.join(failed)}" + (f": {why}" if why else "")


def openvino_arm(
    onnx_path: str | Path,
    specs: Sequence[InputSpec],
    arrays: Sequence[np.ndarray],
    expected: Sequence[np.ndarray] | None,
    threads: int,
    *,
    f32: bool = True,
) -> Arm:
    """OpenVINO on the CPU, `threads` inference threads, the latency hint; `f32` forces
    `INFERENCE_PRECISION_HINT=f32`, else OpenVINO picks (bf16 on CPUs with AVX512_BF16 or AMX).
    The precision it compiled for is read back from the compiled model."""

    def setup() -> tuple[Callable[[], Any], str | None]:
        import openvino as ov

        config: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
        if f32:
            config["INFERENCE_PRECISION_HINT"] = "f32"
        core = ov.Core()
        try:
            compiled = core.compile_model(core.read_model(str(onnx_path)), "CPU", config)
        except RuntimeError as exc:
            reason = _openvino_conversion_failure(str(exc))
            if reason is None:
                raise
            raise RuntimeError(reason) from None
        precision = _ov_precision(compiled.get_property("INFERENCE_PRECISION_HINT"))
        request = compiled.create_infer_request()
        feeds = _feeds([p.get_any_name() for p in compiled.inputs], specs, arrays)
        inputs = [feeds[n] for n in feeds]
        return (lambda: request.infer(inputs, share_inputs=True, share_outputs=True)), precision

    return build_arm(OPENVINO_F32 if f32 else OPENVINO_DEFAULT, setup, expected)


def _ov_precision(value: Any) -> str:
    """OpenVINO's element type (`<Type: 'float32'>`, `bf16`) as a short name: f32, bf16, f16."""
    text = str(getattr(value, "get_type_name", lambda: value)()).lower()
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(text, text)


def tvm_arm(
    name: str,
    executable: Any,
    arrays: Sequence[np.ndarray],
    expected: Sequence[np.ndarray] | None,
    precision: str = "fp32",
) -> Arm:
    """A Relax build (an executable, or the path of one exported with `export_library`) on the CPU
    through TVM's VM; its output held to the tolerance of the `precision` it was built in."""

    def setup() -> tuple[Callable[[], Any], str | None]:
        import tvm
        from tvm import relax

        ex = tvm.runtime.load_module(str(executable)) if isinstance(executable, (str, Path)) else executable
        dev = tvm.cpu()
        main = relax.VirtualMachine(ex, dev)["main"]
        args = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in arrays]
        return (lambda: main(*args)), {"fp32": "f32"}.get(precision, precision)

    return build_arm(name, setup, expected, PRECISION_RTOL[precision])


def runtime_arms(
    net: Any,
    specs: Sequence[InputSpec],
    arrays: Sequence[np.ndarray],
    expected: Sequence[np.ndarray] | None,
    threads: int,
    work: str | Path,
    *,
    onnx_path: str | Path | None = None,
    int8: bool = False,
    calibration: Sequence[Sequence[np.ndarray]] | None = None,
) -> list[Arm]:
    """ONNX Runtime, OpenVINO f32 and OpenVINO default (and with `int8`, ONNX Runtime on the model
    statically quantized, calibrated on `calibration`: `onnxruntime_int8_arm`) from one ONNX export of `net` into `work` (or from `onnx_path`, a model
    that already is ONNX). A failed export fails all the arms with its reason; a missing package
    fails its arm with an install hint. `exporter` names the ONNX exporter that wrote the model."""
    names = [ONNXRUNTIME, OPENVINO_F32, OPENVINO_DEFAULT, *([ONNXRUNTIME_INT8] if int8 else [])]
    path = Path(onnx_path) if onnx_path else Path(work) / "model.onnx"
    export_s = 0.0
    if onnx_path is None:
        t0 = time.perf_counter()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # a work folder not made yet
            exporter = export_onnx(net, arrays, path, [s.name for s in specs])
        except Exception as exc:
            reason = f"ONNX export failed: {type(exc).__name__}: {one_line(exc)}"
            return [Arm(n, error=reason) for n in names]
        export_s = time.perf_counter() - t0
    else:
        exporter = None
    arms = []
    for name in names:
        package = "openvino" if name.startswith("OpenVINO") else "onnxruntime"
        try:
            __import__(package)
        except ImportError:
            arms.append(Arm(name, error=f"{package} is not installed (pip install 'autosearch[bench]')"))
            continue
        if name == ONNXRUNTIME:
            arm = onnxruntime_arm(path, specs, arrays, expected, threads)
        elif name == ONNXRUNTIME_INT8:
            arm = onnxruntime_int8_arm(path, specs, arrays, expected, threads, calibration)
        else:
            arm = openvino_arm(path, specs, arrays, expected, threads, f32=name == OPENVINO_F32)
        if arm.setup_s is not None:
            arm.setup_s += export_s
        arm.exporter = exporter
        arms.append(arm)
    return arms


def interleaved_medians(
    calls: Mapping[str, Callable[[], Any]],
    *,
    rounds: int = ROUNDS,
    min_round_s: float = MIN_ROUND_S,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Median seconds a call of each arm: `rounds` rounds, in each every arm in turn runs one
    untimed call (the previous arm's threads settle, this arm's caches fill) and then a Python loop
    of calls until `min_round_s` has passed; a round's figure is its time over its calls."""
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(max(1, rounds)):
        for name, fn in calls.items():
            fn()
            n, t0 = 0, clock()
            while True:
                fn()
                n += 1
                elapsed = clock() - t0
                if elapsed >= min_round_s:
                    break
            times[name].append(elapsed / n)
    return {k: float(np.median(v)) for k, v in times.items()}


def best_fp32_baseline(arms: Mapping[str, Mapping[str, Any]]) -> tuple[str, float] | None:
    """The fastest float32 baseline whose output checked ok (name, seconds), or None."""
    timed = [
        (k, float(a["latency"]))
        for k, a in arms.items()
        if k in FP32_BASELINES and a.get("ok") and a.get("latency") and not a.get("error")
    ]
    return min(timed, key=lambda t: t[1]) if timed else None


def compare_runtimes(
    spec: str,
    specs: Sequence[InputSpec],
    *,
    threads: int,
    work: str | Path,
    seed: int = 0,
    tvm_builds: Mapping[str, Any] | None = None,
    tvm_precisions: Mapping[str, str] | None = None,
    torch_arms: bool = True,
    compile_arm: bool = True,
    runtimes: bool = True,
    int8_runtime: bool = False,
    rounds: int = ROUNDS,
    min_round_s: float = MIN_ROUND_S,
    arrays: Sequence[np.ndarray] | None = None,
    calibration: Sequence[Sequence[np.ndarray]] | None = None,
) -> dict[str, Arm]:
    """Every arm of the model `spec` (`FILE.py:FUNC` or `FILE.onnx`) set up, checked against the
    original model's output, and timed by one `interleaved_medians` on `threads` threads: PyTorch
    eager and torch.compile (`torch_arms`, `compile_arm`; none for an ONNX model), ONNX Runtime and
    both OpenVINO arms (`runtimes`; `int8_runtime`: ONNX Runtime's static int8 too, calibrated on
    the `calibration` samples, else on the inputs), then `tvm_builds` (label -> executable or
    exported library; `tvm_precisions`: label -> the precision it was built in, fp32 where absent).
    Every arm runs on `arrays` (None: the example inputs drawn with `seed`). An arm that failed to
    set up keeps its reason and no latency."""
    from autosearch.networks.graph import load_source
    from autosearch.networks.inputs import example_arrays
    from autosearch.networks.tune import reference_outputs

    set_threads(threads)
    net = load_source(spec)
    arrays = example_arrays(specs, seed) if arrays is None else arrays
    expected = reference_outputs(net, arrays)
    is_onnx = spec.endswith(".onnx")
    arms: list[Arm] = []
    if torch_arms and not is_onnx:
        arms.append(eager_arm(net, arrays, expected))
        if compile_arm:
            arms.append(torch_compile_arm(net, arrays, expected))
    if runtimes:
        onnx_path = spec if is_onnx else None
        arms += runtime_arms(
            net,
            specs,
            arrays,
            expected,
            threads,
            work,
            onnx_path=onnx_path,
            int8=int8_runtime,
            calibration=calibration,
        )
    for label, ex in (tvm_builds or {}).items():
        arms.append(tvm_arm(label, ex, arrays, expected, (tvm_precisions or {}).get(label, "fp32")))
    calls = {a.name: a.call for a in arms if a.call is not None}
    for name, lat in interleaved_medians(calls, rounds=rounds, min_round_s=min_round_s).items():
        next(a for a in arms if a.name == name).latency = lat
    return {a.name: a for a in arms}


def compare_runtimes_isolated(
    spec: str,
    specs: Sequence[InputSpec],
    *,
    threads: int,
    work: str | Path,
    seed: int = 0,
    tvm_libraries: Mapping[str, str] | None = None,
    tvm_precisions: Mapping[str, str] | None = None,
    torch_arms: bool = True,
    compile_arm: bool = True,
    runtimes: bool = True,
    int8_runtime: bool = False,
    rounds: int = ROUNDS,
    min_round_s: float = MIN_ROUND_S,
    timeout: float = 3600.0,
    inputs: Sequence[str] = (),
    calibration: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    """`compare_runtimes` in a fresh interpreter (the module doc says why), ours as libraries
    exported with `export_library`; each arm as `Arm.to_json`. `inputs` and `calibration` are
    tune-model's `--check-input` and `--calibration` items (`inputs.load_samples`): the arms run on
    the first sample of `inputs` (none: the example inputs), ONNX Runtime's int8 calibrates on
    `calibration`. A
    process that fails gives every arm its last error line."""
    kwargs = {
        "threads": threads,
        "work": str(work),
        "seed": seed,
        "tvm_builds": dict(tvm_libraries or {}),
        "tvm_precisions": dict(tvm_precisions or {}),
        "torch_arms": torch_arms,
        "compile_arm": compile_arm,
        "runtimes": runtimes,
        "int8_runtime": int8_runtime,
        "rounds": rounds,
        "min_round_s": min_round_s,
    }
    code = (
        "import json, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from autosearch.networks.inputs import InputSpec, load_samples\n"
        "from autosearch.networks.runtimes import compare_runtimes\n"
        f"specs = [InputSpec.from_json(d) for d in json.loads({json.dumps([s.to_json() for s in specs])!r})]\n"
        f"inputs, calibration = {list(inputs)!r}, {list(calibration)!r}\n"
        "arrays = load_samples(inputs, specs, '--check-input')[0] if inputs else None\n"
        "samples = load_samples(calibration, specs) if calibration else None\n"
        f"arms = compare_runtimes({spec!r}, specs, arrays=arrays, calibration=samples, **json.loads({json.dumps(kwargs)!r}))\n"
        "print(json.dumps({k: a.to_json() for k, a in arms.items()}))\n"
    )
    env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
        lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
        if proc.returncode == 0 and lines:
            out = json.loads(lines[-1])
            if isinstance(out, dict):
                return out
        errs = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        reason = f"the timing process failed (exit {proc.returncode}): {errs[-1] if errs else 'no output'}"
    except subprocess.TimeoutExpired:
        reason = f"the timing process ran past {timeout:.0f} s"
    except ValueError as exc:
        reason = f"the timing process printed no result: {one_line(exc)}"
    return {"timing process": {"name": "timing process", "error": reason}}
