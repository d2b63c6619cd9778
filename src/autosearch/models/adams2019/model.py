"""Adams2019 behind autosearch's `CostModel` contract, on the store's `halide-adams2019` rows.

Why apart from the trainer: the contract (fit / update / predict / save / load on a `Dataset`
of featurization rows) is what `autosearch train` and the registry see; the trainer itself
works on `PipelineBatch`es and knows no store.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import torch

from autosearch.adams2019_sizes import BUFFER_SHAPES, NUM_FEATURES, NUM_SCHEDULE_FEATURES
from autosearch.errors import InputError
from autosearch.models.adams2019.batches import PipelineBatch
from autosearch.models.adams2019.net import Adams2019Net, ParamSet
from autosearch.models.adams2019.trainer import Adams2019Trainer
from autosearch.models.base import CostModel, FeatureBatch, TrainReport

__all__ = [
    "EXTRACTOR",
    "Adams2019Model",
    "batches_from_dataset",
]

#: The feature extractor the Halide backend stores (stages x 326 floats, the `.sample` layout).
EXTRACTOR: tuple[str, str] = ("halide-adams2019", "1")


# -- the CostModel contract ---------------------------------------------------------------------
def _stage_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, 326) featurization rows -> pipeline features (S, 40, 7), schedule features (S, 39)."""
    return rows[:, NUM_SCHEDULE_FEATURES + 7 :].reshape(-1, 40, 7), rows[:, :NUM_SCHEDULE_FEATURES]


def batches_from_dataset(data: Any, min_schedules: int = 2) -> list[PipelineBatch]:
    """One `PipelineBatch` per (workload, target) group of a `Dataset` of featurization rows
    (extractor `halide-adams2019`): successful candidates only, duplicates merged as Halide does."""
    if data.n_features not in (0, NUM_FEATURES):
        raise InputError(f"Adams2019 reads {NUM_FEATURES} features per stage (halide-adams2019), got {data.n_features}")
    out = []
    for gi, g in enumerate(data.groups):
        best: dict[bytes, tuple[float, np.ndarray]] = {}
        pf = None
        for i in range(g.start, g.stop):
            lat = float(data.latencies[i])
            if not math.isfinite(lat) or lat <= 0:
                continue
            rows = data.rows[data.offsets[i] : data.offsets[i + 1]]
            p, s = _stage_rows(rows)
            if pf is None:
                pf = p
            elif p.shape != pf.shape:
                raise InputError(f"group {g.name or g.workload_key}: candidates disagree on the number of stages")
            key = np.ascontiguousarray(s).tobytes()
            if key not in best or lat < best[key][0]:
                best[key] = (lat, s)
        if pf is None or len(best) < max(1, min_schedules):
            continue
        lats, scheds = zip(*best.values())
        out.append(
            PipelineBatch(
                gi,
                torch.from_numpy(np.ascontiguousarray(pf, dtype=np.float32)),
                torch.from_numpy(np.stack(scheds).astype(np.float32)),
                torch.tensor([x * 1000.0 for x in lats], dtype=torch.float32),
                [],
            )
        )
    return out


class Adams2019Model(CostModel):
    """Adams2019 behind the `CostModel` contract: features are the store's `halide-adams2019`
    rows (one 326-float row per stage), the score is minus the predicted runtime.

    `init` gives the starting parameters (e.g. `Weights.baseline()`; a dict of arrays works);
    without it, `fit` starts from seeded uniform(-0.5, 0.5) values as Halide's randomize does.
    `fit` trains `epochs` passes of Halide's loop from those parameters; `update` continues from
    the current ones for `update_epochs` passes on the new groups only.
    """

    kind: ClassVar[str] = "adams2019"
    weights_file: ClassVar[str] = "adams2019.safetensors"
    length_param: ClassVar[str | None] = "epochs"
    #: Not derived from `__init__`: its `init` (starting weights) is data, not a hyper-parameter.
    hyper: ClassVar[tuple[str, ...]] = ("learning_rate", "epochs", "update_epochs", "num_cores", "seed")
    extractor: tuple[str, str] = EXTRACTOR

    def __init__(
        self,
        learning_rate: float = 0.001,
        epochs: int = 200,
        update_epochs: int = 20,
        num_cores: int = 32,
        seed: int = 0,
        init: ParamSet | None = None,
    ) -> None:
        self.learning_rate = learning_rate
        self.epochs = epochs
        self.update_epochs = update_epochs
        self.num_cores = num_cores
        self.seed = seed
        self.init = init
        self.params_: dict[str, np.ndarray] | None = None

    def _start(self) -> dict[str, np.ndarray]:
        if self.params_ is not None:
            return self.params_
        if self.init is not None:
            return {k: np.asarray(v, np.float32) for k, v in self.init.items()}
        rng = np.random.default_rng(int(self.seed))
        return {k: rng.uniform(-0.5, 0.5, s).astype(np.float32) for k, s in BUFFER_SHAPES.items()}

    def _train(self, data: Any, epochs: int, start: dict[str, np.ndarray]) -> TrainReport:
        batches = batches_from_dataset(data)
        if not batches:
            raise InputError("no group has two or more successful, distinct schedules to train Adams2019 on")
        t0 = time.perf_counter()
        res = Adams2019Trainer(self.learning_rate, int(epochs), int(self.num_cores), seed=int(self.seed)).fit(
            start, batches
        )
        self.params_ = dict(res.weights)
        self.n_features = NUM_FEATURES
        history = [{"epoch": float(i + 1), "train_loss": v} for i, v in enumerate(res.losses)]
        return TrainReport(self.kind, history, None, time.perf_counter() - t0, res.schedules, 0)

    def fit(self, train: Any, valid: Any = None) -> TrainReport:
        self._check_fit_input(train, valid)
        self.params_ = None
        return self._train(train, int(self.epochs), self._start())

    def update(self, new: Any) -> None:
        if not self._should_update(new):
            return
        if batches_from_dataset(new):
            self._train(new, int(self.update_epochs), self._start())

    @torch.no_grad()
    def _predict(self, batch: FeatureBatch) -> np.ndarray:
        net = Adams2019Net(int(self.num_cores), self._start())
        out = np.full(batch.n_candidates, -np.inf)
        for i in range(batch.n_candidates):
            rows = batch.rows[batch.offsets[i] : batch.offsets[i + 1]]
            if rows.shape[0] == 0:
                continue
            pf, sf = _stage_rows(rows)
            out[i] = -float(
                net(torch.from_numpy(np.ascontiguousarray(pf)), torch.from_numpy(np.ascontiguousarray(sf))[None])[0]
            )
        return out

    def parameters(self) -> Iterator[tuple[str, np.ndarray]]:
        """The trained buffers (name, array): e.g. `Weights(dict(model.parameters()))`."""
        if self.params_ is None:
            raise InputError("adams2019 model is not trained: call fit() or load() first")
        return iter(self.params_.items())

    def save(self, path: str | os.PathLike[str]) -> None:
        from safetensors.numpy import save_file

        from autosearch.models.io import prepare_dir

        save_file(dict(self.parameters()), str(prepare_dir(path) / "adams2019.safetensors"))
        self._write_config(path, self.weights_file)

    @classmethod
    def _from_dir(cls, path: str, config: dict[str, Any]) -> Adams2019Model:
        from safetensors.numpy import load_file

        model = cls._from_params(config)
        try:
            arrays = load_file(os.path.join(path, config["weights"]))
        except Exception as exc:
            raise InputError(f"{path}: cannot read Adams2019 weights ({type(exc).__name__}: {exc})") from None
        Adams2019Net(int(model.num_cores), arrays)  # checks names and shapes
        model.params_ = {k: np.asarray(v, np.float32) for k, v in arrays.items()}
        return model
