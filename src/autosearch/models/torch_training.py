"""The early-stopped training run and the optimizer step shared by the PyTorch models (`mlp`, `tlp`).

Why: both networks train the same way (epochs of group minibatches, a clipped gradient step,
early stopping on the validation groups, the run timed into a `TrainReport`); one copy keeps
their numerics and their reports the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from autosearch.models.base import TrainReport

__all__ = ["clipped_step", "early_stopped_run"]


def clipped_step(net: nn.Module, opt: torch.optim.Optimizer, loss: torch.Tensor, grad_clip: float) -> float:
    """One optimizer step on `loss` with the gradient norm clipped to `grad_clip`; returns the loss."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(net.parameters(), grad_clip)
    opt.step()
    return float(loss.detach())


def early_stopped_run(
    kind: str,
    net: nn.Module,
    train: Any,
    valid: Any,
    epochs: int,
    patience: int,
    epoch: Callable[[], float],
    validate: Callable[[], dict[str, float]],
    key: Callable[[dict[str, float]], Any],
    progress: Any,
) -> TrainReport:
    """Up to `epochs` calls of `epoch`, early-stopped on `validate` (only when `valid` has groups)
    by `key` with `patience`; the report holds the history, the best epoch and the time taken."""
    from autosearch.training.trainer import early_stopped_epochs

    report = TrainReport(kind, n_train=train.n_candidates, n_valid=valid.n_candidates if valid else 0)
    has_valid = valid is not None and valid.n_groups > 0
    t0 = time.perf_counter()
    report.history, report.best_epoch = early_stopped_epochs(
        net, epochs, epoch, validate if has_valid else None, key, patience, progress
    )
    report.train_time_s = time.perf_counter() - t0
    return report
