"""The gradient MLP: learns a ranking with the rank loss, round-trips through JSON + safetensors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from autosearch.errors import InputError
from autosearch.search.gradient.features import FEATURE_WIDTH
from autosearch.search.gradient.model import GradientCostModel, Group, rank_loss


def _group(n: int, seed: int) -> Group:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, FEATURE_WIDTH, generator=g)
    # a made-up law (what a test can know), summed over blocks as the model sums them
    lat = torch.exp((0.7 * x[:, :, 0] - 0.5 * x[:, :, 5]).sum(1))
    return Group(f"g{seed}", x, [float(v) for v in lat])


def _pairwise_accuracy(model: GradientCostModel, g: Group) -> float:
    s = model.predict(g.features)
    lat = g.latencies
    pairs = [(i, j) for i in range(len(lat)) for j in range(len(lat)) if lat[i] < lat[j]]  # type: ignore[operator]
    return sum(s[i] > s[j] for i, j in pairs) / len(pairs)


def test_rank_loss_prefers_the_right_order() -> None:
    label = torch.tensor([1.0, 0.5, 0.0])
    assert rank_loss(torch.tensor([3.0, 2.0, 1.0]), label) < rank_loss(torch.tensor([1.0, 2.0, 3.0]), label)
    assert float(rank_loss(torch.tensor([1.0, 2.0]), torch.tensor([0.5, 0.5]))) == 0.0


def test_fit_learns_a_ranking_on_unseen_groups(tmp_path: Path) -> None:
    model = GradientCostModel(hidden=32, epochs=30, lr=3e-3, seed=0)
    before = _pairwise_accuracy(model, _group(60, 99))
    model.fit([_group(200, s) for s in range(4)])
    after = _pairwise_accuracy(model, _group(60, 99))
    assert after > 0.75 and after > before + 0.1
    model.save(tmp_path / "m")
    again = GradientCostModel.load(tmp_path / "m")
    x = _group(5, 7).features
    assert torch.allclose(model.score(x), again.score(x))


def test_failed_schedules_rank_last_and_update_keeps_learning() -> None:
    g = _group(30, 1)
    g.latencies[0] = None
    assert float(g.labels()[0]) == 0.0 and float(g.labels().max()) == 1.0
    model = GradientCostModel(hidden=16, epochs=5, update_epochs=5)
    model.fit([g])
    n = model.n_trained
    model.update([_group(10, 2)])
    assert model.n_trained == n + 10


def test_score_is_differentiable_in_the_features() -> None:
    model = GradientCostModel(hidden=16)
    x = torch.randn(3, 2, FEATURE_WIDTH, requires_grad=True)
    model.score(x).sum().backward()
    assert x.grad is not None and float(x.grad.abs().sum()) > 0


def test_load_refuses_what_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a gradient cost model"):
        GradientCostModel.load(tmp_path)
    (tmp_path / "config.json").write_text('{"format": "other", "format_version": 1}')
    with pytest.raises(InputError, match="not a autosearch-gradient-mlp"):
        GradientCostModel.load(tmp_path)
    with pytest.raises(InputError, match="no group"):
        GradientCostModel().fit([])
