"""LightGBM LambdaRank on per-candidate features, grouped by workload.

Why a second tree model: LambdaRank optimises NDCG of each group's order directly, instead of
regressing throughput. LightGBM ranks fixed-width vectors, so each candidate's rows are pooled
into [sum over rows, max over rows] (2F columns); labels become integer relevance levels
`round(label * (levels - 1))`, and LightGBM's default exponential gains favour the fastest.
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

import numpy as np

from autosearch.errors import InputError, one_line
from autosearch.models.base import CostModel, FeatureBatch, TrainReport

__all__ = ["LGBMRank", "pool_candidates"]


def pool_candidates(batch: FeatureBatch) -> np.ndarray:
    """(N, 2F) float32: per-candidate sum and max of its rows (zeros for a candidate without rows)."""
    n, f = batch.n_candidates, batch.n_features
    out = np.zeros((n, 2 * f), dtype=np.float32)
    if n == 0 or batch.rows.shape[0] == 0:
        return out
    cs = np.zeros((batch.rows.shape[0] + 1, f), dtype=np.float64)
    np.cumsum(batch.rows, axis=0, dtype=np.float64, out=cs[1:])
    out[:, :f] = cs[batch.offsets[1:]] - cs[batch.offsets[:-1]]
    nonempty = np.diff(batch.offsets) > 0
    starts = batch.offsets[:-1][nonempty]
    out[nonempty, f:] = np.maximum.reduceat(batch.rows, starts, axis=0)
    return out


class LGBMRank(CostModel):
    """LightGBM `lambdarank` over pooled candidate features; higher score = faster."""

    kind = "lgbm-rank"
    incremental: ClassVar[bool] = True  # `update` fine-tunes on a run's results
    weights_file: ClassVar[str] = "model.txt"
    length_param: ClassVar[str | None] = "n_rounds"

    def __init__(
        self,
        n_rounds: int = 500,
        learning_rate: float = 0.05,
        num_leaves: int = 63,
        min_data_in_leaf: int = 20,
        feature_fraction: float = 0.8,
        levels: int = 31,
        patience: int = 50,
        update_rounds: int = 30,
        nthread: int | None = None,
        seed: int = 0,
    ) -> None:
        self.n_rounds, self.learning_rate, self.num_leaves = n_rounds, learning_rate, num_leaves
        self.min_data_in_leaf, self.feature_fraction, self.levels = min_data_in_leaf, feature_fraction, levels
        self.patience, self.update_rounds, self.nthread, self.seed = patience, update_rounds, nthread, seed
        self.booster: Any = None

    def _params(self) -> dict[str, Any]:
        return {
            "objective": "lambdarank",
            "metric": "ndcg",
            "eval_at": [1, 5],
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_data_in_leaf": self.min_data_in_leaf,
            "feature_fraction": self.feature_fraction,
            "num_threads": self.nthread or os.cpu_count() or 1,
            "seed": self.seed,
            "verbosity": -1,
            "label_gain": [float(2**i - 1) for i in range(self.levels)],
            "lambdarank_truncation_level": 30,
        }

    def _lgb_data(self, ds: Any, reference: Any = None) -> Any:
        import lightgbm as lgb

        rel = np.rint(np.clip(ds.labels, 0, 1) * (self.levels - 1)).astype(np.int32)
        return lgb.Dataset(
            pool_candidates(ds.batch()),
            label=rel,
            group=[g.size for g in ds.groups],
            reference=reference,
            free_raw_data=True,
            params={"verbosity": -1},
        )

    def fit(self, train: Any, valid: Any = None) -> TrainReport:
        import lightgbm as lgb

        self.n_features = None
        self._check_fit_input(train, valid)
        self.extractor = train.extractor
        t0 = time.perf_counter()
        dtrain = self._lgb_data(train)
        report = TrainReport(self.kind, n_train=train.n_candidates, n_valid=valid.n_candidates if valid else 0)
        log: dict[str, Any] = {}
        kw: dict[str, Any] = {}
        if valid is not None and valid.n_groups:
            kw["valid_sets"], kw["valid_names"] = [self._lgb_data(valid, dtrain)], ["valid"]
            kw["callbacks"] = [
                lgb.early_stopping(self.patience, first_metric_only=True, verbose=False),
                lgb.record_evaluation(log),
            ]
        self.booster = lgb.train(self._params(), dtrain, num_boost_round=self.n_rounds, **kw)
        if log:
            v = log["valid"]
            for i, (n1, n5) in enumerate(zip(v["ndcg@1"], v["ndcg@5"])):
                report.history.append({"epoch": i, "valid_ndcg1": n1, "valid_ndcg5": n5})
            report.best_epoch = int(self.booster.best_iteration) - 1 if self.booster.best_iteration else None
            if self.booster.best_iteration:
                self.booster = lgb.Booster(
                    model_str=self.booster.model_to_string(num_iteration=self.booster.best_iteration)
                )
        else:
            report.history.append({"epoch": self.n_rounds - 1})
        self.n_features = train.n_features
        report.train_time_s = time.perf_counter() - t0
        return report

    def update(self, new: Any) -> None:
        import lightgbm as lgb

        if not self._should_update(new):
            return
        self.booster = lgb.train(
            self._params(),
            self._lgb_data(new),
            num_boost_round=self.update_rounds,
            init_model=self.booster,
            keep_training_booster=True,
        )

    def _predict(self, batch: FeatureBatch) -> np.ndarray:
        return self.booster.predict(pool_candidates(batch), num_threads=1)

    def save(self, path: str | os.PathLike[str]) -> None:
        from autosearch.models.io import prepare_dir

        if self.booster is None:
            raise InputError("cannot save an untrained lgbm-rank model")
        self.booster.save_model(str(prepare_dir(path) / "model.txt"))
        self._write_config(path, self.weights_file)

    @classmethod
    def _from_dir(cls, path: str, config: dict[str, Any]) -> LGBMRank:
        import lightgbm as lgb

        model = cls._from_params(config)
        f = os.path.join(path, "model.txt")
        # LightGBM aborts the process (C++ abort) on some truncated files: check the framing first.
        with open(f, "rb") as fh:
            text = fh.read()
        if b"end of trees" not in text or b"end of parameters" not in text or b"pandas_categorical:" not in text[-200:]:
            raise InputError(f"{f} is truncated or corrupt: not a complete LightGBM text model")
        try:
            booster = lgb.Booster(model_file=f)
        except lgb.basic.LightGBMError as exc:
            raise InputError(f"{f} is truncated or corrupt: {one_line(exc)}") from None
        if booster.num_feature() != 2 * int(config["n_features"]):
            raise InputError(
                f"{f} is truncated or corrupt: it has {booster.num_feature()} inputs, config says {2 * int(config['n_features'])}"
            )
        model.booster = booster
        return model
