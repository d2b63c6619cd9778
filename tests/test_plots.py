"""Plots are written as real PNGs and draw their inputs: the figure's data is read back before it is
saved (lines, bars, points, title) and the PNG's pixels are checked for the series' colours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autosearch.reports import plots
from autosearch.reports.plots import plot_loss_curves, plot_pred_vs_measured, plot_topk_bars

PNG = b"\x89PNG\r\n\x1a\n"
DPI = 110  # plots._save


@pytest.fixture()
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every figure the plot functions save, kept for inspection (then saved as usual)."""
    seen: list[Any] = []
    save = plots._save

    def keep(fig: Any, path: Any) -> Path:
        seen.append(fig)
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return seen


def _pixels(p: Path) -> np.ndarray:
    import matplotlib.image as mpimg

    assert p.read_bytes()[:8] == PNG
    return mpimg.imread(p)[..., :3]


def _has_colour(img: np.ndarray, colour: str, tol: float = 0.02) -> int:
    """How many pixels are (nearly) exactly matplotlib's `colour` (e.g. "C0")."""
    from matplotlib.colors import to_rgb

    return int((np.abs(img - np.asarray(to_rgb(colour))) < tol).all(axis=-1).sum())


def test_loss_curves_draw_each_history(tmp_path: Path, figures: list[Any]) -> None:
    hist = {
        "mlp": [
            {"epoch": i, "train_loss": 1 / (i + 1), "valid_loss": 1.2 / (i + 1), "valid_top1": 0.5 + i / 20}
            for i in range(5)
        ],
        "xgb": [{"epoch": 10 * i, "valid_top1": 0.6} for i in range(3)],
        "tvm-xgb": [{"epoch": 70}],  # nothing to draw
    }
    p = plot_loss_curves(hist, tmp_path / "sub" / "loss.png")
    (fig,) = figures
    ax, ax2 = fig.axes
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert set(lines) == {"mlp train loss", "mlp valid loss"}
    assert np.allclose(lines["mlp train loss"].get_ydata(), [1 / (i + 1) for i in range(5)])
    assert np.allclose(lines["mlp valid loss"].get_ydata(), [1.2 / (i + 1) for i in range(5)])
    top1 = {ln.get_label(): ln for ln in ax2.lines}
    assert set(top1) == {"mlp valid top-1", "xgb valid top-1"}
    assert np.allclose(top1["xgb valid top-1"].get_xdata(), [0, 10, 20])
    img = _pixels(p)
    assert img.shape[:2] == (round(4.2 * DPI), 7 * DPI)
    assert _has_colour(img, "C0") > 100 and _has_colour(img, "C1") > 20  # mlp's lines, xgb's line
    assert _has_colour(img, "C2") == 0  # tvm-xgb drew nothing


def test_topk_bars_hold_the_values_and_skip_nan(tmp_path: Path, figures: list[Any]) -> None:
    p = plot_topk_bars(
        {"a": {"top1": 0.8, "top5": 0.95}, "b": {"top1": float("nan"), "top5": 0.4}}, tmp_path / "bars.png"
    )
    (fig,) = figures
    (ax,) = fig.axes
    heights = [b.get_height() for b in ax.patches]
    assert heights[:2] == [0.8, pytest.approx(np.nan, nan_ok=True)] and heights[2:4] == [0.95, 0.4]
    assert sorted(t.get_text() for t in ax.texts) == ["0.40", "0.80", "0.95"]  # no label on the NaN bar
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    img = _pixels(p)
    # top-5 bars (C1): 0.95 + 0.4 of the axis; top-1 (C0): 0.8 only, and the legend swatches
    assert _has_colour(img, "C1") > _has_colour(img, "C0") > 0


def test_scatter_places_each_schedule(tmp_path: Path, figures: list[Any]) -> None:
    rng = np.random.default_rng(0)
    lat = rng.uniform(1, 2, 30)
    lat[3] = np.inf  # a failed run
    ordered = np.where(np.isfinite(lat), 1 / lat, 0.0)  # scores that rank exactly as the latencies
    a = plot_pred_vs_measured(ordered, lat, tmp_path / "a.png", title="wl")
    b = plot_pred_vs_measured(rng.normal(size=30), np.where(np.isfinite(lat), lat, 1.5), tmp_path / "b.png")
    fa, fb = figures
    (ax,) = fa.axes
    assert ax.get_title() == "wl\nKendall tau 1.00"
    measured, failed, pick = ax.collections
    ok = np.isfinite(lat)
    assert np.allclose(measured.get_offsets(), np.c_[ordered[ok], lat[ok].min() / lat[ok]])
    assert np.allclose(failed.get_offsets(), [[0.0, 0.0]])
    assert np.allclose(pick.get_offsets(), [[ordered.max(), 1.0]])  # the model's pick is the fastest
    assert "Kendall tau 1.00" not in fb.axes[0].get_title()
    assert len(fb.axes[0].collections) == 2  # no failed run: no failed marker
    assert _has_colour(_pixels(a), "C3") > 0 and _has_colour(_pixels(b), "C3") == 0
