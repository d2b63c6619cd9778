"""Measured schedules grouped into one batch per pipeline, as Halide's trainer groups them.

Why: the loss compares each schedule with the fastest of its batch, which only means something
within one program, so every batch holds one pipeline, its duplicate schedules merged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from autosearch.errors import InputError

__all__ = [
    "MAX_BATCH",
    "PipelineBatch",
    "SampleLike",
    "group_samples",
]


class SampleLike(Protocol):
    """One measured schedule of one pipeline (e.g. a `.sample` file's contents)."""

    pipeline_id: int
    runtime_ms: float

    @property
    def num_stages(self) -> int: ...

    @property
    def schedule_features(self) -> np.ndarray: ...

    @property
    def pipeline_features(self) -> np.ndarray: ...


MAX_BATCH = 1024


@dataclass
class PipelineBatch:
    """All unique schedules of one pipeline, ready for the network."""

    pipeline_id: int
    pipeline_features: torch.Tensor  # (S, 40, 7)
    schedule_features: torch.Tensor  # (N, S, 39)
    runtimes_ms: torch.Tensor  # (N,)
    paths: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return int(self.runtimes_ms.shape[0])


def _unique_schedules(samples: Iterable[SampleLike]) -> list[SampleLike]:
    """Merge samples with identical schedule features, keeping the fastest runtime (as Halide does)."""
    best: dict[tuple[int, bytes], SampleLike] = {}
    for s in samples:
        k = (s.pipeline_id, np.ascontiguousarray(s.schedule_features).tobytes())
        if k not in best or s.runtime_ms < best[k].runtime_ms:
            best[k] = s
    return list(best.values())


def group_samples(samples: Sequence[SampleLike], min_schedules: int = 2) -> list[PipelineBatch]:
    """Group by pipeline_id, merge duplicate schedules, drop groups with too few schedules
    (Halide's tool needs 8; the default 2 lets tiny test batches train)."""
    by_pid: dict[int, list[SampleLike]] = {}
    for s in samples:
        by_pid.setdefault(s.pipeline_id, []).append(s)
    out = []
    for pid in sorted(by_pid):
        group = by_pid[pid]
        stages = group[0].num_stages
        bad = [str(getattr(s, "path", "")) for s in group if s.num_stages != stages]
        if bad:
            raise InputError(
                f"pipeline_id {pid}: samples disagree on the number of stages ({bad[0]}); pipeline ids must be unique per pipeline"
            )
        uniq = _unique_schedules(group)
        if len(uniq) < max(1, min_schedules):
            continue
        out.append(
            PipelineBatch(
                pid,
                torch.from_numpy(np.ascontiguousarray(group[0].pipeline_features)),
                torch.from_numpy(np.stack([u.schedule_features for u in uniq])),
                torch.tensor([u.runtime_ms for u in uniq], dtype=torch.float32),
                [str(getattr(u, "path", "")) for u in uniq],
            )
        )
    return out
