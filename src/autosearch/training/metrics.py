"""Ranking metrics of a cost model, with the definitions docs/models.md gives, used everywhere.

All functions take, for ONE group (one workload on one target), the model's scores (higher =
predicted faster) and the measured latencies in seconds (`inf` or NaN = failed measurement).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "GroupMetrics",
    "group_metrics",
    "kendall_tau",
    "labels_from_latency",
    "mean_metrics",
    "pairwise_accuracy",
    "rmse",
    "top_k_score",
]


def _as_arrays(scores: ArrayLike, latencies: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    lat = np.asarray(latencies, dtype=np.float64).reshape(-1)
    if s.shape != lat.shape:
        raise ValueError(f"scores has {s.size} entries but latencies has {lat.size}")
    lat = np.where(np.isfinite(lat) & (lat > 0), lat, np.inf)
    return s, lat


def labels_from_latency(latencies: ArrayLike) -> np.ndarray:
    """Normalised throughput within a group: min_latency / latency; failed runs get 0."""
    lat = np.asarray(latencies, dtype=np.float64).reshape(-1)
    ok = np.isfinite(lat) & (lat > 0)
    out = np.zeros(lat.shape, dtype=np.float64)
    if ok.any():
        out[ok] = lat[ok].min() / lat[ok]
    return out


def top_k_score(scores: ArrayLike, latencies: ArrayLike, k: int) -> float:
    """best true latency / min true latency among the k best-predicted (1 = the best was picked)."""
    s, lat = _as_arrays(scores, latencies)
    if not np.isfinite(lat).any():
        return float("nan")
    order = np.argsort(-s, kind="stable")[: max(1, k)]
    picked = lat[order].min()
    return float(lat.min() / picked) if np.isfinite(picked) else 0.0


def pairwise_accuracy(scores: ArrayLike, latencies: ArrayLike) -> float:
    """Fraction of pairs with different true latency that the scores order correctly."""
    s, lat = _as_arrays(scores, latencies)
    y = labels_from_latency(lat)
    dy = np.sign(y[:, None] - y[None, :])
    ds = np.sign(s[:, None] - s[None, :])
    mask = np.triu(dy != 0, 1)
    if not mask.any():
        return float("nan")
    return float((dy[mask] == ds[mask]).mean())


def kendall_tau(scores: ArrayLike, latencies: ArrayLike) -> float:
    """Kendall tau-b between scores and normalised throughput."""
    from scipy.stats import kendalltau

    s, lat = _as_arrays(scores, latencies)
    y = labels_from_latency(lat)
    if np.ptp(y) == 0 or np.ptp(s) == 0:
        return float("nan")
    return float(kendalltau(s, y).statistic)


def rmse(predicted_throughput: ArrayLike, latencies: ArrayLike) -> float:
    """RMSE between predicted and measured normalised throughput (both in [0, 1])."""
    p, lat = _as_arrays(predicted_throughput, latencies)
    return float(np.sqrt(np.mean((p - labels_from_latency(lat)) ** 2)))


class GroupMetrics(dict):
    """Metrics of one group: top1, top5, pairwise, kendall, rmse, n."""


def group_metrics(scores: ArrayLike, latencies: ArrayLike) -> GroupMetrics:
    """Every metric for one group. RMSE uses scores rescaled to [0, 1] by the group's max."""
    s, lat = _as_arrays(scores, latencies)
    span = s.max() - s.min() if s.size else 0.0
    scaled = (s - s.min()) / span if span > 0 else np.zeros_like(s)
    return GroupMetrics(
        top1=top_k_score(s, lat, 1),
        top5=top_k_score(s, lat, 5),
        pairwise=pairwise_accuracy(s, lat),
        kendall=kendall_tau(s, lat),
        rmse=rmse(scaled, lat),
        n=int(s.size),
    )


def mean_metrics(per_group: Sequence[dict[str, float]]) -> dict[str, float]:
    """Unweighted mean over groups (each workload counts once), ignoring NaN entries."""
    keys = ("top1", "top5", "pairwise", "kendall", "rmse")
    out: dict[str, float] = {}
    for k in keys:
        vals = [g[k] for g in per_group if k in g and not math.isnan(g[k])]
        out[k] = float(np.mean(vals)) if vals else float("nan")
    out["groups"] = float(len(per_group))
    return out
