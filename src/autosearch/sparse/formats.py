"""Format conversion: a canonical CSR matrix -> the arrays one SuperSchedule's kernel reads.

Why numpy only and vectorised: conversion is timed separately from the kernel and runs once per
(matrix, format) during collection, for matrices up to millions of nonzeros. Every converted
format keeps `perm` (stored slot -> CSR position, -1 for padding) so an SDDMM result in any
storage order can be checked against scipy, and `applicable` says *why* a format is refused
(padding blow-up, too many panels) before any array is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

__all__ = ["MAX_FILL", "Converted", "applicable", "convert", "fill_ratio"]

#: A padded format may store at most this many slots per real nonzero.
MAX_FILL = 6.0
_MAX_PANELS = 64
_MAX_ACC_FLOATS = 16384  # local accumulator of one unit (kept on the stack)


@dataclass
class Converted:
    """Arrays of one format. `units` is the outer loop's extent; `rows_pad`/`cols_pad` are the
    dense operands' padded row counts; `slots` the stored entries (SDDMM output length)."""

    fmt: str
    arrays: dict[str, np.ndarray]
    units: int
    rows_pad: int
    cols_pad: int
    slots: int
    perm: np.ndarray  # int64 (slots,): CSR position of each stored slot, -1 for padding
    ints: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def count_distinct(keys: np.ndarray) -> int:
    """Distinct values of an integer array by sort + diff: numpy 2.4's `np.unique` was over
    an order of magnitude slower on the keys of a large matrix (bench/HISTORY.md)."""
    if keys.size == 0:
        return 0
    s = np.sort(keys)
    return int(np.count_nonzero(np.diff(s))) + 1


def _unique_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, index of each key among them), as np.unique(return_inverse=True)."""
    order = np.argsort(keys, kind="stable")
    s = keys[order]
    new = np.concatenate([[True], s[1:] != s[:-1]]) if s.size else np.zeros(0, dtype=bool)
    inv = np.empty(keys.size, dtype=np.int64)
    inv[order] = np.cumsum(new) - 1
    return s[new], inv


def _rows_of(a: sp.csr_matrix) -> np.ndarray:
    return np.repeat(np.arange(a.shape[0], dtype=np.int64), np.diff(a.indptr))


def _ell_widths(a: sp.csr_matrix, s: int) -> np.ndarray:
    lens = np.diff(a.indptr).astype(np.int64)
    ns = -(-a.shape[0] // s)
    padded = np.zeros(ns * s, dtype=np.int64)
    padded[: lens.size] = lens
    return padded.reshape(ns, s).max(axis=1)


def _n_blocks(a: sp.csr_matrix, br: int, bc: int) -> int:
    kb = -(-a.shape[1] // bc)
    keys = (_rows_of(a) // br) * kb + a.indices.astype(np.int64) // bc
    return count_distinct(keys)


def fill_ratio(a: sp.csr_matrix, fmt: str, br: int = 1, bc: int = 1, slice_: int = 1) -> float:
    """Stored slots per real nonzero of a padded format (1.0 for the exact ones)."""
    nnz = max(a.nnz, 1)
    if fmt == "bcsr":
        return _n_blocks(a, br, bc) * br * bc / nnz
    if fmt == "ell":
        return float(_ell_widths(a, slice_).sum() * slice_) / nnz
    return 1.0


def applicable(a: sp.csr_matrix, cfg_fmt: str, br: int, bc: int, slice_: int, panel: int, acc_floats: int = 0) -> str:
    """Why this format cannot serve this matrix ('' when it can)."""
    if a.nnz == 0:
        return "the matrix has no nonzeros"
    if cfg_fmt in ("bcsr", "ell"):
        f = fill_ratio(a, cfg_fmt, br, bc, slice_)
        if f > MAX_FILL:
            what = f"bcsr {br}x{bc}" if cfg_fmt == "bcsr" else f"ell slices of {slice_}"
            return f"{what} would store {f:.1f}x the nonzeros (limit {MAX_FILL:g})"
    if cfg_fmt == "cpcsr":
        n_panels = -(-a.shape[1] // panel)
        if n_panels < 2:
            return f"panel width {panel} >= {a.shape[1]} columns: one panel is plain CSR"
        if n_panels > _MAX_PANELS:
            return f"{n_panels} panels of {panel} columns (limit {_MAX_PANELS})"
    if acc_floats > _MAX_ACC_FLOATS:
        return f"the accumulator of one unit needs {acc_floats} floats (limit {_MAX_ACC_FLOATS}); use order jk"
    return ""


def _i32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.int32)


def _csr(a: sp.csr_matrix) -> Converted:
    arrays = {"indptr": _i32(a.indptr), "indices": _i32(a.indices), "data": np.ascontiguousarray(a.data, np.float32)}
    return Converted("csr", arrays, a.shape[0], a.shape[0], a.shape[1], a.nnz, np.arange(a.nnz, dtype=np.int64))


def _dcsr(a: sp.csr_matrix) -> Converted:
    lens = np.diff(a.indptr)
    rowids = np.flatnonzero(lens > 0)
    ptr = np.concatenate([[0], np.cumsum(lens[rowids])])
    arrays = {
        "rowids": _i32(rowids),
        "indptr": _i32(ptr),
        "indices": _i32(a.indices),
        "data": np.ascontiguousarray(a.data, np.float32),
    }
    return Converted("dcsr", arrays, rowids.size, a.shape[0], a.shape[1], a.nnz, np.arange(a.nnz, dtype=np.int64))


def _csc(a: sp.csr_matrix) -> Converted:
    rows, cols = _rows_of(a), a.indices.astype(np.int64)
    perm = np.lexsort((rows, cols))
    colptr = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=a.shape[1]))])
    arrays = {
        "colptr": _i32(colptr),
        "rowidx": _i32(rows[perm]),
        "data": np.ascontiguousarray(a.data[perm], np.float32),
    }
    return Converted("csc", arrays, a.shape[1], a.shape[0], a.shape[1], a.nnz, perm.astype(np.int64))


def _bcsr(a: sp.csr_matrix, br: int, bc: int) -> Converted:
    m, k = a.shape
    mb, kb = -(-m // br), -(-k // bc)
    rows, cols = _rows_of(a), a.indices.astype(np.int64)
    keys = (rows // br) * kb + cols // bc
    ukeys, blk = _unique_inverse(keys)
    nb = ukeys.size
    bptr = np.concatenate([[0], np.cumsum(np.bincount(ukeys // kb, minlength=mb))])
    slot = blk * (br * bc) + (rows % br) * bc + (cols % bc)
    bdata = np.zeros(nb * br * bc, dtype=np.float32)
    bdata[slot] = a.data
    perm = np.full(nb * br * bc, -1, dtype=np.int64)
    perm[slot] = np.arange(a.nnz)
    arrays = {"bindptr": _i32(bptr), "bindices": _i32(ukeys % kb), "bdata": bdata}
    return Converted("bcsr", arrays, mb, mb * br, kb * bc, nb * br * bc, perm)


def _ell(a: sp.csr_matrix, s: int) -> Converted:
    m = a.shape[0]
    widths = _ell_widths(a, s)
    ns = widths.size
    soff = np.concatenate([[0], np.cumsum(widths * s)])
    rows = _rows_of(a)
    t = np.arange(a.nnz, dtype=np.int64) - a.indptr[rows]
    slot = soff[rows // s] + t * s + rows % s
    n = int(soff[-1])
    col = np.zeros(n, dtype=np.int32)
    val = np.zeros(n, dtype=np.float32)
    col[slot], val[slot] = a.indices, a.data
    perm = np.full(n, -1, dtype=np.int64)
    perm[slot] = np.arange(a.nnz)
    return Converted(
        "ell", {"soff": _i32(soff), "col": col, "val": val}, ns, ns * s, a.shape[1], n, perm, ints={"_m": m}
    )


def _cpcsr(a: sp.csr_matrix, panel: int) -> Converted:
    m, k = a.shape
    npn = -(-k // panel)
    rows, cols = _rows_of(a), a.indices.astype(np.int64)
    keys = (cols // panel) * m + rows
    perm = np.argsort(keys, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=npn * m))])
    arrays = {"pptr": _i32(ptr), "indices": _i32(cols[perm]), "data": np.ascontiguousarray(a.data[perm], np.float32)}
    return Converted("cpcsr", arrays, m, m, k, a.nnz, perm.astype(np.int64), ints={"npanels": npn})


def convert(a: sp.csr_matrix, fmt: str, br: int = 1, bc: int = 1, slice_: int = 1, panel: int = 0) -> Converted:
    """Convert canonical CSR (sorted, no duplicates) to `fmt`; the time taken is in `.seconds`."""
    import time

    t0 = time.perf_counter()
    if fmt == "csr":
        out = _csr(a)
    elif fmt == "dcsr":
        out = _dcsr(a)
    elif fmt == "csc":
        out = _csc(a)
    elif fmt == "bcsr":
        out = _bcsr(a, br, bc)
    elif fmt == "ell":
        out = _ell(a, slice_)
    elif fmt == "cpcsr":
        out = _cpcsr(a, panel)
    else:
        raise ValueError(f"unknown format {fmt!r}")
    out.seconds = time.perf_counter() - t0
    if not math.isfinite(out.seconds):
        out.seconds = 0.0
    return out
