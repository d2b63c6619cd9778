"""The anchors: TVM's own `XGBModel` and `MLPModel`, trained on exactly our training groups.

Why adapters and not re-implementations: a comparison is only honest if the baseline is the code
MetaSchedule users actually run. These classes feed TVM's models the same (workload, target)
groups and cost convention (median seconds, failed = 1e10) that `XGBModel.update` and
`MLPModel.update` would build during tuning, call TVM's training code, and score candidates with
TVM's prediction code. Only persistence is ours: TVM saves with `np.save(allow_pickle=True)`
tarballs, which we do not load.

Workarounds for TVM 0.27 + torch 2.13, applied around TVM's calls without editing TVM:
- `SegmentSumMLPTrainer.train_full` passes `verbose=` to `StepLR` (removed from torch) and uses
  `step_size = epochs // 10` (0 below 10 epochs): a StepLR shim drops the one, clamps the other.
- it holds out `floor(0.2 * groups)` groups for model selection, which is 0 below 5 groups and then
  crashes on an empty concatenate: we raise `test_split` so at least one group is held out.
- its data loader needs float32 features (torch.tensor of float64 breaks the float32 weights).
- one candidate in a batch squeezes to a 0-d output: predictions use one batch per call and pad a
  single candidate.
TVM is imported lazily, so `autosearch.models` stays free of TVM for everything else.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np

from autosearch.errors import InputError, one_line
from autosearch.models.base import CostModel, FeatureBatch, TrainReport

__all__ = ["TVMMLPAnchor", "TVMXGBAnchor"]

_FAILED_COST = 1e10  # what TVM's update() records for a candidate without run_secs


def _groups(ds: Any) -> Iterator[tuple[str, list[np.ndarray], np.ndarray]]:
    """(group hash, per-candidate float32 matrices, costs) for every group, as TVM builds them."""
    for gi, g in enumerate(ds.groups):
        b = ds.group_batch(gi)
        feats = [
            np.ascontiguousarray(b.rows[b.offsets[i] : b.offsets[i + 1]], dtype=np.float32)
            for i in range(b.n_candidates)
        ]
        lat = ds.latencies[g.start : g.stop]
        costs = np.where(np.isfinite(lat), lat, _FAILED_COST).astype(np.float32)
        keep = [i for i, f in enumerate(feats) if len(f)]  # TVM filters candidates without features
        yield f"{g.workload_key}|{g.target}", [feats[i] for i in keep], costs[keep]


def _split(batch: FeatureBatch) -> list[np.ndarray]:
    return [
        np.ascontiguousarray(batch.rows[batch.offsets[i] : batch.offsets[i + 1]], dtype=np.float32)
        for i in range(batch.n_candidates)
    ]


class TVMXGBAnchor(CostModel):
    """`tvm.s_tir.meta_schedule.cost_model.XGBModel`, trained as its `update()` would train it.

    TVM stops on the training set's pack-sum RMSE (50 rounds without improvement, up to 10000),
    so `valid` is not used: giving TVM our held-out set would not be how TVM runs.
    """

    kind = "tvm-xgb"
    weights_file: ClassVar[str] = "model.json"

    def __init__(
        self,
        max_depth: int = 10,
        eta: float = 0.2,
        gamma: float = 0.001,
        min_child_weight: float = 0.0,
        early_stopping_rounds: int = 50,
        nthread: int | None = None,
        seed: int = 43,
    ) -> None:
        self.max_depth, self.eta, self.gamma, self.min_child_weight = max_depth, eta, gamma, min_child_weight
        self.early_stopping_rounds, self.nthread, self.seed = early_stopping_rounds, nthread, seed
        self.tvm_model: Any = None

    def _make(self) -> Any:
        from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig, XGBModel

        cfg = XGBConfig(
            max_depth=self.max_depth,
            gamma=self.gamma,
            min_child_weight=self.min_child_weight,
            eta=self.eta,
            seed=self.seed,
            nthread=self.nthread or os.cpu_count() or 1,
        )
        return XGBModel(
            extractor="per-store-feature",
            config=cfg,
            num_warmup_samples=0,
            early_stopping_rounds=self.early_stopping_rounds,
            adaptive_training=False,
        )

    def _retrain(self) -> None:
        """TVM's XGBModel.update step 5: all groups, label = min_cost / cost, then `_train`."""
        m = self.tvm_model
        xs = [f for g in m.data.values() for f in g.features]
        with np.errstate(divide="ignore", invalid="ignore"):
            ys = np.concatenate(
                [
                    np.divide(g.min_cost, g.costs, out=np.zeros_like(g.costs), where=g.costs != 0)
                    for g in m.data.values()
                ]
            )
        m._train(xs=xs, ys=ys)

    def _add(self, ds: Any) -> None:
        from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup

        m = self.tvm_model
        for key, feats, costs in _groups(ds):
            if not feats:
                continue
            if key in m.data:
                m.data[key].append(feats, costs)
            else:
                m.data[key] = FeatureGroup(group_hash=key, features=feats, costs=costs)
            m.data_size += len(feats)

    def fit(self, train: Any, valid: Any = None) -> TrainReport:
        self.n_features = None
        self._check_fit_input(train, valid)
        self.extractor = train.extractor
        t0 = time.perf_counter()
        self.tvm_model = self._make()
        self._add(train)
        self._retrain()
        self.n_features = train.n_features
        n_rounds = int(self.tvm_model.booster.num_boosted_rounds())
        return TrainReport(self.kind, [{"epoch": n_rounds - 1}], None, time.perf_counter() - t0, train.n_candidates, 0)

    def update(self, new: Any) -> None:
        """As TVM does: add the new groups to the stored data and retrain from scratch."""
        if self.tvm_model is None or not self.tvm_model.data:
            raise InputError(
                "tvm-xgb keeps its training data in memory: update() needs a model trained in this process"
            )
        self._add(new)
        self._retrain()

    def _predict(self, batch: FeatureBatch) -> np.ndarray:
        keep = np.flatnonzero(np.diff(batch.offsets) > 0)
        out = np.zeros(batch.n_candidates)
        if keep.size:
            pred = self.tvm_model._predict(xs=_split(batch.select(keep)))
            out[keep] = pred[: keep.size]
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        from autosearch.models.io import prepare_dir

        if self.tvm_model is None or self.tvm_model.booster is None:
            raise InputError("cannot save an untrained tvm-xgb model")
        self.tvm_model.booster.save_model(str(prepare_dir(path) / "model.json"))
        self._write_config(path, self.weights_file)

    @classmethod
    def _from_dir(cls, path: str, config: dict[str, Any]) -> TVMXGBAnchor:
        import xgboost as xgb

        model = cls._from_params(config)
        model.tvm_model = model._make()
        booster = xgb.Booster()
        try:
            booster.load_model(os.path.join(path, "model.json"))
        except xgb.core.XGBoostError as exc:
            raise InputError(f"{path}/model.json is truncated or corrupt: {str(exc).strip()[:200]}") from None
        model.tvm_model.booster = booster
        model.tvm_model.data_size = 1  # past TVM's warm-up: predict with the booster, not at random
        return model


@contextlib.contextmanager
def _torch_compat() -> Iterator[None]:
    """Let TVM 0.27's trainer build its StepLR on torch 2.13 (see module docstring)."""
    import torch

    orig = torch.optim.lr_scheduler.StepLR

    class _StepLR(orig):  # type: ignore[misc, valid-type]
        def __init__(
            self, optimizer: Any, step_size: int, gamma: float = 0.1, last_epoch: int = -1, verbose: Any = None
        ) -> None:
            super().__init__(optimizer, step_size=max(1, int(step_size)), gamma=gamma, last_epoch=last_epoch)

    torch.optim.lr_scheduler.StepLR = _StepLR  # type: ignore[misc]
    try:
        yield
    finally:
        torch.optim.lr_scheduler.StepLR = orig  # type: ignore[misc]


class TVMMLPAnchor(CostModel):
    """`tvm.s_tir.meta_schedule.cost_model.MLPModel`: TVM's SegmentSumMLP + its `train_full`.

    TVM picks its own 20% of the training groups for model selection (at least one here), so
    `valid` is not used, as in TVM.
    """

    kind = "tvm-mlp"
    incremental: ClassVar[bool] = True  # `update` fine-tunes on a run's results
    weights_file: ClassVar[str] = "model.safetensors"
    length_param: ClassVar[str | None] = "epochs"

    def __init__(
        self,
        epochs: int = 50,
        batch_size: int = 128,
        lr: float = 7e-4,
        weight_decay: float = 1e-6,
        grad_clip: float = 0.5,
        hidden: int = 256,
        seed: int = 0,
    ) -> None:
        self.epochs, self.batch_size, self.lr, self.weight_decay = epochs, batch_size, lr, weight_decay
        self.grad_clip, self.hidden, self.seed = grad_clip, hidden, seed
        self.trainer: Any = None

    def _make(self, n_features: int) -> Any:
        from tvm.s_tir.meta_schedule.cost_model.mlp_model import (
            SegmentSumMLPConfig,
            SegmentSumMLPTrainer,
            State,
            TrainerConfig,
        )

        tc = TrainerConfig(
            batch_size=self.batch_size,
            learning_rate=self.lr,
            weight_decay=self.weight_decay,
            num_epoch_full=self.epochs,
            grad_clip_norm=self.grad_clip,
            train_verbose=1 << 30,
        )
        state = State(model_config=SegmentSumMLPConfig(input_dim=n_features, hidden_dim=self.hidden))
        return SegmentSumMLPTrainer(train_config=tc, state=state)

    def fit(self, train: Any, valid: Any = None) -> TrainReport:
        import torch

        self.n_features = None
        self._check_fit_input(train, valid)
        if train.n_groups < 2:
            raise InputError(
                "TVM's MLPModel needs at least 2 workload groups (it holds some out to pick its best epoch)"
            )
        self.extractor = train.extractor
        t0 = time.perf_counter()
        random.seed(self.seed)
        torch.manual_seed(self.seed)
        self.trainer = self._make(train.n_features)
        for key, feats, costs in _groups(train):
            if feats:
                self.trainer.state.add_to_group(feats, costs, key)
        n = len(self.trainer.state.data)
        self.trainer.test_split = max(0.2, 1.0 / n + 1e-9)  # >= 1 held-out group (TVM crashes on 0)
        with _torch_compat():
            self.trainer.train_full()
        self.n_features = train.n_features
        return TrainReport(
            self.kind, [{"epoch": self.epochs - 1}], None, time.perf_counter() - t0, train.n_candidates, 0
        )

    def update(self, new: Any) -> None:
        """TVM's `trainer.update` per group: incremental epochs, or a full retrain past 20% new data."""
        if self.trainer is None:
            self.fit(new)
            return
        with _torch_compat():
            for key, feats, costs in _groups(new):
                if len(feats) > 1:
                    self.trainer.update(feats, costs, key)

    def _predict(self, batch: FeatureBatch) -> np.ndarray:
        keep = np.flatnonzero(np.diff(batch.offsets) > 0)
        out = np.zeros(batch.n_candidates)
        if keep.size == 0:
            return out
        xs = _split(batch.select(keep))
        pad = len(xs) == 1
        if pad:
            xs = xs * 2
        old = self.trainer.batch_size
        self.trainer.batch_size = len(xs)  # one batch: TVM normalises features by the batch's max
        try:
            pred = np.asarray(self.trainer.predict_incremental(xs), dtype=np.float64).reshape(-1)
        finally:
            self.trainer.batch_size = old
        out[keep] = pred[:1] if pad else pred
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        from safetensors.torch import save_file

        from autosearch.models.io import prepare_dir

        if self.trainer is None:
            raise InputError("cannot save an untrained tvm-mlp model")
        state = {k: v.contiguous() for k, v in self.trainer.state.model.state_dict().items()}
        save_file(state, str(prepare_dir(path) / "model.safetensors"))
        self._write_config(path, self.weights_file)

    @classmethod
    def _from_dir(cls, path: str, config: dict[str, Any]) -> TVMMLPAnchor:
        from safetensors.torch import load_file

        model = cls._from_params(config)
        f = os.path.join(path, "model.safetensors")
        try:
            state = load_file(f)
        except Exception as exc:  # safetensors' own error types
            raise InputError(f"{f} is truncated or corrupt: {one_line(exc)}") from None
        model.trainer = model._make(int(config["n_features"]))
        try:
            model.trainer.state.model.load_state_dict(state)
        except RuntimeError as exc:
            raise InputError(f"{f} does not match its config.json: {one_line(exc)}") from None
        return model
