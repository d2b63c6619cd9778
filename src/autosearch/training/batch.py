"""The batch a cost model scores: the feature rows of many candidates plus the offsets between them.

A candidate schedule is described by a variable number of feature rows (one per buffer store for
TVM's PerStoreFeature, one per trace instruction for trace tokens), so a batch is the rows of all
candidates stacked plus offsets that say where each candidate starts. It lives with the data
(below the models) because datasets are made of it and every model reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autosearch.errors import InputError
from autosearch.features.per_store import EXTRACTOR

__all__ = ["DEFAULT_EXTRACTOR", "FeatureBatch"]

#: The extractor datasets and models default to (PerStoreFeature, what collection and tuning write).
DEFAULT_EXTRACTOR: tuple[str, str] = EXTRACTOR


@dataclass(frozen=True)
class FeatureBatch:
    """Rows of many candidates: `rows[offsets[i]:offsets[i+1]]` belong to candidate i."""

    rows: np.ndarray  # float32 (R, F)
    offsets: np.ndarray  # int64 (N + 1,), offsets[0] = 0, offsets[-1] = R

    @classmethod
    def from_list(cls, mats: Sequence[np.ndarray], n_features: int | None = None) -> FeatureBatch:
        """Stack one (rows, F) matrix per candidate; an empty matrix is a candidate with no rows."""
        if len(mats) == 0:
            return cls(np.zeros((0, n_features or 0), np.float32), np.zeros(1, np.int64))
        arrs = [np.asarray(m, dtype=np.float32) for m in mats]
        width = (
            n_features if n_features is not None else next((a.shape[1] for a in arrs if a.ndim == 2 and a.size), None)
        )
        if width is None:  # every candidate without rows: their width, where they have one
            width = next((a.shape[1] for a in arrs if a.ndim == 2), 0)
        arrs = [a.reshape(0, width) if a.size == 0 else a for a in arrs]
        for i, a in enumerate(arrs):
            if a.ndim != 2:
                raise InputError(f"candidate {i} features must be a 2-D matrix, got shape {a.shape}")
        lens = np.array([a.shape[0] for a in arrs], dtype=np.int64)
        offsets = np.zeros(len(arrs) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        return cls(np.concatenate(arrs, axis=0), offsets)

    @property
    def n_candidates(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def n_features(self) -> int:
        return int(self.rows.shape[1])

    def segment_ids(self) -> np.ndarray:
        """Candidate index of every row (int64, length R)."""
        return np.repeat(np.arange(self.n_candidates, dtype=np.int64), np.diff(self.offsets))

    def select(self, idx: np.ndarray) -> FeatureBatch:
        """The sub-batch of the given candidates, in that order."""
        idx = np.asarray(idx, dtype=np.int64)
        starts, ends = self.offsets[idx], self.offsets[idx + 1]
        lens = ends - starts
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        if len(idx) == 0:
            return FeatureBatch(self.rows[:0], offsets)
        row_idx = np.repeat(starts - offsets[:-1], lens) + np.arange(offsets[-1])
        return FeatureBatch(self.rows[row_idx], offsets)

    def validate(self, n_features: int | None = None) -> None:
        """Raise InputError naming what is wrong with this batch (shape, width, NaN/inf)."""
        if self.rows.ndim != 2:
            raise InputError(f"feature rows must be a 2-D matrix, got shape {self.rows.shape}")
        o = self.offsets
        if o.ndim != 1 or o.size < 1 or o[0] != 0 or o[-1] != self.rows.shape[0] or np.any(np.diff(o) < 0):
            raise InputError("feature batch offsets must start at 0, never decrease and end at the row count")
        if n_features is not None and self.rows.shape[1] != n_features:
            raise InputError(f"features have width {self.rows.shape[1]} but the model expects {n_features}")
        if self.rows.size and not np.isfinite(self.rows).all():
            bad = int((~np.isfinite(self.rows)).any(axis=1).sum())
            raise InputError(f"features contain NaN or inf values in {bad} row(s)")
