"""Target detection and parsing.

Why: without `mcpu`, LLVM emits generic x86-64 (no AVX-512) and every measurement is of code
nobody would ship; a CUDA target without its limits makes MetaSchedule fail deep inside the
search. This module makes both impossible to get wrong by accident.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from typing import Any

import psutil

from autosearch.errors import TargetError, one_line
from autosearch.hostinfo import cpu_model_name, cpu_signature

__all__ = [
    "PRESETS",
    "canonical_target",
    "current_threads",
    "describe_target",
    "device_fingerprint",
    "host_cpu",
    "host_target",
    "is_gpu",
    "parse_target",
    "physical_cores",
    "runtime_threads",
    "set_runtime_threads",
    "set_user_threads",
    "use_physical_cores",
    "user_threads_warning",
]

#: TVM_NUM_THREADS as the user set it before autosearch ran (None: not set, we choose).
_USER_THREADS = os.environ.get("TVM_NUM_THREADS")

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


def physical_cores() -> int:
    """This machine's physical cores (logical ones where psutil cannot tell)."""
    return int(psutil.cpu_count(logical=False) or psutil.cpu_count() or 1)


def host_target(num_cores: int | None = None):
    """LLVM for this CPU: its `mcpu` and its physical core count."""
    import tvm

    return tvm.target.Target({"kind": "llvm", "mcpu": host_cpu(), "num-cores": int(num_cores or physical_cores())})


def _complete_cuda(cfg: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(cfg)
    for k, v in _CUDA_DEFAULTS.items():
        cfg.setdefault(k, v)
    cfg.setdefault("arch", "sm_90")
    return cfg


def _complete_llvm(cfg: dict[str, Any]) -> dict[str, Any]:
    """An LLVM target's `num-cores` (this machine's physical cores where it is not given:
    MetaSchedule refuses a CPU target without it, deep inside the search) and an `mcpu` checked
    against LLVM's list for the target's triple: LLVM would otherwise warn, compile for a generic
    CPU, and the rows would be stored under a CPU name nothing was compiled for."""
    from tvm.target import codegen

    cfg = dict(cfg)
    cfg.setdefault("num-cores", physical_cores())
    cores = cfg["num-cores"]
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        # TVM takes any integer; a negative count was tuned and stored as the threads kernels ran with
        raise TargetError(f"the target's num-cores must be a whole number >= 1, got {json.dumps(cores)}")
    mcpu = cfg.get("mcpu")
    if mcpu == "native":
        mcpu = cfg["mcpu"] = host_cpu()
    if mcpu is not None:
        triple = str(cfg.get("mtriple") or codegen.llvm_get_system_triple())
        if not isinstance(mcpu, str) or not codegen.llvm_is_valid_cpu(mcpu, triple):
            raise TargetError(
                f"LLVM does not know the CPU {mcpu!r} (mcpu) for {triple}; this machine's is {host_cpu()!r} "
                '(or "native"), and `llc -mcpu=help` lists the others'
            )
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
        if target.kind.name == "llvm" and ("num-cores" not in target.attrs or "mcpu" in target.attrs):
            return parse_target(dict(target.export()))  # a tag of an LLVM target: completed as a dict
        if target.kind.name == "cuda" and target.host is None:
            target = tvm.target.Target(target, host=host_target())
        return target
    if not isinstance(spec, dict) or "kind" not in spec:
        raise TargetError('a target JSON must be an object with a \'kind\' key, e.g. {"kind": "llvm"}')
    cfg = dict(spec)
    host = cfg.pop("host", None)
    if cfg["kind"] == "llvm":
        cfg = _complete_llvm(cfg)
    if isinstance(host, dict) and host.get("kind") == "llvm":
        host = _complete_llvm(host)
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


def runtime_threads(target) -> int:
    """Threads TVM's CPU runtime runs `target`'s kernels with here: TVM_NUM_THREADS if the user set
    it, else the target's `num-cores`, else this machine's physical cores.

    Why not TVM's default: on x86-64 TVM's runtime uses half the logical CPUs (it assumes
    hyper-threading), so on a 2-core machine without SMT every kernel ran on one thread while its
    schedule was made for two (measured: a tuned `batch_matmul/1x128x128x128` at 45.6 us on one
    thread, 20.2 us on two; PyTorch on two: 30 us)."""
    if _USER_THREADS is not None and _user_threads_valid():
        return int(_USER_THREADS)
    cores = dict(target.attrs).get("num-cores") if target.kind.name == "llvm" else None
    return int(cores) if cores else physical_cores()


def _user_threads_valid() -> bool:
    return bool(_USER_THREADS and _USER_THREADS.strip().isdigit() and int(_USER_THREADS) > 0)


def use_physical_cores() -> None:
    """Run this process's TVM kernels (and those of every process it starts) on the physical cores
    unless the user set TVM_NUM_THREADS to a thread count. TVM reads it once, when its thread pool
    first starts, so this must run before the first kernel; a runner's workers set their target's
    count themselves (`set_runtime_threads`). A TVM_NUM_THREADS that is no count (`abc`, `0`) is
    replaced, as `runtime_threads` ignores it (`user_threads_warning` says so)."""
    if not _user_threads_valid():
        os.environ["TVM_NUM_THREADS"] = str(physical_cores())


def user_threads_warning() -> str | None:
    """One line about a TVM_NUM_THREADS that is not a thread count (ignored: the kernels run on
    the physical cores) or that asks for more threads than this process has CPUs (they then share
    cores, and every timing measures that); None where it is fine or not set. The CLI prints it
    once, at start."""
    if _USER_THREADS is None:
        return None
    if not _user_threads_valid():
        return (
            f"TVM_NUM_THREADS={_USER_THREADS!r} is not a whole number >= 1: ignored, TVM's kernels run on "
            f"this machine's {physical_cores()} physical cores"
        )
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    n = int(_USER_THREADS)
    if n > cpus:
        return f"TVM_NUM_THREADS={n} is more than the {cpus} CPUs of this machine: the threads share cores"
    return None


def current_threads() -> int:
    """The threads TVM's runtime runs parallel kernels with in this process (starts its pool)."""
    import tvm_ffi

    return int(tvm_ffi.get_global_func("runtime.NumThreads")())


def set_runtime_threads(n: int) -> None:
    """This process's TVM kernels run on `n` threads (a runner worker's initializer, sparse timing).
    Call it before any kernel starts TVM's pool, which can shrink later but never grow."""
    os.environ["TVM_NUM_THREADS"] = str(n)
    import tvm_ffi

    tvm_ffi.get_global_func("runtime.config_threadpool")(0, n)


def set_user_threads(n: int) -> None:
    """`--threads n`: as if the user had set TVM_NUM_THREADS=n before autosearch ran, so this
    process's kernels, its workers' (`runtime_threads`) and `use_physical_cores` all keep n.
    Call it before any kernel starts TVM's pool here."""
    global _USER_THREADS
    _USER_THREADS = str(int(n))
    os.environ["TVM_NUM_THREADS"] = _USER_THREADS


def device_fingerprint(target) -> str:
    """Identifies the machine a measurement came from (CPU model, family and model numbers, cores,
    memory, target kind) and how many threads its kernels ran on (records before `runtime_threads`
    ran on TVM's default of half the logical CPUs, so they carry another fingerprint; records
    before the family/model numbers were added could not tell CPUs a hypervisor names alike)."""
    facts = {
        "cpu": cpu_model_name(),
        "cpu_id": cpu_signature(),
        "cores": physical_cores(),
        "mem_gb": round(psutil.virtual_memory().total / 2**30),
        "machine": platform.machine(),
        "kind": target.kind.name,
        "threads": runtime_threads(target),
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
        "physical_cores": physical_cores(),
        "logical_cores": psutil.cpu_count(),
        "runtime_threads": runtime_threads(target),
        "device_fingerprint": device_fingerprint(target),
    }
    if target.host is not None:
        info["host"] = str(target.host)
    return info
