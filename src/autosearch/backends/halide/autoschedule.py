"""Run Adams2019 and benchmark its schedules in a child process, so nothing can kill the caller.

Why a child: in Halide 21 an unknown parameter key or a bad value aborts the whole process
(SIGABRT), a bad schedule can segfault, and a slow one can hang. So parameters are validated
here first, and all Halide work (build Funcs, autoschedule, JIT-compile, run) happens in one
`python -m autosearch.backends.halide.worker` process per batch that reports every step over a
pipe (never a `multiprocessing` spawn, which re-imports the caller's `__main__`). If the worker dies or stops
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

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from autosearch.backends.halide.pipelines import PipelineSpec
from autosearch.backends.halide.weights import validate_weights_file
from autosearch.backends.halide.worker import PARENT_ENV, decode_message
from autosearch.errors import InputError

__all__ = [
    "ADAMS2019_PARAMS",
    "OTHER_AUTOSCHEDULER_PARAMS",
    "CandidateResult",
    "autoschedule",
    "autoschedule_and_benchmark",
    "default_build_timeout_s",
    "describe_in_child",
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


#: The other autoschedulers' parameters (their ParamParsers abort on anything else too).
OTHER_AUTOSCHEDULER_PARAMS: dict[str, dict[str, tuple[str, float, float]]] = {
    "Mullapudi2016": {
        "parallelism": ("int", 1, 2**31 - 1),
        "last_level_cache_size": ("int", 1, 2**62),
        "balance": ("int", 1, 2**31 - 1),
    },
    "Li2018": {"parallelism": ("int", 1, 2**31 - 1)},
}


def validate_params(params: dict[str, Any], autoscheduler: str = "Adams2019") -> dict[str, str]:
    """Check keys and values exactly as Halide's ParamParser would, but raise `InputError`
    instead of aborting. Returns the string map Halide wants. A weights file is validated too."""
    known = ADAMS2019_PARAMS if autoscheduler == "Adams2019" else OTHER_AUTOSCHEDULER_PARAMS.get(autoscheduler)
    if known is None:
        raise InputError(
            f"unknown autoscheduler {autoscheduler!r}; known: Adams2019, {', '.join(OTHER_AUTOSCHEDULER_PARAMS)}"
        )
    out: dict[str, str] = {}
    for key, value in params.items():
        if key not in known:
            raise InputError(f"unknown {autoscheduler} parameter {key!r}; known: {', '.join(known)}")
        kind, lo, hi = known[key]
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
    compile_s: float = 0.0  # JIT compilation
    schedule_s: float = 0.0  # building the Funcs and running the autoscheduler
    run_s: float = 0.0  # running it: the warm-up and every measurement (parent's clock)

    @property
    def runtime_s(self) -> float:
        return min(self.latencies) if self.status == "ok" and self.latencies else math.inf


# -- the parent side ------------------------------------------------------------------------
def _log_tail(path: str, n: int = 300) -> str:
    try:
        with open(path, errors="replace") as fh:
            text = fh.read()
    except OSError:
        return ""
    return " ".join(text[-n:].split())


def _start_worker(
    job: dict[str, Any], threads: int, permit_failed_unroll: bool, keep_stdin: bool = False
) -> tuple[subprocess.Popen[bytes], Connection]:
    """`python -m autosearch.backends.halide.worker` with the job on its stdin (kept open for the
    "go" line when `keep_stdin`)."""
    env = dict(os.environ)
    env["HL_NUM_THREADS"] = str(int(threads))
    env[PARENT_ENV] = str(os.getpid())
    if permit_failed_unroll:
        # As Halide's data-generation scripts do: Adams2019 sometimes unrolls a loop whose
        # extent is not constant; this turns that compile error into a serial loop.
        env["HL_PERMIT_FAILED_UNROLL"] = "1"
    with open(job["log_path"], "ab") as log:  # start-up errors land in the log the parent reports
        proc = subprocess.Popen(
            [sys.executable, "-m", "autosearch.backends.halide.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
        )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(job).encode() + b"\n")
        if keep_stdin:
            proc.stdin.flush()
        else:
            proc.stdin.close()
    except OSError:
        pass  # the worker died at once: the read below reports it
    return proc, Connection(os.dup(proc.stdout.fileno()))


def _stop(proc: subprocess.Popen[bytes], conn: Connection, grace_s: float) -> None:
    if proc.stdin is not None and not proc.stdin.closed:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    conn.close()
    if proc.stdout is not None:
        proc.stdout.close()


class _Session:
    """The parent's view of one worker: applies its messages to `results`."""

    def __init__(
        self, results: list[CandidateResult], benchmark: bool, on_event: Callable[[str, int], None] | None
    ) -> None:
        self.results, self.benchmark, self.on_event = results, benchmark, on_event
        self.phase, self.current, self.rounds_done = "build", -1, 0
        self.run_started = 0.0

    def what(self) -> str:
        return "autoscheduling/compiling" if self.phase == "build" else "running"

    def fail_current(self, status: str, error: str) -> None:
        if self.current >= 0:
            self.results[self.current].status, self.results[self.current].error = status, error

    def apply(self, msg: tuple[Any, ...]) -> bool:
        """Apply one message; True when the worker reported that it is done."""
        kind, results = msg[0], self.results
        if self.run_started and kind != "start_run":  # the run of `current` ended with this message
            results[self.current].run_s += time.monotonic() - self.run_started
            self.run_started = 0.0
        if kind == "start_build":
            self.phase, self.current = "build", msg[1]
            if self.on_event:
                self.on_event("build", msg[1])
        elif kind == "start_run":
            if self.run_started:  # a warm-up run followed straight by the next start
                results[self.current].run_s += time.monotonic() - self.run_started
            self.phase, self.current = "run", msg[1]
            self.run_started = time.monotonic()
        elif kind == "built":
            _, i, source, feat, compile_s, schedule_s = msg
            results[i].schedule_source, results[i].featurization = source, feat
            results[i].compile_s, results[i].schedule_s = compile_s, schedule_s
            results[i].status, results[i].error = ("ok", "") if self.benchmark else ("ok", "not benchmarked")
        elif kind == "build_failed":
            results[msg[1]].status, results[msg[1]].error = "build_error", msg[2]
        elif kind == "run_failed":
            results[msg[1]].status, results[msg[1]].error = "run_error", msg[2]
        elif kind == "lat":
            results[msg[1]].latencies.append(float(msg[2]))
        elif kind == "round_done":
            self.rounds_done += 1
            if self.on_event:
                self.on_event("round", self.rounds_done)
        return kind == "done"


def _drive(
    sess: _Session,
    proc: subprocess.Popen[bytes],
    conn: Connection,
    log_path: str,
    build_timeout_s: float,
    run_timeout_s: float,
) -> bool:
    """Read the worker's messages until it is done (True), dies or stops answering (False)."""
    while True:
        timeout = build_timeout_s if sess.phase == "build" else run_timeout_s
        if not conn.poll(timeout):
            proc.kill()
            sess.fail_current("timeout", f"no answer within {timeout:g} s while {sess.what()}")
            return False
        try:
            msg = decode_message(conn.recv_bytes())
        except (EOFError, OSError):
            try:
                code = proc.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            sess.fail_current(
                "build_error" if sess.phase == "build" else "run_error",
                f"worker died (exit code {code}) while {sess.what()}: {_log_tail(log_path)}",
            )
            return False
        if sess.apply(msg):
            return True


@dataclass
class _Worker:
    proc: subprocess.Popen[bytes]
    conn: Connection
    sess: _Session
    log_path: str
    last: float = 0.0  # time of its last message
    measuring: bool = False  # between a start_run and its result (it holds the run lock)


def _read(w: _Worker) -> tuple[Any, ...] | None:
    """The next message of a worker, or None when it died (its current candidate then failed)."""
    try:
        msg = decode_message(w.conn.recv_bytes())
    except (EOFError, OSError):
        try:
            code = w.proc.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        w.sess.fail_current(
            "build_error" if w.sess.phase == "build" else "run_error",
            f"worker died (exit code {code}) while {w.sess.what()}: {_log_tail(w.log_path)}",
        )
        return None
    w.last = time.monotonic()
    return msg


def _builds_only(on_event: Callable[[str, int], None]) -> Callable[[str, int], None]:
    return lambda kind, i: on_event(kind, i) if kind == "build" else None


def _parallel_attempt(
    jobs: list[dict[str, Any]],
    results: list[CandidateResult],
    benchmark: bool,
    on_event: Callable[[str, int], None] | None,
    threads: int,
    permit_failed_unroll: bool,
    build_timeout_s: float,
    run_timeout_s: float,
) -> set[int]:
    """One worker per job builds its share of the candidates at the same time as the others
    (autoscheduling and LLVM are single-threaded: Halide's loop compiles a batch in parallel too);
    once every worker has built, they all get "go" and measure, one measurement at a time (the
    workers' run lock), so no benchmark runs beside a compile or another benchmark. Returns the
    candidates of the workers that finished; a worker that died or hung marks its current
    candidate failed, and its other candidates are left to the caller."""
    workers: list[_Worker] = []
    finished: set[int] = set()
    try:
        for k, job in enumerate(jobs):
            proc, conn = _start_worker(job, threads, permit_failed_unroll, keep_stdin=True)
            events = on_event if k == 0 or on_event is None else _builds_only(on_event)  # rounds: worker 0's
            sess = _Session(results, benchmark, events)
            workers.append(_Worker(proc, conn, sess, job["log_path"], time.monotonic()))
        building, ready = list(workers), []
        while building:  # phase 1: build (every worker on its own core)
            timeout = max(0.0, min(w.last for w in building) + build_timeout_s - time.monotonic())
            for c in wait([w.conn for w in building], timeout):
                w = next(x for x in building if x.conn is c)
                msg = _read(w)
                if msg is None:
                    building.remove(w)
                elif msg[0] == "ready":
                    w.sess.apply(msg)  # closes the clock of its last warm-up run
                    building.remove(w)
                    ready.append(w)
                elif w.sess.apply(msg):  # done already (nothing of its share built)
                    building.remove(w)
                    finished.update(int(i) for i, *_ in jobs[workers.index(w)]["cands"])
            for w in [x for x in building if time.monotonic() - x.last > build_timeout_s]:
                w.proc.kill()
                w.sess.fail_current("timeout", f"no answer within {build_timeout_s:g} s while {w.sess.what()}")
                building.remove(w)
        running = []
        for w in ready:  # phase 2: measure, serialized by the run lock
            try:
                assert w.proc.stdin is not None
                w.proc.stdin.write(b"go\n")
                w.proc.stdin.close()
                w.last = time.monotonic()
                running.append(w)
            except OSError:
                pass  # it died: its candidates go back to the caller
        while running:
            for c in wait([w.conn for w in running], run_timeout_s):
                w = next(x for x in running if x.conn is c)
                msg = _read(w)
                if msg is None:
                    running.remove(w)
                    continue
                w.measuring = msg[0] == "start_run"
                if w.sess.apply(msg):
                    running.remove(w)
                    finished.update(int(i) for i, *_ in jobs[workers.index(w)]["cands"])
            now = time.monotonic()
            for w in [x for x in running if x.measuring and now - x.last > run_timeout_s]:
                w.proc.kill()
                w.sess.fail_current("timeout", f"no answer within {run_timeout_s:g} s while running")
                running.remove(w)
    finally:
        for w in workers:
            _stop(w.proc, w.conn, 10)
    return finished


BUILD_TIMEOUT_ENV = "AUTOSEARCH_HALIDE_BUILD_TIMEOUT"


def default_build_timeout_s(default: float = 300.0) -> float:
    """Seconds one build (the pipeline's Funcs, Adams2019, JIT) may take before the worker is
    killed: `$AUTOSEARCH_HALIDE_BUILD_TIMEOUT` when set (Halide's loop has COMPILATION_TIMEOUT)."""
    raw = os.environ.get(BUILD_TIMEOUT_ENV, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{BUILD_TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    return value


def describe_in_child(spec: PipelineSpec, timeout_s: float | None = None) -> str:
    """Build `spec` once in a worker process and return its description.

    Why: a user's pipeline file is arbitrary code; run in the caller, one that segfaults kills the
    CLI (exit 139, nothing printed) and one that never returns hangs it. Here either becomes one
    `InputError` line, as does a Python exception raised by the file."""
    timeout = default_build_timeout_s() if timeout_s is None else float(timeout_s)
    log_dir = tempfile.mkdtemp(prefix="autosearch-halide-")
    log_path = os.path.join(log_dir, "describe.log")
    job = {"describe": True, "spec": [spec.kind, spec.name, spec.params_json], "log_path": log_path}
    what = f"pipeline file {spec.name}" if spec.kind == "file" else f"pipeline {spec.label}"
    try:
        proc, conn = _start_worker(job, 1, False)
        try:
            if not conn.poll(timeout):
                proc.kill()
                raise InputError(f"{what}: building it did not finish within {timeout:g} s (set {BUILD_TIMEOUT_ENV})")
            try:
                msg = decode_message(conn.recv_bytes())
            except (EOFError, OSError):
                try:
                    code = proc.wait(10)
                except subprocess.TimeoutExpired:
                    code = None
                how = _exit_reason(code)
                tail = _log_tail(log_path, 200)
                raise InputError(
                    f"{what}: building it crashed the worker ({how}){': ' + tail if tail else ''}"
                ) from None
        finally:
            _stop(proc, conn, 10)
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    if msg[0] == "described":
        return str(msg[1])
    raise InputError(str(msg[1]))


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def autoschedule_and_benchmark(
    spec: PipelineSpec,
    param_sets: Sequence[dict[str, Any]],
    *,
    threads: int = 1,
    target: str | None = None,
    repeats: int = 5,
    min_time_s: float = 0.002,
    build_timeout_s: float | None = None,
    run_timeout_s: float = 60.0,
    benchmark: bool = True,
    permit_failed_unroll: bool = True,
    per_iter_min: bool = False,
    on_event: Callable[[str, int], None] | None = None,
    autoscheduler: str | Sequence[str] = "Adams2019",
    libraries: Sequence[str] | None = None,
    build_workers: int = 1,
) -> list[CandidateResult]:
    """Autoschedule `spec` once per parameter set and (if `benchmark`) time every schedule.

    Returns one `CandidateResult` per parameter set, in order; failures never raise. The work
    runs in a `python -m` worker process (never a re-import of the caller's `__main__`), which
    dies with this process; its log folder is removed before returning. `autoscheduler` names
    one for all parameter sets or one per set (so Mullapudi2016, Li2018 and Adams2019 schedules
    can be timed interleaved in one worker); `libraries[i]`, when not empty, is a path prefix
    where candidate i is also written as a static library and header (`prefix.a`, `prefix.h`).
    `build_workers` > 1 autoschedules and compiles the candidates in that many worker processes
    at once, then measures them one at a time (see `_parallel_attempt`); if one of those workers
    dies or hangs, the unfinished candidates are measured again from scratch by one worker.
    """
    if int(threads) < 1:
        raise InputError(f"threads must be >= 1, got {threads!r}")
    if int(repeats) < 1:
        raise InputError(f"repeats must be >= 1, got {repeats!r}")
    names = [autoscheduler] * len(param_sets) if isinstance(autoscheduler, str) else list(autoscheduler)
    libs = list(libraries) if libraries is not None else [""] * len(param_sets)
    if len(names) != len(param_sets) or len(libs) != len(param_sets):
        raise InputError(f"{len(param_sets)} parameter sets but {len(names)} autoschedulers and {len(libs)} libraries")
    validated = [validate_params(p, a) for p, a in zip(param_sets, names)]
    build_timeout = default_build_timeout_s() if build_timeout_s is None else float(build_timeout_s)
    target = target or host_target()
    results = [CandidateResult(i, p) for i, p in enumerate(validated)]
    sess = _Session(results, benchmark, on_event)
    pending = list(range(len(results)))  # not failed yet
    log_dir = tempfile.mkdtemp(prefix="autosearch-halide-")

    def job_of(cands: list[int], log_path: str, rounds: int) -> dict[str, Any]:
        return {
            "spec": [spec.kind, spec.name, spec.params_json],
            "target": target,
            "cands": [(i, validated[i], names[i], str(libs[i] or "")) for i in cands],
            "rounds": rounds if benchmark else 0,
            "min_time_s": float(min_time_s),
            "compile": bool(benchmark),
            "log_path": log_path,
            "per_iter_min": bool(per_iter_min),
        }

    try:
        n_workers = min(int(build_workers), len(pending))
        if benchmark and n_workers > 1:
            shares = [pending[k::n_workers] for k in range(n_workers)]  # sample 0 (the beam search) alone-ish
            jobs = [
                {
                    **job_of(share, os.path.join(log_dir, f"parallel{k}.log"), int(repeats)),
                    "wait_go": True,
                    "lock_path": os.path.join(log_dir, "run.lock"),
                }
                for k, share in enumerate(shares)
            ]
            done = _parallel_attempt(
                jobs, results, benchmark, on_event, threads, permit_failed_unroll, build_timeout, run_timeout_s
            )
            pending = [i for i in pending if i not in done and results[i].status in ("pending", "ok")]
            for i in pending:  # a worker died or hung: its unfinished candidates again, in one worker, below
                results[i].latencies = []
        attempts = 0
        while pending and attempts <= len(results) + 1:
            attempts += 1
            for i in pending:
                results[i].latencies = results[i].latencies[: sess.rounds_done]
            log_path = os.path.join(log_dir, f"worker{attempts}.log")
            job = job_of(pending, log_path, int(repeats) - sess.rounds_done)
            proc, conn = _start_worker(job, threads, permit_failed_unroll)
            sess.phase, sess.current = "build", -1
            try:
                finished = _drive(sess, proc, conn, log_path, build_timeout, run_timeout_s)
            finally:
                _stop(proc, conn, 10)
            pending = [i for i in pending if results[i].status in ("pending", "ok")]
            if finished:
                break
            # The worker died or hung: the failed candidate is out; the rest are rebuilt in a new worker.
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    for r in results:
        if r.status == "ok" and benchmark and not r.latencies:
            r.status, r.error = "run_error", r.error or "no measurement completed"
        if r.status == "pending":
            r.status, r.error = "build_error", "not built (worker restarts exhausted)"
    return results


def autoschedule(
    spec: PipelineSpec,
    params: dict[str, Any],
    *,
    target: str | None = None,
    timeout_s: float | None = None,
    autoscheduler: str = "Adams2019",
) -> CandidateResult:
    """Just the schedule (source + featurization) for one parameter set, safely in a child."""
    return autoschedule_and_benchmark(
        spec, [params], target=target, benchmark=False, build_timeout_s=timeout_s, autoscheduler=autoscheduler
    )[0]
