"""The prior's design-space picks of many tasks at once, in worker processes, one task each.

Why: the prior pass of a network that is built from the prior alone is most of its compile (a
DenseNet-121 with 188 tasks: ~250 s of ~290 on a 2-core Zen 4), and most of that is the 71 tasks
with a reduction, each a few seconds of Python, LLVM compiles and scoring with small tensors that
keep one core busy much better than two. Two processes, one torch thread each, ran 12 of its
convolutions 1.3x faster than one process on both cores, with the same picks. Timing needs the
machine to itself, so a worker builds the candidates the pass times beside its pick
(`register_blocks.built_candidates`), or a task's loop nests where it has no reduction
(`spatial.built_forms`), and the pass times them when the workers are done
(`register_blocks.timed_built`). The tasks go out costliest first (by FLOPs), so that no long task
starts last while the other workers stand idle.

A worker ignores Ctrl-C: the parent's wait wakes every `poll` s, and on a Ctrl-C it ends the
workers at once. A worker that dies (a crash in TVM) leaves the task it was passing to the
parent's own pass; the other workers take the tasks not started.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.connection
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from autosearch import interrupts
from autosearch.networks.built import Built
from autosearch.networks.verify import Reference

__all__ = [
    "MAX_WORKERS",
    "MIN_TASKS",
    "TASK_CAP_CEILING",
    "TASK_CAP_FACTOR",
    "TASK_CAP_FLOOR",
    "WorkerPick",
    "ranked_in_workers",
    "worker_count",
]

#: The most worker processes: each holds TVM, torch and both priors (~1 GB).
MAX_WORKERS = 8
#: A worker's cap on one task: `TASK_CAP_FACTOR` x the median of the tasks done so far, at least
#: `TASK_CAP_FLOOR` s, at most `TASK_CAP_CEILING` s (until 8 are done). Why: a worker builds each
#: task's candidates with LLVM in its own process, and one pick (a 64-lane gather over a 112 x 112
#: mean, unrolled 512 steps) held LLVM's -O3 for minutes, and the whole compile with it; the worker
#: is ended and the task is passed in the run's process, whose builds are capped (`timed_pick`).
TASK_CAP_FACTOR, TASK_CAP_FLOOR, TASK_CAP_CEILING = 8.0, 30.0, 120.0
#: The fewest tasks sent to workers. Why: starting them costs seconds (spawned interpreters import
#: TVM and torch and load both priors), and the gain is a fraction of the tasks' time (16 of
#: DenseNet-121's convolutions and 4 timed tasks: 24.7 s with the workers' start, 29.5 s in one
#: process, Zen 4), so a pass over a few tasks (a small network, a test) stays in the run's process.
MIN_TASKS = 8

_TARGET: Any = None
_RANKER: Any = None


def worker_count(n_tasks: int) -> int:
    """Workers for `n_tasks` tasks: one a physical core, at most `MAX_WORKERS`; none for fewer
    than `MIN_TASKS` tasks or fewer than two workers (one is the parent's own pass plus a start)."""
    from autosearch.backends.tvm.target import physical_cores

    if n_tasks < MIN_TASKS:
        return 0
    n = min(physical_cores(), MAX_WORKERS, n_tasks)
    return n if n >= 2 else 0


def _start(target: str, threads: int) -> None:
    import signal

    import torch
    import tvm

    from autosearch.networks.prior import PriorRanker

    global _TARGET, _RANKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the workers on a Ctrl-C
    torch.set_num_threads(threads)
    _TARGET = tvm.target.Target(json.loads(target))
    _RANKER = PriorRanker(_TARGET)
    _RANKER.shortlister.score_threads = threads


class WorkerPick(NamedTuple):
    """A worker's answer for one task: the prior's pick, the `timed_pick` candidates it built
    (`register_blocks.built_candidates`; for a task with no reduction its loop nests and its
    unscheduled loops, all checked, and no pick: `spatial.built_forms`) and the unscheduled task's
    run that checked the pick (`verify.reference_of`; None where none was checked), so the run's
    process checks the candidate it times fastest without running the unscheduled task again."""

    pick: str | None
    built: list[Built]
    reference: Reference | None = None


def _ranked(name: str, module: str, seed: int, directory: str) -> tuple[WorkerPick, float]:
    import tvm

    from autosearch.networks.prior import ranked_schedules
    from autosearch.networks.register_blocks import built_candidates
    from autosearch.networks.spatial import built_forms
    from autosearch.networks.verify import reference_of
    from autosearch.search.registers import simd_bits
    from autosearch.workloads.module import ModuleWorkload

    t0 = time.perf_counter()
    workload = ModuleWorkload(name=name, ir_module=tvm.ir.load_json(module), family="network")
    built = built_forms(workload, _TARGET, simd_bits(_TARGET), seed, directory)
    pick = None
    if not built:  # a task with a reduction, or forms TVM does not build: the prior's design space
        pick, runners_up = ranked_schedules(workload, _TARGET, _RANKER, seed)
        built = built_candidates(workload, _TARGET, pick, runners_up, directory, seed)
    return WorkerPick(pick, built, reference_of(workload, _TARGET, seed)), time.perf_counter() - t0


class _Worker:
    """One worker process and the parent's end of its pipe. `task` is the task it is passing;
    `ready` turns true when it has loaded TVM, torch and the priors (its first message), so that
    a task is sent only to a worker that reads it at once and the parent never blocks on a send."""

    def __init__(self, context: Any, target: str, threads: int) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, target, threads), name="autosearch-prior-worker")
        self.process.start()
        child.close()  # the worker's end lives in the worker only: its death reads as EOF here
        self.ready = False
        self.task: int | None = None
        self.since = 0.0  # when it was sent its task (monotonic)

    def stop(self, deadline: float) -> None:
        """Ends the worker: asked, when it is waiting for a task; ended, when it is not done by
        `deadline` (a monotonic time) or is still passing a task."""
        if self.process.is_alive() and self.ready and self.task is None:
            with contextlib.suppress(OSError):
                self.conn.send(None)
        else:
            self.process.terminate()
        self.process.join(max(0.0, deadline - time.monotonic()))
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def _serve(conn: Any, target: str, threads: int) -> None:
    """A worker's life: load, say it is ready, then pass each task it is sent until it is sent
    None. An exception in a task goes back to the parent, which raises it."""
    _start(target, threads)
    conn.send(("ready", None))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        try:
            answer: tuple[str, Any] = ("done", _ranked(*job))
        except Exception as e:
            answer = ("error", e)
        try:
            conn.send(answer)
        except Exception as e:
            conn.send(("error", RuntimeError(f"a prior worker failed: {answer[1]!r} ({e})")))


#: Why every worker can die before it loads: a worker is a fresh Python ("spawn") that imports the
#: caller's main module, so a script that calls autosearch at its top level reruns there.
_NONE_LOADED = (
    "every prior worker process died before it loaded (a script calling autosearch needs its calls under "
    '`if __name__ == "__main__":`, as each worker imports it again); the prior pass goes on in this process'
)


def ranked_in_workers(
    workloads: Sequence[Any],
    todo: Sequence[int],
    target: Any,
    seed: int,
    done: Callable[[int, WorkerPick], None],
    directory: str,
    poll: float = 0.25,
) -> None:
    """`prior.ranked_schedules` of each task in `todo`, in `worker_count` processes, and the
    candidates `register_blocks.timed_pick` would build, built under `directory`; `done(i,
    WorkerPick)` as each finishes. A task a dead worker left is not reported: the
    caller's own.

    Why its own processes and pipes rather than a `ProcessPoolExecutor`: on Python 3.11 a worker
    killed mid-task could leave the executor's wait (or its shutdown) hanging for good (a CI run
    hung 18 min in the test that kills one). Here the parent waits on each worker's pipe and its
    process at once, so a death reads at once as its task left to the caller."""
    import tvm

    from autosearch.backends.tvm.build import median_cap
    from autosearch.backends.tvm.space import to_plain_json
    from autosearch.backends.tvm.target import physical_cores

    n = worker_count(len(todo))
    if not n:
        return
    context = multiprocessing.get_context("spawn")  # TVM's and torch's threads do not survive a fork
    target_json = json.dumps(to_plain_json(target.export()))
    queue = deque(sorted(todo, key=lambda i: -(workloads[i].flops or 0.0)))  # longest first
    threads = max(1, physical_cores() // n)
    workers = [_Worker(context, target_json, threads) for _ in range(n)]
    loaded = False  # whether any worker ever answered
    took: list[float] = []  # seconds of each task done
    try:
        while queue or any(w.task is not None for w in workers):
            interrupts.check()
            cap = median_cap(took, TASK_CAP_CEILING, TASK_CAP_FACTOR, TASK_CAP_FLOOR)
            for w in [w for w in workers if w.task is not None and time.monotonic() - w.since > cap]:
                w.task = None  # left to the caller, as a dead worker's; a new worker takes the queue
                workers.remove(w)
                w.stop(time.monotonic())
                if queue:
                    workers.append(_Worker(context, target_json, threads))
            alive = [w for w in workers if w.process.is_alive() or w.conn.poll()]
            if not alive:
                if not loaded:
                    warnings.warn(_NONE_LOADED, stacklevel=2)
                return  # every worker died: the caller passes what is left
            ready = multiprocessing.connection.wait(
                [w.conn for w in alive] + [w.process.sentinel for w in alive], timeout=poll
            )
            for w in alive:
                if w.conn not in ready and w.process.sentinel not in ready:
                    continue
                try:
                    kind, value = w.conn.recv()
                except (EOFError, OSError):  # it died: its task, if any, is the caller's
                    w.task = None
                    workers.remove(w)
                    w.stop(time.monotonic())
                    continue
                loaded = True
                if kind == "error":
                    raise value
                if kind == "done" and w.task is not None:
                    (pick, seconds), i = value, w.task
                    w.task = None
                    took.append(seconds)
                    done(i, pick)
                w.ready = True
            for w in workers:
                if queue and w.ready and w.task is None and w.process.is_alive():
                    i = queue.popleft()
                    try:
                        w.conn.send((workloads[i].name, tvm.ir.save_json(workloads[i].mod()), seed, directory))
                        w.task, w.since = i, time.monotonic()
                    except OSError:
                        queue.appendleft(i)  # it died before reading it: another worker takes it
    finally:
        deadline = time.monotonic() + 2.0
        for w in workers:
            w.stop(deadline)
