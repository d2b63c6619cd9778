"""A design space as decision vectors, tokenized without TVM: tens of thousands of candidates a second.

Why: scoring a candidate that search holds as a TVM schedule first needs its trace out of TVM
(bench/scoring_breakdown.py), and tokenizing the text costs about as much again. But every candidate of one design space (one sketch) is the same instruction list with other
sampling decisions. So the tokens of the instructions before post-processing
(`trace_tokens.PREFIX_EXTRACTOR`) are a fixed matrix plus, per knob, a contribution that depends
on that knob's decision alone: a tile factor enters its Split's token, the loops it creates and
the summary token (sums), a categorical choice its Annotate's token. `DecisionSpace` works these
contributions out once per option (by the tokenizer itself, so the result is the tokenizer's),
and then the tokens of N decision vectors are N copies of the fixed matrix plus one table lookup
per knob: no parsing, no TVM, no Python per candidate. The one exception is the emulated
post-processing on Reorder rows (`trace_tokens.postproc._Post`: a parallel extent is a product of several
knobs' factors, no sum), worked out for all N vectors at once from the knobs' factor tables.

Knobs: `SamplePerfectTile` (every ordered factorisation of the loop's extent, innermost factor
within the instruction's limit; the extent is the product of the representative's factors) and
`SampleCategorical` (its candidates). A `SampleComputeLocation` changes the loop structure and
stays as the representative has it, as in the gradient search's sketches; so does any sampling
instruction this module does not know, and a tile with more than `MAX_OPTIONS` factorisations.

A vector is an int array of option indices, one per knob. `trace(x)` writes one back into the
representative's trace (instructions before post-processing + decisions): what MetaSchedule
replays, and then post-processes, to build and measure the candidate.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosearch.errors import InputError
from autosearch.features.trace_tokens.columns import _C_POSTPAR, PREFIX_FEATURE_WIDTH
from autosearch.features.trace_tokens.ir import parse_ir_blocks, workload_tokens
from autosearch.features.trace_tokens.plan import _compile
from autosearch.features.trace_tokens.tokenizer import _decisions, _parse, _positions, prefix_instructions

__all__ = ["MAX_OPTIONS", "DecisionSpace", "Knob", "RowPlan", "SketchHead", "decisions_by_inst", "factorizations"]

#: A tile knob with more factorisations than this stays fixed (tables are options x cells).
MAX_OPTIONS = 5000


def decisions_by_inst(decisions: Any) -> dict[int, Any]:
    """{instruction index: decision} of a trace's decisions (pairs or a dict), tile factors as
    tuples: the form `DecisionSpace.vector` and `DecisionSpace.fixed` compare."""
    items = decisions.items() if isinstance(decisions, dict) else decisions
    return {int(i): (tuple(d) if isinstance(d, list) else d) for i, d in items}


@functools.lru_cache(maxsize=4096)
def factorizations(extent: int, n: int, max_innermost: int = -1) -> tuple[tuple[int, ...], ...]:
    """Every ordered n-tuple of positive ints whose product is `extent` (innermost <= max_innermost)."""
    if extent < 1 or n < 1:
        return ()
    small = [d for d in range(1, math.isqrt(extent) + 1) if extent % d == 0]
    divisors = sorted({*small, *(extent // d for d in small)})

    def rec(rest: int, k: int) -> list[tuple[int, ...]]:
        if k == 1:
            return [(rest,)]
        return [(d, *tail) for d in divisors if rest % d == 0 for tail in rec(rest // d, k - 1)]

    out = rec(extent, n)
    if max_innermost > 0:
        out = [f for f in out if f[-1] <= max_innermost]
    return tuple(out)


@dataclass(frozen=True)
class RowPlan:
    """Which knobs move each token row of a space.

    Why: a network that reads each token row on its own first (tlp's per-token MLP, and its first
    attention layer's projections) computes, for a row no knob moves, one value for every
    candidate, and for a row one knob moves, one value per option of that knob; only rows two or
    more knobs move (the summary token) need computing per candidate."""

    const: np.ndarray  #: rows no knob moves
    single: tuple[tuple[int, int], ...]  #: (row, knob) for rows exactly one knob moves
    mixed: np.ndarray  #: rows two or more knobs move


@dataclass(frozen=True)
class Knob:
    """One free decision: the sampling instruction's index and the decisions it may take."""

    inst: int
    kind: str  # "tile" or "categorical"
    options: tuple[Any, ...]  # tile: factor tuples; categorical: candidate indices


@dataclass(frozen=True)
class SketchHead:
    """What tells one sketch from another: a trace's instructions before post-processing, its
    knobs and decisions. Why apart from `DecisionSpace`: it reads in a few milliseconds where a
    whole space (its token tables) takes tens, and most of the traces a search reads repeat a
    sketch it holds already (a convolution's 35 traces held 6 sketches)."""

    instructions: list[Any]
    knobs: list[Knob]
    representative: dict[int, Any]  #: decisions of the instructions the prefix has
    fixed: dict[int, Any]  #: the representative's decisions no knob moves (compute locations, ...)

    @classmethod
    def read(cls, trace: str | list[Any]) -> SketchHead:
        insts, decisions = _parse(trace)
        instructions = prefix_instructions(insts)
        rep = _decisions(decisions)
        knobs: list[Knob] = []
        for i, ins in enumerate(instructions):
            if i not in rep or not (ins.__class__ is list and len(ins) == 4):
                continue
            knob = _knob(i, ins, rep[i])
            if knob is not None:
                knobs.append(knob)
        # decisions of instructions the prefix has (post-processing decisions are not replayed)
        representative = {i: d for i, d in rep.items() if i < len(instructions)}
        knob_insts = {k.inst for k in knobs}
        fixed = {i: d for i, d in decisions_by_inst(representative).items() if i not in knob_insts}
        return cls(instructions, knobs, representative, fixed)

    @property
    def signature(self) -> str:
        """Equal for two traces of one sketch (the same instructions and fixed decisions)."""
        return repr((self.instructions, sorted(self.fixed.items())))


class DecisionSpace:
    """The candidates of one sketch (a trace with its decisions) as option-index vectors."""

    def __init__(
        self, trace: str | list[Any], ir: str, flops: float | None = None, head: SketchHead | None = None
    ) -> None:
        """`head`: the trace's `SketchHead` where the caller has read it already."""
        head = head if head is not None else SketchHead.read(trace)
        self.instructions, self.knobs, self.representative = head.instructions, head.knobs, head.representative
        #: The representative's decisions no knob moves (compute locations, ...), tile factors as tuples.
        self.fixed = head.fixed
        self.signature = head.signature
        self.current = np.asarray(
            [k.options.index(_norm(k, self.representative[k.inst])) for k in self.knobs], dtype=np.int64
        )
        blocks = {b.name: b for b in parse_ir_blocks(ir)}
        plan, _ = _compile(self.instructions, blocks)
        base = _positions(np.array(plan.apply(self.representative)))
        self.workload = workload_tokens(ir, flops, postproc=False)
        self.n_tokens = self.workload.shape[0] + base.shape[0]
        # the emulated post-processing columns (`trace_tokens.postproc._Post`) are no sum of per-knob
        # changes: they are worked out per candidate from the tile factors (`_post_values`)
        knob_of = {k.inst: j for j, k in enumerate(self.knobs)}
        self._posts: list[tuple[int, Any, list[tuple[int, Any]], int]] = []
        post_cells: list[int] = []
        for r, post in plan.posts:
            ext: list[tuple[int, Any]] = []  # per loop: (knob, its options' factor) or (-1, a fixed extent)
            for ref, fixed in zip(post.refs(), post.loop_extents(self.representative)):
                if isinstance(ref, tuple) and ref[0] in knob_of:
                    j = knob_of[ref[0]]
                    ext.append((j, np.asarray([o[ref[1]] for o in self.knobs[j].options], dtype=np.float64)))
                else:
                    ext.append((-1, fixed))
            self._posts.append((self.workload.shape[0] + r, post, ext, post.cut(self.representative)))
            post_cells += [r * PREFIX_FEATURE_WIDTH + _C_POSTPAR + c for c in range(3)]
        # per knob, each option's change to the cells any knob moves (`_moved`, flat indices into
        # the whole token matrix): tokens are then dense gathers and adds over those cells only
        flat = base.reshape(-1)
        changes: list[tuple[np.ndarray, np.ndarray]] = []
        for j, knob in enumerate(self.knobs):
            outs = np.empty((len(knob.options), base.size), dtype=np.float32)
            dec = dict(self.representative)
            for o, value in enumerate(knob.options):
                dec[knob.inst] = list(value) if knob.kind == "tile" else value
                outs[o] = plan.apply(dec).reshape(-1)  # the positions column is the same for all
            outs[:, post_cells] = outs[self.current[j], post_cells]
            cells = np.flatnonzero((outs != outs[self.current[j]]).any(axis=0))
            changes.append((cells, outs[:, cells] - flat[cells]))
        moved = np.unique(np.concatenate([c for c, _ in changes])) if changes else np.zeros(0, np.int64)
        self._deltas: list[np.ndarray] = []
        for cells, delta in changes:
            wide = np.zeros((delta.shape[0], moved.size), dtype=np.float32)
            wide[:, np.searchsorted(moved, cells)] = delta
            self._deltas.append(wide)
        self._moved = moved + self.workload.size
        self._base = np.concatenate([self.workload, base], axis=0).reshape(-1)

    @property
    def n_knobs(self) -> int:
        return len(self.knobs)

    @property
    def sizes(self) -> np.ndarray:
        """Options per knob."""
        return np.asarray([len(k.options) for k in self.knobs], dtype=np.int64)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n, knobs) vectors, every knob uniform over its options."""
        return (rng.random((int(n), self.n_knobs)) * self.sizes).astype(np.int64)

    def mutate(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A copy of `x` with one knob of every row resampled (to another option where it has one)."""
        x = np.array(x, dtype=np.int64, copy=True)
        if not self.n_knobs or not len(x):
            return x
        sizes = self.sizes
        j = rng.integers(0, self.n_knobs, size=len(x))
        step = 1 + (rng.random(len(x)) * np.maximum(sizes[j] - 1, 1)).astype(np.int64)
        x[np.arange(len(x)), j] = np.where(sizes[j] > 1, (x[np.arange(len(x)), j] + step) % sizes[j], 0)
        return x

    def validate(self, x: np.ndarray) -> np.ndarray:
        """`x` as (n, knobs) int64 option indices; InputError for an index outside its knob."""
        x = np.asarray(x, dtype=np.int64).reshape(-1, self.n_knobs)
        if len(x) and self.n_knobs and ((x < 0).any() or (x >= self.sizes).any()):
            raise InputError("a decision vector has an option index outside its knob's options")
        return x

    def tokens(self, x: np.ndarray) -> np.ndarray:
        """(n, n_tokens, PREFIX_FEATURE_WIDTH) float32: workload tokens, then trace-prefix tokens."""
        return self._rows(self.validate(x), np.arange(self.n_tokens), None)

    @functools.cached_property
    def row_plan(self) -> RowPlan:
        """The rows each knob moves (`RowPlan`)."""
        rows_of = self._moved // PREFIX_FEATURE_WIDTH
        knobs: list[set[int]] = [set() for _ in range(self.n_tokens)]
        for j, delta in enumerate(self._deltas):
            for r in np.unique(rows_of[(delta != 0).any(axis=0)]):
                knobs[r].add(j)
        for r, _post, ext, _cut in self._posts:
            knobs[r].update(j for j, table in ext if j >= 0 and np.unique(table).size > 1)
        movers = np.asarray([len(k) for k in knobs], dtype=np.int64)
        single = tuple((int(r), min(knobs[r])) for r in np.flatnonzero(movers == 1))
        return RowPlan(np.flatnonzero(movers == 0), single, np.flatnonzero(movers > 1))

    def row_tokens(self, x: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """(n, len(rows), PREFIX_FEATURE_WIDTH) float32: `tokens(x)[:, rows]` without the other rows."""
        return self._rows(self.validate(x), np.asarray(rows, dtype=np.int64), None)

    def option_tokens(self, knob: int, rows: np.ndarray) -> np.ndarray:
        """(options of `knob`, len(rows), PREFIX_FEATURE_WIDTH): the rows with the knob at each option and
        the other knobs at the representative's (exact for rows only this knob moves)."""
        return self._rows(None, np.asarray(rows, dtype=np.int64), knob)

    def _rows(self, x: np.ndarray | None, rows: np.ndarray, knob: int | None) -> np.ndarray:
        """Token rows `rows` of vectors `x`, or of every option of `knob` (the others as represented):
        the fixed rows plus each knob's change, summed over the moved cells of those rows only."""
        base = self._base.reshape(self.n_tokens, PREFIX_FEATURE_WIDTH)[rows].reshape(-1)
        n = len(self.knobs[knob].options) if knob is not None else len(x)  # type: ignore[arg-type]
        out = np.broadcast_to(base, (n, base.size)).copy()
        where = np.full(self.n_tokens, -1, dtype=np.int64)
        where[rows] = np.arange(rows.size)
        sel = np.flatnonzero(where[self._moved // PREFIX_FEATURE_WIDTH] >= 0)
        if sel.size:
            dest = (
                where[self._moved[sel] // PREFIX_FEATURE_WIDTH] * PREFIX_FEATURE_WIDTH
                + self._moved[sel] % PREFIX_FEATURE_WIDTH
            )
            # every moved cell (the whole-matrix `tokens`): views of the changes, no copies
            cols: np.ndarray | slice = slice(None) if sel.size == self._moved.size else sel
            if knob is not None:
                out[:, dest] = base[dest] + self._deltas[knob][:, cols]
            else:
                assert x is not None
                moved = base[dest] + self._deltas[0][x[:, 0]][:, cols]
                for j in range(1, self.n_knobs):
                    moved += self._deltas[j][x[:, j]][:, cols]
                out[:, dest] = moved
        out = out.reshape(n, rows.size, PREFIX_FEATURE_WIDTH)
        if self._posts:
            self._post_values(out, x, knob, where)
        return out

    def _post_values(self, out: np.ndarray, x: np.ndarray | None, knob: int | None, where: np.ndarray) -> None:
        """Write the emulated post-processing columns of the requested rows that hold them."""
        if x is None:  # every option of `knob`, the others as represented
            assert knob is not None
            x = np.broadcast_to(self.current, (len(self.knobs[knob].options), self.n_knobs)).copy()
            x[:, knob] = np.arange(len(x))
        for r, values in self._emulated(x, where >= 0):
            out[:, where[r], _C_POSTPAR : _C_POSTPAR + 3] = values

    def _emulated(self, x: np.ndarray, wanted: np.ndarray | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """(token row, (n, 3) emulated post-processing columns) of every tiled nest for vectors `x`,
        only for rows `wanted` marks (all if None)."""
        for r, post, ext, cut in self._posts:
            if wanted is None or wanted[r]:
                loops = [table[x[:, j]] if j >= 0 else np.full(len(x), table) for j, table in ext]
                yield r, post.values(loops, cut)

    def structure(self, x: np.ndarray) -> np.ndarray:
        """(n, m) float32: what each vector makes of the loop structure after post-processing (the
        emulated parallel extent, parallel loop count and vector extent of every tiled nest) and
        its categorical choices (unroll depth): the coarse shape that tile sizes vary within.

        Why: candidates that share this and differ only in inner tile sizes mostly run alike, so a
        search that picks many of them in one round learns little from the measurements."""
        x = self.validate(x)
        cols = [x[:, j].astype(np.float32) for j, k in enumerate(self.knobs) if k.kind == "categorical"]
        for _r, values in self._emulated(x):
            cols += list(values.T)
        return np.stack(cols, axis=1) if cols else np.zeros((len(x), 0), dtype=np.float32)

    @functools.cached_property
    def _option_index(self) -> list[dict[Any, int]]:
        return [{o: j for j, o in enumerate(k.options)} for k in self.knobs]

    def vector(self, decisions: dict[int, Any]) -> np.ndarray | None:
        """The vector of a candidate's decisions ({instruction index: decision}, tile factors as
        tuples); None if one is no option of its knob, or a decision the space keeps fixed (a
        compute location) differs: then the candidate is not in this space."""
        vec = np.empty(self.n_knobs, dtype=np.int64)
        for j, knob in enumerate(self.knobs):
            o = self._option_index[j].get(decisions.get(knob.inst))
            if o is None:
                return None
            vec[j] = o
        if any(decisions.get(i) != d for i, d in self.fixed.items()):
            return None
        return vec

    def decisions(self, x: np.ndarray) -> list[list[Any]]:
        """MetaSchedule's decision list ([instruction index, decision] pairs) of one vector."""
        dec = dict(self.representative)
        for knob, o in zip(self.knobs, self.validate(x).reshape(-1)):
            v = knob.options[int(o)]
            dec[knob.inst] = list(v) if knob.kind == "tile" else int(v)
        return [[i, dec[i]] for i in sorted(dec)]

    def trace(self, x: np.ndarray) -> list[Any]:
        """The trace JSON of one vector: the instructions before post-processing and its decisions."""
        return [self.instructions, self.decisions(x)]


def _norm(knob: Knob, d: Any) -> Any:
    return tuple(int(v) for v in d) if knob.kind == "tile" else int(d)


def _knob(i: int, ins: list[Any], decision: Any) -> Knob | None:
    kind, attrs = ins[0], ins[2]
    try:
        if kind == "SamplePerfectTile":
            factors = tuple(int(v) for v in decision)
            if not factors or min(factors) < 1:
                return None
            limit = int(attrs[1]) if len(attrs) > 1 else -1
            extent = math.prod(factors)
            opts = factorizations(extent, len(factors), limit)
            if len(opts) > MAX_OPTIONS or factors not in opts:
                return None
            return Knob(i, "tile", opts)
        if kind == "SampleCategorical":
            n = len(attrs[0])
            if not 0 <= int(decision) < n:
                return None
            return Knob(i, "categorical", tuple(range(n)))
    except (TypeError, ValueError, IndexError):
        return None
    return None
