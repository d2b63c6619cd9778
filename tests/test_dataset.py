"""Dataset from the store, splits by whole workloads, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.errors import InputError
from autosearch.models.base import DEFAULT_EXTRACTOR, FeatureBatch
from autosearch.store.db import MeasurementRecord, Store, WorkloadRecord
from autosearch.training.dataset import Dataset, load_dataset
from autosearch.training.splits import Split, apply_split, split_workloads

W = 164


def _make_store(path, n_workloads=4, per=6, seed=0, fail_every=4, nan_in=None, all_failed=None):
    """A real Store with per-candidate feature matrices of 1-3 rows; returns {(key): [latencies]}."""
    rng = np.random.default_rng(seed)
    lat_by_key = {}
    with Store(path) as st:
        for w in range(n_workloads):
            key = f"k{w}"
            st.add_workload(WorkloadRecord(key, f"op{w}/1x{w}", "GMM" if w % 2 else "C2D", "tvm", {"w": w}, "ir"))
            recs, feats, lats = [], [], []
            for c in range(per):
                failed = (fail_every and c % fail_every == fail_every - 1) or key == all_failed
                lat = float(rng.uniform(1e-4, 1e-3))
                recs.append(
                    MeasurementRecord(
                        key,
                        "llvm -mcpu=x",
                        "dev",
                        f"sched-{w}-{c}",
                        "run_error" if failed else "ok",
                        [] if failed else [lat, lat],
                    )
                )
                m = rng.random((1 + c % 3, W)).astype(np.float32)
                if nan_in == (w, c):
                    m[0, 3] = np.nan
                feats.append(m)
                lats.append(None if failed else lat)
            st.add_measurements(recs, feats, DEFAULT_EXTRACTOR)
            lat_by_key[key] = lats
    return lat_by_key


def test_load_dataset_groups_labels_and_rows(tmp_path):
    db = tmp_path / "s.db"
    lats = _make_store(db)
    ds = load_dataset(db)
    assert ds.n_groups == 4 and ds.n_candidates == 24 and ds.n_features == W
    for g in ds.groups:
        lab = ds.labels[g.start : g.stop]
        true = np.array([x if x is not None else np.inf for x in lats[g.workload_key]])
        ok = np.isfinite(true)
        np.testing.assert_allclose(lab[ok], true[ok].min() / true[ok])
        assert np.all(lab[~ok] == 0) and lab.max() == pytest.approx(1.0)
        assert g.name.startswith("op") and g.family in ("GMM", "C2D")
    # variable-length rows: 1, 2, 3, 1, ... rows per candidate
    assert list(np.diff(ds.offsets[:5])) == [1, 2, 3, 1]
    b = ds.group_batch(1)
    assert b.n_candidates == 6 and b.rows.shape[0] == b.offsets[-1]
    np.testing.assert_array_equal(b.segment_ids()[:3], [0, 1, 1])


def test_one_target_measured_on_two_devices_is_two_groups(tmp_path):
    """Latencies from two machines (or two thread counts) are not comparable: never one group."""
    db = tmp_path / "s.db"
    with Store(db) as st:
        st.add_workload(WorkloadRecord("k", "op/1", "GMM", "tvm", {}, "ir"))
        for dev, lats in (("one-thread", [4e-4, 2e-4]), ("two-threads", [2e-4, 1e-4]), ("one-thread", [8e-4])):
            recs = [MeasurementRecord("k", "llvm -mcpu=x", dev, f"s-{dev}-{x}", "ok", [x]) for x in lats]
            st.add_measurements(recs, [np.ones((1, W), np.float32)] * len(recs), DEFAULT_EXTRACTOR)
    ds = load_dataset(db)
    assert sorted((g.device, g.size) for g in ds.groups) == [("one-thread", 3), ("two-threads", 2)]
    two = next(g for g in ds.groups if g.device == "two-threads")
    np.testing.assert_allclose(ds.labels[two.start : two.stop], [0.5, 1.0])
    assert [g.device for g in ds.subset([1, 0]).groups] == [ds.groups[1].device, ds.groups[0].device]


def test_load_dataset_filters(tmp_path):
    db = tmp_path / "s.db"
    _make_store(db)
    assert load_dataset(db, workloads=["GMM"]).n_groups == 2
    assert load_dataset(db, workloads=["op0/1x0"]).n_groups == 1
    assert load_dataset(db, max_groups=3).n_groups == 3
    with pytest.raises(InputError, match="unknown workload"):
        load_dataset(db, workloads=["nope"])
    with pytest.raises(InputError, match="empty"):
        load_dataset(db, extractor=("other", "v0"))


def test_nan_features_and_all_failed_groups_are_skipped_with_warning(tmp_path):
    db = tmp_path / "s.db"
    _make_store(db, nan_in=(0, 2), all_failed="k3")
    with pytest.warns(UserWarning) as rec:
        ds = load_dataset(db)
    msgs = " ".join(str(r.message) for r in rec)
    assert "NaN or inf" in msgs and "every measurement failed" in msgs
    assert ds.n_groups == 3 and ds.groups[0].size == 5


def test_all_failed_store_is_one_clear_error(tmp_path):
    db = tmp_path / "f.db"
    _make_store(db, n_workloads=2, fail_every=1)
    with pytest.warns(UserWarning), pytest.raises(InputError, match="every measurement of all 2 group"):
        load_dataset(db)


def test_single_workload_cannot_be_split(tmp_path):
    db = tmp_path / "one.db"
    _make_store(db, n_workloads=1)
    with pytest.raises(InputError, match="at least 2 workloads"):
        split_workloads(load_dataset(db), fraction=0.2)


def test_resolve_db_decompresses_xz(tmp_path):
    import lzma

    from autosearch.training.dataset import resolve_db

    db = tmp_path / "s.db"
    _make_store(db, n_workloads=2)
    xz = tmp_path / "s.db.xz"
    xz.write_bytes(lzma.compress(db.read_bytes()))
    assert load_dataset(resolve_db(xz)).n_groups == 2
    bad = tmp_path / "bad.db.xz"
    bad.write_bytes(b"not xz")
    with pytest.raises(InputError, match="not a valid .xz"):
        resolve_db(bad)


def test_empty_store_is_one_clear_error(tmp_path):
    db = tmp_path / "e.db"
    Store(db).close()
    with pytest.raises(InputError, match="dataset is empty"):
        load_dataset(db)


def test_subset_preserves_candidates():
    rng = np.random.default_rng(0)
    groups = [
        (f"k{i}", "t", [rng.random((i + 1, 5), dtype=np.float32) for _ in range(3)], [1.0, 2.0, None]) for i in range(3)
    ]
    ds = Dataset.from_groups(groups)
    sub = ds.subset([2, 0])
    assert [g.workload_key for g in sub.groups] == ["k2", "k0"]
    np.testing.assert_array_equal(sub.group_batch(0).rows, ds.group_batch(2).rows)
    np.testing.assert_array_equal(sub.labels, [1.0, 0.5, 0.0, 1.0, 0.5, 0.0])
    assert ds.select_workloads(["k1"]).n_candidates == 3


def test_feature_batch_select_and_validate():
    mats = [np.full((n, 4), n, np.float32) for n in (2, 0, 3)]
    b = FeatureBatch.from_list(mats)
    assert b.n_candidates == 3 and list(b.offsets) == [0, 2, 2, 5]
    s = b.select(np.array([2, 0]))
    np.testing.assert_array_equal(s.rows[:, 0], [3, 3, 3, 2, 2])
    with pytest.raises(InputError, match="width 4 but the model expects 5"):
        b.validate(5)
    bad = FeatureBatch(np.array([[np.inf, 0, 0, 0]], np.float32), np.array([0, 1]))
    with pytest.raises(InputError, match="NaN or inf"):
        bad.validate(4)


def _ds(n_workloads=10):
    rng = np.random.default_rng(1)
    groups = [
        (f"k{i}", "t", [rng.random((1, 3), dtype=np.float32) for _ in range(2)], [1.0, 2.0]) for i in range(n_workloads)
    ]
    names = {f"k{i}": (f"n{i}", "A" if i < 3 else "B") for i in range(n_workloads)}
    return Dataset.from_groups(groups, names=names)


def test_split_fraction_is_seeded_and_by_workload(tmp_path):
    ds = _ds()
    a, b = split_workloads(ds, fraction=0.3, seed=7), split_workloads(ds, fraction=0.3, seed=7)
    assert a == b and len(a.test) == 3 and not set(a.test) & set(a.train)
    assert len({tuple(split_workloads(ds, fraction=0.3, seed=s).test) for s in range(6)}) > 1
    p = tmp_path / "split.json"
    a.save(p)
    assert Split.load(p) == a
    tr, te = apply_split(ds, a)
    assert {g.workload_key for g in te.groups} == set(a.test)
    assert tr.n_groups + te.n_groups == ds.n_groups


def test_split_holdout_by_family_and_errors():
    ds = _ds()
    sp = split_workloads(ds, holdout=["A"])
    assert sorted(sp.test) == ["k0", "k1", "k2"]
    with pytest.raises(InputError, match="names no workload"):
        split_workloads(ds, holdout=["Z"])
    with pytest.raises(InputError, match="covers every workload"):
        split_workloads(ds, holdout=["A", "B"])
    with pytest.raises(InputError, match="at least 2 workloads"):
        split_workloads(_ds(1), fraction=0.5)


def test_split_file_errors(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{nope")
    with pytest.raises(InputError, match="not valid JSON"):
        Split.load(p)
    p.write_text('{"format": "other"}')
    with pytest.raises(InputError, match="not an autosearch split"):
        Split.load(p)


def test_concat_keeps_every_group_its_rows_and_labels(tmp_path):
    _make_store(tmp_path / "a.db", n_workloads=2, per=5, seed=1)
    _make_store(tmp_path / "b.db", n_workloads=3, per=4, seed=2)
    a, b = load_dataset(tmp_path / "a.db"), load_dataset(tmp_path / "b.db")
    both = Dataset.concat([a, Dataset.empty(W), b])
    assert both.n_groups == a.n_groups + b.n_groups  # same keys in both stores stay separate groups
    assert both.n_candidates == a.n_candidates + b.n_candidates
    for part, first in ((a, 0), (b, a.n_groups)):
        for i, g in enumerate(part.groups):
            h = both.groups[first + i]
            assert (h.workload_key, h.size) == (g.workload_key, g.size)
            np.testing.assert_array_equal(both.labels[h.start : h.stop], part.labels[g.start : g.stop])
            np.testing.assert_array_equal(both.group_batch(first + i).rows, part.group_batch(i).rows)
            np.testing.assert_array_equal(both.group_batch(first + i).offsets, part.group_batch(i).offsets)
    with pytest.raises(InputError, match="cannot join"):
        Dataset.concat([a, Dataset.from_groups([("k", "t", [np.ones((1, 3), np.float32)], [1.0])])])
    with pytest.raises(InputError, match="at least one"):
        Dataset.concat([Dataset.empty(W)])


def test_join_training_never_adds_held_out_workloads_and_lists_what_it_added():
    from autosearch.training.splits import join_training

    ds = _ds(6)  # k0-k2 family A, k3-k5 family B
    split = split_workloads(ds, holdout=["A"])
    tr, _ = apply_split(ds, split)
    rng = np.random.default_rng(2)
    other = Dataset.from_groups(
        [
            (k, "t2", [rng.random((1, 3), dtype=np.float32) for _ in range(2)], [1.0, 3.0])
            for k in ("k1", "k4", "x1", "x2")
        ],
        names={"k1": ("n1", "B"), "k4": ("n4", "B"), "x1": ("m1", "A"), "x2": ("m2", "C")},
    )
    joined, both = join_training(split, tr, [other])
    added = [g.workload_key for g in both.groups[tr.n_groups :]]
    assert added == ["k4", "x2"]  # k1 is a held-out key, x1 a held-out family
    assert set(joined.test) == set(split.test) and {"k4", "x2"} <= set(joined.train)
    assert joined.names["x2"] == "m2"
    assert join_training(split, tr, [other.select_workloads(["x1"])]) == (split, tr)


def test_resolve_db_decompresses_once_for_callers_started_together(tmp_path, monkeypatch):
    """Several trainings on one .xz store: one decompression, and no caller's copy is replaced
    under another that already opened it."""
    import lzma
    import time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from autosearch.training.dataset import resolve_db

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    xz = tmp_path / "s.db.xz"
    xz.write_bytes(lzma.compress(b"payload" * 1000))
    opened = []
    real_open = lzma.open

    def slow_open(*args, **kwargs):  # every caller checks for the copy before the first one lands
        opened.append(1)
        time.sleep(0.3)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(lzma, "open", slow_open)
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: resolve_db(xz), range(4)))
    assert len(set(outs)) == 1 and len(opened) == 1
    assert Path(outs[0]).read_bytes() == b"payload" * 1000
