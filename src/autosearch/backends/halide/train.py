"""Training the Adams2019 model on `.sample` files, as `retrain_cost_model.cpp` does it.

Why mirror Halide's loop: weights must mean the same thing to the real autoscheduler. So samples
are grouped by pipeline_id (pipeline features from the group's first sample), identical
schedules are merged keeping the fastest runtime, each group is one batch (at most 1024
schedules, a random window beyond that), the reference is the fastest schedule of the batch,
and one ADAM (beta 0.9 / 0.999, eps 1e-5, bias-corrected; torch's Adam is the same formula)
step is taken per batch. One epoch visits every group once. Every batch holds the schedules of
ONE pipeline: the loss compares each schedule with the fastest of its batch, which only means
something within one program.

Fine-tuning options beyond Halide's tool (all off by default, so the plain trainer stays
step-for-step identical to `adams2019_retrain_cost_model`):
- `calibrate=True`: before the first step, scale conv1 (filter and bias) by the one factor that
  minimises the loss. Every cost term is linear in the relu'd conv1 outputs, so this rescales every
  prediction by the same factor and leaves the ordering untouched; it removes the gross unit
  mismatch (stock weights vs this machine's milliseconds) that would otherwise dominate the first
  steps and drag the ordering-relevant weights around.
- `fit(..., valid=batches)` with `select="best_valid"`: after every epoch, measure the mean
  pairwise ordering accuracy on validation pipelines and keep the best epoch; epoch 0 (the
  starting weights, after calibration) competes too and wins ties, so selection never returns
  weights that order the validation pipelines worse than the starting (e.g. stock) weights. When
  epoch 0 wins, the input weights are returned unchanged (calibration does not change ordering).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from autosearch.backends.halide.cost_model import Adams2019Net, adams2019_loss
from autosearch.backends.halide.sample_io import Sample, unique_schedules
from autosearch.backends.halide.weights import Weights
from autosearch.errors import InputError
from autosearch.training.metrics import group_metrics, mean_metrics

__all__ = [
    "Adams2019Trainer",
    "PipelineBatch",
    "TrainResult",
    "evaluate",
    "group_samples",
    "calibration_factor",
    "halide_ordering_rate",
    "ordering_score",
    "predict_group",
]

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


def group_samples(samples: Sequence[Sample], min_schedules: int = 2) -> list[PipelineBatch]:
    """Group by pipeline_id, merge duplicate schedules, drop groups with too few schedules
    (Halide's tool needs 8; the default 2 lets tiny test batches train)."""
    by_pid: dict[int, list[Sample]] = {}
    for s in samples:
        by_pid.setdefault(s.pipeline_id, []).append(s)
    out = []
    for pid in sorted(by_pid):
        group = by_pid[pid]
        stages = group[0].num_stages
        bad = [s.path for s in group if s.num_stages != stages]
        if bad:
            raise InputError(
                f"pipeline_id {pid}: samples disagree on the number of stages ({bad[0]}); pipeline ids must be unique per pipeline"
            )
        uniq = unique_schedules(group)
        if len(uniq) < max(1, min_schedules):
            continue
        out.append(
            PipelineBatch(
                pid,
                torch.from_numpy(np.ascontiguousarray(group[0].pipeline_features)),
                torch.from_numpy(np.stack([u.schedule_features for u in uniq])),
                torch.tensor([u.runtime_ms for u in uniq], dtype=torch.float32),
                [u.path for u in uniq],
            )
        )
    return out


def halide_ordering_rate(pred: np.ndarray, runtimes: np.ndarray) -> tuple[int, int]:
    """Halide's "Rate": among schedules > 1.3x slower than the fastest, how many are predicted
    slower than it. Returns (good, total)."""
    ref = int(np.argmin(runtimes))
    good = bad = 0
    for i in range(len(runtimes)):
        if runtimes[i] / runtimes[ref] <= 1.3:
            continue
        if pred[i] >= pred[ref]:
            good += 1
        else:
            bad += 1
    return good, good + bad


@torch.no_grad()
def predict_group(net: Adams2019Net, batch: PipelineBatch) -> np.ndarray:
    """Predicted runtimes of every schedule of one pipeline."""
    return net(batch.pipeline_features, batch.schedule_features).numpy()


def evaluate(weights: Weights, batches: Sequence[PipelineBatch], num_cores: int = 32) -> dict[str, float]:
    """Ranking metrics (shared definitions) of a weight set on grouped samples; score = -prediction."""
    net = Adams2019Net(num_cores, weights)
    per_group = []
    good = total = 0
    for b in batches:
        pred = predict_group(net, b)
        rt = b.runtimes_ms.numpy().astype(np.float64) / 1000.0
        per_group.append(group_metrics(-pred, rt))
        g, t = halide_ordering_rate(pred, rt)
        good, total = good + g, total + t
    out = mean_metrics(per_group)
    out["halide_rate"] = good / total if total else float("nan")
    return out


def ordering_score(net: Adams2019Net, batches: Sequence[PipelineBatch], num_cores: int) -> float:
    """Mean over pipelines of the pairwise ordering accuracy (the selection score)."""
    vals = []
    for b in batches:
        with torch.no_grad():
            pred = net(b.pipeline_features, b.schedule_features, num_cores).numpy()
        m = group_metrics(-pred, b.runtimes_ms.numpy().astype(np.float64))
        if not math.isnan(m["pairwise"]):
            vals.append(m["pairwise"])
    return float(np.mean(vals)) if vals else float("nan")


@torch.no_grad()
def calibration_factor(net: Adams2019Net, batches: Sequence[PipelineBatch], num_cores: int) -> float:
    """The factor a > 0 minimising sum (1/(a p) - 1/r)^2 over every batch (p, r relative to the
    batch's fastest true runtime), in closed form: 1/a = sum(u v) / sum(u u), u = 1/p, v = 1/r."""
    num = den = 0.0
    for b in batches:
        pred = net(b.pipeline_features, b.schedule_features, num_cores).double()
        t = b.runtimes_ms.double()
        ref = t.min()
        u = 1.0 / torch.clamp(pred / ref, min=1e-10)
        v = 1.0 / (t / ref)
        num += float((u * v).sum())
        den += float((u * u).sum())
    if not (num > 0 and den > 0 and math.isfinite(num) and math.isfinite(den)):
        return 1.0
    return den / num


@dataclass
class TrainResult:
    weights: Weights
    losses: list[float]  # mean loss per epoch
    epochs: int
    groups: int
    schedules: int
    calibration: float = 1.0  # factor applied to conv1 before training (1 = none)
    valid_scores: list[float] = field(default_factory=list)  # [start, after epoch 1, ...]
    best_epoch: int | None = None  # the epoch kept (0 = the starting weights); None = the last
    last_weights: Weights | None = None  # the last epoch's weights (= weights unless selection kept another)


class Adams2019Trainer:
    """ADAM on the Adams2019 loss, one step per pipeline group per epoch (retrain_cost_model)."""

    def __init__(self, learning_rate: float = 0.001, epochs: int = 200, num_cores: int = 32,
                 min_schedules: int = 2, seed: int = 0, progress: bool = False, *,
                 calibrate: bool = False, select: str = "last", min_improvement: float = 0.0) -> None:
        self.learning_rate = learning_rate
        self.epochs = epochs
        self.num_cores = num_cores
        self.min_schedules = min_schedules
        self.seed = seed
        self.progress = progress
        self.calibrate = calibrate
        self.select = select
        self.min_improvement = min_improvement

    def _check(self) -> None:
        if not (isinstance(self.learning_rate, (int, float)) and math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise InputError(f"learning_rate must be a positive number, got {self.learning_rate!r}")
        if int(self.epochs) < 1:
            raise InputError(f"train_iters/epochs must be >= 1, got {self.epochs!r}")
        if int(self.num_cores) < 1:
            raise InputError(f"num_cores must be >= 1, got {self.num_cores!r}")
        if self.select not in ("last", "best_valid"):
            raise InputError(f"select must be 'last' or 'best_valid', got {self.select!r}")

    def make_optimizer(self, net: Adams2019Net) -> torch.optim.Optimizer:
        return torch.optim.Adam(net.parameters(), lr=self.learning_rate, betas=(0.9, 0.999), eps=1e-5)

    def step(self, net: Adams2019Net, opt: torch.optim.Optimizer, batch: PipelineBatch,
             rng: random.Random | None = None) -> float:
        """One ADAM step on one pipeline's batch; returns the loss before the step."""
        sf, rt = batch.schedule_features, batch.runtimes_ms
        if batch.size > MAX_BATCH:
            first = (rng or random.Random(0)).randrange(batch.size - MAX_BATCH)
            sf, rt = sf[first : first + MAX_BATCH], rt[first : first + MAX_BATCH]
        opt.zero_grad()
        pred, stage2 = net.forward_with_coefficients(batch.pipeline_features, sf, self.num_cores)
        loss = adams2019_loss(pred, stage2, rt)
        if not torch.isfinite(loss):
            raise InputError(f"pipeline_id {batch.pipeline_id}: the loss is {loss.item()} (non-finite features or weights)")
        loss.backward()
        opt.step()
        return float(loss.item())

    def fit(self, weights: Weights, batches: Sequence[PipelineBatch],
            valid: Sequence[PipelineBatch] | None = None) -> TrainResult:
        """Train from `weights` on the groups; returns new weights (the input is not modified).

        With `valid` (whole pipelines not in `batches`), the pairwise ordering accuracy on them
        is recorded before training and after every epoch; `select="best_valid"` returns the best
        of those weights (the starting weights win ties)."""
        self._check()
        if not batches:
            raise InputError("no pipeline has enough distinct schedules to train on")
        if self.select == "best_valid" and not valid:
            raise InputError("select='best_valid' needs validation batches (fit(..., valid=...))")
        for b in batches:  # one pipeline per batch, or the loss's reference is meaningless
            if b.schedule_features.shape[1] != b.pipeline_features.shape[0]:
                raise InputError(f"pipeline_id {b.pipeline_id}: schedule and pipeline features disagree on the stage count")
        if valid:
            overlap = {b.pipeline_id for b in batches} & {b.pipeline_id for b in valid}
            if overlap:
                raise InputError(f"validation pipelines also in training: {sorted(overlap)[:5]}")
        net = Adams2019Net(self.num_cores, weights)
        start = Weights.from_model(net)  # a copy of the input: what "epoch 0 wins" returns
        calibration = 1.0
        if self.calibrate:
            calibration = calibration_factor(net, batches, self.num_cores)
            with torch.no_grad():
                net.conv1_filter.mul_(calibration)
                net.conv1_bias.mul_(calibration)
        opt = self.make_optimizer(net)
        rng = random.Random(self.seed)
        losses: list[float] = []
        scores: list[float] = []
        best_epoch, best_score, best_weights = 0, -math.inf, start
        if valid:
            scores.append(ordering_score(net, valid, self.num_cores))
            # a trained epoch must beat the start by min_improvement (noise margin), later ones
            # must beat the best so far
            best_score = (scores[0] + float(self.min_improvement)) if not math.isnan(scores[0]) else -math.inf
        progress = None
        if self.progress:
            from rich.progress import Progress

            progress = Progress(transient=True)
            progress.start()
            task = progress.add_task("training Adams2019", total=int(self.epochs))
        try:
            for epoch in range(1, int(self.epochs) + 1):
                ls = [self.step(net, opt, b, rng) for b in batches]
                losses.append(float(np.mean(ls)))
                if valid:
                    scores.append(ordering_score(net, valid, self.num_cores))
                    if self.select == "best_valid" and scores[-1] > best_score:
                        best_epoch, best_score, best_weights = epoch, scores[-1], Weights.from_model(net)
                if progress is not None:
                    progress.advance(task)
        finally:
            if progress is not None:
                progress.stop()
        last = Weights.from_model(net)
        if self.select == "best_valid":
            out, kept = best_weights, best_epoch
        else:
            out, kept = last, None
        return TrainResult(out, losses, int(self.epochs), len(batches), sum(b.size for b in batches),
                           calibration=calibration, valid_scores=scores, best_epoch=kept, last_weights=last)
