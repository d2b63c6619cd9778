"""Halide's training loop (`retrain_cost_model.cpp`): ADAM, one step per pipeline per epoch.

Why: the plain trainer stays step for step `adams2019_retrain_cost_model`; its fine-tuning
options (calibration, validation-based selection) are off by default.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch

from autosearch.errors import InputError
from autosearch.models.adams2019.batches import MAX_BATCH, PipelineBatch
from autosearch.models.adams2019.loss import adams2019_loss
from autosearch.models.adams2019.metrics import calibration_factor, ordering_score
from autosearch.models.adams2019.net import Adams2019Net, ParamSet, PreparedSchedules
from autosearch.models.adams2019.optim import Adam, _FusedAdam, _Ready

__all__ = [
    "Adams2019Trainer",
    "TrainResult",
]

P = TypeVar("P", bound=ParamSet)


def _like(weights: P, net: Adams2019Net) -> P:
    """The network's parameters in the container type the caller gave (`type(w)(arrays)`)."""
    return type(weights)(net.params())  # type: ignore[call-arg]  # dict and Weights both take a name->array map


@dataclass
class TrainResult:
    weights: Any  # the type `fit` was given (Weights, or a dict of arrays)
    losses: list[float]  # mean loss per epoch
    epochs: int
    groups: int
    schedules: int
    calibration: float = 1.0  # factor applied to conv1 before training (1 = none)
    valid_scores: list[float] = field(default_factory=list)  # [start, after epoch 1, ...]
    best_epoch: int | None = None  # the epoch kept (0 = the starting weights); None = the last
    last_weights: Any = None  # the last epoch's weights (= weights unless selection kept another)


class Adams2019Trainer:
    """ADAM on the Adams2019 loss, one step per pipeline group per epoch (retrain_cost_model).

    Speed: each group's weight-free tensors (log features, cost-term factors) are built once per
    `fit`, so an epoch is one small forward/backward per group and no per-sample Python; `fit`'s
    steps are `_FusedAdam`'s (hand-written gradient in numpy, one ADAM update on one flat array:
    several times the autograd step's speed at the autotune loop's batch sizes), `step` keeps autograd and `Adam`.
    `threads` sets torch's intra-op threads for the fit (restored after; None keeps torch's
    setting); the fused step's small products run in numpy's BLAS, single-threaded at these sizes.
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        epochs: int = 200,
        num_cores: int = 32,
        min_schedules: int = 2,
        seed: int = 0,
        progress: bool = False,
        *,
        calibrate: bool = False,
        select: str = "last",
        min_improvement: float = 0.0,
        threads: int | None = None,
    ) -> None:
        self.learning_rate = learning_rate
        self.threads = threads
        self.epochs = epochs
        self.num_cores = num_cores
        self.min_schedules = min_schedules
        self.seed = seed
        self.progress = progress
        self.calibrate = calibrate
        self.select = select
        self.min_improvement = min_improvement

    def _check(self) -> None:
        if not (
            isinstance(self.learning_rate, (int, float))
            and math.isfinite(self.learning_rate)
            and self.learning_rate > 0
        ):
            raise InputError(f"learning_rate must be a positive number, got {self.learning_rate!r}")
        if int(self.epochs) < 1:
            raise InputError(f"train_iters/epochs must be >= 1, got {self.epochs!r}")
        if int(self.num_cores) < 1:
            raise InputError(f"num_cores must be >= 1, got {self.num_cores!r}")
        if self.select not in ("last", "best_valid"):
            raise InputError(f"select must be 'last' or 'best_valid', got {self.select!r}")
        if self.threads is not None and int(self.threads) < 1:
            raise InputError(f"threads must be >= 1, got {self.threads!r}")

    def make_optimizer(self, net: Adams2019Net) -> Adam:
        return Adam(list(net.parameters()), lr=self.learning_rate, betas=(0.9, 0.999), eps=1e-5)

    def step(self, net: Adams2019Net, opt: Adam, batch: PipelineBatch, rng: random.Random | None = None) -> float:
        """One ADAM step on one pipeline's batch; returns the loss before the step."""
        return self._step(net, opt, _Ready.of(batch, self.num_cores), rng)

    def _step(self, net: Adams2019Net, opt: Adam | _FusedAdam, r: _Ready, rng: random.Random | None) -> float:
        if isinstance(opt, _FusedAdam):  # fit's loop: the hand-written gradient
            value = opt.loss_and_grad(r, rng)
            self._check_loss(r, value)
            opt.update()
            return value
        prepared, rt = r.prepared, r.runtimes
        ref: int | None = r.reference
        if r.size > MAX_BATCH:  # Halide's random window of at most 1024 schedules
            first = (rng or random.Random(0)).randrange(r.size - MAX_BATCH)
            window = slice(first, first + MAX_BATCH)
            prepared = PreparedSchedules(prepared.normalized[window], prepared.terms[window])
            rt, ref = rt[window], None
        opt.zero_grad()
        pred, stage2 = net.forward_prepared(r.batch.pipeline_features, prepared)
        loss = adams2019_loss(pred, stage2, rt, ref)
        value = float(loss.item())
        self._check_loss(r, value)
        loss.backward()
        opt.step()
        return value

    @staticmethod
    def _check_loss(r: _Ready, value: float) -> None:
        if not math.isfinite(value):
            raise InputError(f"pipeline_id {r.batch.pipeline_id}: the loss is {value} (non-finite features or weights)")

    def fit(
        self, weights: P, batches: Sequence[PipelineBatch], valid: Sequence[PipelineBatch] | None = None
    ) -> TrainResult:
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
                raise InputError(
                    f"pipeline_id {b.pipeline_id}: schedule and pipeline features disagree on the stage count"
                )
        if valid:
            overlap = {b.pipeline_id for b in batches} & {b.pipeline_id for b in valid}
            if overlap:
                raise InputError(f"validation pipelines also in training: {sorted(overlap)[:5]}")
        net = Adams2019Net(self.num_cores, weights)
        start = _like(weights, net)  # a copy of the input: what "epoch 0 wins" returns
        calibration = 1.0
        if self.calibrate:
            calibration = calibration_factor(net, batches, self.num_cores)
            with torch.no_grad():
                net.conv1_filter.mul_(calibration)
                net.conv1_bias.mul_(calibration)
        # the parameters become views of the fused step's flat array: `net` stays current
        opt = _FusedAdam(net, self.learning_rate, betas=(0.9, 0.999), eps=1e-5)
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
        saved_threads = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(int(self.threads))
        try:
            ready = [_Ready.of(b, self.num_cores) for b in batches]
            for epoch in range(1, int(self.epochs) + 1):
                ls = [self._step(net, opt, r, rng) for r in ready]
                losses.append(float(np.mean(ls)))
                if valid:
                    scores.append(ordering_score(net, valid, self.num_cores))
                    if self.select == "best_valid" and scores[-1] > best_score:
                        best_epoch, best_score, best_weights = epoch, scores[-1], _like(weights, net)
                if progress is not None:
                    progress.advance(task)
        finally:
            torch.set_num_threads(saved_threads)
            if progress is not None:
                progress.stop()
        last = _like(weights, net)
        if self.select == "best_valid":
            out, kept = best_weights, best_epoch
        else:
            out, kept = last, None
        return TrainResult(
            out,
            losses,
            int(self.epochs),
            len(batches),
            sum(b.size for b in batches),
            calibration=calibration,
            valid_scores=scores,
            best_epoch=kept,
            last_weights=last,
        )
