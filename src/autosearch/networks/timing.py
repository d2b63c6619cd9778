"""How a network is timed: TVM's VM (`time_vm`) and PyTorch's latency of the original model in a
fresh process (`torch_timing`), what `tune-model` reports its build against."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from autosearch.networks.inputs import InputSpec

__all__ = ["time_vm", "torch_latency_isolated", "torch_timing"]


def time_vm(vm: Any, dev: Any, args: list[Any], repeat: int = 5) -> float:
    """Median seconds of one call of the VM's `main` (TVM's own timer, at least 20 ms a repeat)."""
    ev = vm.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=20)
    return float(np.median(ev(*args).results))


def torch_timing(
    spec: str, specs: Sequence[InputSpec], *, device: str = "cpu", seed: int = 0, compiled: bool = False
) -> dict[str, Any]:
    """PyTorch's latency of the model in a fresh process (`{"latency": s, "compile_s": s}`): eager
    on the CPU the faster of the default thread count and one thread; `compiled`: `torch.compile`
    (inductor) with the default threads, its compile time measured; with `device="cuda"` on GPU 0,
    latency None without a CUDA PyTorch (a GPU network is never compared with PyTorch's CPU time).
    Latency None for an ONNX file (no PyTorch model).

    Why a fresh process: see `autosearch.reference.run_isolated`."""
    from autosearch.reference import check_torch_device, run_isolated

    if spec.endswith(".onnx"):
        return {"latency": None, "compile_s": None}
    check_torch_device(device)
    code = (
        "import json, time, warnings, torch\n"
        "warnings.simplefilter('ignore')\n"
        "from autosearch.networks.graph import load_source\n"
        "from autosearch.networks.inputs import InputSpec, example_arrays\n"
        "from autosearch.reference import time_callable\n"
        f"specs = [InputSpec.from_json(d) for d in json.loads({json.dumps([s.to_json() for s in specs])!r})]\n"
        f"net = load_source({spec!r})\n"
        f"xs = [torch.from_numpy(a) for a in example_arrays(specs, {seed})]\n"
        "best, compile_s, sync = None, None, None\n"
        f"if {device!r} == 'cuda':\n"
        "    if not torch.cuda.is_available():\n"
        "        print(json.dumps({'latency': None, 'compile_s': None})); raise SystemExit\n"
        "    net, xs, sync = net.to('cuda'), [x.to('cuda') for x in xs], torch.cuda.synchronize\n"
        "with torch.no_grad():\n"
        f"    if {compiled!r}:\n"
        "        t0 = time.perf_counter(); net = torch.compile(net); net(*xs); compile_s = time.perf_counter() - t0\n"
        f"    threads = [torch.get_num_threads()] + ([1] if {device!r} == 'cpu' and not {compiled!r} else [])\n"
        "    for t in dict.fromkeys(threads):\n"
        "        torch.set_num_threads(t)\n"
        "        lat = time_callable(lambda: net(*xs), sync=sync)\n"
        "        best = lat if best is None else min(best, lat)\n"
        "print(json.dumps({'latency': best, 'compile_s': compile_s}))\n"
    )
    out = run_isolated(code, timeout=1800.0)
    return out if isinstance(out, dict) else {"latency": None, "compile_s": None}


def torch_latency_isolated(spec: str, specs: Sequence[InputSpec], device: str = "cpu", seed: int = 0) -> float | None:
    """PyTorch eager seconds of the model in a fresh process (`torch_timing`), or None."""
    lat = torch_timing(spec, specs, device=device, seed=seed).get("latency")
    return float(lat) if isinstance(lat, (int, float)) else None
