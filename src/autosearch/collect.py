"""`autosearch collect`: measure many random schedules of many workloads into the store.

Resumable by construction: every batch is one transaction, and a workload is topped up to N
records (ok or failed) counting what the store already holds, so re-running the same command
after Ctrl-C or SIGKILL continues where the last complete batch ended.

A network's tasks (`autosearch collect --network`) come here as workloads too; many of them (a
reshape, a transpose) have nothing to decide, one fixed schedule and no ranking to learn, and
`skip_fixed` counts them (`CollectSummary.nothing_to_decide`) instead of measuring that one
schedule and announcing each.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from autosearch import interrupts
from autosearch.backends.tvm.measure import EvaluatorSettings, Measurer, close_shared_measurers, shared_measurer
from autosearch.backends.tvm.space import NoDesignSpace, TaskSpace
from autosearch.backends.tvm.target import canonical_target, device_fingerprint
from autosearch.errors import AutosearchError, InputError
from autosearch.features.per_store import EXTRACTOR, extract_features
from autosearch.store import MeasurementRecord, Store, WorkloadRecord

__all__ = ["NOTHING_TO_DECIDE", "CollectSummary", "collect"]

#: The note of a workload `skip_fixed` passed over (`CollectSummary.per_workload`).
NOTHING_TO_DECIDE = "nothing to decide"


@dataclass
class CollectSummary:
    """What one `collect` call did, per workload and in total."""

    measured: int = 0
    ok: int = 0
    failed: int = 0
    skipped_full: int = 0
    #: workloads passed over with `skip_fixed`: no design space, or none with a decision
    nothing_to_decide: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    budget_exhausted: bool = False
    per_workload: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.measured / self.seconds if self.seconds > 0 else 0.0


class _Rate(TextColumn):
    """Candidates per second over the whole run."""

    def __init__(self) -> None:
        super().__init__("")

    def render(self, task: Any) -> Any:
        from rich.text import Text

        elapsed = task.elapsed or 0.0
        return Text(f"{task.completed / elapsed:.2f} cand/s" if elapsed > 0 else "- cand/s", style="cyan")


@dataclass
class _Job:
    """One collection: where records go and what each batch does."""

    store: Store
    target: Any
    tgt: str
    device: str
    evaluator: EvaluatorSettings | None
    rpc: tuple[str, int, str] | None
    seed: int
    source: str
    batch_size: int
    deadline: float | None
    summary: CollectSummary
    console: Console
    skip_fixed: bool = False
    measurer: Measurer | None = None

    def out_of_time(self) -> bool:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.summary.budget_exhausted = True
            return True
        return False


# Long by nature: the public signature lists every collection setting.
def collect(
    workloads: Sequence[Any],
    store: Store,
    target: Any,
    *,
    per_workload: int = 64,
    batch_size: int = 16,
    budget_minutes: float | None = None,
    evaluator: EvaluatorSettings | None = None,
    rpc: tuple[str, int, str] | None = None,
    seed: int = 0,
    source: str = "random",
    console: Console | None = None,
    progress: bool = True,
    skip_fixed: bool = False,
) -> CollectSummary:
    """Top up every workload to `per_workload` measured schedules on `target`, in the given order.

    Each batch: sample unseen schedules (MetaSchedule ReplayTrace), build + run them, extract
    PerStoreFeature, write records and features in one transaction. `skip_fixed`: a workload
    with no design space, or whose spaces have no decision, is not measured, only counted
    (`CollectSummary.nothing_to_decide`; its note `NOTHING_TO_DECIDE`).
    """
    if per_workload < 1:
        raise InputError("--per-workload must be at least 1")
    if batch_size < 1:
        raise InputError("--batch-size must be at least 1")
    console = console or Console(stderr=True)
    job = _Job(
        store,
        target,
        canonical_target(target),
        device_fingerprint(target),
        evaluator,
        rpc,
        seed,
        source,
        batch_size,
        time.monotonic() + budget_minutes * 60 if budget_minutes else None,
        CollectSummary(),
        console,
        skip_fixed,
    )
    todo = _plan(job, workloads, per_workload)
    start = time.monotonic()
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _Rate(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, disable=not progress, transient=False) as bar:
        task = bar.add_task("collect", total=sum(n for _, n in todo))
        try:
            for wl, need in todo:
                if job.out_of_time():
                    break
                bar.update(task, description=f"{wl.name[:40]}")
                _collect_workload(job, wl, need, lambda n: bar.advance(task, n))
        except BaseException as exc:
            close_shared_measurers()  # a worker stopped mid-run is not reused
            if not interrupts.handled(exc):  # a Ctrl-C, or an error TVM raised in its place
                raise
            job.summary.interrupted = True
    job.summary.seconds = time.monotonic() - start
    return job.summary


def _plan(job: _Job, workloads: Sequence[Any], per_workload: int) -> list[tuple[Any, int]]:
    """(workload, schedules still to measure) for every workload below `per_workload`."""
    todo = []
    for wl in workloads:
        job.store.add_workload(WorkloadRecord.from_workload(wl))
        have = job.store.count(wl.key, job.tgt)
        job.summary.per_workload[wl.name] = {"before": have, "measured": 0, "ok": 0, "note": ""}
        if have >= per_workload:
            job.summary.skipped_full += 1
        else:
            todo.append((wl, per_workload - have))
    return todo


def _collect_workload(job: _Job, wl: Any, need: int, advance: Any) -> None:
    """Sample, measure and store `need` new schedules of one workload, a batch per transaction."""
    info = job.summary.per_workload[wl.name]
    if job.measurer is None:
        job.measurer = shared_measurer(job.target, job.evaluator, rpc=job.rpc)
    try:
        space: TaskSpace | None = TaskSpace(
            wl.mod(), job.target, seed=job.seed + job.store.count(wl.key, job.tgt), name=wl.name
        )
    except AutosearchError as exc:
        if not (job.skip_fixed and isinstance(exc, NoDesignSpace)):
            info["note"] = str(exc)
            job.console.print(f"[yellow]skip[/] {wl.name}: {exc}")
            advance(need)
            return
        space = None
    if space is None or (job.skip_fixed and not space.decides):
        info["note"] = NOTHING_TO_DECIDE
        job.summary.nothing_to_decide += 1
        advance(need)
        return
    seen = job.store.schedule_hashes(wl.key, job.tgt)
    left = need
    while left > 0 and not job.out_of_time():
        with interrupts.deferred():  # TVM's threaded C++ sampling must not see a KeyboardInterrupt
            batch = space.sample(min(job.batch_size, left), seen)
        if not batch:
            info["note"] = "design space exhausted"
            advance(left)
            return
        cands = [c for c, _, _ in batch]
        results = job.measurer.measure(cands)
        with interrupts.deferred():
            feats = extract_features(space.context, cands)
        records = [
            MeasurementRecord(
                workload_key=wl.key,
                target=job.tgt,
                device=job.device,
                schedule=text,
                schedule_hash=h,
                status=r.status,
                latencies=r.latencies,
                error=r.error,
                source=job.source,
            )
            for (_, text, h), r in zip(batch, results)
        ]
        job.store.add_measurements(records, feats, EXTRACTOR)
        n_ok = sum(r.status == "ok" for r in records)
        job.summary.measured += len(records)
        job.summary.ok += n_ok
        job.summary.failed += len(records) - n_ok
        info["measured"] += len(records)
        info["ok"] += n_ok
        left -= len(records)
        advance(len(records))
