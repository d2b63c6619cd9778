"""The four sparse cost models: shapes, save/load, and that training learns a ranking it can be wrong about."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from autosearch.errors import InputError
from autosearch.sparse.matrices import MatrixSpec, generate, matrix_hash
from autosearch.sparse.models import KINDS, build_model, load_model, save_model
from autosearch.sparse.records import Group
from autosearch.sparse.space import SuperSchedule, sample_configs
from autosearch.sparse.train import evaluate, fit, margin_ranking_loss, predict_configs, split_groups


def _latency(c: SuperSchedule, family: str) -> float:
    """A made-up but learnable cost: blocks win on block matrices, parallel and vectors help."""
    t = 1.0
    t *= 0.4 if (c.fmt == "bcsr") == (family == "blockdiag") else 1.0
    t *= 0.6 if c.parallel else 1.0
    t *= 0.8 if c.vectorize else 1.0
    return t * (1 + 0.1 * c.unroll / 8)


def _groups(n: int = 12, op: str = "spmm") -> list[Group]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        fam = "blockdiag" if i % 2 else "uniform"
        spec = MatrixSpec(fam, 200 + 10 * i, 200, 4.0, seed=i)
        cfgs = sample_configs(rng, op, 24, 16)
        g = Group(f"k{i}", f"{op}/{spec.name}", op, 16, fam, spec, matrix_hash(generate(spec)))
        g.configs, g.latencies = cfgs, [_latency(c, fam) for c in cfgs]
        out.append(g)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_forward_shapes(kind: str) -> None:
    m = build_model(kind, placement="concat" if kind == "AutoSparseNet" else "token", layers=2)
    img, info = np.random.rand(2, 64, 64).astype(np.float32), np.random.rand(14).astype(np.float32)
    cfgs = sample_configs(np.random.default_rng(1), "sddmm", 7, 32)
    s = predict_configs(m, img, info, cfgs)
    assert s.shape == (7,) and np.isfinite(s).all()


def test_training_learns_the_ranking_and_beats_untrained() -> None:
    groups = _groups()
    train, test = groups[:9], groups[9:]
    chance = []  # untrained networks, seeded: the global RNG's state would make this test order-dependent
    for s in range(3):
        torch.manual_seed(s)
        chance.append(evaluate(build_model("AutoSparseNet", channels=8), test))
    untrained = {k: float(np.mean([c[k] for c in chance])) for k in ("top1", "pairwise")}
    res = fit("AutoSparseNet", train, None, epochs=8, seed=0, hyper={"channels": 8})
    got = evaluate(res.model, test)
    assert res.losses[-1] < res.losses[0]
    assert got["top5"] >= 0.95 and got["pairwise"] > 0.75, got
    assert got["top1"] > untrained["top1"] and got["pairwise"] > untrained["pairwise"] + 0.2, (got, untrained)


def test_waconet_margin_loss_and_training() -> None:
    s = torch.tensor([[2.0, 1.0, 0.0]])
    lab = torch.tensor([[1.0, 0.5, 0.2]])
    mask = torch.ones_like(lab, dtype=torch.bool)
    assert float(margin_ranking_loss(s, lab, mask)) == 0.0  # ordered with margin: no loss
    assert float(margin_ranking_loss(-s, lab, mask)) > 1.0  # reversed: large loss
    groups = _groups(8, "spmv")
    res = fit("WACONet", groups[:6], None, epochs=8, seed=0)
    assert evaluate(res.model, groups[6:])["pairwise"] > 0.7


def test_save_load_roundtrip_and_bad_files(tmp_path) -> None:
    m = build_model("AutoSparseNet_WACONet", layers=2)
    img, info = np.random.rand(2, 64, 64).astype(np.float32), np.random.rand(14).astype(np.float32)
    cfgs = sample_configs(np.random.default_rng(2), "spmm", 5, 32)
    p = save_model(m, tmp_path / "m", {"trained_on": "spmm"})
    m2, cfg = load_model(p)
    assert cfg["hyper"]["layers"] == 2 and cfg["trained_on"] == "spmm"
    np.testing.assert_allclose(predict_configs(m, img, info, cfgs), predict_configs(m2, img, info, cfgs), rtol=1e-5)
    (p / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(InputError, match="cannot be read"):
        load_model(p)
    with pytest.raises(InputError, match="not a sparse model directory"):
        load_model(tmp_path / "nowhere")
    with pytest.raises(InputError, match="unknown sparse model"):
        build_model("ResNet")


def test_split_holds_out_whole_matrices_and_a_family() -> None:
    groups = _groups(12) + _groups(12, "spmv")
    train, test = split_groups(groups, holdout_family="blockdiag", test_share=0.34, seed=0)
    assert all(g.family == "uniform" for g in train)
    assert {g.family for g in test} == {"blockdiag", "uniform"}
    assert not {g.matrix_hash for g in train} & {g.matrix_hash for g in test}


def test_split_holds_out_several_whole_families() -> None:
    groups = _groups(12)
    for g in groups[:4]:  # a third family: the bench holds out two whole families at once
        g.family = "community"
    train, test = split_groups(groups, holdout_family=("community", "blockdiag"), test_share=0.0, seed=0)
    assert {g.family for g in train} == {"uniform"} and train
    assert {g.key for g in test} == {g.key for g in groups if g.family in ("community", "blockdiag")}
