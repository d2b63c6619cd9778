"""The record store: schema, batches, bad files, and that nothing stored is ever lost."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from autosearch.errors import StoreError
from autosearch.store import SCHEMA_VERSION, MeasurementRecord, Store, WorkloadRecord


def _wl(key: str = "k1") -> WorkloadRecord:
    return WorkloadRecord(key, f"name-{key}", "fam", "tvm", {"n": 1}, "ir", 2e6)


def _rec(schedule: str, status: str = "ok", lat=(1e-3, 2e-3, 3e-3)) -> MeasurementRecord:
    return MeasurementRecord("k1", "llvm", "dev", schedule, status, list(lat) if status == "ok" else [])


def test_roundtrip_batch_and_uniqueness(tmp_path):
    with Store(tmp_path / "a.db") as s:
        assert s.add_workload(_wl()) == s.add_workload(_wl())  # idempotent by key
        ids = s.add_measurements([_rec("a"), _rec("b", "build_error")], [np.ones((2, 3)), None], ("x", "1"))
        assert ids[0] is not None and ids[1] is not None
        assert s.add_measurements([_rec("a")]) == [None]  # same (workload, target, schedule): ignored
        rows = list(s.measurements())
        assert [r.status for r in rows] == ["ok", "build_error"]
        assert rows[0].latencies == [1e-3, 2e-3, 3e-3] and rows[0].median == 2e-3
        assert rows[1].median is None and rows[1].latencies == []
        (f,) = list(s.iter_features(("x", "1")))
        assert f.features.shape == (2, 3) and f.features.dtype == np.float32
        st = s.stats()[0]
        assert (st["records"], st["ok"], st["failed"], st["features"]) == (2, 1, 1, 1)
        assert st["gflops"] == pytest.approx(2e6 / 2e-3 / 1e9)
    mode = sqlite3.connect(tmp_path / "a.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 0.0])
def test_invalid_latency_becomes_run_error(bad):
    rec = _rec("s", lat=(1e-3, bad))
    assert rec.status == "run_error" and rec.latencies == [] and "invalid latencies" in rec.error


def test_unknown_status_and_unknown_workload(tmp_path):
    with pytest.raises(StoreError, match="status"):
        MeasurementRecord("k1", "llvm", "dev", "s", "exploded")
    with Store(tmp_path / "a.db") as s, pytest.raises(StoreError, match="unknown workload"):
        s.add_measurements([_rec("a")])


def test_not_sqlite_file_is_refused_untouched(tmp_path):
    p = tmp_path / "notes.db"
    p.write_text("hello, this is not a database\n")
    with pytest.raises(StoreError, match="not an SQLite database"):
        Store(p)
    assert p.read_text() == "hello, this is not a database\n"


def test_foreign_sqlite_and_newer_schema(tmp_path):
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.commit()
    with pytest.raises(StoreError, match="not an autosearch one"):
        Store(other)
    newer = tmp_path / "newer.db"
    with Store(newer) as s:
        s.add_workload(_wl())
    con = sqlite3.connect(newer)
    con.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer autosearch"):
        Store(newer)


def test_corrupt_file_fails_cleanly(tmp_path):
    p = tmp_path / "c.db"
    with Store(p) as s:
        s.add_workload(_wl())
        s.add_measurements([_rec(str(i)) for i in range(200)])
    data = bytearray(p.read_bytes())
    data[100:4000] = b"\xff" * 3900  # smash the first page after the header
    p.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="corrupt|not an autosearch"):
        Store(p)


def test_readonly_missing_file(tmp_path):
    with pytest.raises(StoreError, match="no database"):
        Store(tmp_path / "missing.db", readonly=True)
