"""The Adams2019 training loss: L2 on throughput relative to the batch's fastest schedule.

Why apart: the loss is what the autograd step, the hand-written gradient of `optim._FusedAdam`
and the parity test against Halide all compute; it is defined once, here.
"""

from __future__ import annotations

import torch

__all__ = [
    "adams2019_loss",
    "reference_index",
]


def reference_index(true_runtimes: torch.Tensor) -> int:
    """Index of the fastest schedule (the first one on ties), Halide's `fastest_idx`."""
    return int(torch.argmin(true_runtimes).item())


def adams2019_loss(
    prediction: torch.Tensor, stage2: torch.Tensor, true_runtimes: torch.Tensor, reference: int | None = None
) -> torch.Tensor:
    """L2 on throughput relative to the fastest schedule of the batch, plus 1e-5 x the sum of
    negative pre-activation coefficients (keeps relus alive), summed over the batch."""
    t = true_runtimes.to(torch.float32)
    ref = reference_index(t) if reference is None else max(0, min(int(reference), t.shape[0] - 1))
    scale = 1.0 / t[ref]
    p1 = prediction * scale
    r1 = t * scale
    delta = (1.0 / torch.clamp(p1, min=1e-10) - 1.0 / r1) ** 2
    regularize = (-torch.clamp(stage2, max=0)).sum(dim=(1, 2))
    return (delta + 1e-5 * regularize).sum()
