"""The records database: one SQLite file, WAL mode, one transaction per batch of results.

Why SQLite: a killed collection must lose at most the batch in flight, many readers (training,
stats) must be able to read while a collection writes, and the file must be self-contained.
The schema is versioned in the `meta` table; a file written by a newer schema is refused rather
than misread.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import statistics
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autosearch.errors import StoreError
from autosearch.hashing import schedule_hash

__all__ = [
    "SCHEMA_VERSION",
    "STATUSES",
    "FeatureRow",
    "MeasurementRecord",
    "MeasurementRow",
    "Store",
    "WorkloadRecord",
    "WorkloadRow",
    "schedule_hash",
]

SCHEMA_VERSION = 1
#: Every measurement has exactly one of these; only `ok` rows carry latencies.
STATUSES = ("ok", "build_error", "run_error", "timeout")
_SQLITE_MAGIC = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workloads (
    id       INTEGER PRIMARY KEY,
    key      TEXT NOT NULL UNIQUE,      -- stable structural hash of the program
    name     TEXT NOT NULL,             -- human name, e.g. conv2d_nhwc/1x56x56x64/k3s1p1/64
    family   TEXT NOT NULL,
    backend  TEXT NOT NULL,             -- 'tvm' or 'halide'
    params   TEXT NOT NULL,             -- JSON: shape parameters / generator seed
    flops    REAL,                      -- floating-point operations of one run, if known
    ir       TEXT NOT NULL,             -- the program as text (TVMScript, Halide source)
    created  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS measurements (
    id            INTEGER PRIMARY KEY,
    workload_id   INTEGER NOT NULL REFERENCES workloads(id),
    target        TEXT NOT NULL,        -- canonical target JSON
    device        TEXT NOT NULL,        -- fingerprint of the machine that ran it
    schedule_hash TEXT NOT NULL,
    schedule      TEXT NOT NULL,        -- MetaSchedule trace JSON, or Halide schedule source
    latencies     TEXT NOT NULL,        -- JSON list: every repeat, seconds (empty unless ok)
    median        REAL,                 -- NULL unless status = 'ok'
    status        TEXT NOT NULL CHECK (status IN ('ok','build_error','run_error','timeout')),
    error         TEXT NOT NULL DEFAULT '',
    source        TEXT NOT NULL DEFAULT '',   -- 'random', 'tune:<run id>', 'import:<file>', ...
    extra         TEXT NOT NULL DEFAULT '{}', -- backend-specific JSON (args info, Halide ids, ...)
    created       REAL NOT NULL,
    UNIQUE (workload_id, target, schedule_hash)
);
CREATE INDEX IF NOT EXISTS measurements_group ON measurements (workload_id, target);
CREATE TABLE IF NOT EXISTS features (
    measurement_id INTEGER NOT NULL REFERENCES measurements(id) ON DELETE CASCADE,
    extractor      TEXT NOT NULL,
    version        TEXT NOT NULL,
    rows           INTEGER NOT NULL,
    cols           INTEGER NOT NULL,
    data           BLOB NOT NULL,       -- float32, C order, rows x cols
    PRIMARY KEY (measurement_id, extractor, version)
);
-- Added without a schema-version bump: an additive table that older readers ignore; a file
-- opened read-only before it existed simply has no device descriptors (see Store.device).
CREATE TABLE IF NOT EXISTS devices (
    fingerprint TEXT NOT NULL,          -- device_fingerprint() of the machine the numbers were measured on
    target      TEXT NOT NULL,          -- canonical target JSON the descriptor describes
    descriptor  TEXT NOT NULL,          -- JSON: cores, ISA level, caches, clock, measured bandwidth and FLOP/s
    created     REAL NOT NULL,
    PRIMARY KEY (fingerprint, target)
);
"""


@dataclass(frozen=True)
class WorkloadRecord:
    """A program to be scheduled, as it is written to the store."""

    key: str
    name: str
    family: str
    backend: str
    params: dict[str, Any]
    ir: str
    flops: float | None = None

    @classmethod
    def from_workload(cls, wl: Any, backend: str = "tvm") -> WorkloadRecord:
        """The row of a `Workload` (or anything with its name, family, params, key, flops, mod())."""
        params = dict(wl.params)
        if getattr(wl, "source", ""):
            params.setdefault("module", wl.source)
        return cls(
            key=wl.key,
            name=wl.name,
            family=wl.family,
            backend=backend,
            params=params,
            ir=wl.mod().script(),
            flops=wl.flops,
        )


@dataclass(frozen=True)
class WorkloadRow(WorkloadRecord):
    """A workload as read back, with its row id."""

    id: int = 0


@dataclass
class MeasurementRecord:
    """One measured (or failed) schedule, as it is written to the store.

    A NaN, infinite or non-positive latency never enters the statistics: such a record is stored
    as a `run_error` naming the bad value.
    """

    workload_key: str
    target: str
    device: str
    schedule: str
    status: str
    latencies: list[float] = field(default_factory=list)
    error: str = ""
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    schedule_hash: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise StoreError(f"status must be one of {STATUSES}, got {self.status!r}")
        if not self.schedule_hash:
            self.schedule_hash = schedule_hash(self.schedule)
        if self.status == "ok":
            bad = [x for x in self.latencies if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0)]
            if not self.latencies or bad:
                self.status = "run_error"
                self.error = f"invalid latencies {bad or self.latencies!r}: not finite positive seconds"
                self.latencies = []
        else:
            self.latencies = []

    @property
    def median(self) -> float | None:
        return statistics.median(self.latencies) if self.status == "ok" else None


@dataclass(frozen=True)
class MeasurementRow:
    """A measurement as read back."""

    id: int
    workload_id: int
    workload_key: str
    target: str
    device: str
    schedule_hash: str
    schedule: str
    latencies: list[float]
    median: float | None
    status: str
    error: str
    source: str
    extra: dict[str, Any]
    created: float


@dataclass(frozen=True)
class FeatureRow:
    """A stored feature matrix with the facts a dataset needs about its measurement."""

    measurement_id: int
    workload_id: int
    workload_key: str
    target: str
    status: str
    median: float | None
    features: np.ndarray  # float32 (rows, cols)
    device: str = ""  # fingerprint of the machine that measured it


def _check_sqlite_file(path: Path) -> None:
    if not path.exists() or path.stat().st_size == 0:
        return
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not an SQLite database")
    with open(path, "rb") as fh:
        head = fh.read(len(_SQLITE_MAGIC))
    if head != _SQLITE_MAGIC:
        raise StoreError(f"{path} is not an SQLite database (bad header); refusing to touch it")


def _is_write_refusal(exc: sqlite3.OperationalError) -> bool:
    msg = str(exc).lower()
    return "readonly" in msg or "read-only" in msg or "unable to open" in msg or "permission" in msg


def _is_disk_full(exc: sqlite3.OperationalError) -> bool:
    msg = str(exc).lower()
    return "disk is full" in msg or "disk i/o error" in msg


def _json_field(r: sqlite3.Row, column: str, kind: type) -> Any:
    """A JSON column of a measurement row, or a one-line StoreError naming the record.

    Why: a store edited by hand (or damaged) must not end a command in a JSONDecodeError."""
    text = r[column]
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        value = None
    numbers = isinstance(value, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
    if not isinstance(value, kind) or (column == "latencies" and not numbers):
        what = "a JSON list of seconds" if column == "latencies" else f"a JSON {kind.__name__}"
        raise StoreError(
            f"measurement {r['id']} holds {column} {str(text)[:40]!r}, not {what}: the store is damaged there"
        )
    return value


def _measurement_row(r: sqlite3.Row) -> MeasurementRow:
    return MeasurementRow(
        id=r["id"],
        workload_id=r["workload_id"],
        workload_key=r["wkey"],
        target=r["target"],
        device=r["device"],
        schedule_hash=r["schedule_hash"],
        schedule=r["schedule"],
        latencies=_json_field(r, "latencies", list),
        median=r["median"],
        status=r["status"],
        error=r["error"],
        source=r["source"],
        extra=_json_field(r, "extra", dict),
        created=r["created"],
    )


class Store:
    """The records database. Open with `Store(path)`; use as a context manager to close it.

    Writes happen in batches (`add_measurements`), each one transaction: a process killed
    mid-collection leaves every earlier batch intact.
    """

    def __init__(self, path: str | os.PathLike[str] = "autosearch.db", *, readonly: bool = False) -> None:
        self.path = Path(path)
        if readonly and not self.path.exists():
            raise StoreError(f"no database at {self.path}")
        _check_sqlite_file(self.path)
        try:
            self._conn = self._connect_ro() if readonly else self._connect_rw()
            self._conn.row_factory = sqlite3.Row
            self._init(readonly)
        except sqlite3.OperationalError as exc:
            if not readonly and _is_write_refusal(exc):
                raise StoreError(
                    f"{self.path} cannot be written ({exc}): it is on read-only media or lacks write permission; "
                    "commands that only read (train, eval, db stats, db export) open it read-only"
                ) from None
            raise StoreError(f"{self.path} cannot be opened: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is corrupt or not an autosearch database: {exc}") from None

    def _connect_rw(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return sqlite3.connect(self.path, timeout=30)

    def _connect_ro(self) -> sqlite3.Connection:
        """Read-only, by URI: the path is percent-encoded (a '#' or '?' in a file name is not a URI
        part). A WAL database on read-only media cannot create its -shm file: `immutable=1` then."""
        from urllib.parse import quote

        uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=30)
        try:
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return conn
        except sqlite3.OperationalError:
            conn.close()
            return sqlite3.connect(uri + "&immutable=1", uri=True, timeout=30)

    # -- lifecycle ---------------------------------------------------------------------------
    def _init(self, readonly: bool) -> None:
        conn = self._conn
        conn.execute("PRAGMA foreign_keys = ON")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise StoreError(f"{self.path} is an SQLite database but not an autosearch one (no meta table)")
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            try:
                version = int(row[0]) if row else 0
            except (TypeError, ValueError):
                raise StoreError(
                    f"{self.path} has schema version {str(row[0])[:40]!r}, not a number; not an autosearch database"
                ) from None
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer autosearch (schema {version} > {SCHEMA_VERSION}); upgrade autosearch"
                )
            if version < 1:
                raise StoreError(f"{self.path} has no valid schema version; not an autosearch database")
            # A cheap structural check catches truncated/corrupted files before any write.
            bad = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
            if bad != "ok":
                raise StoreError(f"{self.path} is corrupt: {bad}")
        elif readonly:
            raise StoreError(f"{self.path} is empty, not an autosearch database")
        if not readonly:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            with conn:
                conn.executescript(_SCHEMA)
                conn.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )

    def close(self) -> None:
        self._conn.close()

    @contextlib.contextmanager
    def _write(self, what: str) -> Iterator[sqlite3.Connection]:
        """One write transaction; a full disk (or a failing one) is a one-line StoreError that says
        the transaction was rolled back and every earlier one is kept (SQLite guarantees both)."""
        try:
            with self._conn:
                yield self._conn
        except sqlite3.OperationalError as exc:
            if _is_disk_full(exc):
                try:
                    kept = int(self._conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])
                    held = f"the {kept} measurements written before are kept"
                except sqlite3.Error:
                    held = "every earlier batch is kept"
                raise StoreError(
                    f"{self.path}: the disk is full ({exc}): {what} was not written, {held}; "
                    "free space and run the same command again"
                ) from None
            if _is_write_refusal(exc):
                raise StoreError(f"{self.path} cannot be written ({exc}): {what} was not written") from None
            raise

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- workloads ---------------------------------------------------------------------------
    def add_workload(self, wl: WorkloadRecord) -> int:
        """Insert a workload (or find it by key) and return its id."""
        with self._write(f"workload {wl.name}"):
            self._conn.execute(
                "INSERT OR IGNORE INTO workloads(key, name, family, backend, params, flops, ir, created)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (
                    wl.key,
                    wl.name,
                    wl.family,
                    wl.backend,
                    json.dumps(wl.params, sort_keys=True),
                    wl.flops,
                    wl.ir,
                    time.time(),
                ),
            )
        return int(self._conn.execute("SELECT id FROM workloads WHERE key=?", (wl.key,)).fetchone()[0])

    @staticmethod
    def _workload_row(r: sqlite3.Row) -> WorkloadRow:
        return WorkloadRow(
            id=r["id"],
            key=r["key"],
            name=r["name"],
            family=r["family"],
            backend=r["backend"],
            params=json.loads(r["params"]),
            ir=r["ir"],
            flops=r["flops"],
        )

    def workload(self, key_or_name: str) -> WorkloadRow | None:
        r = self._conn.execute(
            "SELECT * FROM workloads WHERE key=? OR name=? ORDER BY id LIMIT 1", (key_or_name, key_or_name)
        ).fetchone()
        return self._workload_row(r) if r else None

    def workloads(self, backend: str | None = None) -> list[WorkloadRow]:
        sql, args = "SELECT * FROM workloads", tuple[str, ...]()
        if backend:
            sql, args = sql + " WHERE backend=?", (backend,)
        return [self._workload_row(r) for r in self._conn.execute(sql + " ORDER BY id", args)]

    # -- measurements ------------------------------------------------------------------------
    def add_measurements(
        self,
        records: Sequence[MeasurementRecord],
        features: Sequence[np.ndarray | None] | None = None,
        extractor: tuple[str, str] | None = None,
    ) -> list[int | None]:
        """Write a batch in one transaction; returns each record's id (None for a duplicate).

        `features[i]` (float32 rows x cols) is stored for record i under `extractor` = (name, version).
        """
        if features is not None and (extractor is None or len(features) != len(records)):
            raise StoreError("features need an extractor (name, version) and one entry per record")
        ids: list[int | None] = []
        now = time.time()
        with self._write(f"this batch of {len(records)} records"):
            wl_ids: dict[str, int] = {}
            for i, rec in enumerate(records):
                if rec.workload_key not in wl_ids:
                    row = self._conn.execute("SELECT id FROM workloads WHERE key=?", (rec.workload_key,)).fetchone()
                    if row is None:
                        raise StoreError(f"unknown workload key {rec.workload_key!r}: add the workload first")
                    wl_ids[rec.workload_key] = int(row[0])
                cur = self._conn.execute(
                    "INSERT OR IGNORE INTO measurements(workload_id, target, device, schedule_hash, schedule,"
                    " latencies, median, status, error, source, extra, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        wl_ids[rec.workload_key],
                        rec.target,
                        rec.device,
                        rec.schedule_hash,
                        rec.schedule,
                        json.dumps(rec.latencies),
                        rec.median,
                        rec.status,
                        rec.error[:4000],
                        rec.source,
                        json.dumps(rec.extra, sort_keys=True),
                        now,
                    ),
                )
                mid = int(cur.lastrowid) if cur.rowcount == 1 and cur.lastrowid is not None else None
                ids.append(mid)
                if mid is not None and features is not None and features[i] is not None:
                    self._insert_feature(mid, extractor, features[i])  # type: ignore[arg-type]
        return ids

    def _insert_feature(self, measurement_id: int, extractor: tuple[str, str], arr: np.ndarray) -> None:
        a = np.ascontiguousarray(arr, dtype=np.float32)
        if a.ndim != 2:
            raise StoreError(f"features must be a 2-D array (rows x cols), got shape {a.shape}")
        self._conn.execute(
            "INSERT OR REPLACE INTO features(measurement_id, extractor, version, rows, cols, data) VALUES (?,?,?,?,?,?)",
            (measurement_id, extractor[0], extractor[1], a.shape[0], a.shape[1], a.tobytes()),
        )

    def add_features(self, items: Iterable[tuple[int, np.ndarray]], extractor: tuple[str, str]) -> int:
        """Store (measurement id, matrix) pairs in one transaction; returns how many."""
        n = 0
        with self._write("this batch of features"):
            for mid, arr in items:
                self._insert_feature(mid, extractor, arr)
                n += 1
        return n

    def schedule_hashes(self, workload_key: str, target: str) -> set[str]:
        rows = self._conn.execute(
            "SELECT m.schedule_hash FROM measurements m JOIN workloads w ON w.id = m.workload_id"
            " WHERE w.key=? AND m.target=?",
            (workload_key, target),
        )
        return {r[0] for r in rows}

    def count(self, workload_key: str, target: str, status: str | None = None) -> int:
        sql = (
            "SELECT COUNT(*) FROM measurements m JOIN workloads w ON w.id = m.workload_id WHERE w.key=? AND m.target=?"
        )
        args: tuple[Any, ...] = (workload_key, target)
        if status:
            sql, args = sql + " AND m.status=?", args + (status,)
        return int(self._conn.execute(sql, args).fetchone()[0])

    def measurements(
        self,
        workload_key: str | None = None,
        target: str | None = None,
        status: str | None = None,
        after_id: int | None = None,
        limit: int | None = None,
    ) -> Iterator[MeasurementRow]:
        """Stream measurements (optionally of one workload / target / status), oldest first;
        `after_id` and `limit` read one page (ids above `after_id`, at most `limit` of them).

        Writing through this store while the stream is open fails at once with "database is
        locked" if another process wrote since the stream began (SQLite cannot upgrade an old
        read snapshot to a write): a reader that writes must read a page to its end first."""
        conds = [("w.key=?", workload_key), ("m.target=?", target), ("m.status=?", status), ("m.id>?", after_id)]
        where = [cond for cond, val in conds if val is not None]
        args: list[Any] = [val for _, val in conds if val is not None]
        sql = "SELECT m.*, w.key AS wkey FROM measurements m JOIN workloads w ON w.id = m.workload_id"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY m.id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        for r in self._conn.execute(sql, args):
            yield _measurement_row(r)

    def best(self, workload_key: str, target: str, k: int = 1) -> list[MeasurementRow]:
        """The `k` fastest successful measurements of a workload on a target, fastest first."""
        rows = self._conn.execute(
            "SELECT m.*, w.key AS wkey FROM measurements m JOIN workloads w ON w.id = m.workload_id"
            " WHERE w.key=? AND m.target=? AND m.status='ok' AND m.median IS NOT NULL ORDER BY m.median LIMIT ?",
            (workload_key, target, int(k)),
        )
        return [_measurement_row(r) for r in rows]

    def missing_features(self, extractor: tuple[str, str], backend: str = "tvm") -> list[int]:
        """Ids of ok measurements that have no features from this extractor version."""
        rows = self._conn.execute(
            "SELECT m.id FROM measurements m JOIN workloads w ON w.id=m.workload_id"
            " WHERE m.status='ok' AND w.backend=? AND NOT EXISTS (SELECT 1 FROM features f"
            " WHERE f.measurement_id=m.id AND f.extractor=? AND f.version=?) ORDER BY m.id",
            (backend, extractor[0], extractor[1]),
        )
        return [int(r[0]) for r in rows]

    def iter_features(
        self,
        extractor: tuple[str, str],
        target: str | None = None,
        workload_keys: Sequence[str] | None = None,
    ) -> Iterator[FeatureRow]:
        """Stream feature matrices with their labels' raw facts, grouped by (workload, target, device)."""
        sql = (
            "SELECT f.measurement_id, m.workload_id, w.key, m.target, m.status, m.median, f.rows, f.cols, f.data,"
            " m.device"
            " FROM features f JOIN measurements m ON m.id=f.measurement_id JOIN workloads w ON w.id=m.workload_id"
            " WHERE f.extractor=? AND f.version=?"
        )
        args: list[Any] = [extractor[0], extractor[1]]
        if target is not None:
            sql += " AND m.target=?"
            args.append(target)
        if workload_keys is not None:
            sql += f" AND w.key IN ({','.join('?' * len(workload_keys))})"
            args.extend(workload_keys)
        for r in self._conn.execute(sql + " ORDER BY m.workload_id, m.target, m.device, m.id", args):
            arr = np.frombuffer(r[8], dtype=np.float32)
            if arr.size != r[6] * r[7]:
                raise StoreError(f"feature blob of measurement {r[0]} has {arr.size} values, expected {r[6]}x{r[7]}")
            yield FeatureRow(r[0], r[1], r[2], r[3], r[4], r[5], arr.reshape(r[6], r[7]), r[9])

    def feature_counts(self) -> dict[int, int]:
        """Number of stored feature matrices per workload id."""
        rows = self._conn.execute(
            "SELECT m.workload_id, COUNT(*) FROM features f JOIN measurements m ON m.id=f.measurement_id"
            " GROUP BY m.workload_id"
        )
        return {int(r[0]): int(r[1]) for r in rows}

    # -- devices ---------------------------------------------------------------------------
    def put_device(self, fingerprint: str, target: str, descriptor: dict[str, Any]) -> None:
        """Store (or replace) the descriptor of `target` on the machine `fingerprint`."""
        with self._write("the device descriptor"):
            self._conn.execute(
                "INSERT OR REPLACE INTO devices(fingerprint, target, descriptor, created) VALUES (?,?,?,?)",
                (fingerprint, target, json.dumps(descriptor, sort_keys=True), time.time()),
            )

    def device(self, fingerprint: str, target: str) -> dict[str, Any] | None:
        """The stored descriptor of `target` on machine `fingerprint`, or None."""
        try:
            r = self._conn.execute(
                "SELECT descriptor FROM devices WHERE fingerprint=? AND target=?", (fingerprint, target)
            ).fetchone()
        except sqlite3.OperationalError:  # a file from before the devices table, opened read-only
            return None
        return json.loads(r[0]) if r else None

    def devices(self) -> list[dict[str, Any]]:
        """Every stored descriptor: {"fingerprint", "target", "descriptor", "created"}, oldest first."""
        try:
            rows = self._conn.execute("SELECT * FROM devices ORDER BY created").fetchall()
        except sqlite3.OperationalError:  # a file from before the devices table, opened read-only
            return []
        return [
            {
                "fingerprint": r["fingerprint"],
                "target": r["target"],
                "descriptor": json.loads(r["descriptor"]),
                "created": r["created"],
            }
            for r in rows
        ]

    def targets(self) -> list[str]:
        return [r[0] for r in self._conn.execute("SELECT DISTINCT target FROM measurements ORDER BY target")]

    # -- summaries ---------------------------------------------------------------------------
    def stats(self) -> list[dict[str, Any]]:
        """Per (workload, target): records, ok, failed, best latency, GFLOP/s, repeat spread, features."""
        feats = self.feature_counts()
        out = []
        groups = self._conn.execute(
            "SELECT w.id, w.name, w.family, w.backend, w.flops, m.target, COUNT(*) AS n,"
            " SUM(m.status='ok') AS ok, MIN(m.median) AS best FROM measurements m"
            " JOIN workloads w ON w.id=m.workload_id GROUP BY w.id, m.target ORDER BY w.id"
        ).fetchall()
        for g in groups:
            spreads = []
            for r in self._conn.execute(
                "SELECT id, latencies FROM measurements WHERE workload_id=? AND target=? AND status='ok'",
                (g["id"], g["target"]),
            ):
                xs = _json_field(r, "latencies", list)
                if len(xs) > 1 and statistics.median(xs) > 0:
                    spreads.append((max(xs) - min(xs)) / statistics.median(xs))
            best = g["best"]
            out.append(
                {
                    "workload": g["name"],
                    "family": g["family"],
                    "backend": g["backend"],
                    "target": g["target"],
                    "records": int(g["n"]),
                    "ok": int(g["ok"] or 0),
                    "failed": int(g["n"] - (g["ok"] or 0)),
                    "best_latency_s": best,
                    "gflops": (g["flops"] / best / 1e9) if (best and g["flops"]) else None,
                    "repeat_spread": statistics.median(spreads) if spreads else None,
                    "features": feats.get(int(g["id"]), 0),
                }
            )
        return out
