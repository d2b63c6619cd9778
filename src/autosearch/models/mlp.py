"""Segment-sum MLP: encode every feature row, sum a candidate's rows, refine, score.

The network (per-row encoder -> sum over the candidate's rows -> residual layers -> linear score)
follows MetaSchedule's SegmentSumMLP; the training is ours: minibatches of whole-group chunks so
the ranking losses (`pairwise`, `lambdarank`) only compare candidates of one workload, fixed
per-column feature scaling learned from the training set (TVM rescales by each batch's max, so a
score depends on what else is in the batch), and early stopping on held-out workloads' top-1.

`members=K` trains K networks from seeds seed..seed+K-1 and scores with their mean. Why: on
unseen operator families one network's top-1 swings by +-0.1 with the seed alone; the mean of
five is steadier and a little better (bench/README.md).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from autosearch.errors import InputError
from autosearch.models.base import CostModel, FeatureBatch, TrainReport
from autosearch.models.torch_training import clipped_step, early_stopped_run

__all__ = ["SegmentSumMLP", "SegmentSumNet"]


class SegmentSumNet(nn.Module):
    """rows (R, F) + segment ids (R,) -> one score per candidate."""

    scale: torch.Tensor  # a registered buffer: 1 / max |column| on the training set

    def __init__(self, n_features: int, hidden: int = 256, n_residual: int = 2) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(n_features))  # 1 / max |column| on the training set
        self.encoder = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.residual = nn.ModuleList(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU()) for _ in range(n_residual))
        self.head = nn.Linear(hidden, 1)

    def forward(self, rows: torch.Tensor, seg: torch.Tensor, n: int) -> torch.Tensor:
        x = self.encoder(rows * self.scale)
        h = torch.zeros(n, x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, seg, x)
        for layer in self.residual:
            h = h + layer(h)
        return self.head(h).squeeze(-1)


class SegmentSumMLP(CostModel):
    """Segment-sum MLP trained with `mse`, `pairwise` (RankNet) or `lambdarank` loss."""

    kind = "mlp"
    incremental: ClassVar[bool] = True  # `update` fine-tunes on a run's results
    weights_file: ClassVar[str] = "model.safetensors"
    length_param: ClassVar[str | None] = "epochs"

    def __init__(
        self,
        loss: str = "lambdarank",
        hidden: int = 256,
        n_residual: int = 2,
        lr: float = 7e-4,
        weight_decay: float = 1e-6,
        epochs: int = 30,
        groups_per_batch: int = 4,
        cands_per_group: int = 32,
        grad_clip: float = 1.0,
        patience: int = 6,
        stop_on: str = "top1",
        update_epochs: int = 3,
        seed: int = 0,
        members: int = 1,
    ) -> None:
        if int(members) < 1:
            raise InputError(f"members must be >= 1, got {members}")
        self.loss, self.hidden, self.n_residual = loss, hidden, n_residual
        self.lr, self.weight_decay, self.epochs = lr, weight_decay, epochs
        self.groups_per_batch, self.cands_per_group, self.grad_clip = groups_per_batch, cands_per_group, grad_clip
        self.patience, self.stop_on, self.update_epochs, self.seed = patience, stop_on, update_epochs, seed
        self.members = int(members)
        self.nets: list[SegmentSumNet] = []  # the trained members; scores are their mean
        self.net: SegmentSumNet | None = None  # the member being trained or updated

    # -- training ----------------------------------------------------------------------------
    def fit(self, train: Any, valid: Any = None, progress: Any = None) -> TrainReport:
        """Train from scratch. `progress(epoch, record)` is called after every epoch (CLI bar).

        With several members, each early-stops on its own; the report keeps every member's
        history (records carry "member") and its best epoch is the members' median.
        """
        from autosearch.training.losses import get_loss
        from autosearch.training.trainer import fit_members, selection_key

        loss_fn = get_loss(self.loss)
        selection_key(0.0, 0.0, self.stop_on)  # validate the name before training
        self.n_features = None
        self._check_fit_input(train, valid)
        self.extractor = train.extractor

        def one(seed: int, tag: Any) -> tuple[Any, TrainReport]:
            report = self._fit_member(train, valid, loss_fn, seed, tag)
            assert self.net is not None  # _fit_member always builds one
            return self.net, report

        self.nets, report = fit_members(self.members, self.seed, one, progress)
        return report

    def _fit_member(self, train: Any, valid: Any, loss_fn: Any, seed: int, progress: Any) -> TrainReport:
        """One network from scratch (into self.net), early-stopped on `valid` if given."""
        from autosearch.training.trainer import column_scale, selection_key

        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        self.net = SegmentSumNet(train.n_features, self.hidden, self.n_residual)
        self.net.scale.copy_(torch.from_numpy(column_scale(train.rows, train.n_features)))
        self.nets = [self.net]  # validation scores this member alone
        self.n_features = train.n_features
        opt = torch.optim.Adam(self.net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        return early_stopped_run(
            self.kind,
            self.net,
            train,
            valid,
            self.epochs,
            self.patience,
            lambda: self._run_epoch(train, loss_fn, opt, rng),
            lambda: self._validate(valid, loss_fn),
            lambda r: selection_key(r["valid_top1"], r["valid_top5"], self.stop_on, r["valid_loss"], r["epoch"]),
            progress,
        )

    def _run_epoch(self, data: Any, loss_fn: Any, opt: torch.optim.Optimizer, rng: np.random.Generator) -> float:
        from autosearch.training.trainer import group_minibatches

        assert self.net is not None
        self.net.train()
        total, steps = 0.0, 0
        labels_all = torch.from_numpy(data.labels.astype(np.float32))
        for idx in group_minibatches(data, self.groups_per_batch, self.cands_per_group, rng):
            mask = torch.from_numpy(idx >= 0)
            flat = idx[idx >= 0]
            scores_flat = self._forward(data.batch(flat))
            scores = torch.zeros(mask.shape, dtype=scores_flat.dtype).masked_scatter(mask, scores_flat)
            labels = torch.zeros(mask.shape).masked_scatter(mask, labels_all[torch.from_numpy(flat)])
            loss = loss_fn(scores, labels, mask)
            total += clipped_step(self.net, opt, loss, self.grad_clip)
            steps += 1
        return total / max(steps, 1)

    @torch.no_grad()
    def _validate(self, valid: Any, loss_fn: Any) -> dict[str, float]:
        from autosearch.training.trainer import group_minibatches, quick_metrics

        assert self.net is not None
        self.net.eval()
        scores = self._predict(valid.batch())
        out = {f"valid_{k}": v for k, v in quick_metrics(scores, valid).items()}
        s_all = torch.from_numpy(scores.astype(np.float32))
        l_all = torch.from_numpy(valid.labels.astype(np.float32))
        losses = []
        for idx in group_minibatches(valid, self.groups_per_batch, self.cands_per_group, np.random.default_rng(0)):
            mask = torch.from_numpy(idx >= 0)
            flat = torch.from_numpy(idx[idx >= 0])
            s = torch.zeros(mask.shape).masked_scatter(mask, s_all[flat])
            lab = torch.zeros(mask.shape).masked_scatter(mask, l_all[flat])
            losses.append(float(loss_fn(s, lab, mask)))
        out["valid_loss"] = float(np.mean(losses)) if losses else float("nan")
        return out

    def _forward(self, batch: FeatureBatch, nets: list[SegmentSumNet] | None = None) -> torch.Tensor:
        """Scores of the member being trained, or the mean over `nets`."""
        rows = torch.from_numpy(np.ascontiguousarray(batch.rows, dtype=np.float32))
        seg = torch.from_numpy(batch.segment_ids())
        if nets is None:
            assert self.net is not None
            return self.net(rows, seg, batch.n_candidates)
        return torch.stack([net(rows, seg, batch.n_candidates) for net in nets]).mean(0)

    def update(self, new: Any) -> None:
        """A few epochs on the new candidates only, at a tenth of the learning rate (every member)."""
        from autosearch.training.losses import get_loss

        if not self._should_update(new):
            return
        for member, net in enumerate(self.nets):
            self.net = net
            opt = torch.optim.Adam(net.parameters(), lr=self.lr * 0.1, weight_decay=self.weight_decay)
            rng = np.random.default_rng(self.seed + 1 + member)
            for _ in range(self.update_epochs):
                self._run_epoch(new, get_loss(self.loss), opt, rng)

    # -- inference ---------------------------------------------------------------------------
    @torch.no_grad()
    def _predict(self, batch: FeatureBatch) -> np.ndarray:
        assert self.nets
        for net in self.nets:
            net.eval()
        if batch.rows.shape[0] <= _SMALL_ROWS:  # search scores a few hundred candidates at a time:
            with _threads(1):  # one thread avoids thread wake-ups that cost more than the math
                return self._predict_chunks(batch)
        return self._predict_chunks(batch)

    def predict_members(self, batch: FeatureBatch) -> np.ndarray:
        """(members, candidates) scores of every member: their spread is the ensemble's uncertainty."""
        if not self.nets:
            raise InputError("mlp model is not trained: call fit() or load() first")
        batch.validate(self.n_features)
        rows = torch.from_numpy(np.ascontiguousarray(batch.rows, dtype=np.float32))
        seg = torch.from_numpy(batch.segment_ids())
        for net in self.nets:
            net.eval()
        with torch.no_grad(), _threads(1):
            return torch.stack([net(rows, seg, batch.n_candidates) for net in self.nets]).double().numpy()

    def _predict_chunks(self, batch: FeatureBatch) -> np.ndarray:
        out = np.empty(batch.n_candidates, dtype=np.float64)
        step = 8192
        for s in range(0, batch.n_candidates, step):
            idx = np.arange(s, min(s + step, batch.n_candidates))
            sub = batch if (s == 0 and idx.size == batch.n_candidates) else batch.select(idx)
            out[idx] = self._forward(sub, self.nets).double().numpy()
        return out

    # -- persistence -------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        from autosearch.models.io import prepare_dir, save_members

        if not self.nets:
            raise InputError("cannot save an untrained mlp model")
        save_members(self.nets, prepare_dir(path) / self.weights_file)
        self._write_config(path, self.weights_file)

    @classmethod
    def _from_dir(cls, path: str, config: dict[str, Any]) -> SegmentSumMLP:
        from autosearch.models.io import load_members

        model = cls._from_params(config)
        f = os.path.join(path, "model.safetensors")
        nets = load_members(
            f, model.members, lambda: SegmentSumNet(int(config["n_features"]), model.hidden, model.n_residual)
        )
        model.nets, model.net = nets, nets[0]
        return model


_SMALL_ROWS = 4096


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    if old == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
