"""The one interface every cost model implements (the batch it scores is `training.batch`).

Scores are "higher = faster"; only their order within one workload matters to search.
"""

from __future__ import annotations

import abc
import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from autosearch.errors import InputError
from autosearch.models.io import LABEL_SCHEME, read_config, write_config
from autosearch.training.batch import DEFAULT_EXTRACTOR, FeatureBatch

if TYPE_CHECKING:
    from autosearch.training.dataset import Dataset

__all__ = ["DEFAULT_EXTRACTOR", "LABEL_SCHEME", "CostModel", "FeatureBatch", "TrainReport"]


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
            "model": self.model,
            "history": self.history,
            "best_epoch": self.best_epoch,
            "train_time_s": self.train_time_s,
            "n_train": self.n_train,
            "n_valid": self.n_valid,
        }


class CostModel(abc.ABC):
    """Orders the candidate schedules of one workload by predicted speed.

    Constructors store hyper-parameters only (scikit-learn style); `fit` does the work. After
    `fit` or `load`, `n_features` is the feature width the model accepts.
    """

    kind: ClassVar[str] = ""
    #: The one file `save` writes and `_from_dir` reads; config.json must name exactly this file.
    weights_file: ClassVar[str] = ""
    #: Targets (canonical JSON) of the measurements it was trained on; saved in config.json, so a
    #: tuning run on another device can say that the model never saw it.
    trained_on: list[str] = []  # noqa: RUF012 - replaced per instance (set by training / load), never mutated
    #: The hyper-parameter that says how long training runs (epochs / boosting rounds); None when
    #: the model stops on its own criterion. `--epochs` and refitting after early stopping set it.
    length_param: ClassVar[str | None] = None
    #: Constructor arguments saved in config.json ("params") and given back to the constructor by
    #: `load`: by default every named argument of the class's `__init__` (scikit-learn's
    #: `get_params` rule, `__init_subclass__`), so a new argument is saved without a second list.
    hyper: ClassVar[tuple[str, ...]] = ()
    #: Whether `update` is a cheap incremental step that keeps what pretraining learned. A tuning
    #: run fine-tunes a pretrained model of such a class on its results and keeps any other
    #: pretrained model as it is, since refitting it on a run's few hundred results would forget
    #: what pretraining learned (search/retrain.py).
    incremental: ClassVar[bool] = False
    #: Hyper-parameters a model of this class gets when fitted from scratch on one run's results as
    #: the online half of a `PRIOR+KIND` blend (search/online_blend.py); none by default.
    online_fit_options: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    #: Whether it scores decision vectors of a `DecisionSpace` from tables, without building their
    #: tokens (`predict_space_members`).
    scores_decision_vectors: ClassVar[bool] = False

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "hyper" not in cls.__dict__:
            params = inspect.signature(cls.__init__).parameters.values()
            named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            cls.hyper = tuple(p.name for p in params if p.name != "self" and p.kind in named)

    extractor: tuple[str, str] = DEFAULT_EXTRACTOR
    n_features: int | None = None
    #: Whether it reads the device descriptor beside each candidate's features (a tuning run then
    #: describes its target to it); a model without one ranks schedules of the device it was trained on.
    device: bool = False
    #: How many networks (trained from different seeds) it scores with; their spread is the
    #: ensemble's uncertainty. One for a single model.
    members: int = 1

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
        """Load a model directory written by `save` (checks kind, format version, file and checksum).

        Call it on the concrete class; `autosearch.models.load_model` dispatches on the saved kind."""
        if not cls.kind:
            raise InputError("CostModel.load needs a concrete model class: use autosearch.models.load_model(path)")
        cfg = read_config(path)
        if cfg["kind"] != cls.kind:
            raise InputError(f"{path} holds a {cfg['kind']!r} model, not {cls.kind!r}")
        if cls.weights_file and cfg["weights"] != cls.weights_file:
            raise InputError(
                f"{path}: a {cls.kind} model keeps its weights in {cls.weights_file}, "
                f"config.json names {cfg['weights']!r}"
            )
        model = cls._from_dir(str(path), cfg)
        model.extractor = (cfg["extractor"][0], cfg["extractor"][1])
        model.n_features = cfg["n_features"]
        model.trained_on = [str(t) for t in cfg.get("trained_on", []) if isinstance(t, str)]
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

    def predict_members(self, batch: FeatureBatch) -> np.ndarray:
        """(members, candidates) scores of every ensemble member; a single model is its one member."""
        return self.predict(batch)[None, :]

    def predict_space_members(self, space: Any, x: np.ndarray, threads: int | None = None) -> np.ndarray:
        """(members, len(x)) scores of decision vectors `x` of a `DecisionSpace`, from tables: only
        for a class that `scores_decision_vectors`; the others score `space.tokens(x)` instead."""
        raise NotImplementedError(f"a {self.kind or type(self).__name__} model does not score decision vectors")

    @classmethod
    def _from_params(cls, config: dict[str, Any]) -> Any:
        """A fresh instance with the hyper-parameters saved in `config` (unknown keys ignored)."""
        return cls(**{k: v for k, v in config.get("params", {}).items() if k in cls.hyper})

    def _write_config(self, path: str | os.PathLike[str], weights: str) -> None:
        """config.json next to the weights file `save` just wrote (with the targets it was trained on)."""
        params = {k: getattr(self, k) for k in self.hyper}
        trained_on = sorted(self.trained_on or [])
        write_config(
            path,
            self.kind,
            weights,
            n_features=self.n_features,
            extractor=list(self.extractor),
            params=params,
            trained_on=trained_on,
        )

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
