"""PNG plots of cost-model training and quality (matplotlib, headless).

Three pictures answer the questions one asks of a cost model: did training converge (loss
curves), which model picks the best schedules (top-1/top-5 bars), and how do its scores relate to
real speed on one workload (scatter of predicted score vs. measured normalised throughput).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["plot_loss_curves", "plot_pred_vs_measured", "plot_topk_bars"]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    _plt().close(fig)
    return p


def plot_loss_curves(histories: Mapping[str, Sequence[Mapping[str, float]]], path: str | os.PathLike[str]) -> Path:
    """Train (solid) and validation (dashed) loss per epoch for each model; top-1 on a twin axis.

    A history is `TrainReport.history`: dicts with `epoch` and any of train_loss, valid_loss,
    valid_top1. Models without a loss (e.g. tree ensembles with only ranking metrics) show
    only their validation top-1.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax2 = None
    for i, (name, hist) in enumerate(histories.items()):
        color = f"C{i % 10}"
        ep = np.array([h.get("epoch", j) for j, h in enumerate(hist)], dtype=float)
        for key, style, label in (("train_loss", "-", "train"), ("valid_loss", "--", "valid")):
            ys = np.array([h.get(key, np.nan) for h in hist], dtype=float)
            if np.isfinite(ys).any():
                ax.plot(ep, ys, style, color=color, label=f"{name} {label} loss")
        top1 = np.array([h.get("valid_top1", np.nan) for h in hist], dtype=float)
        if np.isfinite(top1).any():
            ax2 = ax2 or ax.twinx()
            ax2.plot(ep, top1, ":", color=color, marker=".", label=f"{name} valid top-1")
    ax.set_xlabel("epoch / boosting round")
    ax.set_ylabel("loss")
    ax.set_title("training curves")
    handles, labels = ax.get_legend_handles_labels()
    if ax2 is not None:
        ax2.set_ylabel("validation top-1")
        ax2.set_ylim(0, 1.02)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    if handles:
        ax.legend(handles, labels, fontsize=7, loc="best")
    return _save(fig, path)


def plot_topk_bars(results: Mapping[str, Mapping[str, float]], path: str | os.PathLike[str]) -> Path:
    """Grouped bars: mean held-out top-1 and top-5 for each model, values printed on the bars."""
    plt = _plt()
    names = list(results)
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(names) + 2), 4))
    for j, (key, label) in enumerate((("top1", "top-1"), ("top5", "top-5"))):
        vals = [float(results[n].get(key, np.nan)) for n in names]
        bars = ax.bar(x + (j - 0.5) * 0.38, vals, 0.38, label=label)
        for b, v in zip(bars, vals):
            if np.isfinite(v):
                ax.text(b.get_x() + b.get_width() / 2, v + 0.01, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, names, rotation=20, ha="right")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("score (1 = picked the fastest)")
    ax.set_title("held-out workloads: top-k score")
    ax.legend()
    return _save(fig, path)


def plot_pred_vs_measured(
    scores: ArrayLike, latencies: ArrayLike, path: str | os.PathLike[str], title: str = ""
) -> Path:
    """Predicted score vs. measured normalised throughput for one workload; failed runs at 0."""
    from autosearch.training.metrics import kendall_tau, labels_from_latency

    plt = _plt()
    s = np.asarray(scores, dtype=float)
    y = labels_from_latency(latencies)
    fig, ax = plt.subplots(figsize=(5, 4.2))
    ok = y > 0
    ax.scatter(s[ok], y[ok], s=10, alpha=0.6, label="measured")
    if (~ok).any():
        ax.scatter(s[~ok], y[~ok], s=10, marker="x", color="C3", label="failed")
    if s.size:
        best = int(np.argmax(s))
        ax.scatter([s[best]], [y[best]], s=60, facecolors="none", edgecolors="k", label="model's pick")
    ax.set_xlabel("predicted score (higher = faster)")
    ax.set_ylabel("measured throughput / best")
    ax.set_ylim(-0.03, 1.05)
    tau = kendall_tau(s, latencies) if s.size > 1 else float("nan")
    ax.set_title(f"{title}\nKendall tau {tau:.2f}" if title else f"Kendall tau {tau:.2f}", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, path)
