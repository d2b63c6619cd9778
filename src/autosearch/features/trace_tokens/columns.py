"""The columns of a trace token: what each one means and where it sits in the row.

Why a module of its own: the column layout is the extractor's contract (a stored token row, a
trained model and the decision-vector tables of `features.decision_space` all index it), so it
is defined once, apart from the code that fills rows in. Change anything here and bump
`EXTRACTOR`'s version.
"""

from __future__ import annotations

import math

__all__ = [
    "ANNOTATION_KEYS",
    "BLOCK_ROLES",
    "EXTRACTOR",
    "FEATURE_NAMES",
    "FEATURE_WIDTH",
    "FOLDED_KINDS",
    "MAX_TRACE_TOKENS",
    "MAX_WORKLOAD_TOKENS",
    "PREFIX_EXTRACTOR",
    "PREFIX_FEATURE_NAMES",
    "PREFIX_FEATURE_WIDTH",
    "SCOPES",
    "THREADS",
    "TOKEN_EXTRACTORS",
    "TOKEN_KINDS",
    "_ANN_COL",
    "_ANN_OTHER",
    "_COL",
    "_C_BUF",
    "_C_CHOICE",
    "_C_EXT",
    "_C_EXTK",
    "_C_F0",
    "_C_INL",
    "_C_LDEPTH",
    "_C_LDER",
    "_C_LEVELS",
    "_C_LOC",
    "_C_LPOS",
    "_C_LR",
    "_C_LS",
    "_C_NIN",
    "_C_NOUT",
    "_C_POS",
    "_C_POST",
    "_C_POSTPAR",
    "_C_PRES",
    "_C_ROOT",
    "_C_TR",
    "_C_TS",
    "_C_VAL",
    "_C_VR",
    "_C_VS",
    "_KIND_COL",
    "_KIND_OTHER",
    "_LOG2",
    "_ROLE_COL",
    "_SCOPE_COL",
    "_WIDTH",
    "_log2",
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
