"""The seed's figures are drawn from a results JSON, and a wrong file is refused with one line."""

from __future__ import annotations

import json

import pytest

from autosearch.errors import InputError
from autosearch.sparse.plots import plot_all


def _results() -> dict:
    run = {"losses": [3.0, 2.0, 1.5], "top1": 0.7, "top5": 0.9}
    model = {"runs": [run, run], "top1": 0.7, "top1_std": 0.01, "top5": 0.9, "top5_std": 0.0}
    hist = [{"best": b} for b in (3e-3, 2e-3, 2e-3, 1e-3)]
    search = {"seconds": 4.0, "best_latency": 1e-3, "history": hist,
              "breakdown": {"sample": 0.1, "predict": 0.2, "measure": 3.0, "update": 0.5}}  # fmt: skip
    row = {"op": "spmm", "matrix": "uniform-1000x1000-r4-s1", "model_search": search, "random_search": search}
    return {"models": {"spmm": {"WACONet": model, "AutoSparseNet[token]": model}}, "search": [row]}


def test_plot_all_writes_every_figure(tmp_path) -> None:
    p = tmp_path / "r.json"
    p.write_text(json.dumps(_results()))
    files = plot_all(p, tmp_path / "figs")
    names = sorted(f.name for f in files)
    assert names == ["sparse_breakdown.png", "sparse_convergence.png", "sparse_loss.png", "sparse_search_time.png",
                     "sparse_topk.png"]  # fmt: skip
    assert all(f.stat().st_size > 5000 for f in files)


def test_plot_all_refuses_other_json(tmp_path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"rows": []}')
    with pytest.raises(InputError, match="no 'models' section"):
        plot_all(p, tmp_path)
    with pytest.raises(InputError, match="cannot read results"):
        plot_all(tmp_path / "missing.json", tmp_path)
