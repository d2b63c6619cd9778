"""The loop structure of a sketch, read from concrete applications of its trace.

Why probing instead of symbolic splitting: every loop of a MetaSchedule schedule has an extent
that is a product of tile factors (split loops, and loops that `compute_at` creates to cover a
tile). Replaying the sketch with a few random decisions and fitting log(extent) as an integer
linear function of the log tile factors recovers that product exactly, for any transformation
the trace makes, without re-implementing TIR's bound inference. The fit is checked on every
probe; a loop it cannot explain exactly is kept with the least-squares fit and flagged.

What else is read from one application: the block's iterators (spatial / reduce) and which loops
feed each of them, and every buffer access as integer coefficients over the block iterators —
the data the feature functions (features.py) turn into footprints and reuse.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosearch.errors import AutosearchError
from autosearch.search.gradient.sketch import Decisions, Sketch

__all__ = [
    "AccessSpec",
    "BlockNest",
    "BlockSpec",
    "LoopSpec",
    "SketchStructure",
    "StructureError",
    "block_nests",
    "iter_info",
    "read_structure",
]


class StructureError(AutosearchError):
    """The sketch's loop structure cannot be expressed in its knobs."""


@dataclass
class BlockNest:
    """One block of a concrete schedule with the loops around it (outermost first)."""

    name: str
    realize: Any
    loops: list[Any]
    root_child: bool
    shares_outer: int = -1  # index of an earlier block under the same outermost loop, else -1


def block_nests(func: Any) -> list[BlockNest]:
    """Every non-root block of a PrimFunc, in program order, with its enclosing loops."""
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For, SeqStmt

    out: list[BlockNest] = []

    def visit(stmt: Any, loops: list[Any], depth: int) -> None:
        if isinstance(stmt, SBlockRealize):
            if depth > 0:
                out.append(BlockNest(stmt.block.name_hint, stmt, list(loops), depth == 1))
            visit(stmt.block.body, [] if depth == 0 else loops, depth + 1)
        elif isinstance(stmt, For):
            visit(stmt.body, [*loops, stmt], depth)
        elif isinstance(stmt, SeqStmt):
            for s in stmt.seq:
                visit(s, loops, depth)
        else:
            for attr in ("body", "then_case", "else_case"):
                sub = getattr(stmt, attr, None)
                if sub is not None:
                    visit(sub, loops, depth)

    visit(func.body, [], 0)
    for i, nest in enumerate(out):
        for j in range(i):
            if nest.loops and out[j].loops and nest.loops[0].same_as(out[j].loops[0]):
                nest.shares_outer = j if out[j].shares_outer < 0 else out[j].shares_outer
                break
    return out


def _int(expr: Any, binds: dict[Any, int]) -> int | None:
    from tvm import sym
    from tvm.tirx import IntImm

    ana = sym.Analyzer()
    for v, val in binds.items():
        ana.bind(v, val)
    out = ana.simplify(expr)
    return int(out.value) if isinstance(out, IntImm) else None


def _linear_coefs(expr: Any, variables: list[Any]) -> tuple[list[int], int, bool]:
    """Integer coefficients of `expr` over `variables`, its constant, and whether it is affine."""
    zero = {v: 0 for v in variables}
    c0 = _int(expr, zero)
    if c0 is None:
        return [0] * len(variables), 0, False
    coefs = []
    for v in variables:
        c1 = _int(expr, {**zero, v: 1})
        c3 = _int(expr, {**zero, v: 3})
        if c1 is None or c3 is None or c3 - c0 != 3 * (c1 - c0):
            return [0] * len(variables), c0, False
        coefs.append(c1 - c0)
    if len(variables) > 1:  # cross terms / floordiv show up on a joint point
        rng = random.Random(len(variables))
        pt = {v: rng.randint(1, 5) for v in variables}
        val = _int(expr, pt)
        if val is None or val != c0 + sum(c * pt[v] for c, v in zip(coefs, variables)):
            return coefs, c0, False
    return coefs, c0, True


def iter_info(nest: BlockNest) -> tuple[list[bool], list[list[int]], list[list[int]], bool]:
    """(iterator is reduce, loops feeding each iterator, loop coefficients per iterator, affine)."""
    from tvm.tirx.analysis import undefined_vars

    block = nest.realize.block
    loop_vars = [lp.loop_var for lp in nest.loops]
    reduce = [int(iv.iter_type) != 0 for iv in block.iter_vars]
    feeds: list[list[int]] = []
    coefs: list[list[int]] = []
    affine = True
    for value in nest.realize.iter_values:
        names = list(undefined_vars(value))
        idx = [i for i, lv in enumerate(loop_vars) if any(lv.same_as(v) for v in names)]
        c, _, ok = _linear_coefs(value, [loop_vars[i] for i in idx])
        affine = affine and ok
        feeds.append(idx)
        coefs.append(c)
    return reduce, feeds, coefs, affine


@dataclass
class LoopSpec:
    """log(extent) = bias + coef . (log tile factors at the free coordinates)."""

    coef: np.ndarray
    bias: float
    exact: bool
    reduce: bool
    single_body: bool


@dataclass
class AccessSpec:
    """One buffer access: index of dim d = sum_k coef[d][k] * iterator_k + const; `ext` per dim."""

    buffer: str
    write: bool
    nbytes: int
    coef: np.ndarray  # (ndim, n_iters)
    ext: np.ndarray  # (ndim,)
    affine: bool


@dataclass
class BlockSpec:
    """A block of the sketch: its loops, iterators and accesses."""

    name: str
    loops: list[LoopSpec]
    iter_reduce: list[bool]
    iter_loops: list[list[int]]
    accesses: list[AccessSpec]
    root_child: bool
    chain_ok: bool  # iterator bindings are perfect-tile chains (footprints are then exact)
    max_fusible: int  # loops TVM's vectorizer may fuse (contiguous access), at the sketch's own decisions
    shares_outer: int = -1  # an earlier block under the same outermost loop (its parallel loops are shared)

    @property
    def spatial(self) -> bool:
        return not any(self.iter_reduce)


@dataclass
class SketchStructure:
    """Everything the feature functions need about one sketch."""

    sketch: Sketch
    free: list[int]  # positions in the flat log-factor vector that the fits use
    blocks: list[BlockSpec]
    max_parallel: int = -1
    max_vectorize: int = -1
    unroll_cat: int | None = None  # categorical knob giving the unroll step
    unroll_explicit: bool = True
    unroll_const: int = -1
    probes: int = 0
    notes: list[str] = field(default_factory=list)


def _flat_free(sketch: Sketch) -> list[int]:
    free: list[int] = []
    pos = 0
    for t in sketch.tiles:
        free.extend(range(pos + 1, pos + t.n))  # level 0 is implied by the product
        pos += t.n
    return free


def _accesses(block: Any) -> list[AccessSpec]:
    iters = [iv.var for iv in block.iter_vars]
    out = []
    for write, regions in ((True, block.writes), (False, block.reads)):
        for br in regions:
            buf = br.source
            rows, exts, ok = [], [], True
            for rg in br.region:
                c, _, aff = _linear_coefs(rg.min, iters)
                e = _int(rg.extent, {})
                ok = ok and aff and e is not None
                rows.append(c)
                exts.append(e if e is not None else 1)
            nbytes = max(1, int(buf.dtype.bits) * int(buf.dtype.lanes) // 8)
            out.append(
                AccessSpec(
                    buf.name,
                    write,
                    nbytes,
                    np.array(rows, dtype=np.float64).reshape(len(rows), len(iters)),
                    np.array(exts, dtype=np.float64),
                    ok,
                )
            )
    return out


def _chain_ok(nest: BlockNest, feeds: list[list[int]], coefs: list[list[int]]) -> bool:
    for idx, c in zip(feeds, coefs):
        stride = 1
        for i, ci in sorted(zip(idx, c), reverse=True):
            if ci != stride:
                return False
            stride *= int(nest.loops[i].extent)
    return True


def _max_fusible(nest: BlockNest, feeds: list[list[int]], coefs: list[list[int]]) -> int:
    """TVM RewriteParallelVectorizeUnroll's contiguity check (strides of each loop per access)."""
    block = nest.realize.block
    n = len(nest.loops)
    best = n
    for acc in _accesses(block):
        shape = [int(s) for s in _buffer_shape(block, acc.buffer)]
        if not acc.affine or len(shape) != acc.coef.shape[0]:
            return 0
        strides = []
        for lp in range(n):
            stride, bstride = 0, 1
            for d in range(acc.coef.shape[0] - 1, -1, -1):
                coef = sum(acc.coef[d, k] * coefs[k][feeds[k].index(lp)] for k in range(len(feeds)) if lp in feeds[k])
                if coef != 0:
                    stride = int(coef) * bstride
                    break
                bstride *= shape[d]
            strides.append(stride)
        fusible, prev = 0, -1
        for i in range(n - 1, -1, -1):
            if strides[i] == 0:
                fusible += 1
            elif prev == -1:
                if strides[i] != 1 and fusible != 0:
                    break
                fusible += 1
                prev = i
            elif strides[i] == strides[prev] * int(nest.loops[prev].extent):
                fusible += 1
                prev = i
            else:
                break
        best = min(best, fusible)
    return best


def _buffer_shape(block: Any, name: str) -> list[Any]:
    for br in [*block.reads, *block.writes]:
        if br.source.name == name:
            return list(br.source.shape)
    return []


def _root_annotations(sketch: Sketch, st: SketchStructure) -> None:
    insts = sketch.trace.insts
    cat_out = {i: c for i, c in enumerate(sketch.cats)}
    for inst in insts:
        if inst.kind.name != "Annotate":
            continue
        key = str(inst.attrs[0])
        val = inst.inputs[1] if len(inst.inputs) > 1 else None
        if key in ("meta_schedule.parallel", "meta_schedule.vectorize"):
            v = int(val) if isinstance(val, int) else int(getattr(val, "value", -1))
            if key == "meta_schedule.parallel":
                st.max_parallel = v
            else:
                st.max_vectorize = v
        elif key in ("meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit"):
            st.unroll_explicit = key.endswith("explicit")
            for ci, c in cat_out.items():
                if insts[c.inst].outputs[0].same_as(val):
                    st.unroll_cat = ci
            if st.unroll_cat is None and isinstance(val, int):
                st.unroll_const = int(val)


def read_structure(sketch: Sketch, *, probes: int | None = None, seed: int = 0) -> SketchStructure:
    """Fit every loop extent of every block as a function of the knobs (see module docstring)."""
    rng = random.Random(seed)
    free = _flat_free(sketch)
    n_probe = probes or max(8, len(free) + 6)
    decs: list[Decisions] = []
    first = None
    ext_rows: list[list[list[float]]] = []
    all_nests: list[list[BlockNest]] = []
    tries, skipped = 0, 0
    while len(decs) <= n_probe and tries < 4 * n_probe + 4:
        d = sketch.own_decisions() if tries == 0 else sketch.random_decisions(rng)
        tries += 1
        nests = block_nests(sketch.apply(d).mod["main"])
        if first is None:
            first = nests
        if [(n.name, len(n.loops)) for n in nests] != [(n.name, len(n.loops)) for n in first]:
            # a compute-location index names another loop when unit loops come and go: such
            # decisions give another structure; the sketch's features describe its own
            skipped += 1
            continue
        decs.append(d)
        all_nests.append(nests)
        ext_rows.append(
            [[float(np.log(int(lp.extent))) if _is_const(lp.extent) else float("nan") for lp in n.loops] for n in nests]
        )
    if len(decs) < min(n_probe, len(free) + 2):
        raise StructureError("the loop structure of this sketch changes with most of its decisions")
    assert first is not None
    X = np.array([[sketch.log_factors(d)[i] for i in free] for d in decs], dtype=np.float64).reshape(
        len(decs), len(free)
    )
    X1 = np.hstack([X, np.ones((len(decs), 1))])
    st = SketchStructure(sketch=sketch, free=free, blocks=[], probes=len(decs))
    if skipped:
        st.notes.append(f"{skipped} of {tries} probes gave another loop structure (compute location)")
    extra = all_nests[1:]
    for b, nest in enumerate(first):
        reduce, feeds0, coefs, affine = iter_info(nest)
        feeds = feeds0
        for other in extra:  # a unit loop drops out of a binding: feeds are the union over probes
            _, feeds2, _, aff2 = iter_info(other[b])
            feeds = [sorted(set(f) | set(g)) for f, g in zip(feeds, feeds2)]
            affine = affine and aff2
        loop_reduce = [any(reduce[k] for k in range(len(feeds)) if i in feeds[k]) for i in range(len(nest.loops))]
        loops = []
        for i, lp in enumerate(nest.loops):
            y = np.array([ext_rows[p][b][i] for p in range(len(decs))])
            if not np.all(np.isfinite(y)):
                raise StructureError(f"block {nest.name}: a loop extent is not a constant")
            sol = np.linalg.lstsq(X1, y, rcond=None)[0]
            a = np.round(sol[:-1])
            bias = float(np.mean(y - X @ a)) if len(free) else float(np.mean(y))
            exact = bool(np.max(np.abs(X @ a + bias - y)) < 1e-6)
            if not exact:
                a, bias = sol[:-1], float(sol[-1])
                st.notes.append(f"{nest.name} loop {i}: extent fitted approximately")
            from tvm.tirx import SeqStmt

            loops.append(LoopSpec(a.astype(np.float64), bias, exact, loop_reduce[i], not isinstance(lp.body, SeqStmt)))
        chain = affine and _chain_ok(nest, feeds0, coefs)
        st.blocks.append(
            BlockSpec(
                name=nest.name,
                loops=loops,
                iter_reduce=reduce,
                iter_loops=feeds,
                accesses=_accesses(nest.realize.block),
                root_child=nest.root_child,
                chain_ok=chain,
                shares_outer=nest.shares_outer,
                max_fusible=_max_fusible(nest, feeds0, coefs) if affine else 0,
            )
        )
    _root_annotations(sketch, st)
    return st


def _is_const(expr: Any) -> bool:
    from tvm.tirx import IntImm

    return isinstance(expr, IntImm)
