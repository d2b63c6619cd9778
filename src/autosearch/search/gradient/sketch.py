"""A MetaSchedule design space as a symbolic sketch: its sampling decisions are the knobs.

Why: gradient search (Felix) needs the schedule's free choices as numbers. In a post-order-apply
design space every choice is a sampling instruction of the trace: `SamplePerfectTile` (factors of
one loop over n levels, whose product is the loop's extent), `SampleCategorical` (e.g. the unroll
step) and `SampleComputeLocation`. Tile factors and categorical choices are the knobs; a compute
location changes the loop structure itself, so it stays fixed per sketch (each design space is its
own sketch, as each Felix sketch is).

Relaxation: a tile of extent E over n levels is z in R^n with factor_i = E^softmax(z)_i, so the
product constraint holds by construction; a categorical knob is a softmax over its candidates.
Rounding goes to the nearest valid factorisation in log space (all are enumerated: cheap).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autosearch.features.decision_space import factorizations

__all__ = [
    "CategoricalKnob",
    "Decisions",
    "Sketch",
    "TileKnob",
    "factorizations",
    "relax_reason",
]

#: Decisions of one sketch: (tile factors per tile knob, candidate index per categorical knob).
Decisions = tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]

_TILE = "SamplePerfectTile"
_CAT = "SampleCategorical"
_LOC = "SampleComputeLocation"
_KNOWN = (_TILE, _CAT, _LOC)


@dataclass(frozen=True)
class TileKnob:
    """Factors of one loop over `n` levels; `inst` is the index of its instruction in the trace."""

    inst: int
    extent: int
    n: int
    max_innermost: int

    @property
    def choices(self) -> tuple[tuple[int, ...], ...]:
        return factorizations(self.extent, self.n, self.max_innermost)


@dataclass(frozen=True)
class CategoricalKnob:
    """One choice among `candidates` (e.g. the auto-unroll step)."""

    inst: int
    candidates: tuple[int, ...]
    probs: tuple[float, ...]


@dataclass
class Sketch:
    """One design space with its knobs; `apply` replays it with other decisions."""

    mod: Any
    trace: Any  # the design space's trace (no post-processing)
    tiles: list[TileKnob] = field(default_factory=list)
    cats: list[CategoricalKnob] = field(default_factory=list)
    index: int = 0
    _canon: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_space(cls, mod: Any, space: Any, index: int = 0) -> Sketch:
        """Read the knobs off a design-space schedule (one of `generate_design_space()`)."""
        trace = space.trace
        tiles, cats = [], []
        for i, inst in enumerate(trace.insts):
            name = inst.kind.name
            if name == _TILE:
                dec = [int(x) for x in trace.decisions[inst]]
                attrs = [int(a) for a in inst.attrs]
                tiles.append(TileKnob(i, math.prod(dec), attrs[0], attrs[1]))
            elif name == _CAT:
                cand = tuple(int(c) for c in inst.attrs[0])
                probs = tuple(float(p) for p in inst.attrs[1])
                cats.append(CategoricalKnob(i, cand, probs))
        return cls(mod=mod, trace=trace, tiles=tiles, cats=cats, index=index)

    # -- decisions -------------------------------------------------------------------------------
    def own_decisions(self) -> Decisions:
        """The decisions the design space was sampled with."""
        insts = self.trace.insts
        tiles = tuple(tuple(int(x) for x in self.trace.decisions[insts[t.inst]]) for t in self.tiles)
        cats = tuple(int(self.trace.decisions[insts[c.inst]]) for c in self.cats)
        return tiles, cats

    def random_decisions(self, rng: random.Random) -> Decisions:
        """Uniform over valid factorisations; categorical by the sketch's own probabilities."""
        tiles = tuple(rng.choice(t.choices) for t in self.tiles)
        cats = tuple(rng.choices(range(len(c.candidates)), weights=c.probs)[0] for c in self.cats)
        return tiles, cats

    def decisions_of(self, trace_json: Any, strict_location: bool = True) -> Decisions | None:
        """The decisions of a stored trace (JSON) made from this sketch, or None if it is not one.

        Stored traces are simplified (dead instructions such as GetConsumers dropped, random
        variables renamed), so both are compared in a canonical form: instructions other than the
        dropped kinds, up to post-processing, with every input named by (producer, output slot).
        With `strict_location=False` a trace whose compute locations differ still matches (its
        features are then those of this sketch's structure: an approximation)."""
        if self._canon is None:
            self._canon = _canonical(to_json(self.trace))
        mine, _ = self._canon
        theirs, positions = _canonical(trace_json)
        if len(theirs) < len(mine) or theirs[: len(mine)] != mine:
            return None
        by_idx = {int(d[0]): d[1] for d in trace_json[1]}
        sk_pos = _canonical(to_json(self.trace))[1]
        own = {int(d[0]): d[1] for d in to_json(self.trace)[1]}
        at = {sk_pos[k]: positions[k] for k in range(len(mine))}  # sketch inst index -> stored index
        for i, inst in enumerate(self.trace.insts):
            if strict_location and inst.kind.name == _LOC and i in at and by_idx.get(at[i]) != own.get(i):
                return None
        try:
            tiles = tuple(tuple(int(x) for x in by_idx[at[t.inst]]) for t in self.tiles)
            cats = tuple(int(by_idx[at[c.inst]]) for c in self.cats)
        except (KeyError, TypeError, ValueError):
            return None
        if any(math.prod(f) != t.extent or len(f) != t.n for f, t in zip(tiles, self.tiles)):
            return None
        return tiles, cats

    def with_decisions(self, dec: Decisions) -> Any:
        """The sketch's trace with `dec` substituted (compute locations kept)."""
        from tvm.s_tir.schedule import Trace

        insts = self.trace.insts
        new = dict(self.trace.decisions.items())
        for t, f in zip(self.tiles, dec[0]):
            new[insts[t.inst]] = [int(x) for x in f]
        for c, k in zip(self.cats, dec[1]):
            new[insts[c.inst]] = int(k)
        return Trace(list(insts), new)

    def apply(self, dec: Decisions) -> Any:
        """A fresh schedule of the workload with the sketch replayed under `dec` (no post-processing)."""
        from tvm.s_tir import Schedule

        sch = Schedule(self.mod)
        self.with_decisions(dec).apply_to_schedule(sch, remove_postproc=True)
        return sch

    # -- relaxed knobs ---------------------------------------------------------------------------
    def knob_width(self) -> int:
        return sum(t.n for t in self.tiles)

    def log_factors(self, dec: Decisions) -> list[float]:
        """Decisions as the flat vector of log tile factors (the feature functions' input)."""
        return [math.log(f) for fs in dec[0] for f in fs]

    def round_tiles(self, log_f: Sequence[Sequence[float]]) -> tuple[tuple[int, ...], ...]:
        """Nearest valid factorisation (squared distance in log space) per tile knob."""
        out = []
        for t, lf in zip(self.tiles, log_f):
            best = min(t.choices, key=lambda c: sum((math.log(a) - b) ** 2 for a, b in zip(c, lf)))
            out.append(best)
        return tuple(out)


def to_json(trace: Any) -> Any:
    """A trace as plain JSON ([instructions, decisions]), as the store keeps it."""
    from autosearch.backends.tvm.space import to_plain_json

    return to_plain_json(trace.as_json())


def _canonical(trace_json: Any) -> tuple[list[Any], list[int]]:
    """(canonical instructions up to post-processing, their indices in the trace).

    Getter instructions whose results are never used are dropped on both sides (a simplified
    trace has lost them), then every input is named by (producing instruction, output slot)."""
    insts = []
    for idx, inst in enumerate(trace_json[0]):
        if inst[0] == "EnterPostproc":
            break
        insts.append((idx, inst))
    while True:
        used = {x for _, inst in insts for x in inst[1] if isinstance(x, str)}
        keep = [
            (i, inst) for i, inst in insts if not (inst[0].startswith("Get") and not any(o in used for o in inst[3]))
        ]
        if len(keep) == len(insts):
            break
        insts = keep
    names: dict[str, tuple[int, int]] = {}
    out: list[Any] = []
    pos: list[int] = []
    for idx, (kind, inputs, attrs, outputs) in insts:
        ins = [list(names[x]) if isinstance(x, str) and x in names else x for x in inputs]
        out.append([kind, ins, attrs])
        pos.append(idx)
        for slot, o in enumerate(outputs):
            names[o] = (len(out) - 1, slot)
    return out, pos


def relax_reason(spaces: Sequence[Any]) -> str | None:
    """Why these design spaces cannot be searched by gradient (None when they can)."""
    if not spaces:
        return "no design space"
    if not any(inst.kind.name in (_TILE, _CAT) for sch in spaces for inst in sch.trace.insts):
        return "the design space has no tile or categorical decision to relax"
    for sch in spaces:
        for inst in sch.trace.insts:
            name = inst.kind.name
            if name.startswith("Sample") and name not in _KNOWN:
                return f"the design space samples with {name}, which gradient search cannot relax"
    return None
