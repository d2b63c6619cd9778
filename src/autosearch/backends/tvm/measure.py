"""Run built candidates on the device through MetaSchedule's Runner (local or RPC).

Building goes through `autosearch.backends.tvm.build.PoolBuilder`, the one builder of collection
and tuning; this module times what it built and turns every outcome into a `MeasureResult`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from autosearch import interrupts
from autosearch.backends.tvm.build import median_cap, pool_builder, shutdown_pool
from autosearch.errors import InputError

__all__ = [
    "TUNE_EVALUATOR",
    "EvaluatorSettings",
    "MeasureResult",
    "Measurer",
    "adaptive_run_timeout",
    "close_shared_measurers",
    "rpc_devices",
    "shared_measurer",
]


@dataclass(frozen=True)
class EvaluatorSettings:
    """How each candidate is timed. Defaults suit a shared machine: every repeat lasts at least
    `min_repeat_ms`, and the median over `repeat` repeats damps interference from neighbours."""

    number: int = 1
    repeat: int = 5
    min_repeat_ms: int = 20
    enable_cpu_cache_flush: bool = False

    def __post_init__(self) -> None:
        if self.number < 1 or self.repeat < 1 or self.min_repeat_ms < 0:
            raise InputError("evaluator settings need number >= 1, repeat >= 1, min_repeat_ms >= 0")

    def config(self) -> Any:
        from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

        return EvaluatorConfig(
            number=self.number,
            repeat=self.repeat,
            min_repeat_ms=self.min_repeat_ms,
            enable_cpu_cache_flush=self.enable_cpu_cache_flush,
        )


#: How `tune` times one operator when not told otherwise: three repeats of at least 10 ms each,
#: the caches warm.
TUNE_EVALUATOR = EvaluatorSettings(number=1, repeat=3, min_repeat_ms=10)


@dataclass(frozen=True)
class MeasureResult:
    """Outcome of one candidate: status is ok / build_error / run_error / timeout."""

    status: str
    latencies: list[float]
    error: str = ""
    #: wall seconds of its run on the device (loading, inputs, every repeat); 0 when not run
    seconds: float = 0.0


def adaptive_run_timeout(
    ok_seconds: Sequence[float], ceiling: float, factor: float = 10.0, floor: float = 5.0, window: int = 64
) -> float:
    """A cap for the next runs: `factor` x the median wall time of recent successful runs, at least
    `floor` s, at most `ceiling` (the runner's timeout); the ceiling until 8 runs succeeded. A
    schedule that runs for seconds where its siblings take a fraction of one is orders of
    magnitude slower than them and useless: a `timeout` result the model learns from, not the full
    timeout of waiting (on softmax such picks once took most of a tuning run's wall time;
    bench/README.md, "run cap")."""
    return median_cap(ok_seconds, ceiling, factor, floor, window)


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold back Ctrl-C for the duration (a Python-level handler records it: the signal may land on
    any thread, but handlers run in the main thread); it is raised as KeyboardInterrupt at the end."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if got:
        raise KeyboardInterrupt


def _classify(msg: str, default: str) -> str:
    return "timeout" if "Timeout" in msg or "timeout" in msg else default


def rpc_devices(host: str, port: int, key: str) -> int:
    """How many servers the tracker holds for `key` (free or busy): the RPC runner measures on that
    many at once. One line, exit 2, where the tracker cannot be reached or has no server for the key
    (every measurement would fail otherwise, after the whole budget)."""
    import socket

    from tvm import rpc

    from autosearch.errors import TargetError

    try:  # TVM's own connect retries for a minute: a tracker that is not there is said at once
        socket.create_connection((host, int(port)), timeout=5).close()
        summary = rpc.connect_tracker(host, int(port)).summary()
    except Exception as exc:
        raise TargetError(
            f"cannot reach the RPC tracker at {host}:{port}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    servers = [sv for sv in summary.get("server_info", []) if str(sv.get("key", "")).split(":", 1)[-1] == key]
    n = max(len(servers), int(summary.get("queue_info", {}).get(key, {}).get("free", 0)))
    if n <= 0:
        raise TargetError(f"the RPC tracker at {host}:{port} has no server with key {key!r}")
    return n


@functools.cache
def _starting_runner() -> Any:
    """TVM's LocalRunner, except that its start-up check does not wait for the worker process.

    Why: LocalRunner's constructor sends its worker a check and waits for the answer, which is the
    worker's start (TVM's import, seconds even since it starts without torch, `backends.tvm.worker`).
    The worker is needed
    only at the first run, so it now starts while this process imports the workload, generates
    its design space and builds the first round, on the other core. The first run queues behind
    the start in the pool's one thread, and a task's timeout counts from its own send, so the
    start never counts against a run's cap; `Measurer` waits for `started` before it times the
    first run, so the start is not in that run's wall time either."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import LocalRunner

    from autosearch.backends.tvm.worker import lean_workers

    lean_workers()

    @derived_object
    class StartingRunner(LocalRunner._cls):
        def _sanity_check(self) -> None:
            self.started = self.pool.submit(int)  # a builtin: starts the worker, nothing of ours to import

    return StartingRunner


class Measurer:
    """Builds candidates in parallel and runs them one at a time on the device.

    `rpc=(host, port, key)` sends runs to a TVM RPC tracker instead of the local device.
    The local runner's worker process keeps every module it loaded (its memory grows with every
    schedule run; bench/HISTORY.md, "Figures from the code's docstrings"), so it is replaced every `runner_restart` candidates to keep
    memory flat.
    """

    def __init__(
        self,
        target: Any,
        evaluator: EvaluatorSettings | None = None,
        *,
        build_workers: int | None = None,
        build_timeout: float = 60.0,
        run_timeout: float = 30.0,
        rpc: tuple[str, int, str] | None = None,
        runner_restart: int = 256,
    ) -> None:
        from tvm.s_tir.meta_schedule.runner import RPCConfig, RPCRunner

        from autosearch.backends.tvm.target import is_gpu

        self.target = target
        self.evaluator = evaluator or EvaluatorSettings()
        self.device_type = "cuda" if is_gpu(target) else "cpu"
        self.builder = pool_builder(build_timeout, build_workers)
        self._pending_runner: Any = None
        self._worker_start: Any = None  # the local runner's background worker start (a Future)
        #: Devices measured on at once: the tracker's servers for the key (1 on the local device).
        self.devices = 1
        self._runs_locally = rpc is None  # in this machine's worker process, not on an RPC tracker
        if rpc is not None:
            host, port, key = rpc
            self.devices = rpc_devices(host, int(port), key)
            self.runner = RPCRunner(
                rpc_config=RPCConfig(
                    tracker_host=host, tracker_port=int(port), tracker_key=key, session_timeout_sec=int(run_timeout)
                ),
                evaluator_config=self.evaluator.config(),
                max_workers=self.devices,
            )
        else:
            try:
                self.runner = self._local_runner(run_timeout)
            except KeyboardInterrupt:
                if self._pending_runner is not None:
                    shutdown_pool(self._pending_runner.pool)
                raise
        self._run_timeout = run_timeout
        self._last_failed = False  # the last local run failed: its worker was killed or crashed
        self._runner_restart = runner_restart
        self._ran = 0

    @property
    def run_timeout(self) -> float:
        """The fixed timeout of one run on the device (the ceiling of any cap)."""
        return self._run_timeout

    def _local_runner(self, timeout: float) -> Any:
        """A LocalRunner (`_starting_runner`), built with Ctrl-C held back: interrupted halfway, its
        worker pool would be garbage while its thread still runs, and TVM then fails to join that
        thread at exit."""
        from autosearch.backends.tvm.target import runtime_threads, set_runtime_threads

        init = functools.partial(set_runtime_threads, runtime_threads(self.target))
        with _sigint_deferred():
            runner = _starting_runner()(timeout_sec=timeout, evaluator_config=self.evaluator.config(), initializer=init)
            self._pending_runner = runner
        self._pending_runner = None  # a Ctrl-C held back above is raised here, with `runner` closable
        self._worker_start = runner.started
        return runner

    def _await_worker_start(self) -> None:
        """Wait for the local runner's worker to have started (`_starting_runner`) before a run is
        timed; a start that failed (killed at the timeout) is restarted like a killed run's worker."""
        start, self._worker_start = self._worker_start, None
        if start is not None:
            interrupts.wait([start])
            self._last_failed = self._last_failed or start.exception() is not None

    def _restart_worker(self) -> None:
        """Start a killed (or crashed) worker again with an empty task under the full timeout.
        Why: a worker restarts with the next task it is sent, and its start-up (TVM's import,
        seconds) then counted against that task's cap; the rule before this gave the run after a
        failure the full timeout instead, so a row of hung picks still waited the full timeout each,
        far past their cap (CHANGELOG.md)."""
        self.runner.pool._timeout = self._run_timeout
        fut = self.runner.pool.submit(int)  # a builtin: nothing of ours to import in the worker
        interrupts.wait([fut])
        self._last_failed = fut.exception() is not None

    def _maybe_restart_runner(self) -> None:
        if self._runs_locally and self._ran >= self._runner_restart:
            shutdown_pool(self.runner.pool)
            self.runner = self._local_runner(self._run_timeout)
            self._ran = 0

    def close(self) -> None:
        """Stop the runner's worker now rather than in a garbage collector's `__del__` at exit."""
        pool = getattr(self.runner, "pool", None)
        if pool is not None:
            shutdown_pool(pool)

    def build(self, candidates: Sequence[Any]) -> list[Any]:
        """BuilderResults in candidate order, from the process-wide `PoolBuilder`."""
        return self.builder.build(list(candidates), self.target)

    def measure(self, candidates: Sequence[Any]) -> list[MeasureResult]:
        """Build then run every candidate; failures are results, never exceptions."""
        return self.run_built(candidates, self.build(candidates))

    def run_built(
        self, candidates: Sequence[Any], built: Sequence[Any], timeout: float | None = None
    ) -> list[MeasureResult]:
        """Run candidates already built (BuilderResults in the same order; one result may be listed
        more than once to run it again); removes the artifacts.
        On the local device a run longer than `timeout` (default and at most: the runner's) is
        killed and becomes a `timeout` result; an RPC runner keeps its session timeout."""
        from tvm.s_tir.meta_schedule.runner import RunnerInput
        from tvm.s_tir.meta_schedule.utils import remove_build_dir

        results: list[MeasureResult | None] = [None] * len(candidates)
        to_run = []
        for i, b in enumerate(built):
            if b.error_msg is not None:
                results[i] = MeasureResult(_classify(b.error_msg, "build_error"), [], b.error_msg.strip())
            else:
                to_run.append(i)
        self._maybe_restart_runner()
        self._ran += len(to_run)
        inputs = [RunnerInput(built[i].artifact_path, self.device_type, candidates[i].args_info) for i in to_run]
        # TVM's pool reads its timeout per task (`send`), so a cap applies to the tasks sent under it
        limit = self._run_timeout if timeout is None else min(timeout, self._run_timeout)
        try:
            if self._runs_locally:  # one at a time (LocalRunner runs them in turn anyway): each run's wall time
                self._await_worker_start()
                timed = []
                for inp in inputs:
                    if self._last_failed:
                        self._restart_worker()
                    self.runner.pool._timeout = self.runner.timeout_sec = limit
                    t0 = time.perf_counter()
                    (fut,) = self.runner.run([inp])
                    res = fut.result()
                    timed.append((res, time.perf_counter() - t0))
                    self._last_failed = res.error_msg is not None
                    interrupts.check()  # a Ctrl-C the run's C++ side swallowed
            else:
                timed = [(f.result(), 0.0) for f in self.runner.run(inputs)]
            for i, (res, wall) in zip(to_run, timed):
                if res.error_msg is not None:
                    results[i] = MeasureResult(_classify(res.error_msg, "run_error"), [], res.error_msg.strip(), wall)
                    continue
                secs = [float(x) for x in res.run_secs]
                if not secs or not all(math.isfinite(x) and x > 0 for x in secs):
                    results[i] = MeasureResult("run_error", [], f"runner returned invalid latencies {secs}", wall)
                else:
                    results[i] = MeasureResult("ok", secs, "", wall)
        finally:  # each artifact once: a candidate listed twice runs its one build twice
            for path in dict.fromkeys(built[i].artifact_path for i in to_run):
                remove_build_dir(path)
        return [r for r in results if r is not None]


_SHARED: dict[Any, Measurer] = {}


@atexit.register
def close_shared_measurers() -> None:
    """Close every process-wide Measurer (at exit, or after an interrupted run)."""
    while _SHARED:
        _SHARED.popitem()[1].close()


def shared_measurer(
    target: Any, evaluator: EvaluatorSettings | None = None, rpc: tuple[str, int, str] | None = None
) -> Measurer:
    """The process's Measurer for (target, evaluator, RPC tracker). Why shared: its runner's worker
    start is TVM's import (seconds of CPU, even without torch), so
    every collection and tuning run in one process (a network's tasks, a program that collects
    then tunes) pays it once. With `rpc=(host, port, key)` runs go to the tracker's devices for
    that key."""
    key = (str(target), evaluator, rpc)
    if key not in _SHARED:
        _SHARED[key] = Measurer(target, evaluator, rpc=rpc)
    return _SHARED[key]
