"""A token value that depends on a sampled decision (`_Sym`), resolved per candidate.

Why apart: the trace compiler (`plan`) and the post-processing emulation (`postproc`) both
leave such values open, and a plan is compiled once per distinct trace prefix and then resolved
for each candidate's decisions.
"""

from __future__ import annotations

from typing import Any

from autosearch.features.trace_tokens.columns import _log2

__all__ = [
    "_Sym",
]


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
