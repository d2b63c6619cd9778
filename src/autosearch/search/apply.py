"""Re-apply a saved best schedule: `autosearch apply DIR|best.json`.

A schedule is stored as its MetaSchedule trace; replaying the trace on the workload's program
(`Trace.apply_json_to_schedule`) reproduces the measured schedule exactly. `best_schedule.py`,
written next to best.json, is the standalone form: the scheduled TIR as TVMScript plus a few
lines that compile and time it with TVM alone (no autosearch needed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from autosearch.atomic_write import write_text_atomic
from autosearch.errors import InputError, TargetError, one_line

__all__ = ["BEST_FORMAT_VERSION", "apply_best", "load_best", "measure_schedule", "write_script"]


#: The best.json format this code reads and `results.save_result` writes.
BEST_FORMAT_VERSION = 1


def load_best(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read best.json (or the best.json inside a tuning output directory)."""
    p = Path(path)
    if p.is_dir():
        p = p / "best.json"
    if not p.is_file():
        raise InputError(f"no saved schedule at {p}: pass a tuning output directory or its best.json")
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{p} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != "autosearch-best-schedule":
        raise InputError(f"{p} is not a schedule saved by `autosearch tune`")
    version = data.get("format_version", 1)  # none: written before the field was
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InputError(f"{p}: format_version must be a whole number >= 1, got {json.dumps(version)}")
    if version > BEST_FORMAT_VERSION:  # as `run` and `eval` refuse newer artifacts and models
        raise InputError(
            f"{p} has best-schedule format {version}; this autosearch reads up to {BEST_FORMAT_VERSION}: "
            "use the autosearch that wrote it (or a newer one)"
        )
    for key in ("trace", "workload_name", "workload_key"):
        if key not in data:
            raise InputError(f"{p} lacks the field {key!r}")
    return data


def _workload(best: dict[str, Any], module: str | None) -> Any:
    """The workload a saved schedule belongs to. A user module is code: it is imported only when the
    user names it again (`--module`), never because a JSON file says so."""
    from autosearch.workloads.module import resolve_workload_spec

    saved = best.get("module")
    if saved is not None and not isinstance(saved, str):
        raise InputError("best.json: the field 'module' must be a string")
    if saved and module is None:
        raise InputError(
            f"{best['workload_name']} was tuned on a user module ({saved}); importing it runs its code, so "
            "pass --module with that FILE.py:FUNC to confirm"
        )
    if module is not None:
        return resolve_workload_spec(best["workload_name"], module)
    return resolve_workload_spec(best["workload_name"])


def _check_trace(best: dict[str, Any]) -> None:
    """The trace must be the one tuning measured: best.json carries its `schedule_hash` (the store's
    key for it), so an edited decision is refused instead of applied and timed as the tuned one
    (a changed tile size can run many times slower than the saved schedule).
    A best.json from before the hash was saved has none to check."""
    from autosearch.hashing import schedule_hash

    saved = best.get("schedule_hash")
    if saved is None:
        return
    if not isinstance(saved, str):
        raise InputError("best.json: the field 'schedule_hash' must be a string")
    if schedule_hash(json.dumps(best["trace"], separators=(",", ":"))) != saved:
        raise InputError(
            f"the trace in best.json of {best['workload_name']} does not match its schedule_hash {saved[:12]}...: "
            "it was edited or damaged after tuning; refusing to apply it"
        )


def apply_best(
    path_or_best: str | os.PathLike[str] | dict[str, Any],
    workload: Any = None,
    *,
    module: str | None = None,
) -> tuple[Any, Any]:
    """(workload, tvm.s_tir.Schedule) with the saved trace replayed on the workload's program.

    The workload's key must equal the saved one, so a `--module` that builds another program
    than the one tuned is refused."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from autosearch.backends.tvm.lowp import register_dot_kernels

    register_dot_kernels()  # a bf16 / int8 trace tensorizes with them
    best = path_or_best if isinstance(path_or_best, dict) else load_best(path_or_best)
    wl = workload if workload is not None else _workload(best, module)
    if wl.key != best["workload_key"]:
        raise InputError(
            f"{best['workload_name']} now has key {wl.key}, the schedule was tuned for {best['workload_key']}: "
            "the program changed, tune it again"
        )
    _check_trace(best)
    sch = Schedule(wl.mod())
    try:
        Trace.apply_json_to_schedule(best["trace"], sch)
    except Exception as exc:
        raise InputError(f"the saved trace does not apply to {wl.name}: {one_line(exc)}") from None
    return wl, sch


def measure_schedule(sch: Any, target: Any, evaluator: Any = None) -> float:
    """Median latency (seconds) of a schedule, built and run as tuning measures it; a GPU target
    with no GPU here, or a schedule that fails to build or run, is an error that says why."""
    import numpy as np
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from autosearch.backends.tvm.build import build_in_process
    from autosearch.backends.tvm.measure import EvaluatorSettings, Measurer
    from autosearch.backends.tvm.target import is_gpu

    if is_gpu(target):
        import tvm

        if not tvm.device(target.kind.name, 0).exist:
            raise TargetError(
                f"target {target.kind.name} has no device on this machine: the schedule cannot be timed here"
            )
    m = Measurer(target, evaluator or EvaluatorSettings(number=1, repeat=3, min_repeat_ms=10))
    cand = MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
    (res,) = m.run_built([cand], build_in_process([cand], target))
    if res.status != "ok" or not res.latencies:
        reason = one_line(RuntimeError(res.error)) if res.error else "no latency"
        raise InputError(f"the schedule could not be timed on {target.kind.name} ({res.status}): {reason}")
    return float(np.median(res.latencies))


_SCRIPT = '''"""Best schedule found by `autosearch tune` (standalone: needs only apache-tvm and numpy).

Run:  python best_schedule.py
"""

import os

# TVM's runtime uses half the logical CPUs on x86-64 unless told; run on the threads it was tuned with
os.environ.setdefault("TVM_NUM_THREADS", {threads})

import numpy as np  # noqa: E402
import tvm  # noqa: E402
import tvm.script  # noqa: E402

# Every value below is a Python literal written by autosearch (repr), never code.
WORKLOAD = {name}
MODEL = {model}
TRIALS = {trials}
TUNED_LATENCY_S = {latency}
TARGET = {target}
TIR = {tir}


def main() -> None:
    mod = tvm.script.from_source(TIR)
    target = tvm.target.Target(TARGET)
    exe = tvm.compile(mod, target=target)
    dev = tvm.cpu() if target.kind.name == "llvm" else tvm.device(target.kind.name)
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    args = [
        tvm.runtime.tensor(np.random.rand(*[int(s) for s in a.shape]).astype(a.dtype), dev)
        for a in ArgInfo.from_prim_func(mod["main"])
    ]
    timer = exe.mod.time_evaluator("main", dev, number=1, repeat=5, min_repeat_ms=20)
    secs = sorted(timer(*args).results)
    print(f"{{WORKLOAD}}: median {{secs[len(secs) // 2] * 1e6:.1f}} us over {{len(secs)}} repeats")


if __name__ == "__main__":
    main()
'''


def _threads(saved: Any) -> int:
    """The threads best.json says the kernel was tuned with, else this machine's physical cores."""
    if isinstance(saved, int) and not isinstance(saved, bool) and 0 < saved <= 4096:
        return saved
    from autosearch.backends.tvm.target import physical_cores

    return physical_cores()


def write_script(best_path: str | os.PathLike[str], workload: Any = None) -> Path:
    """Write best_schedule.py (scheduled TIR + compile + time) next to best.json."""
    best = load_best(best_path)
    _, sch = apply_best(best, workload)
    lat = best.get("best_latency_s")
    target = best.get("target") or "llvm"
    text = _SCRIPT.format(
        name=repr(str(best["workload_name"])),
        model=repr(str(best.get("model", "?"))),
        trials=repr(int(best.get("trials_measured") or 0)),
        latency=repr(float(lat)) if isinstance(lat, (int, float)) else "None",
        target=repr(json.loads(target) if isinstance(target, str) and target.startswith("{") else str(target)),
        tir=repr(sch.mod.script(show_meta=True)),  # a bf16 / int8 kernel's IR is metadata
        threads=repr(str(_threads(best.get("runtime_threads")))),
    )
    out = Path(best_path)
    out = (out if out.is_dir() else out.parent) / "best_schedule.py"
    write_text_atomic(out, text)
    return out
