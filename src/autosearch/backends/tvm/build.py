"""Build candidate schedules into loadable modules, in a worker pool that outlives one batch.

Why not MetaSchedule's LocalBuilder: it starts a fresh pool for every batch, and each worker
imports TVM, seconds of every batch on a small machine; the stock `default_build` also imports
`tvm.s_tir.tensor_intrin` in every worker, which only tensorizing schedules need. Why not in the
calling process: a rare schedule sends TVM's lowering into a practically endless recursion (seen
on softmax: one build that did not end in minutes), and only a worker process can be killed after `timeout`
seconds (the candidate is then a `timeout` result). Collection and tuning share this one builder.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

from autosearch import interrupts
from autosearch.errors import one_line

__all__ = [
    "PoolBuilder",
    "build_in_process",
    "close_builders",
    "default_build_workers",
    "fast_build",
    "median_cap",
    "pool_builder",
    "shutdown_pool",
]


def fast_build(mod: Any, target: Any, _params: Any) -> Any:
    """`default_build` without the tensor-intrinsics import (runs inside a builder worker)."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def _pool_build(mod: Any, target: Any, parent: str | None = None) -> tuple[str, float]:
    """Build + export one candidate inside a builder worker: (artifact path, seconds it took).
    The artifact goes in its own directory under `parent` (the builder's, so whatever a killed
    build or an interrupted batch leaves behind is removed with it)."""
    import time

    from tvm.support.tar import tar

    t0 = time.perf_counter()
    try:
        rt = fast_build(mod, target, None)
    except Exception:
        import tvm.s_tir.tensor_intrin  # noqa: F401 - importing registers the intrinsics

        rt = fast_build(mod, target, None)
    path = os.path.join(tempfile.mkdtemp(prefix="autosearch-build-", dir=parent), "tvm_tmp_mod." + tar.output_format)
    rt.export_library(path, fcompile=tar)
    return path, time.perf_counter() - t0


def median_cap(seconds: Sequence[float], ceiling: float, factor: float, floor: float, window: int = 64) -> float:
    """`factor` x the median of the last `window` successful durations, at least `floor`, at most
    `ceiling`; the ceiling until 8 have succeeded (too few to say what is slow). The rule behind
    the build cap (`PoolBuilder.adaptive_timeout`) and the run cap (`measure.adaptive_run_timeout`)."""
    if len(seconds) < 8:
        return ceiling
    recent = sorted(seconds[-window:])
    return min(ceiling, max(floor, factor * float(recent[len(recent) // 2])))


def default_build_workers() -> int:
    """Build workers when none are asked for: one per core, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


class PoolBuilder:
    """Builds candidates in a worker pool that lives as long as the tuning process.

    Why not MetaSchedule's LocalBuilder: it starts a fresh pool for every batch, and each worker
    imports TVM, seconds of every batch on a small machine. Why not in the tuning process
    itself: a rare schedule sends TVM's lowering into a practically endless recursion (seen here
    on softmax: one build that did not end in minutes), and only a worker process can be killed after
    `timeout` seconds (the candidate is then a `timeout` result).
    """

    def __init__(self, max_workers: int | None = None, timeout: float = 60.0) -> None:
        from tvm.support.popen_pool import PopenPoolExecutor

        from autosearch.backends.tvm.worker import lean_workers

        lean_workers()
        self.timeout = timeout
        # every artifact lives under this directory until its run removes it; `close` removes the
        # rest (builds killed mid-export, batches a Ctrl-C cut short): nothing piles up in /tmp
        self.artifacts = tempfile.mkdtemp(prefix="autosearch-builds-")
        # one worker per core, at most 8 (each holds a whole TVM import in memory): a round's builds
        # finish before its runs start, so they never share the cores with a measurement
        self.pool = PopenPoolExecutor(max_workers=max_workers or default_build_workers(), timeout=timeout)
        self.seconds: list[float] = []  # build time of every successful build, in order

    def adaptive_timeout(self, factor: float = 6.0, floor: float = 10.0, window: int = 64) -> float:
        """A cap for the next builds: `factor` x the median of recent successful builds, at least
        `floor` s, at most the pool's timeout. A schedule that builds `factor` times slower than
        its siblings (huge unrolls) is a `timeout` result the model learns from, not minutes of waiting."""
        return median_cap(self.seconds, self.timeout, factor, floor, window)

    def build(self, candidates: list[Any], target: Any, timeout: float | None = None) -> list[Any]:
        """BuilderResults in candidate order; a build longer than `timeout` (default: the pool's)
        is killed and becomes a `timeout` result."""
        from tvm.s_tir.meta_schedule.builder import BuilderResult

        out = []
        limit = self.timeout if timeout is None else min(timeout, self.timeout)
        self.pool._timeout = limit  # read per task by TVM's pool (`send`), so a cap applies to this batch
        futures = [self.pool.submit(_pool_build, c.sch.mod, target, self.artifacts) for c in candidates]
        try:
            interrupts.wait(futures)  # not TVM's blocking `map`: a Ctrl-C is acted on at once
        except BaseException:
            for fut in futures:
                fut.cancel()  # those not started yet
            raise
        for fut in futures:
            exc = fut.exception()
            # Ctrl-C reaches the workers too; TVM's pool re-raises their KeyboardInterrupt, at times
            # wrapped in a RuntimeError. The caller must see an interrupt, not a build failure.
            if isinstance(exc, KeyboardInterrupt) or (exc is not None and "KeyboardInterrupt" in str(exc)):
                raise KeyboardInterrupt
            if exc is None:
                path, secs = fut.result()
                self.seconds.append(float(secs))
                out.append(BuilderResult(path, None))
            elif isinstance(exc, TimeoutError):
                out.append(BuilderResult(None, f"Timeout: build killed after {limit:g} s"))
            else:
                out.append(BuilderResult(None, f"build failed: {one_line(exc)}"))
        return out

    def close(self) -> None:
        """Kill the workers now (see `shutdown_pool`) and remove the artifacts no run removed."""
        shutdown_pool(self.pool)
        shutil.rmtree(self.artifacts, ignore_errors=True)


def shutdown_pool(pool: Any) -> None:
    """Stop a TVM `PopenPoolExecutor` now. Left to `__del__`, it may be finalized on one of its own
    threads ("cannot join current thread"); after Ctrl-C its workers may already be dead, and
    TVM's `shutdown` then raises from psutil before marking the pool shut down.

    The worker processes are killed first: TVM's `shutdown` closes each worker's pipe, and that
    close waits for a pool thread still blocked reading a build's result from the same pipe, so
    an interrupted batch kept the process alive until its slowest build ended."""
    from tvm.support.popen_pool import kill_child_processes

    for worker in list(getattr(pool, "_worker_map", {}).values()):
        proc = getattr(worker, "_proc", None)
        if proc is None or proc.poll() is not None:
            continue
        kill_child_processes(proc.pid)
        proc.kill()
        proc.wait()
    try:
        pool.shutdown(wait=False)
    except Exception:
        pool._threadpool.shutdown(wait=False)
        pool._shutdown = True


_BUILDERS: dict[tuple[float, int | None], PoolBuilder] = {}


@atexit.register
def close_builders() -> None:
    """Close every process-wide builder (at exit, or before forking work elsewhere)."""
    while _BUILDERS:
        _BUILDERS.popitem()[1].close()


def pool_builder(timeout: float = 60.0, max_workers: int | None = None) -> PoolBuilder:
    """The process-wide PoolBuilder for these settings (its workers start once)."""
    key = (timeout, max_workers)
    if key not in _BUILDERS:
        _BUILDERS[key] = PoolBuilder(max_workers=max_workers, timeout=timeout)
    return _BUILDERS[key]


def build_in_process(candidates: list[Any], target: Any, parent: str | None = None) -> list[Any]:
    """BuilderResults built in this process (no isolation, no timeout: for single trusted
    schedules such as a saved best one; tuning uses `PoolBuilder`). Each artifact is in a
    directory of its own under `parent` (default: the system's temporary one) until a run removes
    it (`Measurer.run_built`); whoever builds without running removes them."""
    from tvm.s_tir.meta_schedule.builder import BuilderResult

    out = []
    for c in candidates:
        try:
            out.append(BuilderResult(_pool_build(c.sch.mod, target, parent)[0], None))
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            out.append(BuilderResult(None, f"{type(exc).__name__}: {one_line(exc)}"))
    return out
