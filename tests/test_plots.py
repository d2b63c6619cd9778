"""Plots are written as real PNGs and reflect their inputs."""

from __future__ import annotations

import numpy as np

from autosearch.reports.plots import plot_loss_curves, plot_pred_vs_measured, plot_topk_bars

PNG = b"\x89PNG\r\n\x1a\n"


def _png_size(p):
    import matplotlib.image as mpimg

    return mpimg.imread(p).shape


def test_loss_curves_png(tmp_path):
    hist = {
        "mlp": [
            {"epoch": i, "train_loss": 1 / (i + 1), "valid_loss": 1.2 / (i + 1), "valid_top1": 0.5 + i / 20}
            for i in range(5)
        ],
        "xgb": [{"epoch": 10 * i, "valid_top1": 0.6} for i in range(3)],
        "tvm-xgb": [{"epoch": 70}],
    }
    p = plot_loss_curves(hist, tmp_path / "sub" / "loss.png")
    assert p.read_bytes()[:8] == PNG and _png_size(p)[0] > 100


def test_topk_bars_png_and_nan_tolerant(tmp_path):
    p = plot_topk_bars(
        {"a": {"top1": 0.8, "top5": 0.95}, "b": {"top1": float("nan"), "top5": 0.9}}, tmp_path / "bars.png"
    )
    assert p.read_bytes()[:8] == PNG


def test_scatter_png_differs_with_data(tmp_path):
    rng = np.random.default_rng(0)
    lat = rng.uniform(1, 2, 30)
    lat[3] = np.inf  # a failed run
    a = plot_pred_vs_measured(-lat + rng.normal(0, 0.1, 30), lat, tmp_path / "a.png", title="wl")
    b = plot_pred_vs_measured(rng.normal(size=30), lat, tmp_path / "b.png", title="wl")
    assert a.read_bytes()[:8] == PNG and a.read_bytes() != b.read_bytes()
