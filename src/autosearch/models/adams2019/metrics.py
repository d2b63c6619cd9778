"""How well Adams2019 weights rank the schedules of each pipeline, and the calibration factor.

Why apart: evaluation, the trainer's model selection (`ordering_score`) and its optional
calibration all read predictions per pipeline, never train.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from autosearch.models.adams2019.batches import PipelineBatch
from autosearch.models.adams2019.net import Adams2019Net, ParamSet
from autosearch.training.metrics import group_metrics, mean_metrics

__all__ = [
    "calibration_factor",
    "evaluate",
    "halide_ordering_rate",
    "ordering_score",
    "predict_group",
]


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


def evaluate(weights: ParamSet, batches: Sequence[PipelineBatch], num_cores: int = 32) -> dict[str, float]:
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
