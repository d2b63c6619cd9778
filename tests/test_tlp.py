"""The `tlp` model: learns an order from token sequences, saves/loads exactly, reads device columns."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from autosearch.errors import InputError
from autosearch.models import load_model, make_model
from autosearch.training.dataset import Dataset

TINY = Path(__file__).parent / "data" / "tiny_tvm.db"


def _synthetic(n_groups: int = 6, per_group: int = 40, seed: int = 0) -> Dataset:
    """Sequences of 3-9 random tokens; latency falls with column 2 of the one token flagged in column 5."""
    rng = np.random.default_rng(seed)
    groups = []
    for g in range(n_groups):
        mats, lats = [], []
        for _ in range(per_group):
            m = rng.random((int(rng.integers(3, 10)), 6)).astype(np.float32)
            m[:, 5] = 0.0
            m[1, 5] = 1.0
            mats.append(m)
            lats.append(float(1e-3 * (2.0 - m[1, 2]) * (1 + g)))
        groups.append((f"w{g}", "t", mats, lats))
    return Dataset.from_groups(groups)


def _pairwise(scores: np.ndarray, ds: Dataset) -> float:
    from autosearch.training.metrics import pairwise_accuracy

    return float(
        np.mean([pairwise_accuracy(scores[g.start : g.stop], ds.latencies[g.start : g.stop]) for g in ds.groups])
    )


@pytest.mark.parametrize(
    "size",
    [pytest.param((3, 20, 6, 0.7), id="quick"), pytest.param((6, 40, 20, 0.8), id="full", marks=pytest.mark.slow)],
)
def test_learns_an_order_that_depends_on_one_token(size: tuple[int, int, int, float]) -> None:
    groups, per_group, epochs, floor = size
    torch.manual_seed(0)
    train, test = _synthetic(groups, per_group, seed=0), _synthetic(groups, per_group, seed=1)
    model = make_model("tlp", epochs=epochs, hidden=16, heads=2, groups_per_batch=1, cands_per_group=8, lr=3e-3, seed=0)
    model.fit(train)
    assert _pairwise(model.predict(test.batch()), test) > floor  # random scores give 0.5


def test_save_load_roundtrip_and_bad_hyper_parameters(tmp_path: Path) -> None:
    ds = _synthetic(n_groups=3, per_group=10)
    model = make_model("tlp", epochs=2, hidden=16, heads=2, n_attention=2)
    model.fit(ds)
    model.save(tmp_path / "m")
    again = load_model(tmp_path / "m")
    assert again.kind == "tlp" and again.n_features == 6
    np.testing.assert_allclose(again.predict(ds.batch()), model.predict(ds.batch()), rtol=1e-6)
    with pytest.raises(InputError, match="multiple of heads"):
        make_model("tlp", hidden=30, heads=4)
    with pytest.raises(InputError, match="n_attention"):
        make_model("tlp", n_attention=3)
    with pytest.raises(InputError, match="true or false"):
        make_model("tlp", device="maybe")
    with pytest.raises(InputError, match="width"):
        again.predict(_synthetic(n_groups=1, per_group=2).batch().__class__.from_list([np.zeros((2, 5))]))


def test_members_score_with_their_mean_and_roundtrip(tmp_path: Path) -> None:
    import hashlib
    import json

    from safetensors.torch import load_file, save_file

    ds = _synthetic(n_groups=3, per_group=10)
    model = make_model("tlp", epochs=2, hidden=16, heads=2, members=3, seed=4)
    model.fit(ds)
    per = model.predict_members(ds.batch())
    assert per.shape == (3, ds.n_candidates) and np.ptp(per, axis=0).max() > 0  # distinct seeds, distinct nets
    np.testing.assert_allclose(model.predict(ds.batch()), per.mean(0), rtol=1e-5, atol=1e-6)
    model.save(tmp_path / "m")
    again = load_model(tmp_path / "m")
    np.testing.assert_allclose(again.predict(ds.batch()), model.predict(ds.batch()), rtol=1e-6)
    # a model saved before ensembles (one network, unprefixed names) still loads as one member
    one = make_model("tlp", epochs=1, hidden=16, heads=2, members=1)
    one.fit(ds)
    one.save(tmp_path / "one")
    f = tmp_path / "one" / "model.safetensors"
    save_file({k[3:]: v for k, v in load_file(str(f)).items()}, str(f))
    cfg = json.loads((tmp_path / "one" / "config.json").read_text())
    cfg["weights_sha256"] = hashlib.sha256(f.read_bytes()).hexdigest()
    del cfg["params"]["members"]  # nor did its config name a member count
    (tmp_path / "one" / "config.json").write_text(json.dumps(cfg))
    np.testing.assert_allclose(load_model(tmp_path / "one").predict(ds.batch()), one.predict(ds.batch()), rtol=1e-6)
    with pytest.raises(InputError, match="members"):
        make_model("tlp", members=0)
    assert make_model("tlp").members == 3  # the default: steadier on unseen families (docs/models.md)


def test_empty_candidate_scores_minus_inf() -> None:
    from autosearch.models.base import FeatureBatch

    ds = _synthetic(n_groups=2, per_group=8)
    model = make_model("tlp", epochs=1, hidden=16, heads=2)
    model.fit(ds)
    s = model.predict(FeatureBatch.from_list([np.ones((3, 6)), np.zeros((0, 6)), np.ones((1, 6))]))
    assert np.isneginf(s[1]) and np.isfinite(s[[0, 2]]).all()


def test_device_columns_and_known_devices() -> None:
    from autosearch.features import device as fd
    from autosearch.models import tlp

    assert tlp.DEVICE_WIDTH == fd.DEVICE_WIDTH
    ds = _synthetic(n_groups=2, per_group=10)
    groups = [
        (
            g.workload_key,
            f"target{i}",
            [ds.rows[ds.offsets[c] : ds.offsets[c + 1]] for c in range(g.start, g.stop)],
            list(ds.latencies[g.start : g.stop]),
        )
        for i, g in enumerate(ds.groups)
    ]
    two = Dataset.from_groups(groups)
    descs = {
        "target0": {"cores": 1, "isa_level": 4, "simd_bits": 512},
        "target1": {"cores": 2, "isa_level": 1, "simd_bits": 128},
    }
    wide = fd.with_device(two, descs)
    model = make_model("tlp", epochs=2, hidden=16, heads=2, device="true")
    model.fit(wide)
    assert len(model.known_devices) == 2
    assert model.knows_device(fd.descriptor_vector(descs["target1"]))
    assert not model.knows_device(fd.descriptor_vector({"cores": 8, "isa_level": 3, "simd_bits": 256}))
    with pytest.raises(InputError, match="device columns"):
        make_model("tlp", epochs=1, device=True).fit(_synthetic(n_groups=2, per_group=4))


@pytest.mark.parametrize("extractor", ["trace-tokens:v1", "trace-prefix-tokens:v2"])
def test_cli_trains_and_evaluates_on_trace_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extractor: str
) -> None:
    """`--model tlp --extractor trace-tokens:v1` on a store that has only PerStoreFeature: tokens are
    backfilled; the same with the prefix tokens, and the model remembers which it read."""
    import json

    from autosearch.cli import main

    db = tmp_path / "tiny.db"
    shutil.copy(TINY, db)
    out = tmp_path / "tlp"
    main(
        [
            "train",
            "--model",
            "tlp",
            "--extractor",
            extractor,
            "--db",
            str(db),
            "--out",
            str(out),
            "--holdout",
            "batch_matmul/1x128x128x128",
            "--epochs",
            "2",
            "-p",
            "hidden=16",
            "-p",
            "heads=2",
            "--json",
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["test_groups"] == 1 and 0.0 < summary["held_out"]["top1"] <= 1.0
    main(["eval", "--model", str(out), "--db", str(db), "--json"])
    res = json.loads(capsys.readouterr().out)
    assert res["kind"] == "tlp" and len(res["per_group"]) == 1
    assert ":".join(json.loads((out / "config.json").read_text())["extractor"]) == extractor


@pytest.mark.parametrize("n_attention,positions", [(1, False), (2, True), (0, True)])
def test_decision_vectors_score_from_tables_as_from_tokens(n_attention: int, positions: bool) -> None:
    """`predict_space` (tabulated rows) equals `predict` on the space's tokens, also after an
    update changes the weights, and a device model is refused in one line."""
    from autosearch.features.decision_space import DecisionSpace
    from autosearch.features.trace_tokens import PREFIX_FEATURE_WIDTH as FEATURE_WIDTH
    from autosearch.features.trace_tokens import TraceTokenizer
    from autosearch.models.base import FeatureBatch
    from autosearch.store.db import Store

    with Store(TINY, readonly=True) as st:
        wls = {w.id: w for w in st.workloads()}
        recs = {wls[m.workload_id].key: (m.schedule, wls[m.workload_id]) for m in st.measurements()}
    spaces = [DecisionSpace(t, w.ir, w.flops) for t, w in recs.values()]
    tok = TraceTokenizer(postproc=False)
    ds = Dataset.from_groups([(k, "t", [tok(t, w.ir, w.flops)] * 2, [1e-3, 2e-3]) for k, (t, w) in recs.items()])
    model = make_model("tlp", epochs=1, hidden=16, heads=2, members=2, n_attention=n_attention, positions=positions)
    model.fit(ds)
    for net in model.nets:  # weights far from their initial values: every path matters
        for p in net.parameters():
            p.data.normal_(0, 0.5)
    rng = np.random.default_rng(0)

    def check() -> None:
        for space in spaces:
            x = space.sample(50, rng)
            toks = space.tokens(x)
            ref = model.predict(FeatureBatch(toks.reshape(-1, FEATURE_WIDTH), np.arange(51) * space.n_tokens))
            np.testing.assert_allclose(model.predict_space(space, x), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
            members = model.predict_space_members(space, x)
            assert members.shape == (2, 50)
            # on two torch threads (tune's scoring): the same scores up to float rounding
            np.testing.assert_allclose(model.predict_space_members(space, x, threads=2), members, rtol=1e-5, atol=1e-5)

    check()
    before = model.predict_space(spaces[0], spaces[0].current)
    model.update(ds)  # new weights: the tables are rebuilt
    assert not np.allclose(model.predict_space(spaces[0], spaces[0].current), before)
    check()
    with pytest.raises(InputError, match="outside"):
        model.predict_space(spaces[0], spaces[0].sizes)  # one past every knob's last option
    from autosearch.models import tlp

    assert len(model._tables) == len(spaces)
    limit, tlp._TABLE_BYTES = tlp._TABLE_BYTES, 1  # kept tables are bounded in bytes: the newest stays
    try:
        model.predict_space(spaces[0], spaces[0].current)
        assert list(model._tables) == [id(spaces[0])]
    finally:
        tlp._TABLE_BYTES = limit
    wide = make_model("tlp", epochs=1, hidden=16, heads=2, members=1, device="true")
    wide.nets = [type(model.nets[0])(FEATURE_WIDTH + 14, 16, 2, 1, 14)]
    with pytest.raises(InputError, match="device=true"):
        wide.predict_space(spaces[0], spaces[0].current)
