"""Cost models: learn a ranking, save/load round-trips, losses, and every bad-input path."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
import torch

from autosearch.errors import InputError
from autosearch.models import load_model, make_model
from autosearch.models.base import FeatureBatch
from autosearch.training.dataset import Dataset
from autosearch.training.losses import lambdarank_loss, mse_loss, pairwise_loss
from autosearch.training.trainer import evaluate, group_minibatches, valid_carve_out

W = 12


def synth(n_groups=8, per_group=40, seed=0, fail_frac=0.05, width=W):
    """Latency = sum over a candidate's rows of a shared smooth function (a store's cost).

    As in real PerStoreFeature data, all candidates of one workload have the same number of rows.
    """
    rng = np.random.default_rng(seed)
    w = rng.normal(size=width)
    groups = []
    for g in range(n_groups):
        mats, lats = [], []
        k = 1 + g % 3
        for _ in range(per_group):
            m = rng.random((k, width)).astype(np.float32)
            mats.append(m)
            lat = 1e-3 * (1.0 + float(np.logaddexp(0, 2 * m @ w).sum()))
            lats.append(None if rng.random() < fail_frac else lat)
        groups.append((f"key{g}", "llvm", mats, lats))
    return Dataset.from_groups(groups, names={f"key{g}": (f"wl{g}", f"fam{g % 2}") for g in range(n_groups)})


FAST = {
    "xgb": dict(n_rounds=40, max_depth=4, eval_every=5, nthread=1),
    "lgbm-rank": dict(n_rounds=60, num_leaves=15, nthread=1),
    "mlp": dict(epochs=30, hidden=32, lr=3e-3),
}


@pytest.fixture(scope="module")
def data():
    train = synth(8, 40, seed=0)
    test = synth(11, 40, seed=0).subset([8, 9, 10])  # same latency law, unseen groups
    return train, test


@pytest.mark.parametrize(
    "kind,kw",
    [
        ("xgb", {}),
        ("xgb", {"objective": "rank"}),
        ("lgbm-rank", {}),
        ("mlp", {"loss": "mse"}),
        ("mlp", {"loss": "pairwise"}),
        ("mlp", {"loss": "lambdarank"}),
    ],
)
def test_model_learns_ranking_and_round_trips(kind, kw, data, tmp_path):
    train, test = data
    model = make_model(kind, **FAST[kind], **kw)
    report = model.fit(train)  # no early stopping: 3 validation groups would make it noisy
    assert report.history and report.train_time_s > 0
    res = evaluate(model, test)
    # A learnable target: clearly better than a random order (pairwise 0.5, Kendall 0).
    assert res.mean["pairwise"] > 0.6, res.mean
    assert res.mean["kendall"] > 0.2, res.mean
    assert res.candidates_per_s > 0 and len(res.per_group) == 3
    model.save(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["kind"] == kind and cfg["n_features"] == W and cfg["extractor"] == list(train.extractor)
    assert not any(f.endswith((".pkl", ".pickle", ".pt")) for f in os.listdir(tmp_path / "m"))
    loaded = load_model(tmp_path / "m")
    np.testing.assert_allclose(loaded.predict(test.batch()), model.predict(test.batch()), rtol=1e-5, atol=1e-6)
    # predictions of one group do not depend on what else is in the batch
    g = test.group_batch(0)
    np.testing.assert_allclose(model.predict(g), model.predict(test.batch())[: g.n_candidates], rtol=1e-5, atol=1e-6)
    # update is incremental and keeps the model usable
    model.update(synth(2, 20, seed=5))
    assert np.isfinite(model.predict(g)).all()


def test_mlp_members_score_with_their_mean_and_round_trip(data, tmp_path):
    from safetensors.torch import load_file, save_file

    train, test = data
    ens = make_model("mlp", **FAST["mlp"], members=3, seed=4)
    rep = ens.fit(train, test)
    assert len(ens.nets) == 3 and {r["member"] for r in rep.history} == {0, 1, 2}
    singles = []
    for member in range(3):  # member i is exactly the single network of seed 4 + i
        one = make_model("mlp", **FAST["mlp"], seed=4 + member)
        one.fit(train, test)
        singles.append(one.predict(test.batch()))
    np.testing.assert_allclose(ens.predict(test.batch()), np.mean(singles, axis=0), rtol=1e-4, atol=1e-5)
    ens.save(tmp_path / "e")
    np.testing.assert_allclose(
        load_model(tmp_path / "e").predict(test.batch()), ens.predict(test.batch()), rtol=1e-5, atol=1e-6
    )
    ens.update(synth(2, 20, seed=5))
    assert np.isfinite(ens.predict(test.batch())).all()
    # a directory written before ensembles (one network, unprefixed keys) still loads
    one = make_model("mlp", **FAST["mlp"])
    one.fit(train)
    one.save(tmp_path / "old")
    f = tmp_path / "old" / "model.safetensors"
    save_file({k[len("m0.") :]: v for k, v in load_file(str(f)).items()}, str(f))
    cfg = json.loads((tmp_path / "old" / "config.json").read_text())
    from autosearch.models.io import _sha256

    cfg["weights_sha256"] = _sha256(f)
    del cfg["params"]["members"]
    (tmp_path / "old" / "config.json").write_text(json.dumps(cfg))
    np.testing.assert_allclose(
        load_model(tmp_path / "old").predict(test.batch()), one.predict(test.batch()), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(InputError, match="members must be >= 1"):
        make_model("mlp", members=0)


def test_mlp_ranking_loss_beats_untrained(data):
    train, test = data
    untrained = make_model("mlp", epochs=0, hidden=32)
    untrained.fit(train)
    trained = make_model("mlp", loss="pairwise", epochs=10, hidden=32)
    trained.fit(train)
    assert evaluate(trained, test).mean["pairwise"] > evaluate(untrained, test).mean["pairwise"] + 0.1


def test_early_stopping_records_history(data):
    train, test = data
    m = make_model("mlp", epochs=30, hidden=16, patience=2, lr=0.0)  # lr 0: never improves after epoch 0
    rep = m.fit(train, test)
    assert rep.best_epoch == 0 and len(rep.history) == 3
    assert {"train_loss", "valid_loss", "valid_top1", "valid_top5"} <= set(rep.history[0])


def test_fit_refit_trains_final_model_on_all_training_groups(data):
    from autosearch.training.trainer import fit_refit

    train, _ = data
    m = make_model("xgb", n_rounds=40, max_depth=3, eval_every=5, patience=2, nthread=1)
    rep = fit_refit(m, train, valid_fraction=0.25)
    assert rep.best_epoch is not None and m.n_rounds == rep.best_epoch + 1
    assert rep.n_train == train.n_candidates
    assert m.booster.num_boosted_rounds() == rep.best_epoch + 1


def test_stop_on_choices():
    from autosearch.training.trainer import selection_key

    assert selection_key(0.9, 0.95) > selection_key(0.8, 1.0)
    assert selection_key(0.8, 1.0, "top1+top5") > selection_key(0.9, 0.85, "top1+top5")
    with pytest.raises(InputError, match="unknown stop_on"):
        selection_key(1, 1, "ndcg")


def test_losses_prefer_correct_order():
    labels = torch.tensor([[1.0, 0.5, 0.2, 0.0]])
    mask = torch.ones_like(labels, dtype=torch.bool)
    good, bad = torch.tensor([[3.0, 2.0, 1.0, 0.0]]), torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    for fn in (pairwise_loss, lambdarank_loss):
        assert fn(good, labels, mask) < fn(bad, labels, mask)
    assert mse_loss(labels.clone(), labels, mask) == 0
    # padding is ignored
    pad_mask = torch.tensor([[True, True, False, False]])
    assert pairwise_loss(torch.tensor([[1.0, 0.0, -50.0, 50.0]]), labels, pad_mask) == pytest.approx(
        pairwise_loss(torch.tensor([[1.0, 0.0]]), labels[:, :2], pad_mask[:, :2]).item()
    )
    # lambdarank weighs a swap at the top more than one at the bottom
    top_swap, bottom_swap = torch.tensor([[2.0, 3.0, 1.0, 0.0]]), torch.tensor([[3.0, 2.0, 0.0, 1.0]])
    assert lambdarank_loss(top_swap, labels, mask) > lambdarank_loss(bottom_swap, labels, mask)


def test_group_minibatches_cover_each_candidate_once_within_groups(data):
    train, _ = data
    seen = []
    gid = train.group_ids()
    for idx in group_minibatches(train, 3, 7, np.random.default_rng(0)):
        assert idx.shape[0] <= 3 and idx.shape[1] <= 7
        for row in idx:
            real = row[row >= 0]
            assert len(set(gid[real])) == 1
            seen.extend(real.tolist())
    assert sorted(seen) == list(range(train.n_candidates))


def test_valid_carve_out_is_by_workload(data):
    train, _ = data
    fit, val = valid_carve_out(train, 0.25, seed=0)
    assert val is not None and not set(fit.workload_keys()) & set(val.workload_keys())
    assert fit.n_candidates + val.n_candidates == train.n_candidates


# -- bad input ---------------------------------------------------------------------------------
def test_bad_fit_inputs(data):
    train, _ = data
    with pytest.raises(InputError, match="empty"):
        make_model("mlp").fit(Dataset.empty(W))
    with pytest.raises(InputError, match="unknown loss"):
        make_model("mlp", loss="hinge").fit(train)
    with pytest.raises(InputError, match="unknown model kind"):
        make_model("forest")
    with pytest.raises(InputError, match="bad hyper-parameter"):
        make_model("xgb", depth=3)
    with pytest.raises(InputError, match="not trained"):
        make_model("xgb").predict(train.batch())


@pytest.fixture(scope="module")
def saved(tmp_path_factory, data):
    train, _ = data
    d = tmp_path_factory.mktemp("models")
    out = {}
    for kind in ("xgb", "mlp", "lgbm-rank"):
        m = make_model(kind, **{**FAST[kind], **({"epochs": 1} if kind == "mlp" else {})})
        m.fit(train)
        m.save(d / kind)
        out[kind] = d / kind
    return out


def test_predict_rejects_wrong_width_and_nan(saved):
    m = load_model(saved["mlp"])
    with pytest.raises(InputError, match=f"width {W + 1} but the model expects {W}"):
        m.predict(FeatureBatch.from_list([np.zeros((2, W + 1), np.float32)]))
    with pytest.raises(InputError, match="NaN or inf"):
        m.predict(FeatureBatch.from_list([np.full((2, W), np.nan, np.float32)]))
    # a candidate without rows ranks last rather than crashing
    s = m.predict(FeatureBatch.from_list([np.ones((2, W), np.float32), np.zeros((0, W), np.float32)]))
    assert s[1] == -np.inf and np.isfinite(s[0])
    # every candidate without rows (a schedule that is one tile-kernel call stores nothing else)
    none = m.predict(FeatureBatch.from_list([np.zeros((0, W), np.float32)] * 3))
    assert none.shape == (3,) and (none == -np.inf).all()


@pytest.mark.parametrize("kind", ["xgb", "mlp", "lgbm-rank"])
def test_broken_model_dirs_fail_with_one_line(saved, kind, tmp_path):
    import shutil

    src = saved[kind]
    cfg = json.loads((src / "config.json").read_text())
    weights = cfg["weights"]

    def copy(name):
        d = tmp_path / name
        shutil.copytree(src, d)
        return d

    d = copy("missing")
    (d / weights).unlink()
    with pytest.raises(InputError, match="weights file .* is missing") as e:
        load_model(d)
    assert "\n" not in str(e.value)

    d = copy("trunc")
    data = (d / weights).read_bytes()
    (d / weights).write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated or corrupt") as e:
        load_model(d)
    assert "\n" not in str(e.value)

    d = copy("trunc-resummed")  # a checksum that matches a broken file: the format's loader must still fail cleanly
    data = (d / weights).read_bytes()
    (d / weights).write_bytes(data[: len(data) // 2])
    resummed = hashlib.sha256((d / weights).read_bytes()).hexdigest()
    (d / "config.json").write_text(json.dumps({**cfg, "weights_sha256": resummed}))
    with pytest.raises(InputError, match="truncated or corrupt") as e:
        load_model(d)
    assert "\n" not in str(e.value)

    d = copy("nosum")  # no checksum at all: refused before any loader runs
    (d / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "weights_sha256"}))
    with pytest.raises(InputError, match="lacks the field 'weights_sha256'"):
        load_model(d)

    d = copy("version")
    (d / "config.json").write_text(json.dumps({**cfg, "format_version": 99, "autosearch_version": "9.0"}))
    with pytest.raises(InputError, match="format 99 .*autosearch 9.0"):
        load_model(d)

    d = copy("noconfig")
    (d / "config.json").unlink()
    with pytest.raises(InputError, match="config.json is missing"):
        load_model(d)

    with pytest.raises(InputError, match="no model directory"):
        load_model(tmp_path / "nowhere")


# -- TVM anchors -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,kw", [("tvm-xgb", dict(nthread=1)), ("tvm-mlp", dict(epochs=4, hidden=32))])
def test_tvm_anchors_train_on_few_groups_and_round_trip(kind, kw, data, tmp_path):
    """3 groups (TVM's MLPModel alone crashes below 5), float32 features, torch 2.13 StepLR."""
    train, test = data
    m = make_model(kind, **kw)
    m.fit(train.subset([0, 1, 2]))
    res = evaluate(m, test)
    assert res.mean["groups"] == 3 and np.isfinite(res.mean["top1"])
    one = m.predict(test.group_batch(0).select(np.array([3])))  # a single candidate
    assert one.shape == (1,) and np.isfinite(one).all()
    m.save(tmp_path / kind)
    again = load_model(tmp_path / kind)
    np.testing.assert_allclose(again.predict(test.group_batch(1)), m.predict(test.group_batch(1)), rtol=1e-5, atol=1e-6)
    m.update(test.subset([0]))
    assert np.isfinite(m.predict(test.group_batch(2))).all()


def test_tvm_mlp_anchor_single_group_is_one_clear_error(data):
    with pytest.raises(InputError, match="at least 2 workload groups"):
        make_model("tvm-mlp", epochs=1).fit(data[0].subset([0]))


# -- CLI ---------------------------------------------------------------------------------------
def test_cli_train_eval_report(tmp_path):
    from typer.testing import CliRunner

    from autosearch.cli import app
    from test_dataset import _make_store

    db = tmp_path / "s.db"
    _make_store(db, n_workloads=6, per=10)
    run = CliRunner().invoke
    out = tmp_path / "m"
    r = run(
        app,
        [
            "train",
            "--model",
            "mlp",
            "--loss",
            "lambdarank",
            "--db",
            str(db),
            "--out",
            str(out),
            "--epochs",
            "2",
            "--fraction",
            "0.34",
            "-p",
            "hidden=16",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    assert summary["test_groups"] == 2
    assert (out / "split.json").exists() and (out / "train_report.json").exists()
    r = run(app, ["eval", "--model", str(out), "--db", str(db), "--json"])
    assert r.exit_code == 0, r.output
    ev = json.loads(r.output)
    split = json.loads((out / "split.json").read_text())
    assert sorted(g["key"] for g in ev["per_group"]) == sorted(split["test"])
    # the saved model scores the held-out groups exactly as it did when train reported them
    for k in ("top1", "top5", "pairwise"):
        assert ev["mean"][k] == pytest.approx(summary["held_out"][k], abs=1e-9)
    r = run(app, ["eval", "--model", str(out), "--db", str(db), "--workloads", "GMM"])
    assert r.exit_code == 0 and "mean of 3 groups" in r.output
    r = run(app, ["report", "--model", str(out), "--db", str(db), "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    assert {p.name for p in (tmp_path / "rep").iterdir()} == {"loss_curves.png", "topk.png", "scatter_m.png"}
    # bad input: one line, exit status 2
    r = run(app, ["eval", "--model", str(tmp_path / "none"), "--db", str(db)])
    assert r.exit_code == 2 and "no model directory" in r.output
    # --train-db: the other store's groups join training, never its held-out family (C2D: k0, k2)
    extra = tmp_path / "extra.db"
    _make_store(extra, n_workloads=4, per=6, seed=3)
    args = ["train", "--model", "xgb", "--db", str(db), "--train-db", str(extra), "--holdout", "C2D"]
    r = run(app, [*args, "--epochs", "3", "--out", str(tmp_path / "j"), "--json"])
    assert r.exit_code == 0, r.output
    joined = json.loads(r.output)
    assert joined["train_groups"] + joined["valid_groups"] == 3 + 2 and joined["test_groups"] == 3
    r = run(app, ["train", "--model", "xgb", "--loss", "mse", "--db", str(db), "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--loss applies to --model mlp only" in r.output


# -- real data: tests/data/tiny_tvm.db (real measurements + PerStoreFeature, from `autosearch collect`)
TINY = os.path.join(os.path.dirname(__file__), "data", "tiny_tvm.db")


def _top_k_by_hand(scores: np.ndarray, lat: np.ndarray, k: int) -> float:
    """DESIGN.md's top-k, written out independently of training.metrics."""
    best_true = min(x for x in lat if np.isfinite(x))
    picked = sorted(range(len(scores)), key=lambda i: -scores[i])[:k]
    best_picked = min(lat[i] for i in picked)
    return best_true / best_picked if np.isfinite(best_picked) else 0.0


def test_real_tiny_db_train_and_eval(tmp_path):
    from autosearch.training.dataset import load_dataset
    from autosearch.training.splits import apply_split, split_workloads

    ds = load_dataset(TINY)
    assert ds.n_features == 164 and ds.n_groups >= 2 and ds.extractor == ("per-store-feature", "tvm-0.27")
    assert np.isfinite(ds.rows).all() and (ds.labels.max() == 1.0)
    train, test = apply_split(ds, split_workloads(ds, fraction=0.34, seed=0))
    for kind, kw in (
        ("xgb", dict(nthread=1, n_rounds=30, max_depth=6)),
        ("mlp", dict(epochs=10, hidden=64, loss="pairwise", lr=2e-3)),
    ):
        m = make_model(kind, **kw)
        m.fit(train)
        # fits its own training groups clearly better than chance
        assert evaluate(m, train).mean["pairwise"] > 0.6
        res = evaluate(m, test)
        assert res.mean["groups"] == test.n_groups
        for g, group in zip(res.per_group, range(test.n_groups)):
            scores = m.predict(test.group_batch(group))
            lat = test.latencies[test.group_ids() == group]
            assert g["top1"] == pytest.approx(_top_k_by_hand(scores, lat, 1))
            assert g["top5"] == pytest.approx(_top_k_by_hand(scores, lat, 5))
        m.save(tmp_path / kind)
        np.testing.assert_allclose(
            load_model(tmp_path / kind).predict(test.batch()), m.predict(test.batch()), rtol=1e-5, atol=1e-6
        )


def test_cli_eval_takes_pretrained_as_tune_does(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from autosearch.cli import app

    monkeypatch.chdir(tmp_path)  # no folder named `pretrained` here: the shipped model is meant
    r = CliRunner().invoke(app, ["eval", "--model", "pretrained", "--db", str(TINY), "--workloads", "GMM", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["kind"] == "mlp" and out["mean"]["groups"] >= 1 and 0 < out["mean"]["top1"] <= 1


def test_hyper_parameters_are_the_constructors_arguments() -> None:
    """A model's saved hyper-parameters are its `__init__`'s named arguments (issue 46: no second
    list to keep in step), save for Adams2019's starting weights, which are data."""
    import inspect

    from autosearch.models.base import CostModel
    from autosearch.models.registry import KINDS, model_class

    class Toy(CostModel):
        kind = "toy"

        def __init__(self, depth: int = 3, *, rate: float = 0.1) -> None:
            self.depth, self.rate = depth, rate

        fit = update = _predict = save = _from_dir = None  # type: ignore[assignment]

    assert Toy.hyper == ("depth", "rate")
    assert Toy._from_params({"params": {"depth": 5, "rate": 0.5, "unknown": 1}}).depth == 5
    for kind in KINDS:
        cls = model_class(kind)
        args = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
        assert list(cls.hyper) == [a for a in args if (kind, a) != ("adams2019", "init")], kind
