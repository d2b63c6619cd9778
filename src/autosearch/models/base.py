"""The one interface every cost model implements, and the batch it scores.

A candidate schedule is described by a variable number of feature rows (one per buffer store for
TVM's PerStoreFeature), so a batch is the rows of all candidates stacked plus offsets that say
where each candidate starts. Scores are "higher = faster"; only their order within one workload
matters to search.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from autosearch.errors import InputError

if TYPE_CHECKING:
    from autosearch.training.dataset import Dataset

__all__ = ["DEFAULT_EXTRACTOR", "LABEL_SCHEME", "CostModel", "FeatureBatch", "TrainReport"]

#: The feature extractor our TVM backend writes (autosearch.backends.tvm.features.EXTRACTOR).
#: Spelled out here because models must not import the TVM backend.
DEFAULT_EXTRACTOR: tuple[str, str] = ("per-store-feature", "tvm-0.27")
#: How labels are made from latencies (DESIGN.md); saved with every model.
LABEL_SCHEME = "min_latency/latency per (workload, target); failed = 0"


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
        width = n_features if n_features is not None else next((a.shape[1] for a in arrs if a.ndim == 2 and a.size), 0)
        arrs = [a.reshape(-1, width) if a.size == 0 else a for a in arrs]
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


@dataclass
class TrainReport:
    """What one `fit` did: per-epoch (or per-round) history and the time it took."""

    model: str
    history: list[dict[str, float]] = field(default_factory=list)  # epoch, train_loss, valid_loss, valid_top1...
    best_epoch: int | None = None
    train_time_s: float = 0.0
    n_train: int = 0
    n_valid: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "history": self.history, "best_epoch": self.best_epoch,
            "train_time_s": self.train_time_s, "n_train": self.n_train, "n_valid": self.n_valid,
        }


class CostModel(abc.ABC):
    """Orders the candidate schedules of one workload by predicted speed.

    Constructors store hyper-parameters only (scikit-learn style); `fit` does the work. After
    `fit` or `load`, `n_features` is the feature width the model accepts.
    """

    kind: ClassVar[str] = ""
    #: Constructor arguments saved in config.json ("params") and given back to the constructor by `load`.
    hyper: ClassVar[tuple[str, ...]] = ()
    extractor: tuple[str, str] = DEFAULT_EXTRACTOR
    n_features: int | None = None

    @abc.abstractmethod
    def fit(self, train: Dataset, valid: Dataset | None = None) -> TrainReport:
        """Train from scratch on `train`; `valid` (held-out workloads) drives early stopping."""

    @abc.abstractmethod
    def update(self, new: Dataset) -> None:
        """Cheap incremental training on newly measured candidates (used during tuning)."""

    @abc.abstractmethod
    def _predict(self, batch: FeatureBatch) -> np.ndarray:
        """Scores of a validated batch."""

    @abc.abstractmethod
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model directory (config.json + weights file)."""

    @classmethod
    @abc.abstractmethod
    def _from_dir(cls, path: str, config: dict[str, Any]) -> CostModel:
        """Rebuild from a directory whose config.json was already checked by `models.io`."""

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CostModel:
        """Load a model directory written by `save` (checks kind, format version and files)."""
        from autosearch.models.io import load_model

        model = load_model(path)
        if cls.kind and model.kind != cls.kind:
            raise InputError(f"{path} holds a {model.kind!r} model, not {cls.kind!r}")
        return model

    def predict(self, batch: FeatureBatch) -> np.ndarray:
        """float64 score per candidate, higher = faster. A candidate with no rows scores -inf."""
        if self.n_features is None:
            raise InputError(f"{self.kind} model is not trained: call fit() or load() first")
        batch.validate(self.n_features)
        if batch.n_candidates == 0:
            return np.zeros(0, dtype=np.float64)
        scores = np.asarray(self._predict(batch), dtype=np.float64).reshape(-1)
        empty = np.diff(batch.offsets) == 0
        if empty.any():
            scores = scores.copy()
            scores[empty] = -np.inf
        return scores

    @classmethod
    def _from_params(cls, config: dict[str, Any]) -> Any:
        """A fresh instance with the hyper-parameters saved in `config` (unknown keys ignored)."""
        return cls(**{k: v for k, v in config.get("params", {}).items() if k in cls.hyper})

    def _write_config(self, path: str | os.PathLike[str], weights: str) -> None:
        """config.json next to the weights file `save` just wrote."""
        from autosearch.models.io import write_config

        params = {k: getattr(self, k) for k in self.hyper}
        write_config(path, self.kind, weights, n_features=self.n_features, extractor=list(self.extractor), params=params)

    def _should_update(self, new: Dataset) -> bool:
        """The preamble every `update` shares: an untrained model is fitted on `new` instead
        (False), a batch with nothing to learn from is skipped (False), a wrong width is refused."""
        if self.n_features is None:
            self.fit(new)
            return False
        if new.n_candidates == 0 or not np.any(new.labels > 0):
            return False
        if new.n_features != self.n_features:
            raise InputError(f"features have width {new.n_features} but the model expects {self.n_features}")
        return True

    def _check_fit_input(self, train: Dataset, valid: Dataset | None) -> None:
        """The boundary checks every `fit` shares."""
        if train.n_candidates == 0:
            raise InputError("training dataset is empty: no candidates with features")
        if not np.any(train.labels > 0):
            raise InputError("training dataset has no successful measurement (every group failed)")
        if valid is not None and valid.n_features != train.n_features and valid.n_candidates:
            raise InputError(f"validation features have width {valid.n_features}, training has {train.n_features}")
        if self.n_features is not None and train.n_features != self.n_features:
            raise InputError(f"features have width {train.n_features} but the model expects {self.n_features}")
