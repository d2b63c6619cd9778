"""Sparse workloads and records in the shared store: workload = operator + matrix, record = configuration.

Why the same tables as the dense records: the store, its resumability and its tools are shared.
A workload's `params` hold the operator, the dense size and the matrix spec with its content hash
(`ir` holds the spec JSON, the text that rebuilds the matrix); a measurement's `schedule` is the
SuperSchedule JSON, and `extra` keeps the conversion and build seconds, timed apart from the kernel.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import scipy.sparse as sp

from autosearch.errors import InputError
from autosearch.sparse.matrices import MatrixSpec, matrix_hash
from autosearch.sparse.space import SuperSchedule
from autosearch.store.db import Store, WorkloadRecord

__all__ = ["BACKEND", "Group", "load_groups", "sparse_target", "workload_key", "workload_record"]

BACKEND = "sparse"


def sparse_target() -> tuple[str, str]:
    """(canonical target, device fingerprint) of this CPU, as the dense records use."""
    from autosearch.backends.tvm.target import canonical_target, device_fingerprint, host_target

    t = host_target()
    return canonical_target(t), device_fingerprint(t)


def workload_key(op: str, dense: int, mhash: str) -> str:
    return hashlib.sha256(f"sparse|{op}|{dense}|{mhash}".encode()).hexdigest()[:32]


def workload_record(op: str, dense: int, spec: MatrixSpec, a: sp.csr_matrix) -> WorkloadRecord:
    mh = matrix_hash(a)
    dense = dense if op != "spmv" else 0
    params = {
        "op": op,
        "dense": dense,
        "matrix": json.loads(spec.to_json()),
        "matrix_hash": mh,
        "rows": int(a.shape[0]),
        "cols": int(a.shape[1]),
        "nnz": int(a.nnz),
    }
    return WorkloadRecord(
        key=workload_key(op, dense, mh),
        name=f"{op}/d{dense}/{spec.name}",
        family=spec.family,
        backend=BACKEND,
        params=params,
        ir=spec.to_json(),
        flops=2.0 * a.nnz * max(dense, 1),
    )


@dataclass
class Group:
    """All ok measurements of one (operator, matrix) workload on one target."""

    key: str
    name: str
    op: str
    dense: int
    family: str
    spec: MatrixSpec
    matrix_hash: str
    configs: list[SuperSchedule] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    @property
    def seed(self) -> int:
        return self.spec.seed

    def best(self) -> float:
        return min(self.latencies) if self.latencies else math.inf


def load_groups(
    store: Store, target: str | None = None, ops: tuple[str, ...] | None = None, min_configs: int = 2
) -> list[Group]:
    """Every sparse workload with at least `min_configs` ok records, with its configurations."""
    wls = {w.key: w for w in store.workloads(backend=BACKEND)}
    if not wls:
        raise InputError(f"{store.path} has no sparse workloads; run `autosearch sparse collect` first")
    groups: dict[str, Group] = {}
    per: dict[str, dict[str, tuple[SuperSchedule, float]]] = defaultdict(dict)
    for m in store.measurements(target=target, status="ok"):
        w = wls.get(m.workload_key)
        if w is None or m.median is None:
            continue
        p: dict[str, Any] = w.params
        if ops and p["op"] not in ops:
            continue
        if w.key not in groups:
            groups[w.key] = Group(
                w.key, w.name, p["op"], int(p["dense"]), w.family, MatrixSpec.from_dict(p["matrix"]), p["matrix_hash"]
            )
        per[w.key][m.schedule_hash] = (SuperSchedule.from_json(m.schedule), float(m.median))
    out = []
    for k, g in groups.items():
        items = list(per[k].values())
        if len(items) < min_configs:
            continue
        g.configs = [c for c, _ in items]
        g.latencies = [t for _, t in items]
        out.append(g)
    out.sort(key=lambda g: g.name)
    return out
