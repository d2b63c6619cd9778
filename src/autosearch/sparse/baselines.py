"""Baselines for a co-searched kernel: scipy.sparse, torch.sparse CSR, the default CSR kernel, BestFormat.

Why side by side: on a shared machine a baseline timed a minute apart from the kernel it is
compared with measures a different machine. `side_by_side` times every contender in interleaved
rounds and keeps each one's fastest repeat.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from autosearch.sparse.measure import MatrixBench, Outcome, Timing
from autosearch.sparse.records import Group
from autosearch.sparse.space import SuperSchedule, default_config

__all__ = ["BASELINES", "best_fixed_config", "bestformat_by_op", "confirm_best", "geomean", "side_by_side"]

BASELINES = ("scipy", "torch", "default_csr", "bestformat")


def _fastest(out: Outcome) -> float:
    """The fastest repeat: neighbours' work only ever adds time, so on a shared machine the
    minimum is the least disturbed estimate (used for every contender alike)."""
    return min(out.latencies) if out.status == "ok" and out.latencies else math.inf


def best_fixed_config(groups: list[Group]) -> SuperSchedule | None:
    """BestFormat: the configuration with the best mean normalised throughput over the groups
    (counted 0 where it was not measured or could not apply), among those measured on at least
    half of them."""
    score: dict[str, float] = defaultdict(float)
    seen: dict[str, int] = defaultdict(int)
    cfgs: dict[str, SuperSchedule] = {}
    for g in groups:
        best = g.best()
        for c, t in zip(g.configs, g.latencies):
            key = c.to_json()
            cfgs[key] = c
            seen[key] += 1
            score[key] += best / t
    ok = [k for k in score if seen[k] >= len(groups) / 2]
    if not ok:
        return None
    return cfgs[max(ok, key=lambda k: score[k])]


def bestformat_by_op(groups: list[Group]) -> dict[str, str]:
    """BestFormat of every operator present, as configuration JSON (kept in a model's config.json)."""
    out = {}
    for op in sorted({g.op for g in groups}):
        c = best_fixed_config([g for g in groups if g.op == op])
        if c is not None:
            out[op] = c.to_json()
    return out


def confirm_best(
    mb: MatrixBench,
    measured: list[tuple[SuperSchedule, float]],
    k: int = 3,
    rounds: int = 2,
    also: Sequence[SuperSchedule] = (),
    timing: Timing = Timing(repeat=5, min_repeat_ms=10.0),
) -> SuperSchedule | None:
    """Re-time the k fastest configurations a search measured, and those in `also` it measured
    (interleaved rounds), and keep the fastest.

    Why: a search's latencies were taken one at a time on a shared machine, and the minimum of
    20 noisy numbers favours a lucky one. No new configuration is measured, so the search's
    budget stands; the chosen one is then timed afresh beside the baselines (`side_by_side`).
    """
    ok = sorted((t, i) for i, (_c, t) in enumerate(measured) if math.isfinite(t))[:k]
    if not ok:
        return None
    best = {i: math.inf for _t, i in ok}
    best.update({i: math.inf for i, (c, t) in enumerate(measured) if c in also and math.isfinite(t)})
    for _ in range(rounds):
        for i in best:
            best[i] = min(best[i], _fastest(mb.run(measured[i][0], timing, verify=False)))
    return measured[min(best, key=lambda i: best[i])][0]


def side_by_side(
    mb: MatrixBench,
    ours: SuperSchedule | None,
    bestformat: SuperSchedule | None,
    rounds: int = 2,
    timing: Timing = Timing(repeat=5, min_repeat_ms=10.0),
) -> dict[str, float]:
    """Seconds per call of each contender: the fastest repeat over interleaved rounds, for all alike."""
    out: dict[str, float] = defaultdict(lambda: math.inf)
    contenders: dict[str, SuperSchedule | None] = {"ours": ours, "default_csr": default_config(mb.op, mb.dense),
                                                   "bestformat": bestformat}  # fmt: skip
    for _ in range(rounds):
        for name, cfg in contenders.items():
            if cfg is not None:
                out[name] = min(out[name], _fastest(mb.run(cfg, timing, verify=False)))
        out["scipy"] = min(out["scipy"], mb.time_scipy(timing, reduce=min))
        out["torch"] = min(out["torch"], mb.time_torch(timing, reduce=min))
    return {k: float(v) for k, v in out.items()}


def geomean(xs: list[float]) -> float:
    v = np.asarray([x for x in xs if math.isfinite(x) and x > 0], dtype=float)
    return float(np.exp(np.log(v).mean())) if v.size else math.nan
