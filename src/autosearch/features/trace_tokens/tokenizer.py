"""The token matrix of a candidate: the reference path (`trace_tokens`) and the cached fast one.

Why: scoring reads thousands of candidates per second, so `TraceTokenizer` caches workload
tokens per program and compiled plans per trace prefix, and banks the post-processing tokens
(no decisions there, so they repeat); `trace_tokens` is the plain path the fast one must equal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from autosearch.errors import InputError
from autosearch.features.trace_tokens.columns import _C_POS, _WIDTH, FEATURE_WIDTH, FOLDED_KINDS, MAX_TRACE_TOKENS
from autosearch.features.trace_tokens.ir import _Block, parse_ir_blocks, workload_tokens
from autosearch.features.trace_tokens.plan import _Cols, _compile, _effects, _fold, _Plan, _State, _token
from autosearch.features.trace_tokens.sym import _Sym

__all__ = [
    "TraceTokenizer",
    "_decisions",
    "_parse",
    "_positions",
    "count_trace_tokens",
    "prefix_instructions",
    "trace_tokens",
]


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
