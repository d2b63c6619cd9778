"""Device descriptors as model input, cached in the store; Nsight Compute metrics attached to records.

Why: a cost model that serves several devices must be told which one a candidate runs on. The
descriptor (backends/tvm/device.py) is measured once per (machine fingerprint, target) and kept
in the store's `devices` table; `descriptor_vector` turns it into a few scaled floats that a
model appends to every token row (`with_device`), so `-p device=true` is the same model reading
wider rows. Seed 001's profile features (load/store counts, shared-memory traffic, cache hit
rates, launch dims) come from Nsight Compute CSVs and are stored per record as the extractor
`NCU_EXTRACTOR`.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from autosearch.errors import InputError

__all__ = [
    "DEVICE_FIELDS",
    "DEVICE_WIDTH",
    "NCU_EXTRACTOR",
    "NCU_METRICS",
    "append_device",
    "descriptor_vector",
    "device_descriptor",
    "import_ncu_csv",
    "parse_ncu_csv",
    "target_descriptors",
    "with_device",
]

#: The descriptor as model input: (field, how it is scaled). Versioned with the tlp model's config.
DEVICE_FIELDS: tuple[tuple[str, str], ...] = (
    ("is_gpu", "1 for a GPU target"),
    ("cores", "log2(1 + physical cores used), or log2(1 + SMs) on a GPU"),
    ("isa_level", "x86-64 micro-architecture level 1..4 (SSE2, SSE4.2, AVX2+FMA, AVX-512) / 4"),
    ("simd_bits", "SIMD register width / 512"),
    ("fma", "1 if the ISA has fused multiply-add"),
    ("l1d_bytes", "log2(1 + L1 data cache bytes) / 20"),
    ("l2_bytes", "log2(1 + L2 bytes) / 20"),
    ("l3_bytes", "log2(1 + L3 bytes) / 20 (0 on a GPU)"),
    ("clock_mhz", "clock in GHz"),
    ("mem_bandwidth_gbs", "log2(1 + measured memory bandwidth in GB/s)"),
    ("peak_gflops", "log2(1 + measured peak GFLOP/s)"),
    ("flops_per_byte", "log2(1 + peak GFLOP/s / bandwidth GB/s): the roofline ridge point"),
    ("shared_mem_per_block", "log2(1 + shared memory bytes per block) / 20 (GPU)"),
    ("warp_size", "warp size / 32 (GPU)"),
)
DEVICE_WIDTH = len(DEVICE_FIELDS)


def _lg(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return math.log2(1.0 + v) if v > 0 and math.isfinite(v) else 0.0


def descriptor_vector(desc: dict[str, Any]) -> np.ndarray:
    """float32 (DEVICE_WIDTH,) of a descriptor dict; missing fields are 0."""
    gpu = desc.get("kind") == "cuda"
    bw, gf = float(desc.get("mem_bandwidth_gbs") or 0.0), float(desc.get("peak_gflops") or 0.0)
    vals = {
        "is_gpu": 1.0 if gpu else 0.0,
        "cores": _lg(desc.get("sm_count") if gpu else desc.get("cores")),
        "isa_level": float(desc.get("isa_level") or 0) / 4.0,
        "simd_bits": float(desc.get("simd_bits") or 0) / 512.0,
        "fma": float(desc.get("fma") or 0),
        "l1d_bytes": _lg(desc.get("l1d_bytes")) / 20.0,
        "l2_bytes": _lg(desc.get("l2_bytes")) / 20.0,
        "l3_bytes": _lg(desc.get("l3_bytes")) / 20.0,
        "clock_mhz": float(desc.get("clock_mhz") or 0.0) / 1000.0,
        "mem_bandwidth_gbs": _lg(bw),
        "peak_gflops": _lg(gf),
        "flops_per_byte": _lg(gf / bw) if bw > 0 else 0.0,
        "shared_mem_per_block": _lg(desc.get("shared_mem_per_block")) / 20.0,
        "warp_size": float(desc.get("warp_size") or 0) / 32.0,
    }
    return np.asarray([vals[name] for name, _ in DEVICE_FIELDS], dtype=np.float32)


def device_descriptor(store: Any, target: Any, refresh: bool = False) -> dict[str, Any]:
    """The descriptor of `target` on this machine: from the store, else profiled (~1 s) and stored."""
    from autosearch.backends.tvm.device import profile_target
    from autosearch.backends.tvm.target import canonical_target, device_fingerprint

    fp, key = device_fingerprint(target), canonical_target(target)
    if not refresh:
        hit = store.device(fp, key)
        if hit is not None:
            return dict(hit)
    desc = profile_target(target)
    store.put_device(fp, key, desc)
    return desc


def target_descriptors(store: Any, targets: Iterable[str], profile_missing: bool = False) -> dict[str, dict[str, Any]]:
    """Descriptor per stored target string (the newest one stored for it on any machine).

    With `profile_missing`, a target with none is profiled here if this CPU can run its code
    (an LLVM target whose ISA features this host has); otherwise it is left out and the caller decides.
    """
    from autosearch.backends.tvm.device import runnable_here
    from autosearch.backends.tvm.target import parse_target

    known: dict[str, dict[str, Any]] = {}
    for row in store.devices():  # oldest first: the newest wins
        known[row["target"]] = row["descriptor"]
    out = {}
    for t in dict.fromkeys(targets):
        if t in known:
            out[t] = known[t]
        elif profile_missing and runnable_here(tgt := parse_target(t)):
            out[t] = device_descriptor(store, tgt)
    return out


def append_device(mats: Sequence[np.ndarray], vec: np.ndarray) -> list[np.ndarray]:
    """Every row of every candidate matrix with the device vector appended (what tuning scores)."""
    v = np.asarray(vec, dtype=np.float32).reshape(1, -1)
    return [np.concatenate([m, np.repeat(v, m.shape[0], axis=0)], axis=1) for m in mats]


def with_device(ds: Any, descriptors: dict[str, dict[str, Any]]) -> Any:
    """A copy of a training Dataset whose rows carry their group's device vector (last DEVICE_WIDTH columns)."""
    missing = sorted({g.target for g in ds.groups} - set(descriptors))
    if missing:
        raise InputError(
            f"no device descriptor for target {missing[0][:120]} ({len(missing)} target(s)): "
            "run `autosearch target --profile --target ...` on that device with this --db"
        )
    extra = np.zeros((ds.rows.shape[0], DEVICE_WIDTH), dtype=np.float32)
    vecs = {t: descriptor_vector(d) for t, d in descriptors.items()}
    for g in ds.groups:
        extra[ds.offsets[g.start] : ds.offsets[g.stop]] = vecs[g.target]
    return replace(ds, rows=np.concatenate([ds.rows, extra], axis=1))


# -- Nsight Compute ----------------------------------------------------------------------------------
#: (name, version) of the per-record Nsight Compute metrics in the features table (one row each).
NCU_EXTRACTOR = ("ncu-metrics", "v1")
#: Metrics kept, in column order, with how each is scaled (seed 001's profile features).
NCU_METRICS: tuple[tuple[str, str], ...] = (
    ("launch__grid_size", "log2"),
    ("launch__block_size", "log2"),
    ("launch__registers_per_thread", "log2"),
    ("launch__shared_mem_per_block_static", "log2"),
    ("launch__shared_mem_per_block_dynamic", "log2"),
    ("dram__bytes_read.sum", "log2"),
    ("dram__bytes_write.sum", "log2"),
    ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "log2"),
    ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "log2"),
    ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "log2"),
    ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "log2"),
    ("l1tex__t_sector_hit_rate.pct", "pct"),
    ("lts__t_sector_hit_rate.pct", "pct"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "pct"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "pct"),
    ("gpu__time_duration.sum", "log2"),
)
_UNIT = {
    "byte": 1.0,
    "kbyte": 1e3,
    "mbyte": 1e6,
    "gbyte": 1e9,
    "kibyte": 1024.0,
    "mibyte": 1024.0**2,
    "nsecond": 1.0,
    "usecond": 1e3,
    "msecond": 1e6,
    "second": 1e9,  # durations in ns
}
_ID = re.compile(r"(?:autosearch|as)_m?(\d+)")


def _number(text: str, unit: str = "") -> float | None:
    t = text.strip().replace(",", "")
    if t in ("", "n/a", "N/A", "-"):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    return v * _UNIT.get(unit.strip().lower().split("/")[0], 1.0)  # "Kbyte/block" -> Kbyte


def parse_ncu_csv(path: str | Path) -> dict[str, dict[str, float]]:
    """Kernel name -> {metric: value} (mean over launches) from `ncu --csv` output.

    Both layouts are read: `--page raw` (one row per launch, a units row under the header) and
    `--page details` (one row per metric: "Kernel Name", "Metric Name", "Metric Unit", "Metric Value").
    """
    p = Path(path)
    try:
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror}") from None
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]  # ncu prints ==PROF== lines before the table
    rows = list(csv.reader(lines))
    if not rows or "Kernel Name" not in rows[0]:
        raise InputError(f'{p} is not an Nsight Compute --csv table (no "Kernel Name" column)')
    head = rows[0]
    k = head.index("Kernel Name")
    sums: dict[str, dict[str, list[float]]] = {}
    if "Metric Name" in head and "Metric Value" in head:
        mn, mv = head.index("Metric Name"), head.index("Metric Value")
        mu = head.index("Metric Unit") if "Metric Unit" in head else None
        for r in rows[1:]:
            if len(r) != len(head):
                continue
            v = _number(r[mv], r[mu] if mu is not None else "")
            if v is not None:
                sums.setdefault(r[k], {}).setdefault(r[mn], []).append(v)
    else:
        has_units = len(rows) > 1 and len(rows[1]) > k and not rows[1][k].strip()  # raw page: units row
        units = rows[1] if has_units else [""] * len(head)
        body = rows[2:] if has_units else rows[1:]
        for r in body:
            if len(r) != len(head):
                continue
            for i, name in enumerate(head):
                if i == k:
                    continue
                v = _number(r[i], units[i] if i < len(units) else "")
                if v is not None:
                    sums.setdefault(r[k], {}).setdefault(name, []).append(v)
    if not sums:
        raise InputError(f"{p} has no kernel rows with numeric metrics")
    return {kn: {m: float(np.mean(vs)) for m, vs in ms.items()} for kn, ms in sums.items()}


def _ncu_vector(metrics: dict[str, float]) -> np.ndarray:
    out = []
    for name, scale in NCU_METRICS:
        v = metrics.get(name, 0.0)
        out.append(v / 100.0 if scale == "pct" else _lg(v))
    return np.asarray(out, dtype=np.float32).reshape(1, -1)


def import_ncu_csv(store: Any, path: str | Path) -> dict[str, Any]:
    """Attach Nsight Compute metrics to the records their kernels came from; returns a summary.

    A kernel is matched to a record by name: `autosearch_<measurement id>` (or `as_m<id>`) anywhere
    in the kernel name, else a kernel name that contains the first 12+ hex digits of a record's
    schedule hash (how a replay names its kernels). Kernels that match nothing are counted, not stored.
    """
    kernels = parse_ncu_csv(path)
    by_hash: dict[str, int] = {}
    ids: set[int] = set()
    for m in store.measurements():
        ids.add(m.id)
        by_hash[m.schedule_hash[:12]] = m.id
    items, unmatched = [], []
    for name, metrics in kernels.items():
        mid = None
        hit = _ID.search(name)
        if hit and int(hit.group(1)) in ids:
            mid = int(hit.group(1))
        else:
            for tok in re.findall(r"[0-9a-f]{12,}", name):
                mid = by_hash.get(tok[:12])
                if mid is not None:
                    break
        if mid is None:
            unmatched.append(name)
        else:
            items.append((mid, _ncu_vector(metrics)))
    n = store.add_features(items, NCU_EXTRACTOR) if items else 0
    return {"kernels": len(kernels), "attached": n, "unmatched": unmatched}
