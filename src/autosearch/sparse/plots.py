"""The seed's result figures, drawn from a bench/sparse.py results JSON.

Why from the JSON: the figures must show what one benchmark run measured, and be redrawable
without re-running it (`autosearch sparse plots RESULTS.json`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from autosearch.errors import InputError

__all__ = ["plot_all"]


def _fig() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _loss_curves(res: dict[str, Any], out: Path) -> Path:
    plt = _fig()
    ops = sorted(res["models"])
    fig, axes = plt.subplots(1, len(ops), figsize=(5 * len(ops), 3.6), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for name, m in res["models"][op].items():
            curves = np.asarray([r["losses"] for r in m["runs"]], dtype=float)
            mean = curves.mean(axis=0)
            ax.plot(np.arange(1, mean.size + 1), mean / max(mean[0], 1e-12), label=name)
        ax.set_title(f"{op}: training loss (relative to epoch 1, mean of seeds)")
        ax.set_xlabel("epoch")
        ax.legend(fontsize=7)
    p = out / "sparse_loss.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _topk_bars(res: dict[str, Any], out: Path) -> Path:
    plt = _fig()
    ops = sorted(res["models"])
    names = sorted({n for op in ops for n in res["models"][op]})
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    w = 0.8 / max(len(names), 1)
    for ax, key in zip(axes, ("top1", "top5")):
        for j, n in enumerate(names):
            vals = [res["models"][op].get(n, {}).get(key, np.nan) for op in ops]
            errs = [res["models"][op].get(n, {}).get(key + "_std", 0.0) for op in ops]
            ax.bar(np.arange(len(ops)) + j * w, vals, w, yerr=errs, label=n)
        ax.set_xticks(np.arange(len(ops)) + w * (len(names) - 1) / 2, ops)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"held-out {key} (mean of seeds)")
    axes[0].legend(fontsize=7, loc="lower left")
    p = out / "sparse_topk.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _search(res: dict[str, Any], out: Path) -> list[Path]:
    plt = _fig()
    rows = res.get("search", [])
    if not rows:
        return []
    paths = []
    fig, ax = plt.subplots(figsize=(7, 3.6))
    labels = [f"{r['op']}:{r['matrix'][:18]}" for r in rows]
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["model_search"]["seconds"] for r in rows], 0.4, label="with cost model")
    if all(r.get("random_search") for r in rows):  # bench/sparse.py --no-random leaves it out
        ax.bar(x + 0.2, [r["random_search"]["seconds"] for r in rows], 0.4, label="random (no model)")
    ax.set_xticks(x, labels, rotation=60, fontsize=6, ha="right")
    ax.set_ylabel("search seconds")
    ax.legend()
    fig.tight_layout()
    paths.append(out / "sparse_search_time.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for key, lab in (("model_search", "with cost model"), ("random_search", "random")):
        curves = []
        for r in rows:
            if not r.get(key):
                continue
            best = np.asarray([h["best"] for h in r[key]["history"]], dtype=float)
            if best.size and np.isfinite(best[-1]):
                final = min(r[k]["best_latency"] for k in ("model_search", "random_search") if r.get(k))
                curves.append(np.pad(final / best, (0, max(0, 20 - best.size)), mode="edge")[:20])
        if curves:
            ax.plot(np.arange(1, 21), np.nanmean(curves, axis=0), label=lab)
    ax.set_xlabel("measured configurations")
    ax.set_ylabel("best so far (1 = best found by either)")
    ax.legend()
    fig.tight_layout()
    paths.append(out / "sparse_convergence.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    br = rows[0]["model_search"]["breakdown"]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.barh(list(br), list(br.values()))
    ax.set_xlabel(f"seconds ({rows[0]['op']} on {rows[0]['matrix'][:30]})")
    ax.set_title("time breakdown of one search")
    fig.tight_layout()
    paths.append(out / "sparse_breakdown.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def plot_all(results: str | Path | dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Every figure of a results JSON into out_dir; returns the files written."""
    if isinstance(results, dict):
        res = results
    else:
        try:
            res = json.loads(Path(results).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read results {results}: {exc}") from None
    if "models" not in res:
        raise InputError("results JSON has no 'models' section (not a bench/sparse.py result)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return [_loss_curves(res, out), _topk_bars(res, out)] + _search(res, out)
