"""Training groups for the gradient cost model, read from a store of measured traces.

Why from traces: a stored record is a MetaSchedule trace whose decisions are exactly this
package's knobs, so its features are the symbolic ones evaluated at integer knobs — no replay,
no lowering. Each record is matched to the design space (sketch) whose instructions it follows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from autosearch.search.gradient.features import FeatureFn
from autosearch.search.gradient.model import Group
from autosearch.search.gradient.sketch import Decisions, Sketch
from autosearch.search.gradient.structure import StructureError, read_structure

__all__ = ["SketchSet", "groups_from_store", "sketch_set"]


@dataclass
class SketchSet:
    """The relaxable sketches of one workload, with their feature functions."""

    sketches: list[Sketch] = field(default_factory=list)
    fns: list[FeatureFn] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def match(self, trace_json: Any, strict: bool = True) -> tuple[int, Decisions] | None:
        """(sketch index, decisions) of a stored trace, or None if no sketch produced it."""
        for i, sk in enumerate(self.sketches):
            dec = sk.decisions_of(trace_json, strict_location=strict)
            if dec is not None:
                return i, dec
        return None


def sketch_set(mod: Any, spaces: Iterable[Any], seed: int = 0) -> SketchSet:
    """Sketches of design spaces whose structure can be read (the others are listed with the reason)."""
    out = SketchSet()
    for i, sp in enumerate(spaces):
        sk = Sketch.from_space(mod, sp, i)
        if not sk.tiles and not sk.cats:
            out.skipped.append(f"sketch {i}: no knob")
            continue
        try:
            st = read_structure(sk, seed=seed)
        except StructureError as exc:
            out.skipped.append(f"sketch {i}: {exc}")
            continue
        out.sketches.append(sk)
        out.fns.append(FeatureFn(st))
    return out


def _design_spaces(mod: Any, target: Any) -> list[Any]:
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.lowp import space_generator
    from autosearch.backends.tvm.space import generate_spaces

    ctx = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator=space_generator(mod, target),
        search_strategy="replay-trace",
        task_name="gradient-data",
        num_threads=1,
    )
    return generate_spaces(ctx)


def groups_from_store(
    db: str | os.PathLike[str],
    *,
    keep: Callable[[Any], bool] | None = None,
    max_per_group: int | None = None,
    log: Callable[[str], None] | None = None,
) -> list[Group]:
    """One Group per (workload, target, sketch) of the store's records (`.db.xz` is read directly)."""
    import tvm

    from autosearch.store import Store
    from autosearch.training.dataset import resolve_db
    from autosearch.workloads import get_workload

    groups: list[Group] = []
    with Store(resolve_db(db), readonly=True) as store:
        for row in store.workloads(backend="tvm"):
            if keep is not None and not keep(row):
                continue
            try:
                mod = get_workload(row.name).mod()
            except Exception:
                mod = tvm.script.from_source(row.ir)
            for tstr in store.targets():
                recs = [m for m in store.measurements(row.key, tstr) if m.status in ("ok", "run_error", "build_error")]
                if len(recs) < 2:
                    continue
                sset = sketch_set(mod, _design_spaces(mod, tvm.target.Target(json.loads(tstr))))
                by_sketch: dict[int, tuple[list[Decisions], list[float | None]]] = {}
                for m in recs[: max_per_group or len(recs)]:
                    hit = sset.match(json.loads(m.schedule), strict=False)
                    if hit is None:
                        continue
                    decs, lats = by_sketch.setdefault(hit[0], ([], []))
                    decs.append(hit[1])
                    lats.append(m.median if m.status == "ok" else None)
                for i, (decs, lats) in by_sketch.items():
                    if len(decs) >= 2:
                        groups.append(Group(f"{row.key}/{i}", sset.fns[i].of_decisions(decs).to(torch.float32), lats))
                if log is not None:
                    n = sum(len(v[0]) for v in by_sketch.values())
                    log(
                        f"{row.name}: {n}/{len(recs)} records matched {len(sset.sketches)} sketches ({len(sset.skipped)} skipped)"
                    )
    return groups
