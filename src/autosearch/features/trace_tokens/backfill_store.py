"""Trace tokens written into a store: back-fill, the train-time check, and coverage.

Why: traces are stored with every record, so a store collected with another extractor can be
given tokens afterwards without re-measuring anything; this is the only part of the extractor
that touches the store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from autosearch.errors import InputError
from autosearch.features.trace_tokens.columns import EXTRACTOR, MAX_TRACE_TOKENS, TOKEN_EXTRACTORS
from autosearch.features.trace_tokens.tokenizer import TraceTokenizer, count_trace_tokens

__all__ = [
    "backfill",
    "coverage",
    "ensure_features",
]


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
