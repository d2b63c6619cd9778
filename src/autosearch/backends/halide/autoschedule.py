"""Run Adams2019 and benchmark its schedules in a child process, so nothing can kill the caller.

Why a child: in Halide 21 an unknown parameter key or a bad value aborts the whole process
(SIGABRT), a bad schedule can segfault, and a slow one can hang. So parameters are validated
here first, and all Halide work (build Funcs, autoschedule, JIT-compile, run) happens in one
spawned worker per batch that reports every step over a pipe. If the worker dies or stops
answering, the candidate it was working on is recorded as failed (`build_error`, `run_error`
or `timeout`) and a fresh worker carries on with the others.

Benchmarking: every candidate is compiled first, then the candidates are run round-robin
(`repeats` rounds, order rotated each round) so that machine drift hits all of them alike;
each measurement runs enough iterations to last `min_time_s` and reports their mean, or with
`per_iter_min=True` the fastest single iteration (better on a loaded machine for schedules of
~1 ms and more: a run that was preempted is simply not the min; for microsecond schedules the
Python call overhead makes the mean the better choice). Halide's samples use the min over rounds.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosearch.backends.halide.pipelines import PipelineSpec
from autosearch.backends.halide.weights import validate_weights_file
from autosearch.errors import InputError

__all__ = [
    "ADAMS2019_PARAMS",
    "CandidateResult",
    "autoschedule",
    "autoschedule_and_benchmark",
    "host_target",
    "validate_params",
]

#: Adams2019Params (CostModel.h): key -> (kind, min, max). Anything else aborts Halide.
ADAMS2019_PARAMS: dict[str, tuple[str, float, float]] = {
    "parallelism": ("int", 1, 2**31 - 1),
    "beam_size": ("int", 1, 2**31 - 1),
    "random_dropout": ("int", 0, 100),
    "random_dropout_seed": ("int", 0, 2**31 - 1),
    "weights_path": ("path", 0, 0),
    "disable_subtiling": ("int", 0, 1),
    "disable_memoized_features": ("int", 0, 1),
    "disable_memoized_blocks": ("int", 0, 1),
    "memory_limit": ("int", -1, 2**63 - 1),
}


def validate_params(params: dict[str, Any]) -> dict[str, str]:
    """Check keys and values exactly as Halide's ParamParser would, but raise `InputError`
    instead of aborting. Returns the string map Halide wants. A weights file is validated too."""
    out: dict[str, str] = {}
    for key, value in params.items():
        if key not in ADAMS2019_PARAMS:
            raise InputError(f"unknown Adams2019 parameter {key!r}; known: {', '.join(ADAMS2019_PARAMS)}")
        kind, lo, hi = ADAMS2019_PARAMS[key]
        if kind == "path":
            path = str(value)
            if not path:
                continue  # empty = the built-in baseline weights
            if any(ch.isspace() for ch in path):
                raise InputError(f"weights_path {path!r} contains whitespace, which Halide cannot parse")
            out[key] = str(validate_weights_file(path))
            if any(ch.isspace() for ch in out[key]):
                raise InputError(f"weights_path {out[key]!r} contains whitespace, which Halide cannot parse")
            continue
        if isinstance(value, bool):
            value = int(value)
        try:
            ivalue = int(str(value).strip())
        except ValueError:
            raise InputError(f"Adams2019 parameter {key} must be an integer, got {value!r}") from None
        if isinstance(value, float) and not value.is_integer():
            raise InputError(f"Adams2019 parameter {key} must be an integer, got {value!r}")
        if not lo <= ivalue <= hi:
            raise InputError(f"Adams2019 parameter {key} must be in [{int(lo)}, {int(hi)}], got {ivalue}")
        out[key] = str(ivalue)
    return out


def host_target() -> str:
    """The host's Halide target string (as `get_host_target` reports it)."""
    import halide as hl

    return str(hl.get_host_target())


@dataclass
class CandidateResult:
    """One schedule of a batch: what Adams2019 made and how it ran."""

    index: int
    params: dict[str, str]
    status: str = "pending"
    schedule_source: str = ""
    featurization: bytes = b""
    latencies: list[float] = field(default_factory=list)  # seconds, one per round
    error: str = ""
    compile_s: float = 0.0

    @property
    def runtime_s(self) -> float:
        return min(self.latencies) if self.status == "ok" and self.latencies else math.inf


# -- the worker (runs in the spawned child) -------------------------------------------------
_NUMPY_TYPES = {"float32": np.float32, "float64": np.float64, "uint8": np.uint8, "uint16": np.uint16,
                "uint32": np.uint32, "int8": np.int8, "int16": np.int16, "int32": np.int32}


def _redirect_output(log_path: str) -> None:
    """Halide prints warnings to stdout/stderr; keep them out of the caller's terminal."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


class _Built:
    """A compiled candidate with its input and output buffers (arrays kept alive here)."""

    def __init__(self, pipe: Any, arrays: list[np.ndarray], buffers: list[Any], outputs: list[Any], defn: Any) -> None:
        self.pipe, self.arrays, self.buffers, self.outputs, self.defn = pipe, arrays, buffers, outputs, defn
        self.iters = 1
        self.per_iter_min = False

    def run(self, iters: int) -> float:
        if self.per_iter_min:
            best = math.inf
            for _ in range(iters):
                t0 = time.perf_counter()
                self.pipe.realize(self.outputs)
                best = min(best, time.perf_counter() - t0)
            return best
        t0 = time.perf_counter()
        for _ in range(iters):
            self.pipe.realize(self.outputs)
        return (time.perf_counter() - t0) / iters


def _build_one(spec: PipelineSpec, target_str: str, params: dict[str, str], compile_: bool) -> tuple[Any, str, bytes, float]:
    import halide as hl

    from autosearch.backends.halide.pipelines import build_pipeline
    from autosearch.backends.halide.toolchain import load_adams2019

    load_adams2019()
    defn = build_pipeline(spec)  # fresh Funcs for every schedule
    pipe = defn.pipeline()
    target = hl.Target(target_str)
    res = pipe.apply_autoscheduler(target, hl.AutoschedulerParams("Adams2019", params))
    source, feat = str(res.schedule_source), bytes(res.featurization)
    if not compile_:
        return None, source, feat, 0.0
    t0 = time.perf_counter()
    pipe.compile_jit(target)
    compile_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    arrays, buffers = [], []
    for param, shape in defn.inputs:
        dt = _NUMPY_TYPES.get(str(param.type()), np.float32)
        arr = (rng.random(tuple(shape)[::-1]) * (100 if dt != np.float32 else 1)).astype(dt)
        buf = hl.Buffer(arr)  # does not keep `arr` alive: _Built holds both
        param.set(buf)
        arrays.append(arr)
        buffers.append(buf)
    outputs = [hl.Buffer(f.type(), list(shape)) for f, shape in zip(defn.outputs, defn.output_shapes)]
    return _Built(pipe, arrays, buffers, outputs, defn), source, feat, compile_s


def _worker(conn: Any, spec: PipelineSpec, target_str: str, cands: list[tuple[int, dict[str, str]]],
            rounds: int, min_time_s: float, compile_: bool, log_path: str, per_iter_min: bool = False) -> None:
    _redirect_output(log_path)
    built: dict[int, _Built] = {}
    for idx, params in cands:
        conn.send(("start_build", idx))
        try:
            b, source, feat, compile_s = _build_one(spec, target_str, params, compile_)
        except Exception as exc:  # noqa: BLE001 - reported to the parent as this candidate's failure
            conn.send(("build_failed", idx, f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"))
            continue
        conn.send(("built", idx, source, feat, compile_s))
        if b is not None:
            conn.send(("start_run", idx))
            try:
                b.per_iter_min = per_iter_min
                warm = b.run(1)  # first run: page in code and buffers; also calibrates
                b.iters = max(1, min(10000, int(math.ceil(min_time_s / max(warm, 1e-7)))))
                b.run(b.iters)
                built[idx] = b
            except Exception as exc:  # noqa: BLE001
                conn.send(("run_failed", idx, f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"))
    order = list(built)
    for r in range(rounds):
        k = r % len(order) if order else 0
        for idx in order[k:] + order[:k]:
            conn.send(("start_run", idx))
            try:
                conn.send(("lat", idx, built[idx].run(built[idx].iters)))
            except Exception as exc:  # noqa: BLE001
                conn.send(("run_failed", idx, f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"))
                order.remove(idx)
                break
        conn.send(("round_done", r))
    conn.send(("done",))


# -- the parent side ------------------------------------------------------------------------
def _log_tail(path: str, n: int = 300) -> str:
    try:
        with open(path, errors="replace") as fh:
            text = fh.read()
    except OSError:
        return ""
    return " ".join(text[-n:].split())


def autoschedule_and_benchmark(
    spec: PipelineSpec,
    param_sets: Sequence[dict[str, Any]],
    *,
    threads: int = 1,
    target: str | None = None,
    repeats: int = 5,
    min_time_s: float = 0.002,
    build_timeout_s: float = 300.0,
    run_timeout_s: float = 60.0,
    benchmark: bool = True,
    permit_failed_unroll: bool = True,
    per_iter_min: bool = False,
    on_event: Callable[[str, int], None] | None = None,
) -> list[CandidateResult]:
    """Autoschedule `spec` once per parameter set and (if `benchmark`) time every schedule.

    Returns one `CandidateResult` per parameter set, in order; failures never raise.
    """
    if int(threads) < 1:
        raise InputError(f"threads must be >= 1, got {threads!r}")
    if int(repeats) < 1:
        raise InputError(f"repeats must be >= 1, got {repeats!r}")
    validated = [validate_params(p) for p in param_sets]
    target = target or host_target()
    results = [CandidateResult(i, p) for i, p in enumerate(validated)]
    pending = list(range(len(results)))  # not failed yet
    rounds_done = 0
    log_dir = tempfile.mkdtemp(prefix="autosearch-halide-")
    ctx = mp.get_context("spawn")
    attempts = 0
    while pending and attempts <= len(results) + 1:
        attempts += 1
        for i in pending:
            results[i].latencies = results[i].latencies[:rounds_done]
        log_path = os.path.join(log_dir, f"worker{attempts}.log")
        parent, child = ctx.Pipe(duplex=False)
        env = {"HL_NUM_THREADS": str(int(threads))}
        if permit_failed_unroll:
            # As Halide's data-generation scripts do: Adams2019 sometimes unrolls a loop whose
            # extent is not constant; this turns that compile error into a serial loop.
            env["HL_PERMIT_FAILED_UNROLL"] = "1"
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            proc = ctx.Process(
                target=_worker,
                args=(child, spec, target, [(i, validated[i]) for i in pending],
                      (int(repeats) - rounds_done) if benchmark else 0, float(min_time_s), bool(benchmark), log_path, bool(per_iter_min)),
                daemon=True,
            )
            proc.start()
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        child.close()
        phase, current = "build", -1
        finished = False
        while True:
            timeout = build_timeout_s if phase == "build" else run_timeout_s
            if not parent.poll(timeout):
                proc.kill()
                proc.join()
                if current >= 0:
                    results[current].status = "timeout"
                    results[current].error = f"no answer within {timeout:g} s while {'autoscheduling/compiling' if phase == 'build' else 'running'}"
                break
            try:
                msg = parent.recv()
            except (EOFError, OSError):
                proc.join(5)
                if current >= 0:
                    code = proc.exitcode
                    results[current].status = "build_error" if phase == "build" else "run_error"
                    results[current].error = f"worker died (exit code {code}) while {'autoscheduling/compiling' if phase == 'build' else 'running'}: {_log_tail(log_path)}"
                break
            kind = msg[0]
            if kind == "start_build":
                phase, current = "build", msg[1]
                if on_event:
                    on_event("build", msg[1])
            elif kind == "start_run":
                phase, current = "run", msg[1]
            elif kind == "built":
                _, i, source, feat, compile_s = msg
                results[i].schedule_source, results[i].featurization, results[i].compile_s = source, feat, compile_s
                results[i].status, results[i].error = ("ok", "") if benchmark else ("ok", "not benchmarked")
            elif kind == "build_failed":
                results[msg[1]].status, results[msg[1]].error = "build_error", msg[2]
            elif kind == "run_failed":
                results[msg[1]].status, results[msg[1]].error = "run_error", msg[2]
            elif kind == "lat":
                results[msg[1]].latencies.append(float(msg[2]))
            elif kind == "round_done":
                rounds_done += 1
                if on_event:
                    on_event("round", rounds_done)
            elif kind == "done":
                finished = True
                break
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
        pending = [i for i in pending if results[i].status in ("pending", "ok")]
        if finished:
            break
        # The worker died or hung: the failed candidate is out; the rest are rebuilt in a new worker.
    for r in results:
        if r.status == "ok" and benchmark and not r.latencies:
            r.status, r.error = "run_error", r.error or "no measurement completed"
        if r.status == "pending":
            r.status, r.error = "build_error", "not built (worker restarts exhausted)"
    return results


def autoschedule(spec: PipelineSpec, params: dict[str, Any], *, target: str | None = None,
                 timeout_s: float = 300.0) -> CandidateResult:
    """Just the schedule (source + featurization) for one parameter set, safely in a child."""
    return autoschedule_and_benchmark(spec, [params], target=target, benchmark=False, build_timeout_s=timeout_s)[0]
