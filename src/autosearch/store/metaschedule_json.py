"""Import and export MetaSchedule's JSONDatabase (a workload file and a tuning-record file).

Why: every TVM user already has tuning logs in this format; importing them turns those logs into
training data, and exporting lets `ms.database.JSONDatabase` (and so `tune`/`compile` in TVM) use
what autosearch measured. Reading and writing go through TVM's own JSONDatabase class, so the
files are exactly what TVM writes; each line is validated first so a broken file fails with the
file and line that is wrong, before anything is written to the store.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autosearch.errors import InputError, StoreError, one_line

__all__ = ["FAILED_RUN_SECS", "Featurizer", "TransferCount", "export_json_database", "import_json_database"]

#: MetaSchedule's convention for a failed run in a tuning record.
FAILED_RUN_SECS = 1e10


@dataclass
class TransferCount:
    workloads: int = 0
    records: int = 0
    failed: int = 0


def _validate_lines(path: Path, kind: str) -> None:
    if not path.is_file():
        raise InputError(f"{kind} file {path} does not exist")
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line, parse_int=_bounded_int)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{lineno}: broken JSON line ({exc.msg}); nothing was imported") from None
            except ValueError as exc:  # a number too long to be one (Python refuses > 4300 digits)
                raise InputError(f"{path}:{lineno}: {one_line(exc, 80)}; nothing was imported") from None
            ok = isinstance(obj, list) and len(obj) == 2
            if ok and kind == "tuning-record":
                ok = isinstance(obj[0], int) and isinstance(obj[1], list) and len(obj[1]) >= 2
            if not ok:
                raise InputError(f"{path}:{lineno}: not a MetaSchedule {kind} entry; nothing was imported")


def _bounded_int(text: str) -> int:
    """JSON integers as TVM writes them; a number of hundreds of digits is corrupt input."""
    if len(text.lstrip("-")) > 30:
        raise ValueError(f"a {len(text)}-digit number is not a MetaSchedule value")
    return int(text)


def _func_of(mod: Any) -> Any:
    funcs = [f for _, f in mod.functions.items()]
    return mod["main"] if any(gv.name_hint == "main" for gv in mod.get_global_vars()) else funcs[0]


def _key_index() -> dict[str, Any]:
    from autosearch.workloads import list_workloads

    return {w.key: w for w in list_workloads()}


#: Computes one candidate's feature matrix from (IRModule, target, trace JSON text).
Featurizer = Callable[[Any, Any, str], Any]


def import_json_database(
    store: Any,
    workload_file: Path,
    record_file: Path,
    *,
    featurize: Featurizer | None = None,
    extractor: tuple[str, str] | None = None,
) -> TransferCount:
    """Add every tuning record to the store (source `import:<file>`); known workloads keep their names.

    `featurize` (with its `extractor` id) adds features in the same transaction; the store layer
    does not know any extractor itself, so the caller (the CLI) passes one in.
    """
    from autosearch.workloads.base import structural_key

    workload_file, record_file = Path(workload_file), Path(record_file)
    records = _read_records(workload_file, record_file)
    known = _key_index()
    count = TransferCount()
    seen_workloads: set[str] = set()
    batch: list[Any] = []
    feats: list[Any] = []
    for rec in records:
        func = _func_of(rec.workload.mod)
        key = structural_key(func)
        if key not in seen_workloads:
            _add_workload(store, key, func, known, workload_file)
            seen_workloads.add(key)
            count.workloads += 1
        if rec.target is None:
            raise InputError(f"{record_file}: a record has no target; cannot tell where it was measured")
        m = _record(rec, key, record_file)
        batch.append(m)
        count.failed += 0 if m.status == "ok" else 1
        if featurize is not None:
            feats.append(featurize(tvm_mod(func), rec.target, m.schedule))
    with_features = featurize is not None and extractor is not None
    ids = store.add_measurements(batch, feats if with_features else None, extractor if with_features else None)
    count.records = sum(i is not None for i in ids)
    return count


def _read_records(workload_file: Path, record_file: Path) -> list[Any]:
    """Every tuning record, read by TVM's own JSONDatabase after each line was validated."""
    from tvm.s_tir import meta_schedule as ms

    _validate_lines(workload_file, "workload")
    _validate_lines(record_file, "tuning-record")
    try:
        db = ms.database.JSONDatabase(
            path_workload=str(workload_file), path_tuning_record=str(record_file), allow_missing=False
        )
        return list(db.get_all_tuning_records())
    except Exception as exc:
        raise InputError(f"TVM cannot read {record_file}: {str(exc).strip().splitlines()[-1]}") from None


def _add_workload(store: Any, key: str, func: Any, known: dict[str, Any], workload_file: Path) -> None:
    """The workload row: a registered workload keeps its name, any other is `imported/<key>`."""
    from autosearch.store.db import WorkloadRecord
    from autosearch.workloads.base import Workload

    wl = known.get(key) or Workload(
        name=f"imported/{key}",
        family="imported",
        params={"source": str(workload_file)},
        _builder=functools.partial(lambda f: f, func),
    )
    store.add_workload(WorkloadRecord.from_workload(wl))


def _record(rec: Any, key: str, record_file: Path) -> Any:
    """A MeasurementRecord of one MetaSchedule tuning record (a failed run stays a failure)."""
    from autosearch.backends.tvm.space import to_plain_json
    from autosearch.backends.tvm.target import device_fingerprint
    from autosearch.store.db import MeasurementRecord

    secs = [float(x) for x in (rec.run_secs or [])]
    ok = bool(secs) and all(0 < x < FAILED_RUN_SECS for x in secs)
    return MeasurementRecord(
        workload_key=key,
        target=str(rec.target),
        device=device_fingerprint(rec.target),
        schedule=json.dumps(to_plain_json(rec.trace.as_json()), separators=(",", ":")),
        status="ok" if ok else "run_error",
        latencies=secs if ok else [],
        error="" if ok else "failed run in the imported MetaSchedule log",
        source=f"import:{record_file.name}",
    )


def tvm_mod(func: Any) -> Any:
    import tvm

    return tvm.IRModule({"main": func})


def _rebuild(row: Any) -> Any:
    """The workload's IRModule: from the registry when the name is known, else parsed from its IR."""
    import tvm

    from autosearch.errors import WorkloadError
    from autosearch.workloads import get_workload, random_program

    try:
        if row.family == "random" and "seed" in row.params:
            return random_program(int(row.params["seed"])).mod()
        return get_workload(row.name).mod()
    except WorkloadError:
        mod = tvm.script.from_source(row.ir)
        return mod if isinstance(mod, tvm.IRModule) else tvm.IRModule({"main": mod})


def export_json_database(store: Any, workload_file: Path, record_file: Path) -> TransferCount:
    """Write every TVM record of the store as a MetaSchedule JSONDatabase (failed runs as 1e10 s).

    The pair is written to temporary files next to the outputs and renamed into place at the end:
    a record that cannot be exported (a damaged trace) fails with its id and leaves neither file."""
    workload_file, record_file = Path(workload_file), Path(record_file)
    for p in (workload_file, record_file):
        if p.exists():
            raise InputError(f"{p} already exists; refusing to overwrite it")
    tmp_w = workload_file.with_name(f".{workload_file.name}.partial-{os.getpid()}")
    tmp_r = record_file.with_name(f".{record_file.name}.partial-{os.getpid()}")
    try:
        count = _export(store, tmp_w, tmp_r)
        for p in (workload_file, record_file):  # a file made meanwhile is not replaced either
            if p.exists():
                raise InputError(f"{p} appeared while exporting; refusing to overwrite it")
        os.replace(tmp_w, workload_file)
        os.replace(tmp_r, record_file)
    finally:
        tmp_w.unlink(missing_ok=True)
        tmp_r.unlink(missing_ok=True)
    return count


def _export(store: Any, workload_file: Path, record_file: Path) -> TransferCount:
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.schedule import Trace

    db = ms.database.JSONDatabase(path_workload=str(workload_file), path_tuning_record=str(record_file))
    count = TransferCount()
    for row in store.workloads(backend="tvm"):
        mod = _rebuild(row)
        ms_workload = db.commit_workload(mod)
        count.workloads += 1
        for m in store.measurements(workload_key=row.key):
            sch = Schedule(mod)
            try:
                Trace.apply_json_to_schedule(json.loads(m.schedule), sch)
                target = tvm.target.Target(json.loads(m.target))
            except Exception as exc:  # JSON or TVM errors of a damaged row
                raise StoreError(
                    f"measurement {m.id} ({row.name}) cannot be exported: {one_line(exc, 120)}; nothing was written"
                ) from None
            secs = m.latencies if m.status == "ok" else [FAILED_RUN_SECS]
            db.commit_tuning_record(
                ms.database.TuningRecord(sch.trace, ms_workload, secs, target, ArgInfo.from_prim_func(_func_of(mod)))
            )
            count.records += 1
            count.failed += m.status != "ok"
    return count
