"""The SuperSchedule space (WACO's term): a storage format with its level splits x a loop schedule.

Why one frozen record for both halves: the format decides what the loops iterate over, so the
two are searched together; the record is the unit a cost model scores, a kernel is generated
from, and the store keeps (as sorted-key JSON) in a measurement's `schedule` field.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

from autosearch.errors import InputError

__all__ = [
    "ANCHORS",
    "FORMATS",
    "OPS",
    "SuperSchedule",
    "config_pool",
    "default_config",
    "sample_config",
    "sample_configs",
    "static_reason",
    "with_dense",
]

OPS = ("spmv", "spmm", "sddmm")
#: csr: rows x compressed columns; dcsr: only non-empty rows; csc: columns x rows (SDDMM only:
#: SpMV/SpMM over CSC scatter into the output); bcsr: dense br x bc blocks; ell: sliced ELL
#: (slices of `slice` rows padded to their longest row); cpcsr: column panels of `panel` columns,
#: each a CSR (split-k).
FORMATS = ("csr", "dcsr", "csc", "bcsr", "ell", "cpcsr")
_BLOCKS = (1, 2, 4, 8)
_SLICES = (1, 4, 8, 16, 32)
_PANELS = (256, 1024, 4096, 16384)
_CHUNKS = (1, 4, 16, 64, 256)
_VECS = (1, 4, 8, 16)
_UNROLLS = (1, 2, 4, 8)


@dataclass(frozen=True)
class SuperSchedule:
    """One point of the space. `dense` is N (SpMM columns of B) or D (SDDMM inner dimension)."""

    op: str
    fmt: str = "csr"
    br: int = 1  # bcsr block rows
    bc: int = 1  # bcsr block columns
    slice: int = 1  # ell slice height
    panel: int = 0  # cpcsr panel width in columns
    parallel: bool = False  # outer unit loop parallel over the thread pool
    chunk: int = 1  # units (rows, block rows, slices) per parallel iteration
    order: str = "kj"  # SpMM: "kj" = nonzeros outside the dense loop, "jk" = dense tiles outside
    vec: int = 1  # inner split of the dense dimension (SpMV: lanes over the nonzeros)
    vectorize: bool = False  # the inner split is a vector loop
    unroll: int = 1  # unroll factor of the nonzero loop
    dense: int = 0  # N or D (0 for SpMV)

    def __post_init__(self) -> None:
        reason = static_reason(self)
        if reason:
            raise InputError(f"invalid configuration: {reason}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> SuperSchedule:
        try:
            d = json.loads(text) if isinstance(text, str) else dict(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"configuration is not JSON: {exc.msg}") from None
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise InputError(f"configuration has unknown keys {sorted(unknown)}")
        return cls(**d)

    @property
    def format_key(self) -> tuple[str, int, int, int, int]:
        """What the format conversion depends on (configs sharing it share one converted matrix)."""
        return (self.fmt, self.br, self.bc, self.slice, self.panel)

    @property
    def kernel_key(self) -> str:
        """Everything the generated kernel depends on (the matrix sizes are run-time arguments)."""
        return self.to_json()

    def short(self) -> str:
        f = {"bcsr": f"bcsr{self.br}x{self.bc}", "ell": f"ell{self.slice}", "cpcsr": f"cpcsr{self.panel}"}.get(
            self.fmt, self.fmt
        )
        par = f"par{self.chunk}" if self.parallel else "ser"
        vec = f"v{self.vec}{'V' if self.vectorize else ''}"
        return f"{f}/{par}/{self.order}/{vec}/u{self.unroll}"


def static_reason(c: SuperSchedule) -> str:
    """Why a configuration is invalid whatever the matrix ('' when it is valid)."""
    if c.op not in OPS:
        return f"op must be one of {OPS}, got {c.op!r}"
    if c.fmt not in FORMATS:
        return f"format must be one of {FORMATS}, got {c.fmt!r}"
    if c.fmt == "csc" and c.op != "sddmm":
        return "CSC only suits SDDMM: SpMV/SpMM over columns scatter into the output rows"
    if c.br not in _BLOCKS or c.bc not in _BLOCKS or c.slice not in _SLICES:
        return f"block sizes must be in {_BLOCKS} and slice heights in {_SLICES}"
    if (c.br > 1 or c.bc > 1) and c.fmt != "bcsr":
        return "block sizes apply to bcsr only"
    if c.slice > 1 and c.fmt != "ell":
        return "slice height applies to ell only"
    if (c.panel != 0) != (c.fmt == "cpcsr") or (c.panel and c.panel not in _PANELS):
        return f"cpcsr needs a panel width in {_PANELS} (and only cpcsr has one)"
    if c.chunk not in _CHUNKS or c.vec not in _VECS or c.unroll not in _UNROLLS:
        return f"chunk in {_CHUNKS}, vec in {_VECS}, unroll in {_UNROLLS}"
    if c.order not in ("kj", "jk") or (c.order == "jk" and c.op != "spmm"):
        return "loop order 'jk' (dense tiles outside the nonzeros) applies to SpMM only"
    if c.op == "spmv":
        if c.dense != 0:
            return "SpMV has no dense dimension (dense must be 0)"
    elif c.dense < 1 or c.dense > 4096:
        return f"{c.op} needs the dense dimension (N or D) in 1..4096, got {c.dense}"
    elif c.dense % c.vec:
        return f"vec={c.vec} does not divide the dense dimension {c.dense}"
    if c.op == "spmv" and c.vec > 1 and c.fmt in ("bcsr", "ell"):
        return "SpMV lanes over nonzeros apply to csr/dcsr/cpcsr (bcsr/ell vectorize their blocks)"
    if c.vectorize and c.vec == 1:
        return "vectorize needs vec > 1"
    if not c.parallel and c.chunk != 1:
        return "chunk applies to a parallel loop only"
    return ""


def default_config(op: str, dense: int = 0) -> SuperSchedule:
    """The default CSR kernel: serial rows, no splits (the 'no schedule' baseline)."""
    return SuperSchedule(op=op, dense=dense if op != "spmv" else 0)


def sample_config(rng: np.random.Generator, op: str, dense: int = 0) -> SuperSchedule:
    """A uniformly random statically valid configuration (resampled until valid)."""
    for _ in range(1000):
        fmt = str(rng.choice([f for f in FORMATS if f != "csc" or op == "sddmm"]))
        par = bool(rng.random() < 0.75)
        vec = int(rng.choice(_VECS))
        kw: dict[str, Any] = dict(
            op=op,
            fmt=fmt,
            parallel=par,
            chunk=int(rng.choice(_CHUNKS)) if par else 1,
            order=str(rng.choice(["kj", "jk"])) if op == "spmm" else "kj",
            vec=vec,
            vectorize=bool(vec > 1 and rng.random() < 0.8),
            unroll=int(rng.choice(_UNROLLS)),
            dense=dense if op != "spmv" else 0,
        )
        if fmt == "bcsr":
            kw["br"], kw["bc"] = int(rng.choice(_BLOCKS)), int(rng.choice(_BLOCKS))
        elif fmt == "ell":
            kw["slice"] = int(rng.choice(_SLICES))
        elif fmt == "cpcsr":
            kw["panel"] = int(rng.choice(_PANELS))
        try:
            return SuperSchedule(**kw)
        except InputError:
            continue
    raise InputError(f"could not sample a valid configuration for {op} with dense={dense}")


def sample_configs(
    rng: np.random.Generator, op: str, n: int, dense: int = 0, exclude: set[str] | None = None
) -> list[SuperSchedule]:
    """n distinct random configurations (fewer if the space runs dry)."""
    seen = set(exclude or ())
    out: list[SuperSchedule] = []
    for _ in range(n * 50):
        if len(out) >= n:
            break
        c = sample_config(rng, op, dense)
        if c.to_json() not in seen:
            seen.add(c.to_json())
            out.append(c)
    return out


def with_dense(c: SuperSchedule, dense: int) -> SuperSchedule:
    """The same configuration for another N / D (InputError when vec no longer divides it)."""
    return replace(c, dense=dense if c.op != "spmv" else 0)


def config_pool(op: str, dense: int = 0, size: int = 240, seed: int = 7) -> list[SuperSchedule]:
    """A fixed, seeded list of configurations per operator; the default CSR kernel comes first.

    Why a pool: every matrix of a collection draws from the same few hundred kernels, so each is
    compiled once (and cached on disk), and the first `ANCHORS` are measured on every matrix, which
    is what choosing one best fixed configuration (BestFormat) needs.
    """
    rng = np.random.default_rng([seed, OPS.index(op), dense])
    first = default_config(op, dense)
    return [first] + sample_configs(rng, op, size - 1, dense, exclude={first.to_json()})


#: How many of a pool's first configurations every collected matrix measures.
ANCHORS = 16
