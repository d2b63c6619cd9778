"""The device descriptor of a target: what a cost model needs to know about the hardware.

Why: one model should serve several devices, and every record should say which device it came
from (seed 001's "device attributes"). A descriptor is a small dict of numbers: what the target
says (cores, ISA level / SIMD width from its mcpu), what the machine says (caches, clock), and two
things only a measurement tells: memory bandwidth (a STREAM-like triad) and peak FLOP/s (an FMA
kernel), both built by TVM for the target itself, so `mcpu=x86-64` measures SSE2 code and
`num-cores=1` one thread. Profiling takes about a second; the store caches the result per
(device fingerprint, target), see `autosearch.features.device.device_descriptor`.

CUDA targets read SM count, L2, shared memory, warp size and clock from the device API when a GPU
is present, and measure bandwidth and peak FLOP/s with the same two kernels bound to GPU threads
(the device API has no memory clock or bus width); without a GPU only what the target says.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = [
    "DESCRIPTOR_VERSION",
    "cpu_caches",
    "cpu_clock_mhz",
    "isa_info",
    "measure_bandwidth",
    "measure_cuda_bandwidth",
    "measure_cuda_peak_flops",
    "measure_peak_flops",
    "profile_target",
    "runnable_here",
    "static_descriptor",
]

#: Bumped when a field's meaning or the measuring kernels change (stored with every descriptor).
DESCRIPTOR_VERSION = 1

# ISA levels of x86-64 (psABI micro-architecture levels) and their SIMD width in bits.
_X86_LEVELS = (
    (4, 512, ("avx512f", "avx512bw", "avx512dq", "avx512vl")),
    (3, 256, ("avx2", "fma", "bmi2")),
    (2, 128, ("sse4.2", "popcnt")),
)


def isa_info(target: Any) -> dict[str, Any]:
    """ISA level (x86-64-v1..v4 as 1..4), SIMD width in bits and FMA, from the target's mcpu/features."""
    from tvm.target import codegen

    kind = target.kind.name
    if kind != "llvm":
        return {"isa_level": 0, "simd_bits": 0, "fma": 0}
    try:
        feats = {str(k) for k in codegen.llvm_get_cpu_features(target)}
    except Exception:  # an unknown mcpu / non-x86 triple: no feature list
        feats = set()
    triple = str(target.attrs.get("mtriple", "") or codegen.llvm_get_system_triple())
    if triple.startswith(("aarch64", "arm64")):
        bits = 512 if "sve" in feats else 128
        return {"isa_level": 2 if "sve" in feats else 1, "simd_bits": bits, "fma": 1}
    for level, bits, need in _X86_LEVELS:
        if all(f in feats for f in need):
            return {"isa_level": level, "simd_bits": bits, "fma": int("fma" in feats)}
    return {"isa_level": 1, "simd_bits": 128, "fma": int("fma" in feats)}


def _size_bytes(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(text) if text.isdigit() else 0


def cpu_caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int]:
    """Per-core L1 data, L2 and shared L3 sizes in bytes (0 when the OS does not say)."""
    out = {"l1d_bytes": 0, "l2_bytes": 0, "l3_bytes": 0}
    base = Path(root)
    if not base.is_dir():
        return out
    for idx in sorted(base.glob("index*")):
        try:
            level = (idx / "level").read_text().strip()
            ctype = (idx / "type").read_text().strip()
            size = _size_bytes((idx / "size").read_text())
        except OSError:
            continue
        if level == "1" and ctype in ("Data", "Unified"):
            out["l1d_bytes"] = size
        elif level == "2":
            out["l2_bytes"] = size
        elif level == "3":
            out["l3_bytes"] = size
    return out


def cpu_clock_mhz() -> float:
    """The nominal (max) clock in MHz: cpufreq if present, else /proc/cpuinfo's current clock."""
    f = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    try:
        return int(f.read_text()) / 1000.0
    except (OSError, ValueError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1])
    except (OSError, ValueError):
        pass
    return 0.0


def _cores(target: Any) -> int:
    from autosearch.backends.tvm.target import physical_cores

    n = target.attrs.get("num-cores") if target.kind.name == "llvm" else None
    return int(n) if n else physical_cores()


def static_descriptor(target: Any) -> dict[str, Any]:
    """Everything but the measured numbers (cheap, no kernel is built)."""
    if target.kind.name == "cuda":
        return _cuda_descriptor(target)
    desc: dict[str, Any] = {"kind": target.kind.name, "cores": _cores(target), **isa_info(target)}
    desc.update(cpu_caches())
    desc["clock_mhz"] = round(cpu_clock_mhz(), 1)
    return desc


def _cuda_descriptor(target: Any) -> dict[str, Any]:
    """SM count, bandwidth, L2, shared memory, warp size: from the device API when a GPU exists."""
    attrs = dict(target.attrs)
    desc: dict[str, Any] = {
        "kind": "cuda",
        "arch": str(attrs.get("arch", "")),
        "warp_size": int(attrs.get("thread_warp_size", 32)),
        "shared_mem_per_block": int(attrs.get("max_shared_memory_per_block", 0)),
        "max_threads_per_block": int(attrs.get("max_threads_per_block", 0)),
        "sm_count": 0,
        "l2_bytes": 0,
        "mem_bandwidth_gbs": 0.0,
        "clock_mhz": 0.0,
        "from_device": 0,
    }
    try:
        import tvm

        dev = tvm.cuda(0)
        if not dev.exist:
            return desc
        desc.update(
            sm_count=int(dev.multi_processor_count),
            warp_size=int(dev.warp_size),
            shared_mem_per_block=int(dev.max_shared_memory_per_block),
            max_threads_per_block=int(dev.max_threads_per_block),
            clock_mhz=float(dev.max_clock_rate) / 1000.0,
            from_device=1,
        )
        l2 = getattr(dev, "l2_cache_size_bytes", None)
        desc["l2_bytes"] = int(l2) if l2 else 0
    except Exception:  # no CUDA runtime in this TVM build, or no driver: keep the target's numbers
        pass
    return desc


def _triad_func(n: int, cores: int, lanes: int) -> Any:
    """a = b + s * c over n floats, split into one chunk per core, vectorised `lanes` wide."""
    from tvm.script import tirx as T

    chunk = n // cores
    inner = chunk // lanes

    @T.prim_func
    def triad(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32"), c: T.Buffer((n,), "float32")) -> None:  # type: ignore[valid-type]  # TVMScript buffer annotations are not Python types
        T.func_attr({"tirx.noalias": True})
        for p in T.parallel(cores):
            for i in range(inner):
                for v in T.vectorized(lanes):
                    a[p * chunk + i * lanes + v] = (
                        b[p * chunk + i * lanes + v] + T.float32(3.0) * c[p * chunk + i * lanes + v]
                    )

    return triad


def _fma_func(cores: int, width: int, steps: int) -> Any:
    """`width` independent multiply-add chains per core (registers only), `steps` long."""
    from tvm.script import tirx as T

    @T.prim_func
    def fma(x: T.Buffer((cores, width), "float32"), y: T.Buffer((cores, width), "float32")) -> None:  # type: ignore[valid-type]  # TVMScript buffer annotations are not Python types
        T.func_attr({"tirx.noalias": True})
        for p in T.parallel(cores):
            acc = T.decl_buffer((width,), "float32", scope="local")
            for j in T.vectorized(width):
                acc[j] = x[p, j]
            for _k in range(steps):
                for j in T.vectorized(width):
                    acc[j] = acc[j] * T.float32(0.999) + T.float32(0.001)
            for j in T.vectorized(width):
                y[p, j] = acc[j]

    return fma


def _best_seconds(rt: Any, name: str, args: list[Any], min_repeat_ms: int, dev: Any = None, number: int = 1) -> float:
    """Best of 3 timed repeats of `name` on `dev` (default: the CPU)."""
    import tvm

    ev = rt.mod.time_evaluator(name, dev or tvm.cpu(), number=number, repeat=3, min_repeat_ms=min_repeat_ms)
    return float(min(ev(*args).results))


def measure_bandwidth(target: Any, n: int = 1 << 23) -> float:
    """STREAM triad bandwidth in GB/s (3 arrays x n floats moved per run), built for `target`."""
    import numpy as np
    import tvm

    cores, lanes = _cores(target), max(isa_info(target)["simd_bits"] // 32, 1)
    n -= n % (cores * lanes)
    rt = tvm.compile(_triad_func(n, cores, lanes), target=target)
    dev = tvm.cpu()
    arrs = [tvm.runtime.tensor(np.full(n, 1.0 + i, dtype="float32"), dev) for i in range(3)]
    sec = _best_seconds(rt, "triad", arrs, 20)
    return 3 * n * 4 / sec / 1e9


def measure_peak_flops(target: Any, steps: int = 200_000) -> float:
    """GFLOP/s of independent multiply-add chains on every core, built for `target`."""
    import numpy as np
    import tvm

    cores, lanes = _cores(target), max(isa_info(target)["simd_bits"] // 32, 1)
    width = 8 * lanes  # 8 independent vector chains hide the FMA latency without spilling registers
    rt = tvm.compile(_fma_func(cores, width, steps), target=target)
    dev = tvm.cpu()
    x = tvm.runtime.tensor(np.ones((cores, width), "float32"), dev)
    y = tvm.runtime.tensor(np.zeros((cores, width), "float32"), dev)
    sec = _best_seconds(rt, "fma", [x, y], 20)
    return 2.0 * cores * width * steps / sec / 1e9


_CUDA_THREADS = 256


def _cuda_triad_func(n: int) -> Any:
    """a = b + s * c over n floats, one element per GPU thread, 256 threads a block."""
    from tvm.script import tirx as T

    blocks, threads = n // _CUDA_THREADS, _CUDA_THREADS

    @T.prim_func
    def triad(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32"), c: T.Buffer((n,), "float32")) -> None:  # type: ignore[valid-type]  # TVMScript buffer annotations are not Python types
        T.func_attr({"tirx.noalias": True})
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tx in T.thread_binding(threads, thread="threadIdx.x"):
                a[bx * threads + tx] = b[bx * threads + tx] + T.float32(3.0) * c[bx * threads + tx]

    return triad


def _cuda_fma_func(blocks: int, width: int, steps: int) -> Any:
    """`width` independent multiply-add chains per GPU thread (registers only), `steps` long."""
    from tvm.script import tirx as T

    threads = _CUDA_THREADS
    n = blocks * threads * width

    @T.prim_func
    def fma(x: T.Buffer((n,), "float32"), y: T.Buffer((n,), "float32")) -> None:  # type: ignore[valid-type]  # TVMScript buffer annotations are not Python types
        T.func_attr({"tirx.noalias": True})
        for bx in T.thread_binding(blocks, thread="blockIdx.x"):
            for tx in T.thread_binding(threads, thread="threadIdx.x"):
                acc = T.decl_buffer((width,), "float32", scope="local")
                for j in T.unroll(width):
                    acc[j] = x[(bx * threads + tx) * width + j]
                for _k in range(steps):
                    for j in T.unroll(width):
                        acc[j] = acc[j] * T.float32(0.999) + T.float32(0.001)
                for j in T.unroll(width):
                    y[(bx * threads + tx) * width + j] = acc[j]

    return fma


def measure_cuda_bandwidth(target: Any, n: int = 1 << 26) -> float:
    """STREAM triad bandwidth of GPU 0 in GB/s (3 arrays x n floats, 768 MB a run by default)."""
    import tvm

    n -= n % _CUDA_THREADS
    rt = tvm.compile(_cuda_triad_func(n), target=target)
    dev = tvm.cuda(0)
    arrs = [tvm.runtime.empty((n,), "float32", dev) for _ in range(3)]
    sec = _best_seconds(rt, "triad", arrs, 50, dev, number=10)
    return 3 * n * 4 / sec / 1e9


def measure_cuda_peak_flops(target: Any, steps: int = 4096) -> float:
    """FP32 GFLOP/s of GPU 0: 8 independent multiply-add chains per thread, 16 blocks per SM."""
    import numpy as np
    import tvm

    dev = tvm.cuda(0)
    blocks, width = 16 * int(dev.multi_processor_count), 8
    rt = tvm.compile(_cuda_fma_func(blocks, width, steps), target=target)
    n = blocks * _CUDA_THREADS * width
    x = tvm.runtime.tensor(np.ones(n, "float32"), dev)
    y = tvm.runtime.empty((n,), "float32", dev)
    sec = _best_seconds(rt, "fma", [x, y], 50, dev, number=10)
    return 2.0 * n * steps / sec / 1e9


def runnable_here(target: Any) -> bool:
    """Whether this machine can run code built for `target` (an LLVM target whose CPU features it has)."""
    from tvm.target import codegen

    from autosearch.backends.tvm.target import host_target

    if target.kind.name != "llvm":
        return False
    try:
        want = {str(f) for f in codegen.llvm_get_cpu_features(target)}
        have = {str(f) for f in codegen.llvm_get_cpu_features(host_target())}
    except Exception:  # an mcpu LLVM does not know
        return False
    return {f for f in want - have if not f.startswith(_TUNING_PREFIXES)} == set()


# LLVM lists scheduling/tuning hints beside instruction sets (haswell's `slow-3ops-lea` on a znver4
# host): they say how to emit code, not what the CPU can run.
_TUNING_PREFIXES = (
    "fast-",
    "slow-",
    "false-deps-",
    "no-bypass-",
    "ermsb",
    "prefer-",
    "tuning-",
    "idiv",
    "lea-",
    "macrofusion",
    "branchfusion",
    "allow-light",
    "fsrm",
    "vzeroupper",
    "insert-vzeroupper",
)


def profile_target(target: Any) -> dict[str, Any]:
    """The full descriptor of `target` on this machine: static facts + measured bandwidth and FLOP/s.

    Only a CPU target of this machine's architecture, or a CUDA target with a GPU present, is
    measured; without a GPU a CUDA target gets the target's own numbers and nothing measured.
    """
    from autosearch.backends.tvm.target import use_physical_cores

    use_physical_cores()  # measured in this process: every core, not TVM's half (if no kernel ran yet)
    t0 = time.perf_counter()
    desc = static_descriptor(target)
    if target.kind.name == "llvm":
        desc["mem_bandwidth_gbs"] = round(measure_bandwidth(target), 2)
        desc["peak_gflops"] = round(measure_peak_flops(target), 2)
    elif target.kind.name == "cuda" and desc.get("from_device"):
        desc["mem_bandwidth_gbs"] = round(measure_cuda_bandwidth(target), 2)
        desc["peak_gflops"] = round(measure_cuda_peak_flops(target), 2)
    desc["descriptor_version"] = DESCRIPTOR_VERSION
    desc["profile_seconds"] = round(time.perf_counter() - t0, 3)
    desc["profiled_at"] = time.time()
    return desc
