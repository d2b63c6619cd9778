"""Losses over padded groups: scores and labels are (G, C) with a boolean mask of real entries.

Why padded groups: ranking losses compare candidates of the SAME workload only, so a batch is a
few groups side by side; padding keeps every loss one vectorised expression.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = ["LOSSES", "get_loss", "lambdarank_loss", "mse_loss", "pairwise_loss"]


def mse_loss(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Squared error to the normalised throughput (scores are read as throughput in [0, 1])."""
    diff = (scores - labels)[mask]
    return (diff * diff).mean()


def _pair_mask(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(G, C, C) pairs (i, j) of real entries with label_i > label_j."""
    valid = mask[:, :, None] & mask[:, None, :]
    return valid & (labels[:, :, None] > labels[:, None, :])


def pairwise_loss(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, gap_weight: bool = False
) -> torch.Tensor:
    """RankNet: logistic loss on the score difference of every pair with different labels.

    With `gap_weight`, a pair counts in proportion to its label gap, so confusing the fastest
    candidate with a slow one costs more than confusing two slow ones (top-k is what matters).
    """
    pairs = _pair_mask(labels, mask)
    if not pairs.any():
        return scores.sum() * 0.0
    diff = scores[:, :, None] - scores[:, None, :]
    losses = F.softplus(-diff[pairs])
    if not gap_weight:
        return losses.mean()
    w = (labels[:, :, None] - labels[:, None, :])[pairs]
    return (w * losses).sum() / w.sum()


def lambdarank_loss(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, sigma: float = 1.0, gain_scale: float = 10.0
) -> torch.Tensor:
    """LambdaRank: RankNet pairs weighted by how much swapping them changes NDCG.

    Gains are `2**(gain_scale * label) - 1`: labels are normalised throughput in [0, 1], and the
    scale makes the few fastest candidates dominate, which is what top-1/top-5 measure. Ranks come
    from the current scores (detached), as in LambdaMART.
    """
    pairs = _pair_mask(labels, mask)
    if not pairs.any():
        return scores.sum() * 0.0
    neg = torch.finfo(scores.dtype).min
    s_det = scores.detach().masked_fill(~mask, neg)
    ranks = torch.empty_like(s_det, dtype=torch.long)
    order = s_det.argsort(dim=1, descending=True)
    ranks.scatter_(1, order, torch.arange(s_det.shape[1], device=s_det.device).expand_as(order).contiguous())
    disc = 1.0 / torch.log2(ranks.to(scores.dtype) + 2.0)
    gains = torch.pow(2.0, gain_scale * labels.clamp(min=0)) - 1.0
    gains = gains * mask
    ideal_sorted = gains.sort(dim=1, descending=True).values
    ideal_disc = 1.0 / torch.log2(torch.arange(gains.shape[1], device=gains.device, dtype=scores.dtype) + 2.0)
    max_dcg = (ideal_sorted * ideal_disc).sum(dim=1).clamp(min=1e-10)
    delta = (gains[:, :, None] - gains[:, None, :]).abs() * (disc[:, :, None] - disc[:, None, :]).abs()
    delta = delta / max_dcg[:, None, None]
    diff = scores[:, :, None] - scores[:, None, :]
    loss = delta[pairs] * F.softplus(-sigma * diff[pairs])
    return loss.sum() / mask.shape[0]


LOSSES = {"mse": mse_loss, "pairwise": pairwise_loss, "lambdarank": lambdarank_loss}


def get_loss(name: str) -> Callable[..., torch.Tensor]:
    """The loss function called `name` (mse, pairwise, lambdarank)."""
    from autosearch.errors import InputError

    try:
        return LOSSES[name]
    except KeyError:
        raise InputError(f"unknown loss {name!r}; choose one of {', '.join(LOSSES)}") from None
