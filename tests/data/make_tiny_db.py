"""Rebuild tests/data/tiny_tvm.db: the first 24 records of 6 workloads of a real collection.

    .venv/bin/python tests/data/make_tiny_db.py data/reference.db tests/data/tiny_tvm.db

The source is `bash data/collect_reference.sh` (real measurements on this project's CI-class CPU).
"""

import sys
from pathlib import Path

from autosearch.features.per_store import EXTRACTOR
from autosearch.store import MeasurementRecord, Store

src_path, dst_path = sys.argv[1], Path(sys.argv[2])
dst_path.unlink(missing_ok=True)
with Store(src_path, readonly=True) as src, Store(dst_path) as dst:
    feats = {f.measurement_id: f.features for f in src.iter_features(EXTRACTOR)}
    for wl in src.workloads()[:6]:
        dst.add_workload(wl)
        rows = list(src.measurements(workload_key=wl.key))[:24]
        recs = [
            MeasurementRecord(
                wl.key,
                m.target,
                m.device,
                m.schedule,
                m.status,
                m.latencies,
                m.error,
                m.source,
                m.extra,
                m.schedule_hash,
            )
            for m in rows
        ]
        dst.add_measurements(recs, [feats.get(m.id) for m in rows], EXTRACTOR)
with Store(dst_path) as s:
    s._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s._conn.execute("VACUUM")
print(dst_path, dst_path.stat().st_size, "bytes")
