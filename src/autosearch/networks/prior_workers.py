"""The prior's design-space picks of many tasks at once, in worker processes, one task each.

Why: the prior pass of a network that is built from the prior alone is most of its compile (a
DenseNet-121 with 188 tasks: ~250 s of ~290 on a 2-core Zen 4), and most of that is the 71 tasks
with a reduction, each a few seconds of Python, LLVM compiles and scoring with small tensors that
keep one core busy much better than two. Two processes, one torch thread each, ran 12 of its
convolutions 1.3x faster than one process on both cores, with the same picks. The tasks timed on
this machine (`spatial.spatial_schedule`) are not sent here: their timing needs the machine to
itself, so the pass runs them after the workers are done. For the same reason a worker builds the
candidates the pass times beside its pick (`register_blocks.built_candidates`) and the pass times
them when the workers are done (`register_blocks.timed_built`).

A worker ignores Ctrl-C: the parent's wait wakes every `poll` s, and on a Ctrl-C it ends the
workers at once. A worker that dies (a crash in TVM) leaves its tasks and those not started to
the parent's own pass.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from autosearch import interrupts
from autosearch.networks.register_blocks import Built

__all__ = ["MAX_WORKERS", "MIN_TASKS", "WorkerPick", "ranked_in_workers", "worker_count"]

#: The most worker processes: each holds TVM, torch and both priors (~1 GB).
MAX_WORKERS = 8
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
    _RANKER.shipped_shortlister.score_threads = threads


class WorkerPick(NamedTuple):
    """A worker's answer for one task: the prior's pick and the `timed_pick` candidates it built
    (`register_blocks.built_candidates`)."""

    pick: str | None
    built: list[Built]


def _ranked(name: str, module: str, seed: int, directory: str) -> tuple[WorkerPick, float]:
    import tvm

    from autosearch.networks.prior import ranked_schedules
    from autosearch.networks.register_blocks import built_candidates
    from autosearch.workloads.module import ModuleWorkload

    t0 = time.perf_counter()
    workload = ModuleWorkload(name=name, ir_module=tvm.ir.load_json(module), family="network")
    pick, runners_up = ranked_schedules(workload, _TARGET, _RANKER, seed)
    built = built_candidates(workload, _TARGET, pick, runners_up, directory)
    return WorkerPick(pick, built), time.perf_counter() - t0


def ranked_in_workers(
    workloads: Sequence[Any],
    todo: Sequence[int],
    target: Any,
    seed: int,
    done: Callable[[int, WorkerPick, float], None],
    directory: str,
    poll: float = 0.25,
) -> None:
    """`prior.ranked_schedules` of each task in `todo`, in `worker_count` processes, and the
    candidates `register_blocks.timed_pick` would build, built under `directory`; `done(i,
    WorkerPick, seconds)` as each finishes. A task a dead worker left is not reported: the
    caller's own."""
    import tvm

    from autosearch.backends.tvm.space import to_plain_json

    n = worker_count(len(todo))
    if not n:
        return
    from autosearch.backends.tvm.target import physical_cores

    pool = concurrent.futures.ProcessPoolExecutor(
        n,
        mp_context=multiprocessing.get_context("spawn"),  # TVM's and torch's threads do not survive a fork
        initializer=_start,
        initargs=(json.dumps(to_plain_json(target.export())), max(1, physical_cores() // n)),
    )
    left = set(todo)
    try:
        futures = {
            pool.submit(_ranked, workloads[i].name, tvm.ir.save_json(workloads[i].mod()), seed, directory): i
            for i in todo
        }
        pending = set(futures)
        while pending:
            interrupts.check()
            finished, pending = concurrent.futures.wait(pending, timeout=poll)
            for f in finished:
                i = futures[f]
                try:
                    ranked, seconds = f.result()
                except concurrent.futures.process.BrokenProcessPool:
                    continue  # the caller passes it itself
                left.discard(i)
                done(i, ranked, seconds)
    except concurrent.futures.process.BrokenProcessPool:
        pass
    finally:
        for p in list(getattr(pool, "_processes", {}).values()):  # a Ctrl-C or a crash: no wait for the rest
            if p.is_alive() and (left or interrupts.interrupted()):
                p.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
