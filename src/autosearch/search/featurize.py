"""The features a cost model reads, computed for candidates during tuning, whatever its extractor.

PerStoreFeature (`per-store-feature`) needs each candidate lowered; trace tokens (`trace-tokens`)
read the schedule's trace and the workload's IR text only, so a model trained on them scores far
more candidates per second. A model trained on `trace-prefix-tokens` (the instructions before
post-processing) needs only a candidate's sampling decisions: `_PrefixTokenFeaturizer` reads them
out of TVM (a small fraction of the time the trace's JSON takes) and looks the tokens up in the sketch's
`DecisionSpace`. A model trained with `device=true` gets the target's device descriptor
(measured once per machine, cached in the store) appended to every row.

MetaSchedule's evolutionary search scores the same schedule again and again: survivors of one
genetic iteration are re-scored in the next, the measured best seed every round's population, and a
measured candidate was scored before it was picked (measured on a 64-trial depthwise conv: 1,666 of
4,160 PerStoreFeature extractions were repeats). PerStoreFeature is a function of the scheduled
module alone, so `FeatureCache` keeps each module's features by its structural hash.
"""

from __future__ import annotations

import json
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

    extractor = tuple(model.extractor or per_store.EXTRACTOR)
    if extractor == per_store.EXTRACTOR:
        base: Featurizer = FeatureCache(per_store.extract_features)
    elif extractor == trace_tokens.PREFIX_EXTRACTOR:
        base = _PrefixTokenFeaturizer()
    elif extractor == trace_tokens.EXTRACTOR:
        base = _TokenFeaturizer()
    else:
        known = ", ".join(":".join(e) for e in (per_store.EXTRACTOR, *trace_tokens.TOKEN_EXTRACTORS))
        raise InputError(
            f"the model reads features {':'.join(extractor)}, which tuning cannot compute (known: {known})"
        )
    if not model.device:
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

    def __init__(self, postproc: bool = True) -> None:
        from autosearch.features.trace_tokens import TraceTokenizer

        self.tokenizer = TraceTokenizer(postproc=postproc)
        self._ir: dict[int, str] = {}  # module_key -> IR text

    def ir(self, context: Any) -> str:
        """The workload's IR text, printed once per module."""
        key = module_key(context)
        if key not in self._ir:
            self._ir[key] = context.mod.script()
        return self._ir[key]

    def __call__(self, context: Any, candidates: Sequence[Any]) -> list[np.ndarray]:
        from autosearch.backends.tvm.space import trace_json

        if not candidates:
            return []
        return self.tokenizer.many([trace_json(c.sch) for c in candidates], self.ir(context))


class _PrefixTokenFeaturizer:
    """Trace-prefix tokens of MetaSchedule candidates from their decisions alone.

    Candidates of one sketch share the instructions before post-processing and differ in their
    sampling decisions. TVM writes a candidate's trace without post-processing as JSON in C++, and
    that JSON's instruction half, hashed in C++, names the sketch; only the short decision half is
    read into Python (a small fraction of what the whole trace as Python JSON costs). The
    first candidate of a sketch becomes its `DecisionSpace`, checked once against the tokenizer on
    its full trace text (a sketch where they differ keeps the text path); every later candidate is
    a vector lookup. A candidate whose decisions the space cannot express takes the text path too:
    the tokens are the same either way."""

    def __init__(self, max_spaces: int = 512) -> None:
        self.text = _TokenFeaturizer(postproc=False)
        self.max_spaces = max_spaces
        # sketch key -> None (text path) or (indices of its fixed decisions, their values -> space)
        self._sketches: dict[tuple[int, int], tuple[tuple[int, ...], dict[tuple[Any, ...], Any]] | None] = {}
        self._n_spaces = 0
        self.fast = 0  # candidates tokenized from their decisions (the rest: from their trace text)

    def __call__(self, context: Any, candidates: Sequence[Any]) -> list[np.ndarray]:
        from autosearch.features.decision_space import decisions_by_inst

        out: list[np.ndarray | None] = [None] * len(candidates)
        groups: dict[int, tuple[Any, list[tuple[int, np.ndarray]]]] = {}  # id(space) -> (space, members)
        mod = module_key(context) if candidates else 0
        for pos, cand in enumerate(candidates):
            try:
                key, insts, decisions = _sketch_of(mod, cand)
            except Exception:  # a trace TVM cannot write as JSON: the text path says what is wrong
                continue
            by_inst = decisions_by_inst(decisions)
            space = self._sketch_space(context, cand, key, insts, decisions, by_inst)
            vec = space.vector(by_inst) if space is not None else None
            if vec is not None:
                groups.setdefault(id(space), (space, []))[1].append((pos, vec))
        for space, members in groups.values():
            toks = space.tokens(np.stack([v for _, v in members]))
            for (pos, _), t in zip(members, toks):
                out[pos] = t
            self.fast += len(members)
        slow = [i for i, t in enumerate(out) if t is None]
        for i, t in zip(slow, self.text(context, [candidates[i] for i in slow]) if slow else []):
            out[i] = t
        return [t for t in out if t is not None]

    def _sketch_space(
        self,
        context: Any,
        cand: Any,
        key: tuple[int, int],
        insts: Callable[[], list[Any]],
        decisions: list[Any],
        by_inst: dict[int, Any],
    ) -> Any:
        """The `DecisionSpace` of the candidate's sketch with its fixed decisions (built on first
        sight), or None: the text path."""
        if key in self._sketches and self._sketches[key] is None:
            return None
        known = self._sketches.get(key)
        if known is not None:
            sig = tuple(by_inst.get(i) for i in known[0])
            if sig in known[1]:
                return known[1][sig]
        if self._n_spaces >= self.max_spaces:
            self._sketches.clear()
            self._n_spaces = 0
        space = self._new_space(context, cand, insts(), decisions)
        if space is None:
            self._sketches[key] = None
            return None
        fixed = tuple(sorted(space.fixed))
        if known is None or known[0] != fixed:
            known = self._sketches[key] = (fixed, {})
        known[1][tuple(by_inst.get(i) for i in fixed)] = space
        self._n_spaces += 1
        return space

    def _new_space(self, context: Any, cand: Any, insts: list[Any], decisions: list[Any]) -> Any:
        from autosearch.features.decision_space import DecisionSpace

        try:
            space = DecisionSpace([insts, decisions], self.text.ir(context))
            same = np.allclose(space.tokens(space.current)[0], self.text(context, [cand])[0], atol=1e-5)
        except Exception:  # a sketch the decision space cannot read: the text path serves it
            return None
        return space if same else None


def module_key(context: Any) -> int:
    """The structural hash of a tuning context's module: `context.mod` is a new Python object at
    every access, so its id() names nothing."""
    import tvm_ffi

    return int(tvm_ffi.structural_hash(context.mod))


def _sketch_of(mod: int, cand: Any) -> tuple[tuple[int, int], Callable[[], list[Any]], list[Any]]:
    """(sketch key, its instructions as plain JSON on demand, [[index, decision], ...]) of a
    candidate of the module whose `module_key` is `mod`."""
    import tvm_ffi
    from tvm.s_tir.schedule import _ffi_api

    from autosearch.backends.tvm.space import to_plain_json

    j = _ffi_api.TraceAsJSON(cand.sch.trace.simplified(True), False)
    key = (mod, int(tvm_ffi.structural_hash(j[0])))
    # the instructions once per sketch, through text: TVM's strings are a str subclass the tokenizer refuses
    return key, lambda: json.loads(json.dumps(to_plain_json(j[0]))), to_plain_json(j[1])


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
