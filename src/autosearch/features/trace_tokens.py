"""`trace-tokens`: a MetaSchedule trace read as a sequence of tokens, no lowering (TLP's idea).

Why: PerStoreFeature lowers every candidate to TIR (100-900 candidates/s); a trace is already
stored as JSON and says everything the schedule is (replaying it reproduces the program), so a
sequence model can read it directly. The trace alone does not name the operator, so a few
workload tokens (one per block of the workload's IR text: loop extents, op kinds, dtype) come
first.

Token sequence of one candidate (rows of one float32 matrix, `FEATURE_WIDTH` columns):
1. up to `MAX_WORKLOAD_TOKENS` workload tokens (kind `workload`), the IR blocks with the largest
   iteration spaces, in program order;
2. a summary token: the tiling as a whole (sum of log2 tile factors per tiling level, over the
   spatial and over the reduction loops), filled in by the Splits;
3. one token per trace instruction that changes the program (`TOKEN_KINDS`), in trace order,
   cropped at `MAX_TRACE_TOKENS` (the summary token included). Instructions that only look something up (GetSBlock, GetLoops,
   GetChildBlocks, ...) or sample a decision (SamplePerfectTile, SampleCategorical,
   SampleComputeLocation), and EnterPostproc / Unannotate, get no token of their own
   (`FOLDED_KINDS`): what they produce is written into the token of the instruction that uses it
   (a Split carries its sampled tile factors, an Annotate its sampled unroll value, a ComputeAt
   its sampled location, every loop/block input its role). This keeps a sequence at ~30 tokens
   instead of ~50 with the same information, which is what makes scoring fast.

Prefix tokens (`PREFIX_EXTRACTOR`: the instructions before EnterPostproc only) have three more
columns (`PREFIX_FEATURE_NAMES`), set on each Reorder of a tiled loop nest: the parallel extent,
the number of loops fused into it and the vector extent that the post-processor will give that
nest, worked out from the decisions (`_Post`), since prefix tokens lack the instructions that say so.

The model pads the sequences of a batch to a common length with a mask, which is the same as a
fixed-length padded input; `MAX_TRACE_TOKENS` covers every trace of the reference dataset
(`coverage()` reports it). Every column is named in `FEATURE_NAMES` (`PREFIX_FEATURE_NAMES`) and documented at
`_NUMERIC` below. Change anything about a column and bump `EXTRACTOR`'s version.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosearch.errors import InputError

__all__ = [
    "ANNOTATION_KEYS",
    "EXTRACTOR",
    "FEATURE_NAMES",
    "FEATURE_WIDTH",
    "FOLDED_KINDS",
    "MAX_TRACE_TOKENS",
    "MAX_WORKLOAD_TOKENS",
    "PREFIX_EXTRACTOR",
    "PREFIX_FEATURE_NAMES",
    "PREFIX_FEATURE_WIDTH",
    "TOKEN_EXTRACTORS",
    "TOKEN_KINDS",
    "TraceTokenizer",
    "backfill",
    "coverage",
    "ensure_features",
    "trace_tokens",
    "workload_tokens",
]

#: (name, version) under which tokens are stored; bump the version when any column changes.
EXTRACTOR = ("trace-tokens", "v1")
#: The same tokens without the post-processing instructions (everything from EnterPostproc on),
#: plus the emulated post-processing columns (v2; v1 had none).
#: Why: the instructions before it and their decisions determine the schedule (the post-processors
#: are a deterministic function of them), and they are all that a search over decision vectors
#: knows without building a TVM schedule (`features.decision_space`), so a model trained on these
#: scores such candidates exactly as it scores stored or replayed ones.
PREFIX_EXTRACTOR = ("trace-prefix-tokens", "v2")
#: The token extractors and whether each keeps the post-processing instructions.
TOKEN_EXTRACTORS: dict[tuple[str, str], bool] = {EXTRACTOR: True, PREFIX_EXTRACTOR: False}
#: Trace tokens kept per candidate (the reference dataset's longest trace has 70; see `coverage`).
MAX_TRACE_TOKENS = 80
#: Workload tokens per candidate (the winograd conv, the largest registry program, has 8 blocks).
MAX_WORKLOAD_TOKENS = 8

#: Instruction kinds that get a token, in one-hot order. `other` is any kind not listed
#: (a newer TVM's instruction), `workload` marks the workload tokens.
TOKEN_KINDS: tuple[str, ...] = (
    "Split",
    "Fuse",
    "Reorder",
    "Parallel",
    "Vectorize",
    "Unroll",
    "Bind",
    "CacheRead",
    "CacheWrite",
    "ReIndex",
    "ComputeAt",
    "ReverseComputeAt",
    "ComputeInline",
    "ReverseComputeInline",
    "DecomposeReduction",
    "RFactor",
    "Annotate",
    "TransformLayout",
    "TransformBlockLayout",
    "StorageAlign",
    "SetScope",
    "Blockize",
    "Tensorize",
    "AddUnitLoop",
    "PadEinsum",
    "SamplePartitionedTile",
    "other",
    "summary",
    "workload",
)
#: Instruction kinds folded into the tokens of the instructions that use their results.
FOLDED_KINDS = frozenset(
    {
        "GetSBlock",
        "GetLoops",
        "GetChildBlocks",
        "GetProducers",
        "GetConsumers",
        "GetOutputBlocks",
        "SamplePerfectTile",
        "SampleCategorical",
        "SampleComputeLocation",
        "EnterPostproc",
        "Unannotate",
    }
)
#: Annotation keys with a column of their own (one-hot); `other` is any other key. Versioned with EXTRACTOR.
ANNOTATION_KEYS: tuple[str, ...] = (
    "meta_schedule.tiling_structure",
    "meta_schedule.parallel",
    "meta_schedule.vectorize",
    "meta_schedule.unroll_explicit",
    "meta_schedule.unroll_implicit",
    "pragma_auto_unroll_max_step",
    "pragma_unroll_explicit",
    "meta_schedule.random_compute_producer",
    "meta_schedule.layout_rewrite_preproc",
    "meta_schedule.cooperative_fetch",
    "meta_schedule.thread_extent_low_inclusive",
    "meta_schedule.thread_extent_high_inclusive",
    "software_pipeline_stage",
    "meta_schedule.auto_tensorize",
    "other",
)
#: Storage scopes of CacheRead / CacheWrite / SetScope (one-hot); `other` is any other scope.
SCOPES: tuple[str, ...] = ("global", "shared", "local", "other")
#: Thread axes of Bind (one-hot).
THREADS: tuple[str, ...] = ("blockIdx", "threadIdx", "vthread")
#: Roles of the block an instruction works on (one-hot): the root block, a block of the workload
#: that reduces (has R axes) or not, a block an instruction created (cache, reindex, rfactor, init),
#: a block found by position (GetChildBlocks / producers / consumers, after post-processing).
BLOCK_ROLES: tuple[str, ...] = ("root", "reduction", "spatial", "created", "found")

# Numeric columns (after the one-hots). Values are small (log2 scale, counts, fractions).
_NUMERIC: tuple[tuple[str, str], ...] = (
    ("postproc", "1 if the instruction comes after EnterPostproc (MetaSchedule's post-processing)"),
    ("position", "index of the token among the candidate's trace tokens / MAX_TRACE_TOKENS"),
    ("n_inputs", "log2(1 + number of inputs), e.g. how many loops a Fuse or Reorder takes"),
    ("n_outputs", "log2(1 + number of outputs), e.g. how many loops a Split makes"),
    ("factor0", "Split: log2(factor 0) + 1 (outermost); 0 if absent; factors come from the sampled decision"),
    ("factor1", "Split: log2(factor 1) + 1"),
    ("factor2", "Split: log2(factor 2) + 1"),
    ("factor3", "Split: log2(factor 3) + 1"),
    ("factor4", "Split: log2(factor 4) + 1 (innermost of a 5-level GPU tiling)"),
    ("tile_levels", "Split: number of factors"),
    ("loop_extent", "log2(1 + extent) of the (first) loop input, when known from the IR and earlier Splits/Fuses"),
    ("loop_extent_known", "1 if loop_extent is known"),
    ("loop_pos", "position of the (first) loop input in the block's loop nest it came from / nest depth"),
    ("loop_depth", "log2(1 + depth of that loop nest)"),
    ("loop_derived", "1 if the loop input was made by a Split or Fuse (not an original loop)"),
    ("loop_spatial", "1 if the (first) loop input is, or was split from, a spatial (S) axis of the IR block"),
    ("loop_reduce", "1 if it is, or was split from, a reduction (R) axis"),
    ("loc_inline", "ComputeAt with a sampled location: 1 if the sample chose to inline"),
    ("loc_root", "ComputeAt with a sampled location: 1 if the sample chose the root (no compute-at)"),
    ("loc_index", "ComputeAt with a sampled location: log2(2 + chosen loop index)"),
    ("value", "Annotate: log2(1 + integer value), also the sampled unroll step; RFactor: factor axis"),
    ("value_choice", "Annotate with a SampleCategorical value: chosen index / (number of candidates - 1)"),
    ("value_s", "Annotate with a tiling-structure string: number of S levels"),
    ("value_r", "Annotate with a tiling-structure string: number of R levels"),
    ("buffer_index", "CacheRead/CacheWrite/ReIndex/TransformLayout: log2(1 + buffer index)"),
    ("preserve_unit", "first attribute when it is a boolean/flag (preserve_unit_iters/loops)"),
    # the summary token (one per candidate, the first trace token): the tiling as a whole
    *((f"tiles_s{k}", f"summary: sum over Splits of spatial loops of log2(factor {k})") for k in range(5)),
    *((f"tiles_r{k}", f"summary: sum over Splits of reduction loops of log2(factor {k})") for k in range(5)),
    # workload tokens (0 on trace tokens)
    ("wl_extent0", "workload block: log2(1 + extent) of loop 0 (outermost)"),
    ("wl_extent1", "workload block: log2(1 + extent) of loop 1"),
    ("wl_extent2", "workload block: log2(1 + extent) of loop 2"),
    ("wl_extent3", "workload block: log2(1 + extent) of loop 3"),
    ("wl_extent4", "workload block: log2(1 + extent) of loop 4"),
    ("wl_extent5", "workload block: log2(1 + extent) of loop 5"),
    ("wl_extent_rest", "workload block: log2(1 + product of the extents of loops 6..)"),
    ("wl_n_spatial", "workload block: number of spatial (S) axes"),
    ("wl_n_reduce", "workload block: number of reduction (R) axes"),
    ("wl_iters", "workload block: log2(1 + iteration-space size)"),
    ("wl_op_mul", "workload block body: number of multiplications"),
    ("wl_op_add", "workload block body: number of additions/subtractions"),
    ("wl_op_div", "workload block body: number of divisions / modulo"),
    ("wl_op_minmax", "workload block body: number of T.max/T.min"),
    ("wl_op_math", "workload block body: number of exp/log/sqrt/tanh/sigmoid/pow/erf calls"),
    ("wl_op_select", "workload block body: number of if_then_else/Select (padding, masks)"),
    ("wl_op_cast", "workload block body: number of casts"),
    ("wl_n_reads", "workload block: number of buffer regions read"),
    ("wl_init", "workload block: 1 if it has an init (reduction) statement"),
    ("wl_index", "workload block: position among the program's blocks / number of blocks"),
    ("wl_n_blocks", "workload: log2(1 + number of blocks)"),
    ("wl_flops", "workload: log2(1 + floating-point operations) / 10"),
    ("wl_f32", "workload: 1 if its buffers are float32"),
    ("wl_f16", "workload: 1 if any buffer is float16/bfloat16"),
    ("wl_int", "workload: 1 if any buffer is an integer type"),
    ("wl_f64", "workload: 1 if any buffer is float64"),
)

# Prefix tokens only (after the columns above): on a Reorder of split loops (multi-level tiling),
# what MetaSchedule's RewriteParallelVectorizeUnroll post-processor will make of that loop nest,
# worked out from the decisions (`_Post`). Full tokens hold the post-processor's own instructions.
_POST_COLUMNS: tuple[tuple[str, str], ...] = (
    ("post_par_extent", "Reorder: log2 of the parallel extent the post-processor will give this loop nest"),
    ("post_par_loops", "Reorder: how many outer loops it will fuse into that parallel loop"),
    ("post_vec_extent", "Reorder: log2(1 + extent) of the innermost loop it will vectorize; 0 if none"),
)

#: Columns of `EXTRACTOR`'s tokens.
FEATURE_NAMES: tuple[str, ...] = (
    *(f"kind={k}" for k in TOKEN_KINDS),
    *(f"annotation={k}" for k in ANNOTATION_KEYS),
    *(f"scope={k}" for k in SCOPES),
    *(f"thread={k}" for k in THREADS),
    *(f"block_role={k}" for k in BLOCK_ROLES),
    *(name for name, _ in _NUMERIC),
)
FEATURE_WIDTH = len(FEATURE_NAMES)
#: Columns of `PREFIX_EXTRACTOR`'s tokens: the same, then the emulated post-processing.
PREFIX_FEATURE_NAMES: tuple[str, ...] = (*FEATURE_NAMES, *(name for name, _ in _POST_COLUMNS))
PREFIX_FEATURE_WIDTH = len(PREFIX_FEATURE_NAMES)
_WIDTH = PREFIX_FEATURE_WIDTH  # tokens are built this wide; full tokens drop the last columns
_COL = {name: i for i, name in enumerate(PREFIX_FEATURE_NAMES)}
_KIND_COL = {k: _COL[f"kind={k}"] for k in TOKEN_KINDS}
_ANN_COL = {k: _COL[f"annotation={k}"] for k in ANNOTATION_KEYS}
_SCOPE_COL = {k: _COL[f"scope={k}"] for k in SCOPES}
_ROLE_COL = {k: _COL[f"block_role={k}"] for k in BLOCK_ROLES}
_LOG2 = [0.0] + [math.log2(i) for i in range(1, 4097)]


def _log2(x: float) -> float:
    """log2 for the small positive integers traces hold (cached), math.log2 otherwise."""
    if 0 < x <= 4096 and x == int(x):
        return _LOG2[int(x)]
    return math.log2(x) if x > 0 else 0.0


# -- workload tokens (IR text) ---------------------------------------------------------------------
_FOR_GRID = re.compile(r"^(\s*)for\s+(.+?)\s+in\s+T\.grid\((.*)\):\s*$")
_FOR_RANGE = re.compile(
    r"^(\s*)for\s+(\w+)\s+in\s+(?:T\.serial|T\.parallel|T\.vectorized|T\.unroll|range)\((.*)\):\s*$"
)
_BLOCK = re.compile(r"^(\s*)with\s+T\.sblock\(\"([^\"]+)\"\):\s*$")
_REMAP = re.compile(r"T\.axis\.remap\(\"([SR]+)\"")
_AXIS = re.compile(r"T\.axis\.(spatial|reduce)\(")
_DTYPE = re.compile(r"\"(float16|bfloat16|float32|float64|u?int(?:8|16|32|64)|bool)\"")
_MATH = re.compile(r"T\.(exp|exp2|log|log2|sqrt|rsqrt|tanh|sigmoid|pow|erf|fabs|floor|ceil|round)\(")


@dataclass
class _Block:
    name: str
    extents: list[int]
    spatial: int = 0
    reduce: int = 0
    mul: int = 0
    add: int = 0
    div: int = 0
    minmax: int = 0
    math: int = 0
    select: int = 0
    cast: int = 0
    reads: int = 0
    init: bool = False
    axes: str = ""  # S/R of each block axis, in order

    @property
    def iters(self) -> int:
        return math.prod(self.extents) if self.extents else 1


_TYPED_INT = re.compile(r"T\.u?int(?:8|16|32|64)\((-?\d+)\)")


def _int_args(text: str) -> list[int]:
    # Relax-legalised programs (every `tune-model` task) spell extents `T.int64(56)`: read the number.
    out = []
    for part in _TYPED_INT.sub(r"\1", text).split(","):
        part = part.strip()
        if not part:
            continue
        if ":" in part or "=" in part:  # T.grid(0:n) ranges / keyword args: take the last number
            part = part.replace("=", ":").split(":")[-1]
        try:
            out.append(int(part))
        except ValueError:
            out.append(0)  # a symbolic extent: unknown
    return out


def parse_ir_blocks(ir: str) -> list[_Block]:
    """The blocks of a TVMScript program: enclosing loop extents, axis kinds, op counts."""
    loops: list[tuple[int, list[int]]] = []  # (indent, extents) of the open `for` lines
    blocks: list[_Block] = []
    cur: _Block | None = None
    cur_indent = -1
    for line in ir.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if cur is not None and indent <= cur_indent:
            cur = None
        while loops and loops[-1][0] >= indent:
            loops.pop()
        if stripped.startswith("for "):
            m = _FOR_GRID.match(line)
            if m:
                loops.append((indent, _int_args(m.group(3))))
                continue
            m = _FOR_RANGE.match(line)
            if m:
                args = _int_args(m.group(3))
                loops.append((indent, [args[-1] - (args[0] if len(args) > 1 else 0)] if args else [0]))
                continue
        m = _BLOCK.match(line)
        if m:
            cur = _Block(m.group(2), [e for _, ext in loops for e in ext])
            cur_indent = indent
            blocks.append(cur)
            continue
        if cur is None:
            continue
        if "T.axis.remap(" in stripped:
            r = _REMAP.search(stripped)
            if r:
                cur.spatial += r.group(1).count("S")
                cur.reduce += r.group(1).count("R")
                cur.axes += r.group(1)
        elif "T.axis." in stripped:
            for a in _AXIS.findall(stripped):
                cur.spatial += a == "spatial"
                cur.reduce += a == "reduce"
                cur.axes += "S" if a == "spatial" else "R"
        elif stripped.startswith("T.reads("):
            cur.reads += len(re.findall(r"\w+\[", stripped)) or (0 if stripped == "T.reads()" else 1)
        elif stripped.startswith("with T.init()"):
            cur.init = True
        elif stripped.startswith(("T.writes(", "T.sblock_attr(", "T.where(")):
            continue
        else:  # a body statement: count its operations (the right-hand side)
            rhs = stripped.split(" = ", 1)[-1]
            cur.mul += rhs.count(" * ")
            cur.add += rhs.count(" + ") + rhs.count(" - ")
            cur.div += rhs.count(" / ") + rhs.count(" // ") + rhs.count(" % ")
            cur.minmax += rhs.count("T.max(") + rhs.count("T.min(")
            cur.math += len(_MATH.findall(rhs))
            cur.select += rhs.count("T.if_then_else(") + rhs.count("T.Select(")
            cur.cast += rhs.count("T.Cast(")
    return [b for b in blocks if b.name != "root"]


def workload_tokens(ir: str, flops: float | None = None, postproc: bool = True) -> np.ndarray:
    """Workload tokens of a program given as TVMScript text: (rows, FEATURE_WIDTH), or
    (rows, PREFIX_FEATURE_WIDTH) with `postproc=False` (for prefix tokens)."""
    return _workload_tokens(ir, flops)[:, : FEATURE_WIDTH if postproc else _WIDTH]


def _workload_tokens(ir: str, flops: float | None = None) -> np.ndarray:
    blocks = parse_ir_blocks(ir)
    keep = blocks
    if len(blocks) > MAX_WORKLOAD_TOKENS:
        biggest = sorted(range(len(blocks)), key=lambda i: (-blocks[i].iters, i))[:MAX_WORKLOAD_TOKENS]
        keep = [blocks[i] for i in sorted(biggest)]
    dtypes = set(_DTYPE.findall(ir))
    out = np.zeros((len(keep), _WIDTH), dtype=np.float32)
    c = _COL
    for r, b in enumerate(keep):
        row = out[r]
        row[_KIND_COL["workload"]] = 1.0
        for i, e in enumerate(b.extents[:6]):
            row[c[f"wl_extent{i}"]] = _log2(1 + e)
        if len(b.extents) > 6:
            row[c["wl_extent_rest"]] = _log2(1 + math.prod(b.extents[6:]))
        row[c["wl_n_spatial"]], row[c["wl_n_reduce"]] = b.spatial, b.reduce
        row[c["wl_iters"]] = _log2(1 + b.iters)
        row[c["wl_op_mul"]], row[c["wl_op_add"]], row[c["wl_op_div"]] = b.mul, b.add, b.div
        row[c["wl_op_minmax"]], row[c["wl_op_math"]], row[c["wl_op_select"]] = b.minmax, b.math, min(b.select, 4)
        row[c["wl_op_cast"]], row[c["wl_n_reads"]], row[c["wl_init"]] = b.cast, b.reads, float(b.init)
        row[c["wl_index"]] = blocks.index(b) / max(len(blocks), 1)
        row[c["wl_n_blocks"]] = _log2(1 + len(blocks))
        row[c["wl_flops"]] = _log2(1 + flops) / 10.0 if flops else 0.0
        row[c["wl_f32"]] = float("float32" in dtypes)
        row[c["wl_f16"]] = float(bool(dtypes & {"float16", "bfloat16"}))
        row[c["wl_int"]] = float(any(d.startswith(("int", "uint")) for d in dtypes))
        row[c["wl_f64"]] = float("float64" in dtypes)
    return out


# -- trace tokens ------------------------------------------------------------------------------------
_C_POST, _C_POS, _C_NIN, _C_NOUT = _COL["postproc"], _COL["position"], _COL["n_inputs"], _COL["n_outputs"]
_C_F0, _C_LEVELS = _COL["factor0"], _COL["tile_levels"]
_C_EXT, _C_EXTK, _C_LPOS, _C_LDEPTH, _C_LDER = (
    _COL["loop_extent"],
    _COL["loop_extent_known"],
    _COL["loop_pos"],
    _COL["loop_depth"],
    _COL["loop_derived"],
)
_C_LS, _C_LR = _COL["loop_spatial"], _COL["loop_reduce"]
_C_TS, _C_TR = _COL["tiles_s0"], _COL["tiles_r0"]
_C_INL, _C_ROOT, _C_LOC = _COL["loc_inline"], _COL["loc_root"], _COL["loc_index"]
_C_VAL, _C_CHOICE, _C_VS, _C_VR = _COL["value"], _COL["value_choice"], _COL["value_s"], _COL["value_r"]
_C_BUF, _C_PRES = _COL["buffer_index"], _COL["preserve_unit"]
_C_POSTPAR = _COL["post_par_extent"]  # then post_par_loops, post_vec_extent
_KIND_OTHER = _KIND_COL["other"]
_ANN_OTHER = _ANN_COL["other"]
_BUFFER_KINDS = frozenset({"CacheRead", "CacheWrite", "ReIndex", "TransformLayout", "StorageAlign", "SetScope"})
_CREATES_BLOCK = frozenset({"CacheRead", "CacheWrite", "ReIndex", "DecomposeReduction", "RFactor", "Blockize"})
_LOCATION_KINDS = frozenset({"ComputeAt", "ReverseComputeAt"})


class _Sym:
    """A value that depends on a sampled decision: resolved per candidate when a plan is applied.

    kind `tile`: log2(factor k of decision `inst`) + 1; `ext`: log2(1 + that factor);
    `cat`: log2(1 + chosen candidate value); `choice`: chosen index / (n - 1);
    `inline` / `root` / `loc`: the compute-location decision.
    """

    __slots__ = ("cands", "inst", "k", "kind")

    def __init__(self, kind: str, inst: int, k: int = 0, cands: tuple[Any, ...] = ()) -> None:
        self.kind, self.inst, self.k, self.cands = kind, inst, k, cands

    def derive(self, kind: str) -> _Sym:
        return _Sym(kind, self.inst, self.k, self.cands)

    def resolve(self, dec: dict[int, Any]) -> float:
        d: Any = dec.get(self.inst)  # a malformed decision fails below and counts as unknown
        try:
            if self.kind in ("tile", "ext", "acc"):
                f = d[self.k]
                if not isinstance(f, int) or f <= 0:
                    return 0.0
                return _log2(f) + {"tile": 1.0, "acc": 0.0}[self.kind] if self.kind != "ext" else _log2(1 + f)
            if self.kind == "cat":
                v = self.cands[d]
                return _log2(1 + max(float(v), 0.0)) if isinstance(v, (int, float)) else 0.0
            if self.kind == "choice":
                return float(d) / max(len(self.cands) - 1, 1)
            if self.kind == "inline":
                return float(d == -2)
            if self.kind == "root":
                return float(d == -1)
            if self.kind == "loc":
                return _log2(2 + max(int(d), -1))
        except (TypeError, IndexError, KeyError, ValueError):
            return 0.0
        return 0.0


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


def _token_key(kind: str, ins: list[Any], st: _State) -> tuple[Any, ...] | None:
    """Everything `_token` reads of an instruction and the state, hashable; None = do not cache."""
    if kind == "Split":
        return None
    inputs, attrs = ins[1], ins[2]
    first = inputs[0] if inputs else None
    info1 = (st.block.get(first) or st.loop.get(first)) if first.__class__ is str else None
    second: Any = inputs[1] if len(inputs) > 1 else None
    if second.__class__ is str:
        if second in st.value:
            return None  # a sampled decision: differs per candidate
        second = st.loop.get(second, second)
    elif second is not None and second.__class__ is not int:
        second = repr(second)
    return (kind, len(inputs), len(ins[3]), st.post, info1, second, repr(attrs) if attrs else None)


class _Bank:
    """Distinct token rows seen so far; a candidate's post-processing tokens are rows of it."""

    def __init__(self) -> None:
        self.rows = np.zeros((256, _WIDTH), dtype=np.float32)
        self.n = 0
        self.ids: dict[tuple[Any, ...], int] = {}

    def add(self, cols: _Cols, key: tuple[Any, ...] | None) -> int:
        if self.n == self.rows.shape[0]:
            self.rows = np.concatenate([self.rows, np.zeros_like(self.rows)])
        r = self.n
        row = self.rows[r]
        row[:] = 0.0
        for c, v in cols:
            row[c] = v
        self.n += 1
        if key is not None:
            self.ids[key] = r
        return r


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


def _decisions(decisions: Any) -> dict[int, Any]:
    try:
        return {int(d[0]): d[1] for d in decisions}
    except (TypeError, ValueError, IndexError, KeyError):
        raise InputError("trace decisions must be [instruction index, decision] pairs") from None


def _parse(trace: str | list[Any]) -> list[Any]:
    if isinstance(trace, str):
        try:
            trace = json.loads(trace)
        except json.JSONDecodeError as exc:
            raise InputError(f"trace is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not (isinstance(trace, list) and len(trace) == 2 and isinstance(trace[0], list) and isinstance(trace[1], list)):
        raise InputError("trace JSON must be [instructions, decisions] as MetaSchedule writes it")
    return trace


def _positions(out: np.ndarray) -> np.ndarray:
    if out.shape[0]:
        out[:, _C_POS] = np.arange(out.shape[0], dtype=np.float32) / MAX_TRACE_TOKENS
    return out


def trace_tokens(
    trace: str | list[Any],
    ir: str | None = None,
    _blocks: dict[str, _Block] | None = None,
    postproc: bool = True,
) -> np.ndarray:
    """Trace tokens (rows, FEATURE_WIDTH) of one stored trace (JSON text or parsed), no workload tokens.

    `ir` (the workload's TVMScript) lets tokens know loop extents and block roles. This is the
    reference path; `TraceTokenizer` gives the same matrix faster. `postproc=False` stops at
    EnterPostproc (`PREFIX_EXTRACTOR`).
    """
    insts, decisions = _parse(trace)
    if not postproc:
        insts = prefix_instructions(insts)
    blocks = _blocks if _blocks is not None else ({b.name: b for b in parse_ir_blocks(ir)} if ir else {})
    plan, _ = _compile(insts, blocks, st=_State(emulate=not postproc))
    out = _positions(plan.apply(_decisions(decisions)).copy())
    return out[:, :FEATURE_WIDTH] if postproc else out


def prefix_instructions(insts: list[Any]) -> list[Any]:
    """The instructions before EnterPostproc (all of them when there is none)."""
    for i, ins in enumerate(insts):
        if ins.__class__ is list and ins and ins[0] == "EnterPostproc":
            return insts[:i]
    return insts


def count_trace_tokens(trace: str | list[Any]) -> int:
    """How many trace tokens a trace has before cropping (for coverage), the summary token included."""
    return 1 + sum(1 for ins in _parse(trace)[0] if ins[0] not in FOLDED_KINDS)


_POSTPROC = '["EnterPostproc",'
_INSTS_END = "]]],["  # only where the instruction list closes and the decisions begin (see _split_text)


class TraceTokenizer:
    """Workload tokens + trace tokens of candidates, with per-workload and per-prefix caches.

    The fast path splits the trace text (compact JSON as `trace_json` writes it) into the part
    before EnterPostproc, the post-processing part and the decisions; the first is compiled once
    per distinct text. Anything else (no EnterPostproc, other spacing) takes the reference path.
    """

    def __init__(self, max_cached: int = 4096, postproc: bool = True) -> None:
        self.postproc = bool(postproc)  # False: tokens of the instructions before EnterPostproc only
        self._wl: dict[str, tuple[np.ndarray, dict[str, _Block]]] = {}
        self._prefix: dict[tuple[str, str], tuple[_Plan, int, _State]] = {}
        self._bank = _Bank()
        self.max_cached = max_cached

    def workload(self, ir: str, flops: float | None = None) -> tuple[np.ndarray, dict[str, _Block]]:
        """(workload tokens, IR blocks by name) of a program, parsed once."""
        hit = self._wl.get(ir)
        if hit is None:
            if len(self._wl) >= 256:
                self._wl.clear()
            wl = workload_tokens(ir, flops, self.postproc)
            hit = self._wl[ir] = (wl, {b.name: b for b in parse_ir_blocks(ir)})
        return hit

    def __call__(self, trace: str | list[Any], ir: str, flops: float | None = None) -> np.ndarray:
        """The token matrix of one candidate: workload tokens, then trace tokens."""
        wl, blocks = self.workload(ir, flops)
        fast = self._fast(trace, ir, blocks) if isinstance(trace, str) else None
        if fast is None:
            fast = trace_tokens(trace, ir, blocks, self.postproc)
        elif self.postproc:
            fast = fast[:, :FEATURE_WIDTH]
        return np.concatenate([wl, fast], axis=0)

    def many(self, traces: Sequence[str | list[Any]], ir: str, flops: float | None = None) -> list[np.ndarray]:
        """Token matrices of many candidates of one workload."""
        return [self(t, ir, flops) for t in traces]

    def _fast(self, text: str, ir: str, blocks: dict[str, _Block]) -> np.ndarray | None:
        i = text.find(_POSTPROC)
        j = text.rfind(_INSTS_END)
        if i < 2 or j < i or not text.startswith("[[") or not text.endswith("]"):
            return None
        head = text[:i]
        key = (ir, head)  # equal prefixes of different workloads differ in their loop extents
        hit = self._prefix.get(key)
        if hit is None:
            try:
                insts = json.loads(head[1:-1] + "]")
            except json.JSONDecodeError:
                return None
            st = _State(emulate=not self.postproc)
            plan, _n = _compile(insts, blocks, 0, st)
            if len(self._prefix) >= self.max_cached:
                self._prefix.clear()
            hit = self._prefix[key] = (plan, len(insts), st)
        plan, n_insts, st0 = hit
        try:
            dec = _decisions(json.loads(text[j + 4 : -1]))
            if not self.postproc:
                return _positions(np.array(plan.apply(dec)))
            post = json.loads("[" + text[i : j + 2] + "]")
        except json.JSONDecodeError:
            return None
        head_rows = plan.apply(dec)
        st = _State(post=0.0, emulate=False)
        st.block, st.name = dict(st0.block), dict(st0.name)  # post-processing may refer to earlier blocks
        st.summary = []
        ids = self._tail(post, blocks, n_insts, st, MAX_TRACE_TOKENS - head_rows.shape[0])
        if ids is None or st.summary:  # a Split in post-processing (GPU cooperative fetch): reference path
            return None
        return _positions(np.concatenate([head_rows, self._bank.rows[ids]], axis=0))

    def _tail(
        self, insts: list[Any], blocks: dict[str, _Block], start: int, st: _State, budget: int
    ) -> list[int] | None:
        """Bank rows of the post-processing tokens (no decisions there, so tokens repeat a lot)."""
        if self._bank.n > 60000:  # bounded memory: start over between candidates
            self._bank = _Bank()
        bank, ids = self._bank, list[int]()
        for i, ins in enumerate(insts):
            if not (ins.__class__ is list and len(ins) == 4 and ins[0].__class__ is str):
                raise InputError(f"trace instruction {start + i} is not [kind, inputs, attrs, outputs]")
            kind = ins[0]
            if kind in FOLDED_KINDS:
                _fold(kind, start + i, ins, st, blocks)
                continue
            if len(ids) >= budget:
                break
            key = _token_key(kind, ins, st)
            r = bank.ids.get(key) if key is not None else None
            if r is None:
                cols = _token(kind, ins, st)
                if any(v.__class__ is _Sym for _, v in cols):
                    return None  # a decision after EnterPostproc: not this fast path's case
                r = bank.add(cols, key)
            else:
                _effects(kind, ins, st)
            ids.append(r)
        return ids


# -- the store ---------------------------------------------------------------------------------------
def backfill(store: Any, batch: int = 2000, progress: Any = None, extractor: tuple[str, str] = EXTRACTOR) -> int:
    """Compute trace tokens (`extractor`: one of TOKEN_EXTRACTORS) for every TVM record of `store`
    that lacks them; returns how many were written.

    Every status is covered (failed records too: the dataset gives them label 0). Resumable: a
    record that already has tokens of this version is skipped, and each batch is one transaction.
    Records are read a page at a time, each page to its end before its tokens are written: a
    write under a still-open read fails at once when another process (a second `train` on the
    same store) wrote meanwhile. Two processes backfilling one store write the same tokens.
    """
    if extractor not in TOKEN_EXTRACTORS:
        raise InputError(f"not a trace-token extractor: {':'.join(extractor)}")
    wls = {w.id: w for w in store.workloads(backend="tvm")}
    have = {fr.measurement_id for fr in store.iter_features(extractor=extractor)}
    tok = TraceTokenizer(postproc=TOKEN_EXTRACTORS[extractor])
    written, last = 0, 0
    while page := list(store.measurements(after_id=last, limit=batch)):
        last = page[-1].id
        pending: list[tuple[int, np.ndarray]] = []
        for m in page:
            w = wls.get(m.workload_id)
            if w is None or m.id in have:
                continue
            try:
                pending.append((m.id, tok(m.schedule, w.ir, w.flops)))
            except InputError as exc:
                raise InputError(f"measurement {m.id} ({w.name}): {exc}") from None
        if pending:
            written += store.add_features(pending, extractor)
            if progress is not None:
                progress(written)
    return written


def ensure_features(db_path: str, extractor: Iterable[str]) -> int:
    """If `extractor` is one of the trace-token ones and `db_path` lacks some, backfill them (0 otherwise).

    Why: traces are stored, so a store collected with PerStoreFeature (the reference dataset)
    can be trained on with trace tokens without re-measuring anything.
    """
    from autosearch.store.db import Store

    ex = (*extractor,)
    if ex not in TOKEN_EXTRACTORS:
        current = next((k for k in TOKEN_EXTRACTORS if k[0] == ex[0]), None)
        if current is not None and len(ex) == 2:  # an older version: only what a store already holds
            with Store(db_path, readonly=True) as ro:
                if next(iter(ro.iter_features((ex[0], ex[1]))), None) is None:
                    raise InputError(
                        f"{':'.join(ex)}: this version of autosearch computes {':'.join(current)} "
                        "(older token versions are not kept; train on the current one)"
                    )
        return 0
    key = (ex[0], ex[1])
    with Store(db_path, readonly=True) as ro:
        ids = {m for m in ro.missing_features(key)}
    if not ids:
        return 0
    with Store(db_path) as store:
        return backfill(store, extractor=key)


def coverage(store: Any) -> dict[str, Any]:
    """How well MAX_TRACE_TOKENS covers the store's traces: lengths and the fraction not cropped."""
    lens = [count_trace_tokens(m.schedule) for m in store.measurements() if m.schedule.startswith("[[")]
    if not lens:
        return {"records": 0}
    a = np.asarray(lens)
    return {
        "records": int(a.size),
        "max_trace_tokens": MAX_TRACE_TOKENS,
        "longest": int(a.max()),
        "median": float(np.median(a)),
        "p99": float(np.percentile(a, 99)),
        "covered_fraction": float((a <= MAX_TRACE_TOKENS).mean()),
    }
