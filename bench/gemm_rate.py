"""The machine's reachable FP32 GEMM rate, the ceiling a tuned dense layer is measured against.

Issue 70, item 3: "dense layers at the machine's GEMM rate". Beating PyTorch's SGEMM is not the
bar on a CPU where its BLAS runs at half oneDNN's rate; the bar is the best SGEMM any runtime a user
has reaches on the same threads. Each arm computes C = A @ B in float32 for the sizes given, timed
by one harness (`networks.runtimes.interleaved_medians`: a Python loop of calls, >= --min-round-s
a round, rounds interleaved, the median) in this one process, on --threads threads:

- `torch.mm` (PyTorch's BLAS: MKL on Intel, its own build elsewhere);
- OpenVINO f32 (oneDNN's SGEMM), from a one-MatMul ONNX graph, f32 forced;
- ONNX Runtime (its MLAS SGEMM), from the same graph.

Outputs are checked against NumPy. The last line is `best GFLOP/s` and who reached it;
bench/network.py reports each transformer's tuned matmuls as a fraction of that.

    python bench/gemm_rate.py --sizes 2048,128x768x768,128x768x3072,128x3072x768
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _size(text: str) -> tuple[int, int, int]:
    """`N` (square) or `MxKxN`."""
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) == 1:
        return parts[0], parts[0], parts[0]
    if len(parts) != 3:
        raise SystemExit(f"error: a size is N or MxKxN, got {text!r}")
    return parts[0], parts[1], parts[2]


def _onnx_matmul(path: Path, b: np.ndarray, m: int) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    k, n = b.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "gemm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(b, "b")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _arms(m: int, k: int, n: int, threads: int, work: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """{arm: call} for one size, and {arm: why it could not run}."""
    import onnxruntime as ort
    import openvino as ov
    import torch

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    want = a @ b
    calls: dict[str, Any] = {}
    failed: dict[str, str] = {}
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    calls["torch.mm"] = lambda: torch.mm(ta, tb)
    path = work / f"gemm_{m}x{k}x{n}.onnx"
    _onnx_matmul(path, b, m)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    calls["ONNX Runtime"] = lambda: sess.run(None, {"a": a})
    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    request = core.compile_model(core.read_model(str(path)), "CPU", config).create_infer_request()
    calls["OpenVINO f32"] = lambda: request.infer([a], share_inputs=True)
    checks = {
        "torch.mm": lambda: calls["torch.mm"]().numpy(),
        "ONNX Runtime": lambda: calls["ONNX Runtime"]()[0],
        "OpenVINO f32": lambda: next(iter(calls["OpenVINO f32"]().values())),
    }
    for name, got in checks.items():
        err = float(np.max(np.abs(got() - want)) / np.max(np.abs(want)))
        if not err < 1e-4:
            failed[name] = f"output off by {err:.1e} of its scale"
            calls.pop(name)
    return calls, failed


def rates(m: int, k: int, n: int, threads: int, rounds: int = 7, min_round_s: float = 0.3) -> dict[str, Any]:
    """{"gflops": {arm: GFLOP/s}, "failed": {arm: why}} of one MxKxN SGEMM on `threads` threads."""
    from autosearch.networks.runtimes import interleaved_medians

    with tempfile.TemporaryDirectory() as tmp:
        calls, failed = _arms(m, k, n, threads, Path(tmp))
        secs = interleaved_medians(calls, rounds=rounds, min_round_s=min_round_s)
    flop = 2.0 * m * k * n
    return {"size": f"{m}x{k}x{n}", "gflops": {a: flop / s / 1e9 for a, s in secs.items()}, "failed": failed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2048", help="comma-separated N or MxKxN")
    ap.add_argument("--threads", type=int, default=None, help="default: the physical cores")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-round-s", type=float, default=0.3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from autosearch.backends.tvm.target import host_target, runtime_threads
    from autosearch.hostinfo import cpu_model_name
    from autosearch.networks.runtimes import set_threads

    threads = args.threads or runtime_threads(host_target())
    set_threads(threads)
    rows = [rates(*_size(text), threads, args.rounds, args.min_round_s) for text in args.sizes.split(",")]
    mcpu = host_target().attrs.get("mcpu", "?")
    print(f"SGEMM GFLOP/s, {threads} threads, {cpu_model_name()} ({mcpu})\n")
    arms = sorted({a for r in rows for a in r["gflops"]})
    print("| M x K x N | " + " | ".join(arms) + " |")
    print("|---|" + "---|" * len(arms))
    for r in rows:
        cells = [f"{r['gflops'][a]:.0f}" if a in r["gflops"] else r["failed"].get(a, "-") for a in arms]
        print(f"| {r['size']} | " + " | ".join(cells) + " |")
    best = max(((g, a, r["size"]) for r in rows for a, g in r["gflops"].items()), default=None)
    if best:
        print(f"\nbest GFLOP/s: {best[0]:.0f} ({best[1]}, {best[2]})")
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": threads, "mcpu": mcpu, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
