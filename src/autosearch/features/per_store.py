"""MetaSchedule's PerStoreFeature (164 floats per buffer store), stored per measurement.

Why store the extractor's name and version with every matrix: a model trained on one feature
definition must never be fed another; and since traces are stored, any feature can be recomputed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["EXTRACTOR", "FEATURE_WIDTH", "candidate_from_trace", "extract_features", "featurize_trace"]

#: (name, version) under which features are stored; bump the version if the definition changes.
EXTRACTOR = ("per-store-feature", "tvm-0.27")
FEATURE_WIDTH = 164

_extractor: Any = None


def _per_store() -> Any:
    global _extractor
    if _extractor is None:
        from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

        _extractor = PerStoreFeature(extract_workload=False)
    return _extractor


def extract_features(context: Any, candidates: Sequence[Any]) -> list[np.ndarray]:
    """One float32 (stores x 164) matrix per candidate."""
    if not candidates:
        return []
    out = _per_store().extract_from(context, list(candidates))
    return [np.asarray(x.numpy(), dtype=np.float32) for x in out]


def candidate_from_trace(mod: Any, trace_json: str | list[Any]) -> Any:
    """Replay a stored trace on the workload: exactly the schedule that was measured."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.schedule import Trace

    obj = json.loads(trace_json) if isinstance(trace_json, str) else trace_json
    sch = Schedule(mod)
    Trace.apply_json_to_schedule(obj, sch)
    return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


_CONTEXTS: dict[tuple[str, str], Any] = {}


def featurize_trace(mod: Any, target: Any, trace_json: str) -> np.ndarray:
    """Features of one stored schedule: replay its trace on `mod`, extract (one context per module)."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.workloads.base import structural_key

    key = (structural_key(mod), str(target))
    if key not in _CONTEXTS:
        from autosearch.backends.tvm.intrinsics import register_tensor_intrinsics

        register_tensor_intrinsics(target)
        _CONTEXTS[key] = ms.TuneContext(mod=mod, target=target)
    return extract_features(_CONTEXTS[key], [candidate_from_trace(mod, trace_json)])[0]
