"""Import and export MetaSchedule's JSONDatabase (a workload file and a tuning-record file).

Why: every TVM user already has tuning logs in this format; importing them turns those logs into
training data, and exporting lets `ms.database.JSONDatabase` (and so `tune`/`compile` in TVM) use
what autosearch measured. Reading and writing go through TVM's own JSONDatabase class, so the
files are exactly what TVM writes; each line is validated first so a broken file fails with the
file and line that is wrong, before anything is written to the store.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autosearch.errors import InputError, StoreError, one_line

__all__ = ["FAILED_RUN_SECS", "Featurizer", "TransferCount", "export_json_database", "import_json_database"]

#: MetaSchedule's convention for a failed run in a tuning record.
FAILED_RUN_SECS = 1e10


@dataclass
class TransferCount:
    """What an import or export moved; `duplicates`: records an import skipped because the log
    repeats them or the store already holds their schedule (a log appended to across runs)."""

    workloads: int = 0
    records: int = 0
    failed: int = 0
    duplicates: int = 0


def _lines(path: Path, kind: str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of every non-blank line, read one line at a time.

    Why one at a time: a tuning log can be gigabytes (a 50 MB one read whole peaked at 1.7 GB).
    A line that is not UTF-8 or not JSON fails with this file and line."""
    if not path.is_file():
        raise InputError(f"{kind} file {path} does not exist")
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{path}:{lineno}: not UTF-8 text (byte {raw[exc.start]:#04x} at column {exc.start + 1}); "
                    "nothing was imported"
                ) from None
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
            yield lineno, obj


def _validate_lines(path: Path, kind: str) -> int:
    """Check every line of a file (streamed) before anything is written; returns how many entries."""
    return sum(1 for _ in _lines(path, kind))


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


#: Records written per transaction while importing.
_IMPORT_BATCH = 256


def import_json_database(
    store: Any,
    workload_file: Path,
    record_file: Path,
    *,
    featurize: Featurizer | None = None,
    extractor: tuple[str, str] | None = None,
) -> TransferCount:
    """Add every tuning record to the store (source `import:<file>`); known workloads keep their names.

    Both files are checked line by line first (nothing is written if one line is broken), then
    the records are read again one line at a time and written `_IMPORT_BATCH` per transaction:
    memory stays flat however long the log. A schedule the store (or this import) already holds
    for its workload and target is skipped before it is featurized.

    `featurize` (with its `extractor` id) adds features in the same transaction; the store layer
    does not know any extractor itself, so the caller (the CLI) passes one in.
    """
    workload_file, record_file = Path(workload_file), Path(record_file)
    n_workloads = _validate_lines(workload_file, "workload")
    _validate_lines(record_file, "tuning-record")
    workloads = _read_workloads(workload_file)
    known = _key_index()
    count = TransferCount()
    keys: dict[int, tuple[str, Any]] = {}  # workload line index -> (structural key, PrimFunc)
    have: dict[tuple[str, str], set[str]] = {}  # (key, target) -> schedule hashes stored or seen
    devices: dict[str, str] = {}
    batch: list[Any] = []
    feats: list[Any] = []
    with_features = featurize is not None and extractor is not None

    def flush() -> None:
        if batch:
            ids = store.add_measurements(batch, feats if with_features else None, extractor if with_features else None)
            count.records += sum(i is not None for i in ids)
            batch.clear()
            feats.clear()

    for lineno, rec, index in _read_records(record_file, workloads, n_workloads, count):
        if index not in keys:
            keys[index] = _workload_key(rec.workload.mod)
        key, func = keys[index]
        if rec.target is None:
            raise InputError(f"{record_file}:{lineno}: the record has no target; cannot tell where it was measured")
        m = _record(rec, key, record_file, devices)
        group = have.get((key, m.target))
        if group is None:
            if not any(k == key for k, _ in have):
                _add_workload(store, key, func, known, workload_file)
                count.workloads += 1
            group = have[(key, m.target)] = store.schedule_hashes(key, m.target)
        if m.schedule_hash in group:
            count.duplicates += 1
            continue
        group.add(m.schedule_hash)
        batch.append(m)
        count.failed += 0 if m.status == "ok" else 1
        if featurize is not None:
            feats.append(featurize(tvm_mod(func), rec.target, m.schedule))
        if len(batch) >= _IMPORT_BATCH:
            flush()
    flush()
    return count


def _workload_key(mod: Any) -> tuple[str, Any]:
    from autosearch.workloads.base import structural_key

    func = _func_of(mod)
    return structural_key(func), func


def _read_workloads(workload_file: Path) -> list[Any]:
    """The workload file's entries as TVM reads them (one per line; these files are small)."""
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    parse = tvm_ffi.get_global_func("ffi.json.Parse")
    out = []
    for lineno, obj in _lines(workload_file, "workload"):
        try:
            out.append(ms.database.Workload.from_json(parse(json.dumps(obj))))
        except Exception as exc:  # TVM's own errors
            raise InputError(
                f"TVM cannot read {workload_file}:{lineno}: {one_line(exc, 120)}; nothing was imported"
            ) from None
    return out


def _read_records(
    record_file: Path, workloads: list[Any], n_workloads: int, count: TransferCount
) -> Iterator[tuple[int, Any, int]]:
    """(line number, TVM TuningRecord, workload index) of each record line, one line at a time;
    a line repeated is read once and counted in `count.duplicates`."""
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    parse = tvm_ffi.get_global_func("ffi.json.Parse")
    seen: set[bytes] = set()  # digests of the lines read: a repeated line is the same record
    for lineno, (index, entry) in _lines(record_file, "tuning-record"):
        text = json.dumps([index, entry])
        digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
        if digest in seen:
            count.duplicates += 1
            continue
        seen.add(digest)
        if not 0 <= index < n_workloads:
            raise InputError(
                f"{record_file}:{lineno}: workload index {index}, but the workload file has {n_workloads} entries"
            )
        try:
            rec = ms.database.TuningRecord.from_json(parse(json.dumps(entry)), workloads[index])
        except Exception as exc:  # TVM's own errors
            raise InputError(
                f"TVM cannot read {record_file}:{lineno}: {one_line(exc, 120)}; the records before it are imported "
                "(run again after fixing it: they are skipped)"
            ) from None
        yield lineno, rec, index


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


def _record(rec: Any, key: str, record_file: Path, devices: dict[str, str] | None = None) -> Any:
    """A MeasurementRecord of one MetaSchedule tuning record (a failed run stays a failure).
    `devices` caches each target's fingerprint over an import (it asks the OS each time)."""
    from autosearch.backends.tvm.space import to_plain_json
    from autosearch.backends.tvm.target import device_fingerprint
    from autosearch.store.db import MeasurementRecord

    target = str(rec.target)
    devices = {} if devices is None else devices
    if target not in devices:
        devices[target] = device_fingerprint(rec.target)
    secs = [float(x) for x in (rec.run_secs or [])]
    ok = bool(secs) and all(0 < x < FAILED_RUN_SECS for x in secs)
    return MeasurementRecord(
        workload_key=key,
        target=target,
        device=devices[target],
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
        for final, tmp in ((workload_file, tmp_w), (record_file, tmp_r)):
            _writable(final, tmp)
        count = _export(store, tmp_w, tmp_r)
        for p in (workload_file, record_file):  # a file made meanwhile is not replaced either
            if p.exists():
                raise InputError(f"{p} appeared while exporting; refusing to overwrite it")
        os.replace(tmp_w, workload_file)
        os.replace(tmp_r, record_file)
    except OSError as exc:  # the disk filled, or the folder went away, while writing
        raise InputError(
            f"cannot write {exc.filename or workload_file}: {exc.strerror or exc}; nothing was written"
        ) from None
    finally:
        for tmp in (tmp_w, tmp_r):
            with contextlib.suppress(OSError):  # never made: the folder is missing or a file
                tmp.unlink(missing_ok=True)
    return count


def _writable(final: Path, tmp: Path) -> None:
    """Make `final`'s folder (as `--out` folders are made) and the empty temporary file beside it,
    or fail in one line: TVM's writer reports a folder it cannot write to as an internal error."""
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "x"):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise InputError(f"cannot write {final}: {why}; nothing was written") from None


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
