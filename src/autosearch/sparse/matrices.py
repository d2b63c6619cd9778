"""Sparse matrices to tune for: a seeded generator of pattern families and a Matrix Market loader.

Why families: a format wins or loses on structure (row-length skew, bands, dense blocks,
communities), so the generator must produce patterns that differ in exactly those ways, and
held-out evaluation must be able to leave a whole family out. Every generated matrix is
reproducible from its `MatrixSpec` (family, shape, average row length, seed), and its content hash
is checked when it is regenerated, so a store record always names the matrix it was measured on.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from autosearch.errors import InputError

__all__ = [
    "FAMILIES",
    "MatrixSpec",
    "generate",
    "load_matrix",
    "load_mtx",
    "matrix_hash",
    "random_spec",
]

#: Generator families: how the rows' nonzeros are placed.
FAMILIES = ("uniform", "powerlaw", "banded", "blockdiag", "community", "diagnoise")
_MAX_NNZ = 20_000_000


@dataclass(frozen=True)
class MatrixSpec:
    """How to rebuild a matrix: a generator family with its shape, or a Matrix Market file."""

    family: str
    rows: int
    cols: int
    avg_row: float = 8.0  # mean nonzeros per row (density = avg_row / cols)
    seed: int = 0
    path: str = ""  # family == "mtx": the file it was read from
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES + ("mtx",):
            raise InputError(f"unknown matrix family {self.family!r}; choose one of {', '.join(FAMILIES)}")
        if self.rows < 1 or self.cols < 1:
            raise InputError(f"matrix shape must be positive, got {self.rows}x{self.cols}")
        if self.family != "mtx" and not (0 < self.avg_row <= self.cols):
            raise InputError(f"avg_row must be in (0, cols={self.cols}], got {self.avg_row}")
        if self.family != "mtx" and self.rows * self.avg_row > _MAX_NNZ:
            raise InputError(f"{self.rows} rows x {self.avg_row} per row exceeds {_MAX_NNZ} nonzeros")

    @property
    def name(self) -> str:
        if self.family == "mtx":
            return f"mtx-{Path(self.path).stem}"
        return f"{self.family}-{self.rows}x{self.cols}-r{self.avg_row:g}-s{self.seed}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MatrixSpec:
        try:
            return cls(**d)
        except TypeError as exc:
            raise InputError(f"bad matrix spec {d!r}: {exc}") from None


def matrix_hash(a: sp.csr_matrix) -> str:
    """Content hash of the pattern and values (canonical CSR, float32)."""
    a = sp.csr_matrix(a, dtype=np.float32)
    a.sum_duplicates()
    a.sort_indices()
    h = hashlib.sha256()
    h.update(np.asarray(a.shape, dtype=np.int64).tobytes())
    for arr in (a.indptr.astype(np.int64), a.indices.astype(np.int64), a.data.astype(np.float32)):
        h.update(arr.tobytes())
    return h.hexdigest()[:24]


def _row_lengths(rng: np.random.Generator, spec: MatrixSpec, skew: bool) -> np.ndarray:
    if skew:  # Zipf-like: a few hub rows hold much of the matrix, as in graphs
        w = rng.pareto(1.2, spec.rows) + 1.0
    else:
        w = rng.poisson(spec.avg_row, spec.rows).astype(np.float64) + 0.5
    lens = np.floor(w / w.sum() * spec.rows * spec.avg_row + rng.random(spec.rows)).astype(np.int64)
    return np.minimum(lens, spec.cols)


def _cols_uniform(rng: np.random.Generator, lens: np.ndarray, cols: int) -> tuple[np.ndarray, np.ndarray]:
    rows = np.repeat(np.arange(lens.size), lens)
    return rows, rng.integers(0, cols, rows.size)


def _cols_banded(rng: np.random.Generator, spec: MatrixSpec, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    half = max(1, int(spec.extra.get("bandwidth", max(2 * spec.avg_row, 4))))
    rows = np.repeat(np.arange(lens.size), lens)
    centre = (rows * (spec.cols / spec.rows)).astype(np.int64)
    return rows, np.clip(centre + rng.integers(-half, half + 1, rows.size), 0, spec.cols - 1)


def _cols_blocks(rng: np.random.Generator, spec: MatrixSpec, diag_only: bool) -> tuple[np.ndarray, np.ndarray]:
    """Dense-ish b x b blocks: on the diagonal (block-diagonal) or scattered (block-sparse)."""
    b = int(spec.extra.get("block", rng.choice([2, 4, 8])))
    fill = float(spec.extra.get("fill", rng.uniform(0.6, 1.0)))
    nbr, nbc = max(1, spec.rows // b), max(1, spec.cols // b)
    blocks_per_row = max(1, round(spec.avg_row / (b * fill)))
    br = np.repeat(np.arange(nbr), blocks_per_row)
    if diag_only:
        offs = rng.integers(-2, 3, br.size)
        bc = np.clip((br * (nbc / nbr)).astype(np.int64) + offs, 0, nbc - 1)
    else:
        bc = rng.integers(0, nbc, br.size)
    ii, jj = np.meshgrid(np.arange(b), np.arange(b), indexing="ij")
    rows = (br[:, None] * b + ii.reshape(1, -1)).reshape(-1)
    cols = (bc[:, None] * b + jj.reshape(1, -1)).reshape(-1)
    keep = rng.random(rows.size) < fill
    return rows[keep], cols[keep]


def _cols_community(rng: np.random.Generator, spec: MatrixSpec, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows belong to communities; most nonzeros fall in the community's column range."""
    ncom = int(spec.extra.get("communities", rng.integers(4, 64)))
    rows = np.repeat(np.arange(lens.size), lens)
    com = rows * ncom // spec.rows
    width = max(1, spec.cols // ncom)
    inside = rng.random(rows.size) < 0.85
    cols = np.where(inside, com * width + rng.integers(0, width, rows.size), rng.integers(0, spec.cols, rows.size))
    return rows, np.clip(cols, 0, spec.cols - 1)


def _cols_diagnoise(rng: np.random.Generator, spec: MatrixSpec) -> tuple[np.ndarray, np.ndarray]:
    n = min(spec.rows, spec.cols)
    lens = _row_lengths(rng, spec, skew=False)
    noise = np.maximum(lens - 1, 0)
    r_noise, c_noise = _cols_uniform(rng, noise, spec.cols)
    d = np.arange(n)
    return np.concatenate([d, r_noise]), np.concatenate([d, c_noise])


def generate(spec: MatrixSpec) -> sp.csr_matrix:
    """The float32 CSR matrix a spec describes (duplicates summed, indices sorted)."""
    if spec.family == "mtx":
        return load_mtx(spec.path)
    rng = np.random.default_rng(np.random.SeedSequence([spec.seed, FAMILIES.index(spec.family), spec.rows, spec.cols]))
    fam = spec.family
    if fam in ("uniform", "powerlaw"):
        r, c = _cols_uniform(rng, _row_lengths(rng, spec, skew=fam == "powerlaw"), spec.cols)
    elif fam == "banded":
        r, c = _cols_banded(rng, spec, _row_lengths(rng, spec, skew=False))
    elif fam == "blockdiag":
        r, c = _cols_blocks(rng, spec, diag_only=bool(spec.seed % 2 == 0))
    elif fam == "community":
        r, c = _cols_community(rng, spec, _row_lengths(rng, spec, skew=True))
    else:
        r, c = _cols_diagnoise(rng, spec)
    keep = (r < spec.rows) & (c < spec.cols)
    r, c = r[keep], c[keep]
    vals = rng.uniform(0.5, 1.5, r.size).astype(np.float32)
    a = sp.csr_matrix((vals, (r, c)), shape=(spec.rows, spec.cols), dtype=np.float32)
    a.sum_duplicates()
    a.sort_indices()
    return a


def load_mtx(path: str | Path) -> sp.csr_matrix:
    """A Matrix Market file as float32 CSR; pattern-only files get value 1."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"no Matrix Market file at {p}")
    import scipy.io

    _check_header(p)
    try:
        m = scipy.io.mmread(str(p))
    except Exception as exc:  # scipy raises ValueError / OSError / others for bad files
        raise InputError(
            f"{p} is not a readable Matrix Market file: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        ) from None
    if not sp.issparse(m):
        m = sp.csr_matrix(np.asarray(m))
    a = sp.csr_matrix(m, dtype=np.float32)
    if a.nnz == 0:
        raise InputError(f"{p} has no nonzeros")
    if not np.isfinite(a.data).all():
        raise InputError(f"{p} has non-finite values")
    a.sum_duplicates()
    a.sort_indices()
    return a


def _check_header(p: Path) -> None:
    """Refuse from the header alone what would be wrong or could not be held: complex values
    (their imaginary part would be dropped without a word), shapes beyond 32-bit indices, and a
    matrix whose CSR form would not fit in the memory available now."""
    import psutil
    import scipy.io

    try:
        rows, cols, entries, _fmt, field_, symmetry = scipy.io.mminfo(str(p))
    except Exception as exc:  # scipy raises ValueError / OSError / others for bad headers
        raise InputError(
            f"{p} is not a readable Matrix Market file: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        ) from None
    if field_ == "complex":
        raise InputError(f"{p} has complex values; the sparse kernels are real (float32)")
    limit = 2**31 - 1
    if max(rows, cols) > limit or entries > limit:
        raise InputError(f"{p} is {rows}x{cols} with {entries} entries: beyond 32-bit indices ({limit})")
    nnz = entries * (2 if symmetry != "general" else 1)
    need = nnz * 48 + (rows + 1) * 16  # COO as read (int64 pairs, float64), then CSR
    avail = int(psutil.virtual_memory().available)
    if need > avail:
        raise InputError(
            f"{p} ({rows}x{cols}, {entries} entries) needs about {need / 2**30:.1f} GiB to read; "
            f"{avail / 2**30:.1f} GiB is available"
        )


def load_matrix(spec: MatrixSpec, expect_hash: str | None = None) -> sp.csr_matrix:
    """Rebuild a spec's matrix and check it is the one that was measured."""
    a = generate(spec)
    if expect_hash is not None and matrix_hash(a) != expect_hash:
        raise InputError(f"matrix {spec.name} no longer hashes to {expect_hash} (generator or file changed)")
    return a


def random_spec(
    rng: np.random.Generator,
    family: str | None = None,
    rows: tuple[int, int] = (1000, 30000),
    avg_row: tuple[float, float] = (2.0, 48.0),
    max_nnz: int = 400_000,
    seed: int = 0,
) -> MatrixSpec:
    """A random generator spec: log-uniform rows and row length, square or mildly rectangular."""
    fam = family or str(rng.choice(FAMILIES))
    n = int(math.exp(rng.uniform(math.log(rows[0]), math.log(rows[1]))))
    cols = int(n * float(rng.choice([1.0, 1.0, 0.5, 2.0])))
    cols = max(cols, 64)
    r = math.exp(rng.uniform(math.log(avg_row[0]), math.log(avg_row[1])))
    r = min(r, max_nnz / n, cols)
    return MatrixSpec(family=fam, rows=n, cols=cols, avg_row=round(r, 2), seed=seed)
