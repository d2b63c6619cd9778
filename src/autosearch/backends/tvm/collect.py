"""`autosearch collect`: measure many random schedules of many workloads into the store.

Resumable by construction: every batch is one transaction, and a workload is topped up to N
records (ok or failed) counting what the store already holds, so re-running the same command
after Ctrl-C or SIGKILL continues where the last complete batch ended.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from autosearch.backends.tvm.features import EXTRACTOR, extract_features
from autosearch.backends.tvm.measure import EvaluatorSettings, Measurer
from autosearch.backends.tvm.space import TaskSpace
from autosearch.backends.tvm.target import canonical_target, device_fingerprint
from autosearch.errors import AutosearchError, InputError
from autosearch.store import MeasurementRecord, Store

__all__ = ["CollectSummary", "collect"]


@dataclass
class CollectSummary:
    """What one `collect` call did, per workload and in total."""

    measured: int = 0
    ok: int = 0
    failed: int = 0
    skipped_full: int = 0
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

    def render(self, task: Any) -> Any:  # type: ignore[override]
        from rich.text import Text

        elapsed = task.elapsed or 0.0
        return Text(f"{task.completed / elapsed:.2f} cand/s" if elapsed > 0 else "- cand/s", style="cyan")


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
) -> CollectSummary:
    """Top up every workload to `per_workload` measured schedules on `target`.

    Each batch: sample unseen schedules (MetaSchedule ReplayTrace), build + run them, extract
    PerStoreFeature, write records and features in one transaction.
    """
    if per_workload < 1:
        raise InputError("--per-workload must be at least 1")
    if batch_size < 1:
        raise InputError("--batch-size must be at least 1")
    console = console or Console(stderr=True)
    summary = CollectSummary()
    tgt = canonical_target(target)
    device = device_fingerprint(target)
    deadline = time.monotonic() + budget_minutes * 60 if budget_minutes else None

    todo = []
    for wl in workloads:
        store.add_workload(wl.record())
        have = store.count(wl.key, tgt)
        summary.per_workload[wl.name] = {"before": have, "measured": 0, "ok": 0, "note": ""}
        if have >= per_workload:
            summary.skipped_full += 1
        else:
            todo.append((wl, per_workload - have))
    total = sum(n for _, n in todo)
    start = time.monotonic()
    measurer: Measurer | None = None
    columns = [
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), _Rate(),
        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, disable=not progress, transient=False) as bar:
        task = bar.add_task("collect", total=total)
        try:
            for wl, need in todo:
                if deadline and time.monotonic() > deadline:
                    summary.budget_exhausted = True
                    break
                bar.update(task, description=f"{wl.name[:40]}")
                if measurer is None:
                    measurer = Measurer(target, evaluator, rpc=rpc)
                try:
                    space = TaskSpace(wl.mod(), target, seed=seed + store.count(wl.key, tgt), name=wl.name)
                except AutosearchError as exc:
                    summary.per_workload[wl.name]["note"] = str(exc)
                    console.print(f"[yellow]skip[/] {wl.name}: {exc}")
                    bar.advance(task, need)
                    continue
                seen = store.schedule_hashes(wl.key, tgt)
                left = need
                while left > 0:
                    if deadline and time.monotonic() > deadline:
                        summary.budget_exhausted = True
                        break
                    batch = space.sample(min(batch_size, left), seen)
                    if not batch:
                        summary.per_workload[wl.name]["note"] = "design space exhausted"
                        bar.advance(task, left)
                        break
                    cands = [c for c, _, _ in batch]
                    results = measurer.measure(cands)
                    feats = extract_features(space.context, cands)
                    records = [
                        MeasurementRecord(
                            workload_key=wl.key, target=tgt, device=device, schedule=text, schedule_hash=h,
                            status=r.status, latencies=r.latencies, error=r.error, source=source,
                        )
                        for (_, text, h), r in zip(batch, results)
                    ]
                    store.add_measurements(records, feats, EXTRACTOR)
                    n_ok = sum(r.status == "ok" for r in records)
                    summary.measured += len(records)
                    summary.ok += n_ok
                    summary.failed += len(records) - n_ok
                    info = summary.per_workload[wl.name]
                    info["measured"] += len(records)
                    info["ok"] += n_ok
                    left -= len(records)
                    bar.advance(task, len(records))
        except KeyboardInterrupt:
            summary.interrupted = True
    summary.seconds = time.monotonic() - start
    return summary
