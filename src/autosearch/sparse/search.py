"""Co-search of format and schedule on one matrix: the cost model ranks, the top-k are measured.

Why this loop: measuring is the expensive part (conversion, build, check, timing), scoring a few
hundred candidates is cheap, so the model picks what to measure. eps-greedy keeps measuring some
random candidates, and eps grows when the model ordered the last round badly (a prior that is
wrong about a matrix must not steer the whole run); the optional online update fine-tunes a copy
of the model on this matrix's measurements after every round.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from autosearch.sparse.features import matrix_info, pattern_image
from autosearch.sparse.measure import MatrixBench, Timing, config_reason
from autosearch.sparse.models import SparseCostModel
from autosearch.sparse.space import ANCHORS, SuperSchedule, config_pool, sample_configs
from autosearch.sparse.train import one_thread, predict_configs
from autosearch.training.losses import lambdarank_loss
from autosearch.training.metrics import labels_from_latency, pairwise_accuracy

__all__ = ["TuneResult", "candidates_for", "tune"]

_PHASES = ("sample", "predict", "measure", "update")


@dataclass
class TuneResult:
    """The best configuration found and how the search got there."""

    best: SuperSchedule | None
    best_latency: float
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per measured trial
    breakdown: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_PHASES, 0.0))
    measured: list[tuple[SuperSchedule, float]] = field(default_factory=list)
    seconds: float = 0.0
    rejected: int = 0


def candidates_for(
    a: sp.csr_matrix, op: str, dense: int, n: int, rng: np.random.Generator
) -> tuple[list[SuperSchedule], int]:
    """Up to n applicable candidates (the pool's anchors first, then random); also how many were rejected."""
    fmt_cache: dict[Any, str] = {}
    out, rejected = [], 0
    anchors = config_pool(op, dense)[:ANCHORS]
    for c in anchors + sample_configs(rng, op, n, dense, exclude={x.to_json() for x in anchors}):
        if config_reason(c, a, fmt_cache):
            rejected += 1
            continue
        out.append(c)
        if len(out) >= n:
            break
    return out, rejected


def _online_update(
    model: SparseCostModel,
    img: np.ndarray,
    info: np.ndarray,
    measured: list[tuple[SuperSchedule, float]],
    steps: int = 8,
    lr: float = 1e-3,
) -> None:
    from autosearch.sparse.features import config_tokens, config_vector

    ok = [(c, t) for c, t in measured if math.isfinite(t)]
    if len(ok) < 4:
        return
    toks = torch.from_numpy(np.stack([config_tokens(c, info, model.uses_embedding_token) for c, _ in ok]))[None]
    cv = torch.from_numpy(np.stack([config_vector(c) for c, _ in ok]))[None]
    lab = torch.from_numpy(labels_from_latency([t for _, t in ok])).float()[None]
    mask = torch.ones_like(lab, dtype=torch.bool)
    im, inf = torch.from_numpy(img)[None], torch.from_numpy(info)[None]
    opt = torch.optim.Adam([p for n, p in model.named_parameters() if not n.startswith("extractor")], lr=lr)
    model.train()
    with one_thread():
        for _ in range(steps):
            loss = lambdarank_loss(model(im, inf, toks, cv), lab, mask)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()


def tune(
    a: sp.csr_matrix,
    op: str,
    dense: int = 0,
    model: SparseCostModel | None = None,
    trials: int = 20,
    n_candidates: int = 400,
    batch: int = 4,
    eps: float = 0.15,
    online: bool = True,
    seed: int = 0,
    timing: Timing = Timing(repeat=3, min_repeat_ms=5.0),
    bench: MatrixBench | None = None,
    first: list[SuperSchedule] | None = None,
) -> TuneResult:
    """Measure at most `trials` configurations; with a model they are its top picks (eps-greedy),
    without one they are random (the 'no cost model' search). `first` (e.g. BestFormat, known
    from the training matrices) are measured before anything else and count as trials."""
    t_start = time.perf_counter()
    rng = np.random.default_rng(seed)
    mb = bench or MatrixBench(op, a, dense)
    t0 = time.perf_counter()
    cands, rejected = candidates_for(mb.a, op, mb.dense, n_candidates, rng)
    res = TuneResult(None, math.inf, rejected=rejected)
    res.breakdown["sample"] += time.perf_counter() - t0
    scores = rng.permutation(len(cands)).astype(np.float64)  # random search: a random order
    img = info = None
    if model is not None:
        t0 = time.perf_counter()
        img, info = pattern_image(mb.a), matrix_info(mb.a)
        model = copy.deepcopy(model) if online else model
        scores = predict_configs(model, img, info, cands)
        res.breakdown["predict"] += time.perf_counter() - t0
    if first:
        known = {c.to_json() for c in cands}
        extra = [c for c in first if c.to_json() not in known and not config_reason(c, mb.a)]
        cands = extra + cands
        scores = np.concatenate([np.zeros(len(extra)), scores])
        force = [i for i, c in enumerate(cands) if c in first]
        scores[force] = np.inf  # measured in the first round
    todo = set(range(len(cands)))
    cur_eps = eps
    while todo and len(res.measured) < trials:
        k = min(batch, trials - len(res.measured), len(todo))
        ranked = sorted(todo, key=lambda i: -scores[i])
        n_forced = sum(1 for i in ranked[:k] if np.isinf(scores[i]))
        n_greedy = k if model is None else max(1, n_forced, round(k * (1 - cur_eps)))
        pick = ranked[:n_greedy]
        rest = [i for i in ranked[n_greedy:]]
        if len(pick) < k and rest:
            pick += [rest[j] for j in rng.choice(len(rest), min(k - len(pick), len(rest)), replace=False)]
        t0 = time.perf_counter()
        round_lat = []
        for i in pick:
            todo.discard(i)
            out = mb.run(cands[i], timing)
            lat = out.median
            res.measured.append((cands[i], lat))
            round_lat.append(lat)
            if lat < res.best_latency:
                res.best, res.best_latency = cands[i], lat
            res.history.append({"trial": len(res.measured), "config": cands[i].short(), "latency": lat,
                                "best": res.best_latency, "elapsed": time.perf_counter() - t_start,
                                "status": out.status})  # fmt: skip
        res.breakdown["measure"] += time.perf_counter() - t0
        if model is not None and img is not None and info is not None:
            fin = [(scores[i], t) for i, t in zip(pick, round_lat) if np.isfinite(scores[i])]
            acc = pairwise_accuracy(*zip(*fin)) if len(fin) > 1 else float("nan")
            if math.isfinite(acc):  # a prior that ordered the last round badly earns more exploration
                cur_eps = min(0.5, eps + max(0.0, 0.6 - acc))
            if online and todo:
                t0 = time.perf_counter()
                _online_update(model, img, info, res.measured)
                scores = predict_configs(model, img, info, cands)  # forced ones are measured by now
                res.breakdown["update"] += time.perf_counter() - t0
    res.seconds = time.perf_counter() - t_start
    return res
