"""What the sparse cost models read: the pattern image, SpTFS-style matrix info, SuperSchedule tokens.

Why a fixed-size density image: WACO-style networks see the sparsity pattern, and the seed notes
ran out of memory on big matrices; binning the nonzeros into IMAGE x IMAGE cells costs O(nnz)
time and a constant IMAGE^2 floats whatever the matrix size. Every number is normalised to
roughly [0, 1] (the seed: "the mapped numbers are too large, normalise them").
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from autosearch.sparse.formats import count_distinct
from autosearch.sparse.space import FORMATS, OPS, SuperSchedule

__all__ = [
    "CFG_DIM",
    "EXTRACTOR",
    "IMAGE",
    "INFO_DIM",
    "PRIMITIVES",
    "TOKEN_DIM",
    "config_tokens",
    "config_vector",
    "matrix_info",
    "pattern_image",
]

#: Name and version under which these features are known (bump on any change).
EXTRACTOR = ("sparse-pattern+superschedule-tokens", "1")
IMAGE = 64
#: The seed's primitive vocabulary, one token each.
PRIMITIVES = (
    "fsplit", "freorder", "fmode", "lsplit", "lreorder", "parallel", "vectorize", "unroll",
    "matrix_info", "matrix_embedding",
)  # fmt: skip
INFO_DIM = 14
_NUM = 16  # numeric slots of a token
#: token = primitive one-hot | op one-hot | format one-hot | numeric slots
TOKEN_DIM = len(PRIMITIVES) + len(OPS) + len(FORMATS) + _NUM
#: length of `config_vector`
CFG_DIM = len(OPS) + len(FORMATS) + 12


def pattern_image(a: sp.csr_matrix, size: int = IMAGE) -> np.ndarray:
    """(2, size, size) float32: log nonzero count per cell (scaled by the max) and occupancy.

    Cells map the whole matrix (rows and columns scaled separately), so shapes of any size fit.
    """
    rows = np.repeat(np.arange(a.shape[0], dtype=np.int64), np.diff(a.indptr))
    r = rows * size // max(a.shape[0], 1)
    c = a.indices.astype(np.int64) * size // max(a.shape[1], 1)
    counts = np.bincount(r * size + c, minlength=size * size).astype(np.float32).reshape(size, size)
    img = np.log1p(counts)
    peak = float(img.max()) or 1.0
    return np.stack([img / peak, (counts > 0).astype(np.float32)]).astype(np.float32)


def matrix_info(a: sp.csr_matrix) -> np.ndarray:
    """INFO_DIM floats: normalised shape, nnz, density and row-length / locality statistics (SpTFS)."""
    m, k = a.shape
    nnz = max(a.nnz, 1)
    lens = np.diff(a.indptr).astype(np.float64)
    mean = lens.mean() if lens.size else 0.0
    rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(a.indptr))
    cols = a.indices.astype(np.int64)
    diag_dist = np.abs(rows / max(m, 1) - cols / max(k, 1))
    kb = -(-k // 4)
    blocks4 = count_distinct((rows // 4) * kb + cols // 4)
    widths8 = np.pad(lens, (0, (-m) % 8)).reshape(-1, 8).max(axis=1)
    info = [
        math.log10(m) / 6,
        math.log10(k) / 6,
        math.log10(nnz) / 8,
        -math.log10(nnz / (m * k)) / 8,
        math.log2(1 + mean) / 10,
        float(lens.std() / mean) / 10 if mean > 0 else 0.0,
        math.log2(1 + float(lens.max(initial=0))) / 16,
        float((lens == 0).mean()),
        float((diag_dist < 0.01).mean()),
        float(diag_dist.mean()) * 2,
        nnz / (blocks4 * 16),  # how full 4x4 blocks would be (BCSR)
        nnz / max(float(widths8.sum() * 8), 1.0),  # how full ELL slices of 8 would be
        math.log2(1 + k / m) / 4,
        float(np.mean(np.diff(cols)[np.diff(rows) == 0] <= 2)) if nnz > 1 else 0.0,  # runs of neighbours
    ]
    return np.nan_to_num(np.asarray(info, dtype=np.float32), nan=0.0, posinf=1.0)


def _l2(x: int, scale: float) -> float:
    return math.log2(max(x, 1)) / scale


def _token(kind: str, nums: list[float], op: str = "", fmt: str = "") -> np.ndarray:
    t = np.zeros(TOKEN_DIM, dtype=np.float32)
    t[PRIMITIVES.index(kind)] = 1.0
    base = len(PRIMITIVES)
    if op:
        t[base + OPS.index(op)] = 1.0
    if fmt:
        t[base + len(OPS) + FORMATS.index(fmt)] = 1.0
    off = base + len(OPS) + len(FORMATS)
    t[off : off + len(nums)] = nums[:_NUM]
    return t


def config_tokens(c: SuperSchedule, info: np.ndarray | None = None, embedding_token: bool = True) -> np.ndarray:
    """(T, TOKEN_DIM): one token per primitive of the seed's vocabulary, numbers normalised.

    The `matrix_embedding` token is a placeholder the model overwrites with its pattern embedding
    (the 'token' placement); with `embedding_token=False` it is left out (the 'concat' placement).
    """
    info_list = [] if info is None else [float(v) for v in info]
    toks = [
        _token("fmode", [_l2(c.dense, 12)], c.op, c.fmt),
        _token("fsplit", [_l2(c.br, 3), _l2(c.bc, 3), _l2(c.slice, 5), _l2(c.panel, 14), float(c.panel > 0)]),
        _token("freorder", [float(c.fmt == "csc"), float(c.fmt == "cpcsr"), float(c.fmt == "ell")]),
        _token("lsplit", [_l2(c.chunk, 8), _l2(c.vec, 4), _l2(c.unroll, 3)]),
        _token("lreorder", [float(c.order == "jk")]),
        _token("parallel", [float(c.parallel), _l2(c.chunk, 8)]),
        _token("vectorize", [float(c.vectorize), _l2(c.vec, 4)]),
        _token("unroll", [_l2(c.unroll, 3)]),
        _token("matrix_info", info_list),
    ]
    if embedding_token:
        toks.append(_token("matrix_embedding", []))
    return np.stack(toks)


def config_vector(c: SuperSchedule) -> np.ndarray:
    """A flat vector of a configuration (WACONet's schedule input): one-hots and normalised knobs."""
    v = np.zeros(CFG_DIM, dtype=np.float32)
    v[OPS.index(c.op)] = 1.0
    v[len(OPS) + FORMATS.index(c.fmt)] = 1.0
    v[len(OPS) + len(FORMATS) :] = [
        _l2(c.dense, 12), _l2(c.br, 3), _l2(c.bc, 3), _l2(c.slice, 5), _l2(c.panel, 14), float(c.parallel),
        _l2(c.chunk, 8), float(c.order == "jk"), _l2(c.vec, 4), float(c.vectorize), _l2(c.unroll, 3),
        float(c.panel > 0),
    ]  # fmt: skip
    return v
