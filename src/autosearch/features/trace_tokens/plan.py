"""The trace compiler: instructions to token rows, decision-dependent values left open (`_Plan`).

Why: a workload's traces share a few hundred distinct prefixes that differ only in their
decisions, so a run of instructions is compiled once (`_compile`) into a plan whose sampled
values are resolved per candidate; folded instructions (look-ups, samples) write what they
produce into the state that later tokens read (`_State`, `_fold`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosearch.errors import InputError
from autosearch.features.trace_tokens.columns import (
    _ANN_COL,
    _ANN_OTHER,
    _C_BUF,
    _C_CHOICE,
    _C_EXT,
    _C_EXTK,
    _C_F0,
    _C_INL,
    _C_LDEPTH,
    _C_LDER,
    _C_LEVELS,
    _C_LOC,
    _C_LPOS,
    _C_LR,
    _C_LS,
    _C_NIN,
    _C_NOUT,
    _C_POST,
    _C_POSTPAR,
    _C_PRES,
    _C_ROOT,
    _C_TR,
    _C_TS,
    _C_VAL,
    _C_VR,
    _C_VS,
    _COL,
    _KIND_COL,
    _KIND_OTHER,
    _LOG2,
    _ROLE_COL,
    _SCOPE_COL,
    _WIDTH,
    FOLDED_KINDS,
    MAX_TRACE_TOKENS,
    _log2,
)
from autosearch.features.trace_tokens.ir import _Block
from autosearch.features.trace_tokens.postproc import _Limits, _Post
from autosearch.features.trace_tokens.sym import _Sym

__all__ = [
    "_Cols",
    "_Plan",
    "_State",
    "_compile",
    "_effects",
    "_fold",
    "_token",
]

_BUFFER_KINDS = frozenset({"CacheRead", "CacheWrite", "ReIndex", "TransformLayout", "StorageAlign", "SetScope"})
_CREATES_BLOCK = frozenset({"CacheRead", "CacheWrite", "ReIndex", "DecomposeReduction", "RFactor", "Blockize"})
_LOCATION_KINDS = frozenset({"ComputeAt", "ReverseComputeAt"})


class _State:
    """What the folded instructions told us: sampled variables, roles of blocks and loops."""

    __slots__ = ("block", "emulate", "limits", "loop", "name", "post", "seen_nest", "summary", "value")

    def __init__(self, post: float = 0.0, emulate: bool = True) -> None:
        self.emulate = emulate  # work out the post-processing of tiled nests (`_Post`: prefix tokens only)
        self.value: dict[str, Any] = {}  # sampled variable -> _Sym (tile factor, categorical, location)
        self.block: dict[str, str] = {}  # block variable -> role
        self.name: dict[str, str] = {}  # block variable -> IR block name (GetSBlock)
        self.loop: dict[str, tuple[float, float, Any, float, str]] = {}  # loop -> (pos, depth, extent, derived, S/R)
        self.post = post
        self.seen_nest: set[str] = set()  # blocks whose original loop nest was already read
        self.summary: _Cols | None = None  # the summary token's columns, while compiling from the start
        self.limits = _Limits()


def _fold(kind: str, idx: int, ins: list[Any], st: _State, blocks: dict[str, _Block]) -> None:
    """Record what a folded instruction produces (its decision, if any, as a _Sym)."""
    inputs, attrs, outs = ins[1], ins[2], ins[3]
    if kind == "GetSBlock":
        name = attrs[0] if attrs else ""
        b = blocks.get(name)
        if outs:
            st.name[outs[0]] = name
            st.block[outs[0]] = (
                "root" if name == "root" else ("found" if b is None else ("reduction" if b.reduce else "spatial"))
            )
    elif kind == "GetLoops":
        n = len(outs)
        name = st.name.get(inputs[0], "") if inputs else ""
        b = blocks.get(name) if name else None
        exts = (
            b.extents if (b is not None and not st.post and name not in st.seen_nest and len(b.extents) == n) else None
        )
        if b is not None:
            st.seen_nest.add(name)
        depth = _log2(1 + n)
        axes = b.axes if (exts and b is not None and len(b.axes) == n) else ""
        for i, lv in enumerate(outs):
            st.loop[lv] = (i / n, depth, exts[i] if exts else 0, 0.0, axes[i] if axes else "")
    elif kind in ("GetChildBlocks", "GetProducers", "GetConsumers", "GetOutputBlocks"):
        for o in outs:
            st.block[o] = "found"
    elif kind == "SamplePerfectTile":
        for k, o in enumerate(outs):
            st.value[o] = _Sym("tile", idx, k)
    elif kind == "SampleCategorical":
        if outs and attrs and isinstance(attrs[0], list):
            st.value[outs[0]] = _Sym("cat", idx, 0, tuple(attrs[0]))
    elif kind == "SampleComputeLocation":
        if outs:
            st.value[outs[0]] = _Sym("loc", idx)
    elif kind == "EnterPostproc":
        st.post = 1.0


_Cols = list[tuple[int, Any]]  # (column, float or _Sym)


def _token(kind: str, ins: list[Any], st: _State) -> _Cols:
    """(column, value) pairs of one token; a value may be a _Sym resolved per candidate."""
    inputs, attrs, outs = ins[1], ins[2], ins[3]
    cols: _Cols = [(_KIND_COL.get(kind, _KIND_OTHER), 1.0), (_C_NIN, _LOG2[min(len(inputs) + 1, 4096)])]
    if st.post:
        cols.append((_C_POST, 1.0))
    if outs:
        cols.append((_C_NOUT, _LOG2[min(len(outs) + 1, 4096)]))
    first = inputs[0] if inputs else None
    if first.__class__ is str:
        role = st.block.get(first)
        if role is not None:
            cols.append((_ROLE_COL[role], 1.0))
        else:
            loop = st.loop.get(first)
            if loop is not None:
                cols += [(_C_LPOS, loop[0]), (_C_LDEPTH, loop[1]), (_C_LDER, loop[3])]
                if loop[4]:
                    cols.append((_C_LS if loop[4] == "S" else _C_LR, 1.0))
                ext = loop[2]
                if ext.__class__ is _Sym:
                    cols += [(_C_EXT, ext.derive("ext")), (_C_EXTK, 1.0)]
                elif ext:
                    cols += [(_C_EXT, _log2(1 + ext)), (_C_EXTK, 1.0)]
    if attrs and attrs[0].__class__ is bool:
        cols.append((_C_PRES, float(attrs[0])))
    if kind == "Split":
        _split(inputs, outs, st, cols)
    elif kind == "Annotate":
        _annotate(inputs, attrs, st, cols)
    elif kind in _LOCATION_KINDS and len(inputs) > 1:
        loc = st.value.get(inputs[1])
        if loc is not None:
            cols += [(_C_INL, loc.derive("inline")), (_C_ROOT, loc.derive("root")), (_C_LOC, loc)]
            if st.limits.last is not None and not st.post:
                st.limits.last.located.append(loc.inst)
        elif (info := st.loop.get(inputs[1])) is not None:
            cols += [(_C_LPOS, info[0]), (_C_LDEPTH, info[1])]
            st.limits.multi.add(inputs[1])
    elif kind == "Reorder" and st.emulate and not st.post:
        loops = [st.loop.get(lv) for lv in inputs]
        if inputs and all(info is not None and info[4] for info in loops):
            post = _Post(list(inputs), [info[2] for info in loops], "".join(info[4] for info in loops), st.limits)  # type: ignore[index]
            cols.append((_C_POSTPAR, post))
            st.limits.last = post
    elif kind in _BUFFER_KINDS:
        if attrs and attrs[0].__class__ is int:
            cols.append((_C_BUF, _log2(1 + attrs[0])))
        if kind in ("CacheRead", "CacheWrite", "SetScope"):
            scope = next((a for a in attrs if isinstance(a, str) and a in _SCOPE_COL), "other")
            cols.append((_SCOPE_COL[scope], 1.0))
    elif kind == "Bind" and attrs and isinstance(attrs[0], str):
        col = _COL.get(f"thread={attrs[0].split('.')[0]}")
        if col is not None:
            cols.append((col, 1.0))
    elif kind == "RFactor" and attrs and attrs[0].__class__ is int:
        cols.append((_C_VAL, float(attrs[0])))
    _effects(kind, ins, st)
    return cols


def _effects(kind: str, ins: list[Any], st: _State) -> None:
    """What a token instruction changes in the state (besides a Split's loops, set by _split)."""
    if kind == "Fuse":
        ext: Any = 1
        for lv in ins[1]:
            info = st.loop.get(lv)
            e = info[2] if info else 0
            ext = ext * e if (ext and e and e.__class__ is int) else 0
        for o in ins[3]:
            st.loop[o] = (0.0, 0.0, ext, 1.0, "")
    elif kind in _CREATES_BLOCK:
        for o in ins[3]:
            st.block[o] = "created"


def _split(inputs: list[Any], outs: list[Any], st: _State, cols: _Cols) -> None:
    factors = [st.value.get(f, 0) if f.__class__ is str else f for f in inputs[1:]]
    cols.append((_C_LEVELS, float(len(factors))))
    for i, f in enumerate(factors[:5]):
        if f.__class__ is _Sym:
            cols.append((_C_F0 + i, f))
        elif f.__class__ is int and f > 0:
            cols.append((_C_F0 + i, _log2(f) + 1.0))
    n = max(len(outs), 1)
    parent = st.loop.get(inputs[0]) if inputs else None
    depth, axis = (parent[1], parent[4]) if parent else (0.0, "")
    for i, (o, f) in enumerate(zip(outs, factors)):
        st.loop[o] = (i / n, depth, f if (f.__class__ is _Sym or (f.__class__ is int and f > 0)) else 0, 1.0, axis)
    if axis and st.summary is not None:  # the tiling as a whole: log2 tile sizes per level and axis kind
        base = _C_TS if axis == "S" else _C_TR
        for i, f in enumerate(factors[:5]):
            if f.__class__ is _Sym:
                st.summary.append((base + i, f.derive("acc")))
            elif f.__class__ is int and f > 0:
                st.summary.append((base + i, _log2(f)))


def _annotate(inputs: list[Any], attrs: list[Any], st: _State, cols: _Cols) -> None:
    key = attrs[0] if attrs and isinstance(attrs[0], str) else ""
    cols.append((_ANN_COL.get(key, _ANN_OTHER), 1.0))
    val = inputs[1] if len(inputs) > 1 else None
    if val.__class__ is str and val in st.value:
        sym = st.value[val]
        cols += [(_C_VAL, sym), (_C_CHOICE, sym.derive("choice"))]
    elif isinstance(val, bool):
        cols.append((_C_VAL, float(val)))
    elif isinstance(val, (int, float)):
        cols.append((_C_VAL, _log2(1 + max(float(val), 0.0))))
        if key == "meta_schedule.parallel" and isinstance(val, int):
            st.limits.par = val
        elif key == "meta_schedule.vectorize" and isinstance(val, int):
            st.limits.vec = val
    elif isinstance(val, str) and val.startswith('"'):
        text = val.strip('"')
        cols += [(_C_VS, float(text.count("S"))), (_C_VR, float(text.count("R")))]


_TILE_CODE = {"tile": 0, "ext": 1, "acc": 2}  # how a tile factor f enters a column: log2 f + 1, log2(1 + f), log2 f


class _Plan:
    """Tokens of a run of instructions with the decision-dependent values left open.

    Why: a workload's traces share a few hundred distinct pre-post-processing prefixes that
    differ only in their decisions; a prefix is compiled once and then only its decisions are
    resolved per candidate (tile factors in one vectorised step).
    """

    __slots__ = ("others", "posts", "static", "tiles")

    def __init__(self, rows: list[_Cols]) -> None:
        self.static = np.zeros((len(rows), _WIDTH), dtype=np.float32)
        tiles: list[tuple[int, int, int, int, int]] = []
        self.others: list[tuple[int, int, _Sym]] = []
        self.posts: list[tuple[int, _Post]] = []  # (row, _Post): its 3 columns from _C_POSTPAR on
        r_idx, c_idx, vals = [], [], []
        for r, cols in enumerate(rows):
            for c, v in cols:
                if v.__class__ is _Post:
                    self.posts.append((r, v))
                elif v.__class__ is _Sym:
                    if v.kind in _TILE_CODE:
                        tiles.append((r, c, v.inst, v.k, _TILE_CODE[v.kind]))
                    else:
                        self.others.append((r, c, v))
                else:
                    r_idx.append(r)
                    c_idx.append(c)
                    vals.append(v)
        if r_idx:  # add, not assign: the summary token sums several values into one column
            np.add.at(self.static, (np.asarray(r_idx), np.asarray(c_idx)), np.asarray(vals, dtype=np.float32))
        t = np.asarray([x[:4] for x in tiles], dtype=np.int64).reshape(-1, 4)
        self.tiles = (
            t[:, 0],
            t[:, 1],
            [(int(i), int(k)) for i, k in t[:, 2:]],
            np.asarray([x[4] for x in tiles], np.int64),
        )

    def apply(self, dec: dict[int, Any]) -> np.ndarray:
        if not self.others and not self.tiles[2] and not self.posts:
            return self.static
        out = self.static.copy()
        for r, post in self.posts:
            out[r, _C_POSTPAR : _C_POSTPAR + 3] = post.resolve(dec)
        rows, cols, where, code = self.tiles
        if where:
            try:
                f = np.asarray([dec[i][k] for i, k in where], dtype=np.float64)
            except (KeyError, IndexError, TypeError, ValueError):
                f = np.asarray([_Sym("ext", i, k).resolve(dec) for i, k in where])  # slow, tolerant path
                f = np.exp2(f) - 1.0
            ok = f > 0
            lg = np.log2(np.where(ok, f, 1.0))
            val = np.where(code == 1, np.log2(np.where(ok, f, 0.0) + 1.0), lg + (code == 0))
            np.add.at(out, (rows, cols), np.where(ok, val, 0.0).astype(np.float32))
        for r, c, sym in self.others:
            out[r, c] = sym.resolve(dec)
        return out


def _compile(
    insts: list[Any],
    blocks: dict[str, _Block],
    start: int = 0,
    st: _State | None = None,
    budget: int = MAX_TRACE_TOKENS,
) -> tuple[_Plan, int]:
    """Plan of `insts` (global instruction indices from `start`); returns it and the uncropped token count."""
    st = st or _State()
    rows: list[_Cols] = []
    n = 0
    if start == 0:  # the summary token comes first; the Splits fill it in as they come
        st.summary = [(_KIND_COL["summary"], 1.0)]
        rows.append(st.summary)
        n = 1
    for i, ins in enumerate(insts):
        if not (ins.__class__ is list and len(ins) == 4 and ins[0].__class__ is str):
            raise InputError(f"trace instruction {start + i} is not [kind, inputs, attrs, outputs]")
        kind = ins[0]
        if kind in FOLDED_KINDS:
            _fold(kind, start + i, ins, st, blocks)
            continue
        cols = _token(kind, ins, st)
        if n < budget:
            rows.append(cols)
        n += 1
    return _Plan(rows), n
