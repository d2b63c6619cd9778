"""The quantities of features.py measured on a concrete schedule, by TVM's own analyses.

Why a second implementation: it is the reference the differentiable features are checked
against (tests). Loop extents are read off the applied schedule; footprints come from TVM's
interval analysis (`tvm.sym.Analyzer.int_set`) of each access with the block bindings
substituted; parallel / vector / unroll from the loops of the post-processed schedule (their
`ForKind` and `pragma_auto_unroll_max_step`).
"""

from __future__ import annotations

import math
from typing import Any

from autosearch.search.gradient.structure import block_nests

__all__ = ["applied_quantities", "postprocessed_quantities"]


def _footprint(nest: Any, access: Any, level: int) -> int:
    """Distinct elements of `access` touched while loop `level` runs once through."""
    from tvm import sym

    ana = sym.Analyzer()
    for lp in nest.loops[:level]:
        ana.bind(lp.loop_var, 0)
    dom = {lp.loop_var: sym.IntervalSet(0, int(lp.extent) - 1) for lp in nest.loops[level:]}
    block = nest.realize.block
    for iv, value in zip(block.iter_vars, nest.realize.iter_values):
        ana.bind(iv.var, value)
    total = 1
    for rg in access.region:
        expr = ana.simplify(rg.min)
        s = ana.int_set(expr, dom)
        total *= int(s.max_value) - int(s.min_value) + int(rg.extent)
    return total


def applied_quantities(sch: Any) -> dict[str, dict[str, Any]]:
    """Per block: loop extents and, per access (writes first), the footprint at every loop level."""
    out: dict[str, dict[str, Any]] = {}
    for nest in block_nests(sch.mod["main"]):
        block = nest.realize.block
        accs = [*block.writes, *block.reads]
        out[nest.name] = {
            "extents": [int(lp.extent) for lp in nest.loops],
            "footprints": [[_footprint(nest, a, j) for j in range(len(nest.loops))] for a in accs],
            "buffers": [a.source.name for a in accs],
        }
    return out


def postprocessed_quantities(sch: Any) -> dict[str, dict[str, int]]:
    """Per block of a post-processed schedule: parallel extent, vector length, unroll step."""
    from tvm.tirx import ForKind

    out: dict[str, dict[str, int]] = {}
    for nest in block_nests(sch.mod["main"]):
        par = math.prod(int(lp.extent) for lp in nest.loops if lp.kind == ForKind.PARALLEL)
        vec = math.prod(int(lp.extent) for lp in nest.loops if lp.kind == ForKind.VECTORIZED)
        step = 0
        for lp in nest.loops:
            ann = lp.annotations.get("pragma_auto_unroll_max_step") if lp.annotations else None
            if ann is not None:
                step = int(ann)
        out[nest.name] = {"parallel": par, "vector": vec, "unroll_step": step}
    return out
