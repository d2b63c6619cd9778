"""The child side of `autoschedule_and_benchmark`: run as `python -m autosearch.backends.halide.worker`.

Why a module run with `-m` and not a `multiprocessing` spawn: spawn re-imports the caller's
`__main__` in the child, so a plain script without an `if __name__ == "__main__":` guard (the
quick start as users copy it), a `python -` pipe or a notebook killed every worker and no sample
was written. This process imports only autosearch and Halide.

Protocol: the job arrives as one JSON line on stdin (several workers may build one batch in
parallel: each then says "ready" and waits for a "go" line, and measurements are serialized by an
`flock` on a shared file, so no benchmark ever runs beside a compile or another benchmark); messages go back as JSON frames over a
`multiprocessing.connection.Connection` on the original stdout (fd 1 and 2 are then redirected to
the log file, because Halide prints its warnings there). A job with `"describe": true` only builds
the pipeline and sends its description: the parent's check of a user's pipeline file, so a file
that segfaults or never returns kills or hangs this process, never the CLI. The worker dies with its parent
(`PR_SET_PDEATHSIG` on Linux, plus a watchdog thread that polls the parent pid), so a SIGTERM to a
Halide run never leaves a worker spinning.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from autosearch.backends.halide.pipelines import PipelineSpec

__all__ = ["decode_message", "encode_message", "main"]

PARENT_ENV = "AUTOSEARCH_HALIDE_PARENT_PID"

_NUMPY_TYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
}


def encode_message(msg: tuple[Any, ...]) -> bytes:
    """A message tuple as JSON; bytes (the featurization) travel as base64."""
    return json.dumps([{"b64": base64.b64encode(m).decode()} if isinstance(m, bytes) else m for m in msg]).encode()


def decode_message(raw: bytes) -> tuple[Any, ...]:
    """Inverse of `encode_message`."""
    return tuple(base64.b64decode(m["b64"]) if isinstance(m, dict) and "b64" in m else m for m in json.loads(raw))


def _die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when the parent dies; poll as a fallback (and for the race
    where the parent died before the request was made)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        with contextlib.suppress(OSError, AttributeError):  # no prctl: the watchdog below still works
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(0.5)

    if parent_pid > 0:
        if os.getppid() != parent_pid:
            os._exit(1)
        threading.Thread(target=watch, daemon=True).start()


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


def _build_one(
    spec: PipelineSpec,
    target_str: str,
    params: dict[str, str],
    compile_: bool,
    autoscheduler: str = "Adams2019",
    library: str = "",
) -> tuple[Any, str, bytes, float, float]:
    """(built candidate or None, schedule source, featurization, JIT compile s, autoschedule s)."""
    import halide as hl

    from autosearch.backends.halide.pipelines import build_pipeline
    from autosearch.backends.halide.toolchain import load_autoscheduler

    load_autoscheduler(autoscheduler)
    t0 = time.perf_counter()
    defn = build_pipeline(spec)  # fresh Funcs for every schedule
    pipe = defn.pipeline()
    target = hl.Target(target_str)
    res = pipe.apply_autoscheduler(target, hl.AutoschedulerParams(autoscheduler, params))
    source, feat = str(res.schedule_source), bytes(res.featurization)
    schedule_s = time.perf_counter() - t0
    if library:  # also write the scheduled pipeline as a static library + header (prefix.a, prefix.h)
        name = os.path.basename(library)
        pipe.compile_to_static_library(library, [param for param, _ in defn.inputs], name, target)
    if not compile_:
        return None, source, feat, 0.0, schedule_s
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
    return _Built(pipe, arrays, buffers, outputs, defn), source, feat, compile_s, schedule_s


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"


def run_job(send: Any, job: dict[str, Any]) -> None:
    """Build every candidate, then run them round-robin; report each step through `send`."""
    spec = PipelineSpec(*job["spec"])
    rounds, min_time_s, compile_ = int(job["rounds"]), float(job["min_time_s"]), bool(job["compile"])
    built: dict[int, _Built] = {}
    for idx, params, autoscheduler, library in job["cands"]:
        send(("start_build", idx))
        try:
            b, source, feat, compile_s, schedule_s = _build_one(
                spec, job["target"], params, compile_, autoscheduler, library
            )
        except Exception as exc:
            send(("build_failed", idx, _err(exc)))
            continue
        send(("built", idx, source, feat, compile_s, schedule_s))
        if b is not None:
            send(("start_run", idx))
            try:
                b.per_iter_min = bool(job["per_iter_min"])
                warm = b.run(1)  # first run: page in code and buffers
                warm = min(warm, b.run(1))  # calibrate on a warm run (the first one can be far slower)
                b.iters = max(1, min(10000, math.ceil(min_time_s / max(warm, 1e-7))))
                b.run(b.iters)
                built[idx] = b
            except Exception as exc:
                send(("run_failed", idx, _err(exc)))
    if job.get("wait_go"):  # one of several workers that built in parallel: run when all have built
        send(("ready",))
        if sys.stdin.buffer.readline().strip() != b"go":
            return
    lock = _RunLock(job.get("lock_path") or "")
    order = list(built)
    for r in range(rounds):
        k = r % len(order) if order else 0
        for idx in order[k:] + order[:k]:
            with lock:  # never two measurements at once, whichever worker holds the candidate
                send(("start_run", idx))
                try:
                    send(("lat", idx, built[idx].run(built[idx].iters)))
                except Exception as exc:
                    send(("run_failed", idx, _err(exc)))
                    order.remove(idx)
                    break
        send(("round_done", r))
    send(("done",))


class _RunLock:
    """An exclusive `flock` on a file shared by the workers of one batch (no-op without a path)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644) if path else -1

    def __enter__(self) -> None:
        if self.fd >= 0:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_UN)


def describe_job(send: Any, job: dict[str, Any]) -> None:
    """Build the pipeline once (the user's `pipeline()` runs here, not in the caller) and send its
    description; a Python error comes back as a message, a crash or a hang as the worker's death."""
    from autosearch.backends.halide.pipelines import build_pipeline
    from autosearch.errors import AutosearchError

    spec = PipelineSpec(*job["spec"])
    try:
        defn = build_pipeline(spec)
        defn.pipeline()  # sets the estimates: a shape mismatch is reported now, not per candidate
    except AutosearchError as exc:
        send(("describe_failed", " ".join(str(exc).split())[:500]))
        return
    except Exception as exc:
        send(("describe_failed", f"pipeline {spec.label}: building it raised {_err(exc)}"))
        return
    send(("described", defn.description))


def main() -> None:
    """Entry point of the worker process."""
    _die_with_parent(int(os.environ.get(PARENT_ENV, "0") or 0))
    job = json.loads(sys.stdin.buffer.readline())  # one line: stdin stays open for "go" when building in parallel
    conn = Connection(os.dup(1))
    _redirect_output(job["log_path"])
    send = lambda msg: conn.send_bytes(encode_message(msg))  # noqa: E731
    if job.get("describe"):
        describe_job(send, job)
    else:
        run_job(send, job)
    conn.close()


if __name__ == "__main__":
    main()
