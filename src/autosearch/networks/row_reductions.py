"""Loop nests of a task whose reductions run along the rows of a tensor (softmax, LayerNorm,
RMSNorm): each reduction split into register-wide partial results (`rfactor`) so that it runs as
vector operations, not as one scalar chain, its blocks in separate nests or every block a row at
a time in one loop over the rows. Measured beside a task's first round and timed beside the
prior's pick (`register_blocks.candidates`), built where it is the fastest.

Why: MetaSchedule's design space leaves such a reduction a dependency chain of scalar additions
or maxima (one per element), and LLVM may not reorder floating-point additions to vectorize it.
ViT-base's LayerNorm (197 rows of 768) ran 120.6 us a call from the design-space pick and 47.2 in
the separate nests; its attention softmax (12 x 197 rows of 197) 583.8 and 341.3 in one row loop
(inputs cold, Zen 4, `bench/row_reductions.py`).

Two TVM limits shape the forms. `compute_at` of a block whose split axis does not divide (197
by 16) drops the block's predicate and reads past the row, so the rows are joined by fusing
each block's row axes and `merge`-ing the loops, which keeps every block's own loops and
predicates. And `rfactor` needs the reduction to be the first block under its loops, so each
reduction is split before the rows are joined.
"""

from __future__ import annotations

from typing import Any

__all__ = ["row_reduction_forms"]

#: At most this many blocks in a task with row forms (a softmax with its mask and cast is 8-10).
MAX_BLOCKS = 16
#: `IterVar.iter_type` of a data-parallel and of a reduction axis.
SPATIAL, REDUCTION = 0, 2


def row_reduction_forms(mod: Any, register_lanes: int) -> list[Any]:
    """Schedules of `mod` (see the module doc): the reductions' partial results in separate loop
    nests, and every block in one loop over the rows, each serial and parallel over the rows;
    none where a reduction is not along the innermost axis, is shorter than a register, the
    blocks do not share one set of rows, or the output is not rows of a width (a matmul: its
    reduction's rows are the output's elements)."""
    from tvm import s_tir

    if register_lanes <= 0:
        return []
    forms: list[Any] = []
    for joined in (False, True):
        for parallel in (False, True):
            try:
                sch = _form(mod, register_lanes, joined, parallel)
            except s_tir.ScheduleError:
                sch = None
            if sch is None:
                return forms
            forms.append(sch)
    return forms


def _reduces(sch: Any, block: Any) -> bool:
    return any(iv.iter_type != SPATIAL for iv in sch.get(block).iter_vars)


def _extent(sch: Any, loop: Any) -> int | None:
    value = getattr(sch.get(loop).extent, "value", None)
    return value if isinstance(value, int) else None


def _row_loops(sch: Any, block: Any, rows: int) -> list[Any] | None:
    """The outermost loops of `block` whose extents multiply to `rows` (with the unit loops after
    them: RMSNorm's kept axis), None where none do."""
    out, product = [], 1
    for loop in sch.get_loops(block):
        extent = _extent(sch, loop)
        if product == rows and extent != 1:
            break
        if extent is None:
            return None
        out.append(loop)
        product *= extent
    return out if product == rows else None


def _vectorize_width(sch: Any, block: Any, rows: int, lanes: int) -> None:
    """An element-wise block's loop along a row (its innermost, outside the row loops) split into
    whole registers, the inner one vectorized; left as it is where no whole register divides it
    (a ragged split keeps a predicate TVM cannot vectorize) or it has no such loop.

    Why: LLVM left these loops scalar: BERT-base's masked attention softmax (12 x 128 rows of 128,
    its `fast_exp` a polynomial) ran 100.6 us a call warm in the best row form and 58.0 with its
    element-wise loops vectorized (106.7 and 70.0 cold; Intel `rocketlake`, bench/README.md
    "BERT-base on an Intel `rocketlake`, and row reductions' element-wise steps as vectors")."""
    loops = sch.get_loops(block)
    row_loops = _row_loops(sch, block, rows)
    extent = _extent(sch, loops[-1]) or 0
    if row_loops is None or len(row_loops) != len(loops) - 1 or extent < lanes or extent % lanes:
        return
    _, lane = sch.split(loops[-1], [None, lanes])
    sch.vectorize(lane)


def _form(mod: Any, lanes: int, joined: bool, parallel: bool) -> Any | None:
    """One form (`row_reduction_forms`): the rows are the loops outside the first reduction's
    axis; every block must run over them. None where the task is not of this kind."""
    from tvm.s_tir import Schedule

    from autosearch.networks.spatial import output_blocks, root_blocks

    sch = Schedule(mod)
    blocks = root_blocks(sch)
    if not blocks or len(blocks) > MAX_BLOCKS or not any(_reduces(sch, b) for b in blocks):
        return None
    if _reduces(sch, blocks[-1]):
        return None  # a matmul's or a pooling's output: the rows are an element-wise step's
    reductions = [b for b in blocks if _reduces(sch, b)]
    first = sch.get_loops(reductions[0])
    if any(_extent(sch, loop) is None for loop in first):
        return None
    rows = 1
    for loop in first[:-1]:
        rows *= _extent(sch, loop) or 0
    for block in reductions:  # one reduction axis, innermost, at least a register long, per row
        kinds = [iv.iter_type for iv in sch.get(block).iter_vars]
        loops = sch.get_loops(block)
        if kinds.count(REDUCTION) != 1 or kinds[-1] != REDUCTION or (_extent(sch, loops[-1]) or 0) < lanes:
            return None
        row_loops = _row_loops(sch, block, rows)
        if row_loops is None or len(row_loops) != len(loops) - 1:
            return None
    out_rows = _row_loops(sch, blocks[-1], rows)
    if out_rows is None or len(out_rows) == len(sch.get_loops(blocks[-1])):
        return None  # the output is not rows of a width (a matmul's epilogue: its rows are i x j)
    outputs = output_blocks(sch, blocks)
    for block in blocks:  # element-wise steps folded into their element-wise consumers
        if block in outputs or _reduces(sch, block) or any(_reduces(sch, c) for c in sch.get_consumers(block)):
            continue
        sch.compute_inline(block)
    for block in [b for b in root_blocks(sch) if _reduces(sch, b)]:
        loops = sch.get_loops(block)
        extent = _extent(sch, loops[-1]) or 0
        _, lane = sch.split(loops[-1], [None, lanes])
        partial = sch.rfactor(lane, len(loops) - 1)
        if extent % lanes == 0:  # a ragged axis keeps its predicate: TVM cannot vectorize it
            sch.vectorize(sch.get_loops(partial)[-1])
    for block in [b for b in root_blocks(sch) if not _reduces(sch, b)]:
        _vectorize_width(sch, block, rows, lanes)
    row_loops = []
    for block in root_blocks(sch):
        loops = _row_loops(sch, block, rows)
        if not loops:
            return None
        row_loops.append(sch.fuse(*loops) if len(loops) > 1 else loops[0])
    if joined:
        row_loops = [sch.merge(*row_loops)] if len(row_loops) > 1 else row_loops
    if parallel:
        for loop in row_loops:
            sch.parallel(loop)
    return sch
