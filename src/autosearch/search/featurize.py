"""The features a cost model reads, computed for candidates during tuning, whatever its extractor.

PerStoreFeature (`per-store-feature`) needs each candidate lowered; trace tokens (`trace-tokens`)
read the schedule's trace and the workload's IR text only, so a model trained on them scores far
more candidates per second. A model trained with `device=true` gets the target's device descriptor
(measured once per machine, cached in the store) appended to every row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from autosearch.errors import InputError

__all__ = ["Featurizer", "featurizer_for"]

#: (TuneContext, candidates) -> one float32 matrix per candidate.
Featurizer = Callable[[Any, Sequence[Any]], list[np.ndarray]]


def featurizer_for(model: Any, target: Any = None, store: Any = None) -> tuple[tuple[str, str], Featurizer]:
    """(extractor id, featurizer) of what `model` was trained on."""
    from autosearch.features import per_store, trace_tokens

    extractor = tuple(getattr(model, "extractor", per_store.EXTRACTOR) or per_store.EXTRACTOR)
    if extractor == per_store.EXTRACTOR:
        base: Featurizer = per_store.extract_features
    elif extractor == trace_tokens.EXTRACTOR:
        base = _TokenFeaturizer()
    else:
        raise InputError(
            f"the model reads features {':'.join(extractor)}, which tuning cannot compute "
            f"(known: {':'.join(per_store.EXTRACTOR)}, {':'.join(trace_tokens.EXTRACTOR)})"
        )
    if not getattr(model, "device", False):
        return (extractor[0], extractor[1]), base
    if target is None:
        raise InputError("the model was trained with device descriptors: tuning needs the target to describe it")
    from autosearch.backends.tvm.device import profile_target
    from autosearch.features.device import append_device, descriptor_vector, device_descriptor

    desc = device_descriptor(store, target) if store is not None else profile_target(target)
    vec = descriptor_vector(desc)

    def with_device(context: Any, candidates: Sequence[Any]) -> list[np.ndarray]:
        return append_device(base(context, candidates), vec)

    return (extractor[0], extractor[1]), with_device


class _TokenFeaturizer:
    """Trace tokens of MetaSchedule candidates; the workload's IR text is printed once per module."""

    def __init__(self) -> None:
        from autosearch.features.trace_tokens import TraceTokenizer

        self.tokenizer = TraceTokenizer()
        self._ir: dict[int, str] = {}

    def __call__(self, context: Any, candidates: Sequence[Any]) -> list[np.ndarray]:
        from autosearch.backends.tvm.space import trace_json

        if not candidates:
            return []
        key = id(context.mod)
        if key not in self._ir:
            self._ir[key] = context.mod.script()
        return self.tokenizer.many([trace_json(c.sch) for c in candidates], self._ir[key])
