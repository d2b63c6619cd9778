"""Target detection and parsing.

Why: without `mcpu`, LLVM emits generic x86-64 (no AVX-512) and every measurement is of code
nobody would ship; a CUDA target without its limits makes MetaSchedule fail deep inside the
search. This module makes both impossible to get wrong by accident.
"""

from __future__ import annotations

import hashlib
import json
import platform
from typing import Any

import psutil

from autosearch.errors import TargetError, one_line
from autosearch.hostinfo import cpu_model_name

__all__ = [
    "PRESETS",
    "canonical_target",
    "describe_target",
    "device_fingerprint",
    "host_cpu",
    "host_target",
    "is_gpu",
    "parse_target",
]

# Limits MetaSchedule needs on a CUDA target, by architecture (max threads per block,
# shared memory per block in bytes, warp size). Hopper/Ampere allow more shared memory with
# opt-in; 48 KiB is what a kernel gets without it.
_CUDA_DEFAULTS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152, "thread_warp_size": 32}

#: Named targets accepted by `--target`. "host" is detected at run time.
PRESETS: dict[str, dict[str, Any] | str] = {
    "host": "host",
    "llvm-generic": {"kind": "llvm"},
    "cuda-h100": "nvidia/nvidia-h100",
    "cuda-h200": {"kind": "cuda", "arch": "sm_90a", **_CUDA_DEFAULTS},
    "cuda-a100": "nvidia/nvidia-a100",
}


def host_cpu() -> str:
    """The LLVM name of this machine's CPU (e.g. `znver4`, `skylake-avx512`)."""
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


def _physical_cores() -> int:
    return int(psutil.cpu_count(logical=False) or psutil.cpu_count() or 1)


def host_target(num_cores: int | None = None):
    """LLVM for this CPU: its `mcpu` and its physical core count."""
    import tvm

    return tvm.target.Target({"kind": "llvm", "mcpu": host_cpu(), "num-cores": int(num_cores or _physical_cores())})


def _complete_cuda(cfg: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(cfg)
    for k, v in _CUDA_DEFAULTS.items():
        cfg.setdefault(k, v)
    cfg.setdefault("arch", "sm_90")
    return cfg


def parse_target(spec: str | dict[str, Any] | None = None):
    """A `tvm.target.Target` from None/"host", a preset name, a tag, or a JSON dict (string or dict).

    CUDA targets get MetaSchedule's required limits and the detected host CPU as host.
    """
    import tvm

    if spec is None or spec == "host":
        return host_target()
    if isinstance(spec, str):
        text = spec.strip()
        if text in PRESETS and PRESETS[text] != "host":
            spec = PRESETS[text]
        elif text.startswith("{"):
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TargetError(
                    f"--target is not valid JSON ({exc.msg} at column {exc.colno}): {text[:80]}"
                ) from None
        elif "/" in text:  # a TVM tag such as nvidia/nvidia-h100
            pass
        else:
            names = ", ".join(PRESETS)
            raise TargetError(f"unknown target {text!r}: give a JSON dict, a TVM tag, or one of: {names}")
    if isinstance(spec, str):
        try:
            target = tvm.target.Target(spec)
        except Exception as exc:  # TVM raises its own error types
            raise TargetError(f"TVM does not know target {spec!r}: {one_line(exc)}") from None
        if target.kind.name == "cuda" and target.host is None:
            target = tvm.target.Target(target, host=host_target())
        return target
    if not isinstance(spec, dict) or "kind" not in spec:
        raise TargetError('a target JSON must be an object with a \'kind\' key, e.g. {"kind": "llvm"}')
    cfg = dict(spec)
    host = cfg.pop("host", None)
    if cfg["kind"] == "llvm" and cfg.get("mcpu") == "native":
        cfg["mcpu"] = host_cpu()
    if cfg["kind"] == "cuda":
        cfg = _complete_cuda(cfg)
        host = host or host_target()
    try:
        return tvm.target.Target(cfg, host=host) if host is not None else tvm.target.Target(cfg)
    except Exception as exc:
        raise TargetError(f"invalid target {json.dumps(spec)[:120]}: {one_line(exc)}") from None


def is_gpu(target) -> bool:
    return target.kind.name in ("cuda", "rocm", "vulkan", "metal", "opencl")


def canonical_target(target) -> str:
    """The string a target is stored under: TVM's own JSON rendering, stable for equal targets."""
    return str(target)


def device_fingerprint(target) -> str:
    """Identifies the machine a measurement came from (CPU model, cores, memory, target kind)."""
    facts = {
        "cpu": cpu_model_name(),
        "cores": _physical_cores(),
        "mem_gb": round(psutil.virtual_memory().total / 2**30),
        "machine": platform.machine(),
        "kind": target.kind.name,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def describe_target(target) -> dict[str, Any]:
    """What `autosearch target` prints."""
    attrs = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in dict(target.attrs).items()}
    info: dict[str, Any] = {
        "target": canonical_target(target),
        "kind": target.kind.name,
        "attrs": attrs,
        "host_cpu": host_cpu(),
        "physical_cores": _physical_cores(),
        "logical_cores": psutil.cpu_count(),
        "device_fingerprint": device_fingerprint(target),
    }
    if target.host is not None:
        info["host"] = str(target.host)
    return info
