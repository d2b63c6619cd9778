"""XGBoost on per-store rows with a pack-sum objective (MetaSchedule's XGBModel idea).

Why pack-sum: a candidate's score is the SUM of the tree outputs of its rows, so the model sees
each store separately yet is trained on the candidate's label. Differences from TVM's XGBModel:
the `hist` tree method, early stopping on held-out workloads' top-1 (not training RMSE), a floor
on the label weight so failed candidates still teach "slow", and incremental `update` that adds
trees instead of retraining from scratch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from autosearch.errors import InputError, one_line
from autosearch.models.base import CostModel, FeatureBatch, TrainReport
from autosearch.training.trainer import selection_key

__all__ = ["XGBPackSum"]


class _PackSumObjective:
    """Squared error of per-candidate sums, weighted by max(label, weight_floor)."""

    def __init__(self, seg: np.ndarray, labels: np.ndarray, weight_floor: float) -> None:
        self.seg, self.y = seg, labels
        self.w = np.maximum(labels, weight_floor)
        self.n = labels.shape[0]

    def __call__(self, row_pred: np.ndarray, _dtrain: Any) -> tuple[np.ndarray, np.ndarray]:
        cand = np.bincount(self.seg, weights=row_pred, minlength=self.n)
        g = ((cand - self.y) * self.w)[self.seg]
        h = self.w[self.seg]
        return g, h

    def loss(self, row_pred: np.ndarray) -> float:
        """Weighted mean squared error of the candidate sums (what the objective minimises)."""
        cand = np.bincount(self.seg, weights=row_pred, minlength=self.n)
        return float(np.sum(self.w * (cand - self.y) ** 2) / max(np.sum(self.w), 1e-12))


class _PackSumRank:
    """RankNet on per-candidate sums within each group, pairs weighted by their label gap.

    Why: only the order inside a workload matters, and the label gap makes swapping a 1.0 and a
    0.3 candidate cost more than swapping two slow ones, which favours top-k.
    """

    def __init__(self, seg: np.ndarray, labels: np.ndarray, bounds: list[tuple[int, int]]) -> None:
        self.seg, self.y, self.bounds, self.n = seg, labels, bounds, labels.shape[0]

    def _pairs(self, a: int, b: int, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        y = self.y[a:b]
        w = np.clip(y[:, None] - y[None, :], 0, None)  # > 0 only where i is faster than j
        norm = max(w.sum(), 1e-12) / (b - a)
        sig = 0.5 * (1 - np.tanh(0.5 * (s[a:b, None] - s[None, a:b])))  # sigmoid(-(s_i - s_j))
        return w / norm, sig, norm

    def __call__(self, row_pred: np.ndarray, _dtrain: Any) -> tuple[np.ndarray, np.ndarray]:
        s = np.bincount(self.seg, weights=row_pred, minlength=self.n)
        g, h = np.zeros(self.n), np.zeros(self.n)
        for a, b in self.bounds:
            w, sig, _ = self._pairs(a, b, s)
            ws, wh = w * sig, w * sig * (1 - sig)
            g[a:b] = ws.sum(0) - ws.sum(1)
            h[a:b] = wh.sum(0) + wh.sum(1)
        return g[self.seg], np.maximum(h[self.seg], 1e-6)

    def loss(self, row_pred: np.ndarray) -> float:
        s = np.bincount(self.seg, weights=row_pred, minlength=self.n)
        total = 0.0
        for a, b in self.bounds:
            w, sig, _ = self._pairs(a, b, s)
            total += float((w * -np.log(np.clip(1 - sig, 1e-12, None))).sum()) / (b - a)
        return total / max(len(self.bounds), 1)


def _objective(kind: str, ds: Any, weight_floor: float) -> Any:
    seg = ds.batch().segment_ids()
    if kind == "mse":
        return _PackSumObjective(seg, ds.labels, weight_floor)
    if kind == "rank":
        return _PackSumRank(seg, ds.labels, [(g.start, g.stop) for g in ds.groups])
    raise InputError(f"unknown xgb objective {kind!r}; choose mse or rank")


class XGBPackSum(CostModel):
    """XGBoost pack-sum regressor of normalised throughput; higher score = faster."""

    kind = "xgb"
    incremental: ClassVar[bool] = True  # `update` fine-tunes on a run's results
    #: One thread as a run's online model: a few hundred rows are fitted, and XGBoost's OpenMP
    #: threads spin when another process holds a core, which made such a fit many times slower.
    online_fit_options: ClassVar[Mapping[str, Any]] = MappingProxyType({"nthread": 1})
    weights_file: ClassVar[str] = "model.json"
    length_param: ClassVar[str | None] = "n_rounds"

    def __init__(
        self,
        max_depth: int = 10,
        eta: float = 0.2,
        gamma: float = 0.001,
        min_child_weight: float = 0.0,
        subsample: float = 1.0,
        colsample_bytree: float = 1.0,
        n_rounds: int = 200,
        eval_every: int = 10,
        patience: int = 5,
        stop_on: str = "top1",
        objective: str = "mse",
        weight_floor: float = 0.05,
        update_rounds: int = 30,
        nthread: int | None = None,
        seed: int = 0,
    ) -> None:
        self.max_depth, self.eta, self.gamma, self.min_child_weight = max_depth, eta, gamma, min_child_weight
        self.subsample, self.colsample_bytree = subsample, colsample_bytree
        self.n_rounds, self.eval_every, self.patience = n_rounds, eval_every, patience
        self.objective, self.stop_on = objective, stop_on
        self.weight_floor, self.update_rounds, self.nthread, self.seed = weight_floor, update_rounds, nthread, seed
        self.booster: Any = None

    def _params(self) -> dict[str, Any]:
        return {
            "max_depth": self.max_depth,
            "eta": self.eta,
            "gamma": self.gamma,
            "min_child_weight": self.min_child_weight,
            "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree,
            "tree_method": "hist",
            "base_score": 0.0,
            "nthread": self.nthread or os.cpu_count() or 1,
            "seed": self.seed,
            "disable_default_eval_metric": 1,
        }

    def fit(self, train: Any, valid: Any = None) -> TrainReport:
        import xgboost as xgb

        self.n_features = None
        self._check_fit_input(train, valid)
        self.extractor = train.extractor
        t0 = time.perf_counter()
        obj = _objective(self.objective, train, self.weight_floor)
        dtrain = xgb.DMatrix(train.rows, nthread=self._params()["nthread"])
        report = TrainReport(self.kind, n_train=train.n_candidates, n_valid=valid.n_candidates if valid else 0)
        has_valid = valid is not None and valid.n_groups > 0
        cb = _EvalCallback(self, train, obj, valid if has_valid else None, report)
        self.booster = xgb.train(self._params(), dtrain, num_boost_round=self.n_rounds, obj=obj, callbacks=[cb])
        if has_valid and report.best_epoch is not None:
            self.booster = self.booster[: report.best_epoch + 1]
        self.booster.set_param({"nthread": 1})  # scoring a few hundred candidates: threads cost more than they save
        self.n_features = train.n_features
        report.train_time_s = time.perf_counter() - t0
        return report

    def update(self, new: Any) -> None:
        import xgboost as xgb

        if not self._should_update(new):
            return
        obj = _objective(self.objective, new, self.weight_floor)
        self.booster = xgb.train(
            self._params(), xgb.DMatrix(new.rows), num_boost_round=self.update_rounds, obj=obj, xgb_model=self.booster
        )
        self.booster.set_param({"nthread": 1})

    def _predict(self, batch: FeatureBatch) -> np.ndarray:
        row = self.booster.inplace_predict(batch.rows) if batch.rows.shape[0] else np.zeros(0)
        return np.bincount(batch.segment_ids(), weights=row, minlength=batch.n_candidates)

    def save(self, path: str | os.PathLike[str]) -> None:
        from autosearch.models.io import prepare_dir

        if self.booster is None:
            raise InputError("cannot save an untrained xgb model")
        self.booster.save_model(str(prepare_dir(path) / "model.json"))
        self._write_config(path, self.weights_file)

    @classmethod
    def _from_dir(cls, path: str, config: dict[str, Any]) -> XGBPackSum:
        import xgboost as xgb

        model = cls._from_params(config)
        booster = xgb.Booster()
        try:
            booster.load_model(os.path.join(path, "model.json"))
        except xgb.core.XGBoostError as exc:
            first = one_line(exc)
            raise InputError(f"{path}/model.json is truncated or corrupt: {first[:200]}") from None
        booster.set_param({"nthread": 1})
        model.booster = booster
        return model


def _callback_base() -> type:
    from xgboost.callback import TrainingCallback

    return TrainingCallback


class _EvalCallback(_callback_base()):  # type: ignore[misc]
    """Every `eval_every` rounds: training loss, and validation loss + top-1/top-5 if there are
    validation groups; stops after `patience` evaluations without a better (top-1, top-5)."""

    def __init__(self, model: XGBPackSum, train: Any, obj: Any, valid: Any, report: TrainReport) -> None:
        super().__init__()
        from autosearch.training.trainer import quick_metrics

        self.model, self.train, self.obj, self.valid, self.report, self._qm = (
            model,
            train,
            obj,
            valid,
            report,
            quick_metrics,
        )
        if valid is not None:
            self.batch = valid.batch()
            self.seg = self.batch.segment_ids()
            self.vobj = _objective(model.objective, valid, model.weight_floor)
        self.best = (-1.0, -1.0)
        self.bad = 0

    def after_iteration(self, booster: Any, epoch: int, evals_log: Any) -> bool:
        if (epoch + 1) % self.model.eval_every and epoch + 1 != self.model.n_rounds:
            return False
        rec = {"epoch": epoch, "train_loss": self.obj.loss(booster.inplace_predict(self.train.rows))}
        if self.valid is None:
            self.report.history.append(rec)
            return False
        row = booster.inplace_predict(self.batch.rows)
        scores = np.bincount(self.seg, weights=row, minlength=self.batch.n_candidates)
        m = self._qm(scores, self.valid)
        rec.update(valid_loss=self.vobj.loss(row), valid_top1=m["top1"], valid_top5=m["top5"])
        self.report.history.append(rec)
        key = selection_key(m["top1"], m["top5"], self.model.stop_on, rec["valid_loss"], epoch)
        if key > self.best:
            self.best, self.bad, self.report.best_epoch = key, 0, epoch
        else:
            self.bad += 1
        return self.bad >= self.model.patience
