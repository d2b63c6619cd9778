"""Dense layers in bf16 and int8, tuned by autosearch, against what a user would call in each precision.

Issue 72: "low precision where the CPU has it". For each dense size (data M x K, weight N x K, as
BERT's layers), this script tunes our fp32, bf16 and int8 kernels (`autosearch tune --precision`,
the same trials each, the default model and search) and times them beside:

- PyTorch `x @ w.T` in float32 and in bfloat16 (oneDNN's bf16 GEMM on an AVX512_BF16 CPU);
- OpenVINO on a one-MatMul ONNX graph, f32 forced and at its default precision (bf16 on a CPU
  with AVX512_BF16 or AMX: what a user gets without asking);
- ONNX Runtime on the same graph in float32, and its dynamically quantized int8 model
  (`onnxruntime.quantization.quantize_dynamic`, MatMulInteger).

All arms run on the same threads in one process and are timed by one harness
(`networks.runtimes.interleaved_medians`: rounds interleaved, the median). Outputs are checked
against float32 NumPy on the same (rounded) operands: error relative to the output's scale.

What each arm includes: ours take operands already in their precision with the weight packed
(in a network the activation's conversion is fused into the layer before, and the weight is
packed once at build); OpenVINO and ONNX Runtime take float32 activations and convert inside the
call (ONNX Runtime's dynamic int8 also quantizes the activation each call). The table says so.

    python bench/lowp_dense.py --sizes 128x768x768,128x768x3072,128x3072x768 --trials 64
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _size(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) != 3:
        raise SystemExit(f"error: a size is MxKxN, got {text!r}")
    return parts[0], parts[1], parts[2]


def _tune(m: int, k: int, n: int, precision: str, trials: int, work: Path) -> tuple[Any, dict[str, Any]]:
    """Tune the registry's dense MxK . NxK in `precision`; (its best schedule's IRModule, best.json)."""
    from autosearch.workloads import list_workloads

    name = next(
        (
            w.name
            for w in list_workloads()
            if w.params.get("op") == "dense" and (w.params["M"], w.params["K"], w.params["N"]) == (m, k, n)
        ),
        None,
    )
    if name is None:
        raise RuntimeError(f"no registry dense workload of {m}x{k}x{n}")
    out = work / f"tuned-{m}x{k}x{n}-{precision}"
    cmd = [
        sys.executable, "-c", "from autosearch.cli import main; main()", "tune", name,
        "--precision", precision, "--trials", str(trials),
        "--trials-per-round", str(min(16, trials)), "--db", str(work / "bench.db"),
        "--out", str(out), "--json",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"tune {precision} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    from autosearch.search.apply import apply_best

    best = json.loads((out / "best.json").read_text())
    _, sch = apply_best(out)  # the measured trace replayed, its post-processing (the kernel's IR) included
    return sch.mod, best


def _tvm_call(
    mod: Any, args: list[np.ndarray], out_shape: tuple[int, int], out_dtype: str, precision: str
) -> tuple[Any, Any]:
    """(a call of the kernel as tuning timed it, the output of one full run on `args`).

    A schedule may rewrite its weight's layout (MetaSchedule's `RewriteLayout`): the full function
    does it each call, a network build once, into its constants. The output is checked on the full
    function; the call timed is the one without the rewrite, its weight already in the rewritten
    layout (as tuning measures it, and as the network runs it)."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    dev = tvm.cpu()
    target = _target(precision)
    timed = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    out = tvm.runtime.tensor(np.zeros(out_shape, out_dtype), dev)
    tvm.compile(mod, target=target)["main"](*[tvm.runtime.tensor(a, dev) for a in args], out)
    infos = ArgInfo.from_entry_func(timed, remove_preproc=False)  # removed already
    targs = []
    for a, info in zip([*args, np.zeros(out_shape, out_dtype)], infos):
        shape = tuple(int(x) for x in info.shape)
        # the weight in its rewritten layout: its values do not change the time (no value-dependent work)
        targs.append(tvm.runtime.tensor(a if a.shape == shape else np.resize(a, shape), dev))
    fn = tvm.compile(timed, target=target)["main"]
    return (lambda: fn(*targs)), out


def _target(precision: str) -> Any:
    """This machine's target for `precision`, as `autosearch tune --precision` compiles for it."""
    from autosearch.backends.tvm.lowp import get_precision, precision_target
    from autosearch.backends.tvm.target import host_target

    return precision_target(get_precision(precision), host_target(), native=True)


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want)))


def run_size(m: int, k: int, n: int, trials: int, threads: int, work: Path, rounds: int, min_round_s: float) -> dict:
    import ml_dtypes
    import onnxruntime as ort
    import openvino as ov
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from autosearch.networks.runtimes import _ov_precision, interleaved_medians
    from autosearch.workloads.lowp import pack_weight

    rng = np.random.default_rng(0)
    a32 = rng.standard_normal((m, k), dtype=np.float32)
    w32 = rng.standard_normal((n, k), dtype=np.float32)
    want32 = a32.astype(np.float64) @ w32.T.astype(np.float64)
    a16, w16 = a32.astype(ml_dtypes.bfloat16), w32.astype(ml_dtypes.bfloat16)
    want16 = a16.astype(np.float64) @ w16.T.astype(np.float64)
    # int8: activations u8 (an asymmetric quantization's codes), weights s8; the sum is exact.
    a8 = rng.integers(0, 256, (m, k), dtype=np.uint8)
    w8 = rng.integers(-128, 128, (n, k), dtype=np.int8)
    want8 = a8.astype(np.int64) @ w8.T.astype(np.int64)

    calls: dict[str, Any] = {}
    info: dict[str, dict[str, Any]] = {}
    for precision, args, shape_dtype, want in (
        ("fp32", [a32, w32], "float32", want32),
        ("bf16", [a16, pack_weight(w16, 2)], "float32", want16),
        ("int8", [a8, pack_weight(w8, 4)], "int32", want8),
    ):
        name = f"ours {precision}"
        try:
            mod, best = _tune(m, k, n, precision, trials, work)
            call, out = _tvm_call(mod, args, (m, n), shape_dtype, precision)
            err = _rel_err(out.numpy(), want)
            info[name] = {"precision": precision, "error": err, "trials": best.get("trials_ok")}
            if err > (0.0 if precision == "int8" else 1e-4):
                info[name]["failed"] = f"output off by {err:.1e} of its scale"
                continue
            calls[name] = call
        except Exception as exc:  # one arm's failure is reported, the others still run
            info[name] = {"precision": precision, "failed": str(exc).splitlines()[0][:200]}

    ta32, tw32 = torch.from_numpy(a32), torch.from_numpy(w32)
    ta16, tw16 = ta32.to(torch.bfloat16), tw32.to(torch.bfloat16)
    calls["PyTorch fp32"] = lambda: ta32 @ tw32.T
    calls["PyTorch bf16"] = lambda: ta16 @ tw16.T
    info["PyTorch fp32"] = {"precision": "fp32", "error": _rel_err(calls["PyTorch fp32"]().numpy(), want32)}
    info["PyTorch bf16"] = {
        "precision": "bf16",
        "error": _rel_err(calls["PyTorch bf16"]().float().numpy(), want32),
    }

    sys.path.insert(0, str(ROOT / "bench"))
    from gemm_rate import _onnx_matmul  # the one-MatMul graph of the SGEMM benchmark: a @ (w.T)

    path = work / f"dense_{m}x{k}x{n}.onnx"
    _onnx_matmul(path, np.ascontiguousarray(w32.T), m)
    core = ov.Core()
    for label, hint in (("OpenVINO f32", "f32"), ("OpenVINO default", None)):
        config: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
        if hint:
            config["INFERENCE_PRECISION_HINT"] = hint
        compiled = core.compile_model(core.read_model(str(path)), "CPU", config)
        prec = _ov_precision(compiled.get_property("INFERENCE_PRECISION_HINT"))
        request = compiled.create_infer_request()
        calls[label] = lambda r=request: r.infer([a32], share_inputs=True)
        got = next(iter(calls[label]().values()))
        info[label] = {"precision": prec, "error": _rel_err(got, want32), "note": "f32 in, converts inside"}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    calls["ONNX Runtime fp32"] = lambda: sess.run(None, {"a": a32})
    info["ONNX Runtime fp32"] = {"precision": "fp32", "error": _rel_err(calls["ONNX Runtime fp32"]()[0], want32)}
    qpath = work / f"dense_{m}x{k}x{n}.int8.onnx"
    quantize_dynamic(str(path), str(qpath), weight_type=QuantType.QInt8)
    qsess = ort.InferenceSession(str(qpath), opts, providers=["CPUExecutionProvider"])
    calls["ONNX Runtime int8"] = lambda: qsess.run(None, {"a": a32})
    info["ONNX Runtime int8"] = {
        "precision": "int8",
        "error": _rel_err(calls["ONNX Runtime int8"]()[0], want32),
        "note": "quantizes the activation each call",
    }

    secs = interleaved_medians(calls, rounds=rounds, min_round_s=min_round_s)
    flop = 2.0 * m * k * n
    for name, s in secs.items():
        info[name].update(ms=s * 1e3, gflops=flop / s / 1e9)
    return {"size": f"{m}x{k}x{n}", "arms": info}


def _ratio(arms: dict[str, Any], ours: str, theirs: str) -> float | None:
    a, b = arms.get(ours, {}), arms.get(theirs, {})
    if "ms" in a and "ms" in b:
        return b["ms"] / a["ms"]
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="128x768x768", help="comma-separated MxKxN (data MxK, weight NxK)")
    ap.add_argument("--trials", type=int, default=64, help="trials per tuned kernel (each precision alike)")
    ap.add_argument("--threads", type=int, default=None, help="default: the physical cores")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-round-s", type=float, default=0.3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from autosearch.backends.tvm.target import host_target, runtime_threads, use_physical_cores
    from autosearch.hostinfo import cpu_model_name
    from autosearch.networks.runtimes import set_threads

    use_physical_cores()  # TVM's runtime would take half the logical CPUs, as tuning does not
    target = host_target()
    for p in ("bf16", "int8"):
        _target(p)  # refused here, in one line, where this CPU lacks it
    threads = args.threads or runtime_threads(target)
    set_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            run_size(*_size(t), args.trials, threads, Path(tmp), args.rounds, args.min_round_s)
            for t in args.sizes.split(",")
        ]
    mcpu = target.attrs.get("mcpu", "?")
    print(f"dense layers, {threads} threads, {cpu_model_name()} ({mcpu}), {args.trials} trials per tuned kernel\n")
    for r in rows:
        print(f"### {r['size']} (M x K x N)\n")
        print("| arm | computes in | ms | GFLOP/s | error (rel. to scale) | note |")
        print("|---|---|---|---|---|---|")
        for name, a in r["arms"].items():
            if "ms" not in a:
                print(f"| {name} | {a.get('precision', '')} | - | - | - | {a.get('failed', '')} |")
                continue
            print(
                f"| {name} | {a['precision']} | {a['ms']:.3f} | {a['gflops']:.0f} | {a['error']:.1e} | {a.get('note', '')} |"
            )
        print()
    for r in rows:
        arms = r["arms"]
        parts = []
        for ours, theirs in (
            ("ours bf16", "OpenVINO default"),
            ("ours bf16", "PyTorch bf16"),
            ("ours int8", "ONNX Runtime int8"),
            ("ours bf16", "ours fp32"),
            ("ours int8", "ours fp32"),
        ):
            x = _ratio(arms, ours, theirs)
            parts.append(f"{theirs} / {ours} = {x:.2f}x" if x else f"{theirs} / {ours} = -")
        print(f"{r['size']}: " + "; ".join(parts))
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": threads, "mcpu": mcpu, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
