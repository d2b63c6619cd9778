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
nest, worked out from the decisions (`postproc._Post`), since prefix tokens lack the instructions that say so.

The model pads the sequences of a batch to a common length with a mask, which is the same as a
fixed-length padded input; `MAX_TRACE_TOKENS` covers every trace of the reference dataset
(`coverage()` reports it). Every column is named in `FEATURE_NAMES` (`PREFIX_FEATURE_NAMES`) and documented at
`columns._NUMERIC`. Change anything about a column and bump `EXTRACTOR`'s version.

This package `__init__` is the extractor's documented face (docs/models.md:
`trace_tokens.backfill`, `trace_tokens.coverage`); each concern is a module of its own:
`columns` (the row layout), `ir` (workload tokens from the IR text), `sym` and `postproc`
(values resolved per candidate's decisions: a sampled value, the emulated post-processing),
`plan` (the trace compiler), `tokenizer` (the reference path and the cached one) and
`backfill_store` (tokens written into a store).
"""

from autosearch.features.trace_tokens.backfill_store import backfill, coverage, ensure_features
from autosearch.features.trace_tokens.columns import (
    ANNOTATION_KEYS,
    EXTRACTOR,
    FEATURE_NAMES,
    FEATURE_WIDTH,
    FOLDED_KINDS,
    MAX_TRACE_TOKENS,
    MAX_WORKLOAD_TOKENS,
    PREFIX_EXTRACTOR,
    PREFIX_FEATURE_NAMES,
    PREFIX_FEATURE_WIDTH,
    TOKEN_EXTRACTORS,
    TOKEN_KINDS,
)
from autosearch.features.trace_tokens.ir import workload_tokens
from autosearch.features.trace_tokens.tokenizer import TraceTokenizer, trace_tokens

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
