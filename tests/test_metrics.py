"""The DESIGN.md metric definitions, checked on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autosearch.training.metrics import (
    group_metrics,
    kendall_tau,
    labels_from_latency,
    mean_metrics,
    pairwise_accuracy,
    rmse,
    top_k_score,
)

LAT = [2.0, 1.0, 4.0, float("inf"), 1.25]  # best = 1.0 (index 1); index 3 failed


def test_labels_are_normalised_throughput_and_failed_zero():
    np.testing.assert_allclose(labels_from_latency(LAT), [0.5, 1.0, 0.25, 0.0, 0.8])
    np.testing.assert_allclose(labels_from_latency([float("nan"), -1.0, 0.0]), [0, 0, 0])


def test_top_k_definition():
    # scores pick index 0 first (lat 2.0): top-1 = 1.0 / 2.0
    scores = [5, 1, 4, 3, 2]
    assert top_k_score(scores, LAT, 1) == pytest.approx(0.5)
    # top-3 picks indices 0, 2, 3 -> best of (2.0, 4.0, failed) = 2.0
    assert top_k_score(scores, LAT, 3) == pytest.approx(0.5)
    assert top_k_score(scores, LAT, 5) == pytest.approx(1.0)
    # picking only failed runs scores 0; a group with no success is undefined
    assert top_k_score([0, 0, 0, 9, 0], LAT, 1) == 0.0
    assert math.isnan(top_k_score([1, 2], [float("inf")] * 2, 1))


def test_pairwise_accuracy_and_kendall():
    perfect = -np.array([2.0, 1.0, 4.0, 1e9, 1.25])  # orders exactly as throughput
    assert pairwise_accuracy(perfect, LAT) == 1.0
    assert pairwise_accuracy(-perfect, LAT) == 0.0
    assert kendall_tau(perfect, LAT) == pytest.approx(1.0)
    assert kendall_tau(-perfect, LAT) == pytest.approx(-1.0)
    # one swapped pair out of 10
    s = perfect.copy()
    s[[0, 4]] = s[[4, 0]]
    assert pairwise_accuracy(s, LAT) == pytest.approx(0.9)
    assert math.isnan(kendall_tau([1, 1, 1, 1, 1], LAT))


def test_rmse_and_group_metrics():
    y = labels_from_latency(LAT)
    assert rmse(y, LAT) == 0.0
    assert rmse(np.zeros(5), LAT) == pytest.approx(np.sqrt(np.mean(y**2)))
    g = group_metrics(y * 10 + 3, LAT)  # any increasing transform of the truth ranks perfectly
    assert g["top1"] == 1.0 and g["pairwise"] == 1.0 and g["n"] == 5
    assert g["rmse"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        group_metrics([1, 2], LAT)


def test_mean_is_unweighted_over_groups_and_ignores_nan():
    groups = [
        {"top1": 1.0, "top5": 1.0, "pairwise": 1.0, "kendall": 1.0, "rmse": 0.0},
        {"top1": 0.5, "top5": 1.0, "pairwise": float("nan"), "kendall": 0.0, "rmse": 0.2},
    ]
    m = mean_metrics(groups)
    assert m["top1"] == 0.75 and m["pairwise"] == 1.0 and m["groups"] == 2
