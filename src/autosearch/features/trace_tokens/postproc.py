"""MetaSchedule's RewriteParallelVectorizeUnroll post-processor emulated from the decisions.

Why: prefix tokens (`PREFIX_EXTRACTOR`) lack the post-processing instructions, so the parallel
extent, the loops fused into it and the vector extent that post-processing will give each tiled
loop nest are worked out here (`_Post`), as three extra columns on each Reorder of a tiled nest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosearch.features.trace_tokens.sym import _Sym

__all__ = [
    "_Limits",
    "_Post",
]


class _Limits:
    """What the root block's annotations and the compute-at targets say, for the `_Post`s of a trace.

    Filled in as the trace is compiled; the annotations come after the Reorders they limit, so a
    `_Post` reads them only when resolved."""

    __slots__ = ("last", "multi", "par", "vec")

    def __init__(self) -> None:
        self.par = 0  # meta_schedule.parallel: the largest parallel extent (0: none asked for)
        self.vec = 0  # meta_schedule.vectorize: the largest vector extent
        self.multi: set[str] = set()  # loops something is computed at: their bodies hold two statements
        self.last: _Post | None = None  # the latest tiled loop nest (where a sampled compute location points)


class _Post:
    """What RewriteParallelVectorizeUnroll will make of one tiled loop nest (a Reorder's loops).

    Why: the post-processing instructions are a function of all decisions together, so a model
    that sees only the instructions before post-processing (`PREFIX_EXTRACTOR`, what decision
    vectors give) would have to learn that rule from examples. Worked out here instead, on the
    loop extents the decisions give: the outer spatial loops fuse into one parallel loop until
    their product passes the root's `meta_schedule.parallel` limit or a loop's body holds a
    computed-at block; the innermost loop is vectorized when it is spatial and longer than 1 and
    within `meta_schedule.vectorize` (TVM's contiguous-access check lets it fuse no second loop into
    the vector for a tiled block: the next loop is strided). A block computed at a sampled location
    (`random_compute_producer`) is taken to sit at that index of the latest tiled nest's loops,
    as the location's candidates are that nest's loops from the outermost. Checked against the
    replayed, post-processed TIR of 255 stored schedules: the parallel extent agreed for 98%, the
    vector extent for 99% (bench/README.md, "Prefix tokens v2").
    """

    __slots__ = ("axes", "extents", "limits", "located", "loops")

    def __init__(self, loops: list[str], extents: list[Any], axes: str, limits: _Limits) -> None:
        self.loops, self.extents, self.axes, self.limits = loops, extents, axes, limits
        self.located: list[int] = []  # SampleComputeLocation instructions whose block is computed in this nest

    def refs(self) -> list[int | tuple[int, int]]:
        """Per loop, its extent (int, 0 if unknown) or the tile decision giving it (instruction, factor)."""
        return [(e.inst, e.k) if e.__class__ is _Sym else (e if e.__class__ is int else 0) for e in self.extents]

    def values(self, ext: list[np.ndarray], cut: int) -> np.ndarray:
        """(n, 3): post_par_extent, post_par_loops, post_vec_extent for loop extents `ext[i]`
        ((n,), 0 = unknown) and `cut` (the first loop a sampled location holds, or -1)."""
        n = len(ext[0]) if ext else 1
        out = np.zeros((n, 3), dtype=np.float32)
        lim = self.limits
        if lim.par > 0:
            prod, count, live = np.ones(n), np.zeros(n), np.ones(n, dtype=bool)
            for i, (e, axis, loop) in enumerate(zip(ext, self.axes, self.loops)):
                if axis != "S":
                    break
                live &= e > 0
                count += live
                prod = np.where(live, prod * e, prod)
                live &= (prod <= lim.par) & (cut != i)
                if loop in lim.multi:
                    break
            par = prod > 1
            out[:, 0] = np.where(par, np.log2(prod), 0.0)
            out[:, 1] = np.where(par, count, 0.0)
        if lim.vec > 0 and self.axes and self.axes[-1] == "S":
            e = ext[-1]
            out[:, 2] = np.log2(1.0 + np.where((e > 1) & (e <= lim.vec), e, 0.0))
        return out

    def cut(self, dec: dict[int, Any]) -> int:
        """The first loop index a block computed at a sampled location holds under `dec`, or -1."""
        return min((d for i in self.located if isinstance(d := dec.get(i), int) and d >= 0), default=-1)

    def loop_extents(self, dec: dict[int, Any]) -> list[float]:
        """Each loop's extent under decisions `dec` (0 where unknown)."""
        out = []
        for r in self.refs():
            if r.__class__ is tuple:
                try:
                    f = dec.get(r[0])[r[1]]  # type: ignore[index]
                except (TypeError, IndexError, KeyError):
                    f = 0
                r = f if isinstance(f, int) and f > 0 else 0
            out.append(float(r))  # type: ignore[arg-type]
        return out

    def resolve(self, dec: dict[int, Any]) -> np.ndarray:
        return self.values([np.asarray([e]) for e in self.loop_extents(dec)], self.cut(dec))[0]
