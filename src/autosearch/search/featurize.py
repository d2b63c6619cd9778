"""The features a cost model reads, computed for candidates during tuning, whatever its extractor.

PerStoreFeature (`per-store-feature`) needs each candidate lowered; trace tokens (`trace-tokens`)
read the schedule's trace and the workload's IR text only, so a model trained on them scores far
more candidates per second. A model trained with `device=true` gets the target's device descriptor
(measured once per machine, cached in the store) appended to every row.

MetaSchedule's evolutionary search scores the same schedule again and again: survivors of one
genetic iteration are re-scored in the next, the measured best seed every round's population, and a
measured candidate was scored before it was picked (measured on a 64-trial depthwise conv: 1,666 of
4,160 PerStoreFeature extractions were repeats). PerStoreFeature is a function of the scheduled
module alone, so `FeatureCache` keeps each module's features by its structural hash.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from autosearch.errors import InputError

__all__ = ["FeatureCache", "Featurizer", "featurizer_for"]

#: (TuneContext, candidates) -> one float32 matrix per candidate.
Featurizer = Callable[[Any, Sequence[Any]], list[np.ndarray]]


def featurizer_for(model: Any, target: Any = None, store: Any = None) -> tuple[tuple[str, str], Featurizer]:
    """(extractor id, featurizer) of what `model` was trained on."""
    from autosearch.features import per_store, trace_tokens

    extractor = tuple(getattr(model, "extractor", per_store.EXTRACTOR) or per_store.EXTRACTOR)
    if extractor == per_store.EXTRACTOR:
        base: Featurizer = FeatureCache(per_store.extract_features)
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


class FeatureCache:
    """A featurizer that extracts each distinct scheduled module once (per instance: one tuning run,
    one target). Exact for features that depend on the module alone (PerStoreFeature), so scores
    and search are unchanged. Returned matrices are read-only: they are shared with later calls.
    At most `capacity` modules are kept (least recently used dropped first)."""

    def __init__(self, base: Featurizer, capacity: int = 16384) -> None:
        if capacity < 1:
            raise InputError(f"a feature cache needs a capacity of at least 1, got {capacity}")
        self.base, self.capacity = base, int(capacity)
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @property
    def hit_rate(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else 0.0

    def __call__(self, context: Any, candidates: Sequence[Any]) -> list[np.ndarray]:
        import tvm_ffi

        keys = [int(tvm_ffi.structural_hash(c.sch.mod)) for c in candidates]
        todo: dict[int, Any] = {}
        for k, c in zip(keys, candidates):
            if k in self._cache:
                self._cache.move_to_end(k)
            elif k not in todo:
                todo[k] = c
        self.misses += len(todo)
        self.hits += len(keys) - len(todo)
        fresh = dict(zip(todo, self.base(context, list(todo.values())))) if todo else {}
        out = []
        for k in keys:
            m = fresh.get(k)
            if m is None:
                m = self._cache[k]
            out.append(m)
        for k, m in fresh.items():
            m.flags.writeable = False
            self._cache[k] = m
        while len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return out
