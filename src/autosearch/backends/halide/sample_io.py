"""Halide `.sample` files: one benchmarked schedule of one pipeline, byte-compatible with Halide.

Why this layout: Halide's `featurization_to_sample` and `adams2019_retrain_cost_model` read and
write exactly these bytes, so our samples train Halide's own tools and theirs train ours::

    per stage (reverse realization order, output stage first):
        float32 schedule_features[39]      (ScheduleFeatures, Featurization.h order)
        float32 pipeline_features[287]     (PipelineFeatures as ints cast to float: 7 type-mask
                                            values, then 40 x 7 histogram/access counts)
    float32 runtime in milliseconds
    int32   pipeline_id                    (samples are grouped by it when training)
    int32   schedule_id

Checks follow `retrain_cost_model.cpp`: a truncated file, a runtime above 100 s, or a negative,
NaN or > 1e14 schedule feature is rejected (Halide skips such files with a warning).
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autosearch.adams2019_sizes import NUM_FEATURES, NUM_PIPELINE_FEATURES, NUM_SCHEDULE_FEATURES
from autosearch.errors import InputError

__all__ = [
    "FEATURES_PER_STAGE",
    "NUM_PIPELINE_FEATURES",
    "NUM_SCHEDULE_FEATURES",
    "SCHEDULE_FEATURE_NAMES",
    "Sample",
    "featurization_matrix",
    "load_a_sample",
    "load_from_dir",
    "write_sample",
]

FEATURES_PER_STAGE = NUM_FEATURES
MAX_RUNTIME_MS = 100000.0
MAX_SAMPLE_FLOATS = 10 * 1024 * 1024  # Halide's read buffer; larger files are refused there too

#: ScheduleFeatures fields in Featurization.h order (the 39 per-stage schedule floats).
SCHEDULE_FEATURE_NAMES: tuple[str, ...] = (
    "num_realizations",
    "num_productions",
    "points_computed_per_realization",
    "points_computed_per_production",
    "points_computed_total",
    "points_computed_minimum",
    "innermost_loop_extent",
    "innermost_pure_loop_extent",
    "unrolled_loop_extent",
    "inner_parallelism",
    "outer_parallelism",
    "bytes_at_realization",
    "bytes_at_production",
    "bytes_at_root",
    "innermost_bytes_at_realization",
    "innermost_bytes_at_production",
    "innermost_bytes_at_root",
    "inlined_calls",
    "unique_bytes_read_per_realization",
    "unique_lines_read_per_realization",
    "allocation_bytes_read_per_realization",
    "working_set",
    "vector_size",
    "native_vector_size",
    "num_vectors",
    "num_scalars",
    "scalar_loads_per_vector",
    "vector_loads_per_vector",
    "scalar_loads_per_scalar",
    "bytes_at_task",
    "innermost_bytes_at_task",
    "unique_bytes_read_per_vector",
    "unique_lines_read_per_vector",
    "unique_bytes_read_per_task",
    "unique_lines_read_per_task",
    "working_set_at_task",
    "working_set_at_production",
    "working_set_at_realization",
    "working_set_at_root",
)
assert len(SCHEDULE_FEATURE_NAMES) == NUM_SCHEDULE_FEATURES


@dataclass
class Sample:
    """One `.sample`: the featurization matrix (stages x 326), runtime (ms) and the two ids."""

    features: np.ndarray
    runtime_ms: float
    pipeline_id: int
    schedule_id: int
    path: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def num_stages(self) -> int:
        return int(self.features.shape[0])

    @property
    def schedule_features(self) -> np.ndarray:
        """(stages, 39) raw schedule features."""
        return self.features[:, :NUM_SCHEDULE_FEATURES]

    @property
    def pipeline_features(self) -> np.ndarray:
        """(stages, 40, 7) pipeline features as the network sees them (type-mask row dropped)."""
        return self.features[:, NUM_SCHEDULE_FEATURES + 7 :].reshape(-1, 40, 7)

    def schedule_key(self) -> bytes:
        """Identity of the schedule: samples with equal schedule features are one schedule."""
        return np.ascontiguousarray(self.schedule_features).tobytes()

    def to_bytes(self) -> bytes:
        return np.ascontiguousarray(self.features, dtype="<f4").tobytes() + struct.pack(
            "<fii", self.runtime_ms, self.pipeline_id, self.schedule_id
        )


def featurization_matrix(raw: bytes | np.ndarray, source: str = "<featurization>") -> np.ndarray:
    """Reshape a Halide featurization (bytes or flat floats) into a (stages, 326) float32 matrix."""
    arr = (
        np.frombuffer(raw, dtype="<f4")
        if isinstance(raw, (bytes, bytearray, memoryview))
        else np.asarray(raw, np.float32)
    )
    if arr.size == 0 or arr.size % FEATURES_PER_STAGE:
        raise InputError(
            f"{source}: featurization of {arr.size} floats is not a whole number of {FEATURES_PER_STAGE}-float stages"
        )
    return arr.reshape(-1, FEATURES_PER_STAGE).astype(np.float32)


def _check(features: np.ndarray, runtime_ms: float, source: str) -> None:
    if not (math.isfinite(runtime_ms) and runtime_ms > 0):
        raise InputError(f"{source}: runtime {runtime_ms!r} ms is not a finite positive number")
    if runtime_ms > MAX_RUNTIME_MS:
        raise InputError(f"{source}: implausible runtime {runtime_ms} ms (> 100 s; Halide skips these too)")
    sf = features[:, :NUM_SCHEDULE_FEATURES]
    bad = ~np.isfinite(sf) | (sf < 0) | (sf > 1e14)
    if bad.any():
        s, i = (int(v[0]) for v in np.nonzero(bad))
        raise InputError(
            f"{source}: schedule feature {SCHEDULE_FEATURE_NAMES[i]} of stage {s} is {sf[s, i]!r} (negative, NaN or > 1e14)"
        )
    pf = features[:, NUM_SCHEDULE_FEATURES:]
    if (~np.isfinite(pf) | (pf < 0)).any():
        raise InputError(f"{source}: negative or NaN pipeline feature")


def load_a_sample(path: str | os.PathLike[str]) -> Sample:
    """Read and validate one `.sample` file; a bad file raises `InputError` naming the problem."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"sample file {p} does not exist")
    raw = p.read_bytes()
    if len(raw) % 4:
        raise InputError(f"{p}: {len(raw)} bytes is not a whole number of 4-byte values (truncated?)")
    n = len(raw) // 4
    if n >= MAX_SAMPLE_FLOATS:
        raise InputError(f"{p}: too large for a sample ({n} floats)")
    if n <= 3 or (n - 3) % FEATURES_PER_STAGE:
        raise InputError(f"{p}: truncated sample ({n} floats is not 3 + k x {FEATURES_PER_STAGE})")
    feats = np.frombuffer(raw, dtype="<f4", count=n - 3).reshape(-1, FEATURES_PER_STAGE).astype(np.float32)
    runtime, pid, sid = struct.unpack_from("<fii", raw, 4 * (n - 3))
    _check(feats, runtime, str(p))
    return Sample(feats, float(runtime), int(pid), int(sid), str(p))


def load_from_dir(
    path: str | os.PathLike[str], *, strict: bool = False, skipped: list[str] | None = None
) -> list[Sample]:
    """Every `*.sample` below `path` (recursively, sorted). Bad files are skipped (their one-line
    reasons appended to `skipped`) unless `strict`, where the first one raises."""
    root = Path(path)
    if not root.is_dir():
        raise InputError(f"samples directory {root} does not exist")
    out: list[Sample] = []
    for f in sorted(root.rglob("*.sample")):
        try:
            out.append(load_a_sample(f))
        except InputError as exc:
            if strict:
                raise
            if skipped is not None:
                skipped.append(str(exc))
    return out


def write_sample(
    path: str | os.PathLike[str], features: np.ndarray | bytes, runtime_ms: float, pipeline_id: int, schedule_id: int
) -> Sample:
    """Write a validated sample atomically (what `featurization_to_sample` does, runtime in ms)."""
    p = Path(path)
    feats = featurization_matrix(features, str(p))
    _check(feats, float(np.float32(runtime_ms)), str(p))
    if not (-(2**31) <= pipeline_id < 2**31 and -(2**31) <= schedule_id < 2**31):
        raise InputError(f"{p}: pipeline_id and schedule_id must fit in int32")
    s = Sample(feats, float(np.float32(runtime_ms)), int(pipeline_id), int(schedule_id), str(p))
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_bytes(s.to_bytes())
    os.replace(tmp, p)
    return s


def unique_schedules(samples: Iterable[Sample]) -> list[Sample]:
    """Merge samples with identical schedule features, keeping the fastest runtime (as Halide does)."""
    best: dict[tuple[int, bytes], Sample] = {}
    for s in samples:
        k = (s.pipeline_id, s.schedule_key())
        if k not in best or s.runtime_ms < best[k].runtime_ms:
            best[k] = s
    return list(best.values())


__all__.append("unique_schedules")
