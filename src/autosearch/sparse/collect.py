"""Collect a sparse dataset: generated matrices x configurations per operator, into the store.

Why this shape: matrix i of a plan is a pure function of (plan seed, i), and so are the
configurations tried on it, so a killed or time-boxed run resumes exactly where it stopped
(measured schedules are skipped by hash). Each (operator, matrix) is one transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from autosearch.errors import InputError
from autosearch.sparse.matrices import FAMILIES, MatrixSpec, generate, random_spec
from autosearch.sparse.measure import MatrixBench, Timing
from autosearch.sparse.records import sparse_target, workload_record
from autosearch.sparse.space import ANCHORS, OPS, SuperSchedule, config_pool
from autosearch.store.db import MeasurementRecord, Store

__all__ = ["CollectReport", "collect", "plan_matrix"]


def plan_matrix(
    i: int,
    seed: int = 0,
    families: Sequence[str] = FAMILIES,
    rows: tuple[int, int] = (1000, 30000),
    max_nnz: int = 300_000,
) -> MatrixSpec:
    """Matrix i of a plan: families in turn, shapes and row lengths drawn from (seed, i)."""
    rng = np.random.default_rng([seed, i, 7919])
    return random_spec(rng, family=families[i % len(families)], rows=rows, max_nnz=max_nnz, seed=seed * 100_000 + i)


@dataclass
class CollectReport:
    matrices: int = 0
    workloads: int = 0
    measured: int = 0
    skipped: int = 0  # already in the store
    rejected: int = 0  # not applicable to the matrix (reason counted, not stored)
    failed: int = 0
    seconds: float = 0.0
    stopped_by_budget: bool = False
    reasons: dict[str, int] = field(default_factory=dict)


def _configs_for(op: str, dense: int, n: int, rng: np.random.Generator) -> list[SuperSchedule]:
    """The anchors, then the rest of the pool in a random order (more than n: some get rejected)."""
    pool = config_pool(op, dense)
    rest = list(pool[ANCHORS:])
    order = rng.permutation(len(rest))
    return pool[:ANCHORS] + [rest[j] for j in order]


def _one_workload(
    store: Store,
    mb: MatrixBench,
    spec: MatrixSpec,
    n_configs: int,
    seed: int,
    timing: Timing,
    target: tuple[str, str],
    rep: CollectReport,
    source: str,
) -> None:
    wl = workload_record(mb.op, mb.dense, spec, mb.a)
    store.add_workload(wl)
    have = store.schedule_hashes(wl.key, target[0])
    done = store.count(wl.key, target[0], status="ok")
    rng = np.random.default_rng([seed, spec.seed, OPS.index(mb.op)])
    batch: list[MeasurementRecord] = []
    for c in _configs_for(mb.op, mb.dense, n_configs, rng):
        if done >= n_configs:
            break
        rec_probe = MeasurementRecord(wl.key, target[0], target[1], c.to_json(), "build_error")
        if rec_probe.schedule_hash in have:
            rep.skipped += 1
            continue
        out = mb.run(c, timing)
        if out.status != "ok" and out.error.startswith("not applicable"):
            rep.rejected += 1
            why = out.error.split(":", 1)[1].split(" would ")[0].split(" (")[0].strip()[:40]
            rep.reasons[why] = rep.reasons.get(why, 0) + 1
            continue
        rep.measured += 1
        done += out.status == "ok"
        rep.failed += out.status != "ok"
        batch.append(
            MeasurementRecord(
                wl.key,
                target[0],
                target[1],
                c.to_json(),
                out.status,
                out.latencies,
                error=out.error,
                source=source,
                extra={"convert_s": out.convert_s, "build_s": out.build_s},
            )
        )
    store.add_measurements(batch)
    rep.workloads += 1


def collect(
    store: Store,
    n_matrices: int,
    n_configs: int = 50,
    ops: Sequence[str] = OPS,
    dense: int = 32,
    seed: int = 0,
    budget_minutes: float = 0.0,
    families: Sequence[str] = FAMILIES,
    timing: Timing = Timing(repeat=3, min_repeat_ms=3.0),
    start: int = 0,
    progress: Callable[[int, str], None] | None = None,
    max_rows: int = 30000,
    max_nnz: int = 300_000,
) -> CollectReport:
    """Measure up to `n_configs` applicable configurations of each op on matrices start..n-1."""
    for op in ops:
        if op not in OPS:
            raise InputError(f"unknown operator {op!r}; choose from {', '.join(OPS)}")
    if n_matrices < 1 or n_configs < 1:
        raise InputError("--matrices and --configs must be >= 1")
    target = sparse_target()
    rep = CollectReport()
    t0 = time.perf_counter()
    for i in range(start, n_matrices):
        if budget_minutes and time.perf_counter() - t0 > budget_minutes * 60:
            rep.stopped_by_budget = True
            break
        spec = plan_matrix(i, seed, families, rows=(1000, max_rows), max_nnz=max_nnz)
        a = generate(spec)
        for op in ops:
            mb = MatrixBench(op, a, dense, seed=spec.seed)
            _one_workload(store, mb, spec, n_configs, seed, timing, target, rep, f"collect:{seed}")
        rep.matrices += 1
        if progress:
            progress(i, spec.name)
    rep.seconds = time.perf_counter() - t0
    return rep
