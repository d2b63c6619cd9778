"""Convergence of tuning: best latency found vs. measured trials, one line per model.

Inputs are what `autosearch tune` saves (`history.json` in each output directory) or the JSON
`bench/tuning_efficiency.py --out` writes (a list of runs, each with `model`, `workload` and a
`history`). Several runs of one model (seeds, workloads) are summarised per model as the
geometric mean over runs of `best latency so far / final best of that workload over all runs`,
so workloads of different speed share one axis (1.0 = the best any model found).
"""

from __future__ import annotations

import json
import lzma
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autosearch.errors import InputError

__all__ = ["best_curve", "load_histories", "plot_convergence"]


def best_curve(history: Sequence[dict[str, Any]]) -> np.ndarray:
    """Best latency after each trial (nan until the first success)."""
    out = np.full(len(history), np.nan)
    best = np.inf
    for i, h in enumerate(history):
        lat = h.get("latency")
        if lat is not None and lat < best:
            best = lat
        out[i] = best if np.isfinite(best) else np.nan
    return out


def load_histories(paths: Sequence[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """Runs ({model, workload, seed, history}) from tune output dirs, history.json or bench JSON
    (or bench JSON xz-compressed, `.json.xz`)."""
    runs: list[dict[str, Any]] = []
    for p in map(Path, paths):
        f = p / "history.json" if p.is_dir() else p
        if not f.is_file():
            raise InputError(f"no tuning history at {f}")
        try:  # bench/results commits its large runs xz-compressed (`.json.xz`)
            data = json.loads(lzma.decompress(f.read_bytes()) if f.suffix == ".xz" else f.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, lzma.LZMAError) as exc:
            raise InputError(f"{f} is not valid JSON{' (xz)' if f.suffix == '.xz' else ''}: {exc}") from None
        items = data.get("runs", data) if isinstance(data, dict) and "runs" in data else data
        for run in items if isinstance(items, list) else [items]:
            if not isinstance(run, dict) or "history" not in run or "model" not in run:
                raise InputError(f"{f} holds no tuning history (expected 'model' and 'history')")
            runs.append(run)
    if not runs:
        raise InputError("no tuning runs given")
    return runs


def plot_convergence(runs: Sequence[dict[str, Any]], path: str | os.PathLike[str], title: str | None = None) -> Path:
    """One line per model: best latency vs. trials (one run) or geomean normalised curve (many)."""
    from autosearch.reports.plots import _plt, _save

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    by_model: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by_model[str(r["model"])].append(r)
    workloads = {r.get("workload") for r in runs}
    single = len(workloads) == 1
    final_best: dict[Any, float] = {}
    for r in runs:
        c = best_curve(r["history"])
        if c.size and np.isfinite(c).any():
            w = r.get("workload")
            final_best[w] = min(final_best.get(w, np.inf), float(np.nanmin(c)))
    for i, (model, rs) in enumerate(by_model.items()):
        curves = []
        for r in rs:
            c = best_curve(r["history"])
            if not single:
                c = c / final_best.get(r.get("workload"), np.nan)
            curves.append(c)
        n = max(len(c) for c in curves)
        mat = np.full((len(curves), n), np.nan)
        for j, c in enumerate(curves):
            mat[j, : len(c)] = c
            if len(c) < n and len(c):
                mat[j, len(c) :] = c[-1]  # a run that stopped early keeps its best
        with np.errstate(invalid="ignore", divide="ignore"):
            y = np.exp(np.nanmean(np.log(mat), axis=0))
        ax.plot(
            np.arange(1, n + 1),
            y * (1e6 if single else 1),
            color=f"C{i % 10}",
            label=f"{model} ({len(rs)} run{'s' if len(rs) > 1 else ''})",
        )
    ax.set_xlabel("measured trials")
    if single:
        ax.set_ylabel("best latency so far (us)")
    else:
        ax.set_ylabel("best latency / best found by any model (geomean)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(
        title
        or (
            "convergence: " + (next(iter(workloads)) or "")
            if single
            else f"convergence over {len(workloads)} workloads"
        )
    )
    ax.legend()
    return _save(fig, path)
