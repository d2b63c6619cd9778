"""The same computation in PyTorch eager on the target's device: a reference point for a tuned schedule.

Why PyTorch: its CPU kernels (oneDNN / MKL-backed GEMM and convolution) are what most users would
run instead. Convolutions are timed in PyTorch's native NCHW layout (the TIR operator is NHWC), so
the reference is "the same arithmetic, the way PyTorch would do it", not a layout-exact replay.
Operators without a PyTorch equivalent (capsule conv, winograd, random programs) have none.
A CUDA target is compared with PyTorch on the GPU (`device="cuda"`), never with its CPU kernels: a
GPU kernel "6x faster than PyTorch" against the CPU says nothing. Without a CUDA-enabled PyTorch
there is no reference rather than a wrong one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["check_torch_device", "reference_fn", "reference_latency", "run_isolated", "time_callable", "torch_device"]


def torch_device(target: Any) -> str | None:
    """Where PyTorch runs to be compared with code built for `target`: "cuda" for a CUDA target,
    None for another GPU kind (PyTorch has no such device here, and a CPU time would mislead),
    "cpu" otherwise."""
    from autosearch.backends.tvm.target import is_gpu

    if target.kind.name == "cuda":
        return "cuda"
    return None if is_gpu(target) else "cpu"


def check_torch_device(device: str) -> None:
    """Refuse a PyTorch device other than the two references are timed on."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"PyTorch reference device must be 'cpu' or 'cuda', not {device!r}")


def _conv_args(p: dict[str, Any], dims: int = 2) -> dict[str, Any]:
    return {
        "stride": p.get("stride", p.get("strides", 1)),
        "padding": p.get("padding", 0),
        "dilation": p.get("dilation", 1),
    }


def reference_fn_name(params: dict[str, Any]) -> str | None:
    """The op name when a PyTorch reference exists for these workload parameters."""
    known = {
        "batch_matmul_nkkm",
        "dense",
        "conv2d_nhwc",
        "conv2d_nchw",
        "conv2d_nhwc_bn_relu",
        "conv1d_nlc",
        "conv3d_ndhwc",
        "depthwise_conv2d_nhwc",
        "conv2d_transpose_nhwc",
        "softmax_mn",
        "softmax",
        "layer_norm",
        "norm_bmn",
        "transpose_batch_matmul",
    }
    op = params.get("op")
    return op if op in known else None


# Long by nature: a table of operator family -> PyTorch call.
def reference_fn(params: dict[str, Any], device: str = "cpu") -> tuple[str, Callable[[], Any]] | None:
    """(description, zero-argument callable) computing the operator in PyTorch on `device`, or None."""
    import torch
    import torch.nn.functional as F

    op = params.get("op")
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> Any:
        return torch.rand(*shape, generator=g).to(device)

    if op == "batch_matmul_nkkm":
        x, y = r(params["B"], params["N"], params["K"]), r(params["B"], params["K"], params["M"])
        return "torch.bmm", lambda: torch.bmm(x, y)
    if op == "dense":
        x, w = r(params["M"], params["K"]), r(params["N"], params["K"])
        return "torch.nn.functional.linear", lambda: F.linear(x, w)
    if op in ("conv2d_nhwc", "conv2d_nhwc_bn_relu"):
        gr = params.get("groups", 1)
        x = r(params["N"], params["CI"], params["H"], params["W"])
        w = r(params["CO"], params["CI"] // gr, params["kernel_size"], params["kernel_size"])
        kw = _conv_args(params, 2)
        if op == "conv2d_nhwc":
            return "torch.nn.functional.conv2d (NCHW)", lambda: F.conv2d(x, w, groups=gr, **kw)
        scale, bias = r(1, params["CO"], 1, 1), r(1, params["CO"], 1, 1)
        return "conv2d + scale/bias + relu (NCHW)", lambda: F.relu(F.conv2d(x, w, **kw) * scale + bias)
    if op == "conv2d_nchw":
        x = r(params["N"], params["CI"], params["H"], params["W"])
        w = r(params["CO"], params["CI"], params["kernel_size"], params["kernel_size"])
        return "torch.nn.functional.conv2d", lambda: F.conv2d(x, w, **_conv_args(params, 2))
    if op == "conv1d_nlc":
        gr = params.get("groups", 1)
        x, w = r(params["N"], params["CI"], params["L"]), r(params["CO"], params["CI"] // gr, params["kernel_size"])
        return "torch.nn.functional.conv1d (NCL)", lambda: F.conv1d(x, w, groups=gr, **_conv_args(params, 1))
    if op == "conv3d_ndhwc":
        gr = params.get("groups", 1)
        x = r(params["N"], params["CI"], params["D"], params["H"], params["W"])
        k = params["kernel_size"]
        w = r(params["CO"], params["CI"] // gr, k, k, k)
        return "torch.nn.functional.conv3d (NCDHW)", lambda: F.conv3d(x, w, groups=gr, **_conv_args(params, 3))
    if op == "depthwise_conv2d_nhwc":
        c, f = params["C"], params.get("factor", 1)
        x, w = r(params["N"], c, params["H"], params["W"]), r(c * f, 1, params["kernel_size"], params["kernel_size"])
        return "torch.nn.functional.conv2d depthwise (NCHW)", lambda: F.conv2d(x, w, groups=c, **_conv_args(params, 2))
    if op == "conv2d_transpose_nhwc":
        x = r(params["N"], params["CI"], params["H"], params["W"])
        w = r(params["CI"], params["CO"], params["kernel_size"], params["kernel_size"])
        return "torch.nn.functional.conv_transpose2d (NCHW)", lambda: F.conv_transpose2d(
            x, w, stride=params["stride"], padding=params["padding"]
        )
    if op == "softmax_mn":
        x = r(params["m"], params["n"])
        return "torch.softmax", lambda: torch.softmax(x, dim=-1)
    if op == "softmax":
        x = r(*params["shape"])
        return "torch.softmax", lambda: torch.softmax(x, dim=params.get("axis", -1))
    if op == "layer_norm":
        shape = list(params["shape"])
        x, gamma, beta = r(*shape), r(shape[-1]), r(shape[-1])
        return "torch.nn.functional.layer_norm", lambda: F.layer_norm(x, shape[-1:], gamma, beta)
    if op == "norm_bmn":
        x = r(params["B"], params["M"], params["N"])
        return "torch.linalg.vector_norm", lambda: torch.linalg.vector_norm(x, dim=(1, 2))
    if op == "transpose_batch_matmul":
        b, s, h, d = params["batch"], params["seq_len"], params["n_head"], params["n_dim"]
        q, v = r(b, s, h, d), r(b, s, h, d)
        return "torch.matmul (transposed views)", lambda: torch.matmul(q.transpose(1, 2), v.permute(0, 2, 3, 1))
    return None


def run_isolated(code: str, timeout: float = 300.0) -> Any:
    """Run Python `code` (printing one JSON line last) in a fresh interpreter; its JSON or None.

    Why a subprocess: in the tuning process the thread pools of TVM's runtime and XGBoost
    (spinning OpenMP workers) compete with PyTorch's own pool for the same cores, and a
    microsecond kernel then timed orders of magnitude slower (bench/HISTORY.md, "Figures from the
    code's docstrings"). A fresh process times PyTorch as a user would run it.
    """
    import json
    import subprocess
    import sys

    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        return None
    try:
        return json.loads(lines[-1])
    except ValueError:
        return None


def reference_latency(
    workload: Any, *, min_time: float = 0.2, repeat: int = 5, isolated: bool = True, device: str = "cpu"
) -> dict[str, Any] | None:
    """{"name", "latency" (seconds, best of `repeat` timed loops), "threads", "device"} of the
    PyTorch reference on `device` ("cpu" or "cuda"), or None when the operator has none or PyTorch
    cannot run on that device. `isolated`: time it in a fresh process."""
    import json

    check_torch_device(device)
    params = dict(getattr(workload, "params", {}) or {})
    if reference_fn_name(params) is None:
        return None
    if isolated:
        code = (
            "import json\nfrom autosearch.reference import reference_latency as r\n"
            "class W:\n    pass\n"
            f"w = W()\nw.params = json.loads({json.dumps(json.dumps(params))})\n"
            f"print(json.dumps(r(w, min_time={min_time}, repeat={repeat}, isolated=False, device={device!r})))\n"
        )
        return run_isolated(code)
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return None
    try:
        made = reference_fn(params, device)
    except (KeyError, TypeError, ValueError):
        return None
    if made is None:
        return None
    name, fn = made
    if device == "cuda":
        lat = time_callable(fn, min_time, repeat, sync=torch.cuda.synchronize)
        gpu = torch.cuda.get_device_name()
        return {
            "name": f"PyTorch {torch.__version__.split('+')[0]} {name} on {gpu}",
            "latency": lat,
            "threads": None,
            "device": "cuda",
        }
    best: tuple[float, int] | None = None
    # PyTorch's default thread count, and one thread: on a shared machine an intra-op barrier
    # waiting for a descheduled thread can cost milliseconds; report the faster setting.
    default = torch.get_num_threads()
    try:
        for threads in dict.fromkeys([default, 1]):
            torch.set_num_threads(threads)
            lat = time_callable(fn, min_time, repeat)
            if best is None or lat < best[0]:
                best = (lat, threads)
    finally:
        torch.set_num_threads(default)
    assert best is not None
    return {
        "name": f"PyTorch {torch.__version__.split('+')[0]} {name}",
        "latency": best[0],
        "threads": best[1],
        "device": "cpu",
    }


def time_callable(
    fn: Callable[[], Any], min_time: float = 0.2, repeat: int = 5, sync: Callable[[], Any] | None = None
) -> float:
    """Best per-call seconds of `fn` over `repeat` timed batches of >= min_time/repeat each (no grad).
    `sync` (e.g. torch.cuda.synchronize) waits for queued device work before each clock read, so an
    asynchronous launch is timed to its end, not to its enqueueing."""
    import torch

    wait = sync or (lambda: None)
    with torch.no_grad():
        fn()
        wait()
        t0 = time.perf_counter()
        fn()
        wait()
        one = max(time.perf_counter() - t0, 1e-7)
        number = max(1, int(min_time / repeat / one))
        times = []
        for _ in range(repeat):
            wait()
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            wait()
            times.append((time.perf_counter() - t0) / number)
    return float(np.min(times))
