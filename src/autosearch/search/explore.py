"""Exploration that follows the evidence: random controls, and how many, decided by what the model got right.

A pretrained prior is right about some operators and badly wrong about others, and nothing tells
which before measuring. `ControlGate` (`--explore control`) asks *random* schedules: a share of
every round is drawn uniformly from the design space (the controls), and the model's pairwise
accuracy on them, scored before it learns them, is an unbiased estimate of how well it orders the
space. A round's model picks are its own favourites' neighbourhood, so a prior that is wrong about
the fast region can still order them well (measured on a depthwise conv: accuracy 0.7-0.9 on its
picks, 0.60 on the whole space). The controls' accuracy sets the next round's control share:
`high` when the model orders random schedules like chance, `low` when it orders them well. The
controls also feed the run's online model and the evolutionary population, which is how TVM's
XGBModel finds the fast region its random warm-up samples.

`StallTracker` asks the plainest question: is the run still finding faster schedules? After
`patience` rounds in which the best improved by less than `tol`, a share of every round is spent
on random starts, doubling with each further stalled round up to `cap`, and back to nothing once a
round improves the best (the gradient search's widening, search/gradient/optimize.py).

`Exploration` is what a search strategy asks of exploration (search/strategies): how many of a
round are random controls, how candidates are scored for the search (the model's scores, or with
an upper-confidence bonus), and what the model got right before it learns a round. `NoExploration`
(`--explore none`) and `ControlExploration` (`--explore control`, a `ControlGate`) are the two
kinds; each strategy owns one (`make_exploration`).

Pure NumPy, testable without TVM.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from autosearch.errors import InputError

__all__ = [
    "EXPLORE_MODES",
    "ControlExploration",
    "ControlGate",
    "Exploration",
    "NoExploration",
    "StallTracker",
    "make_exploration",
    "zscore",
]

#: `--explore` values past `auto`: "none" (scores as the model gives them) and "control" (this module).
EXPLORE_MODES = ("none", "control")


def _pair_counts(s: np.ndarray, lat: np.ndarray, new: np.ndarray) -> tuple[int, int]:
    """(pairs `s` orders like the latencies, pairs counted): pairs with at least one new member
    and different latencies (higher score = faster)."""
    ds = np.sign(s[:, None] - s[None, :])
    dl = np.sign(lat[None, :] - lat[:, None])  # +1 where i is faster than j
    mask = np.triu(np.ones(ds.shape, bool), 1) & (dl != 0) & (new[:, None] | new[None, :])
    return int(np.sum(ds[mask] == dl[mask])), int(mask.sum())


def _finite_latencies(latencies: Sequence[float | None]) -> np.ndarray:
    return np.array([np.inf if x is None else float(x) for x in latencies], dtype=np.float64)


def zscore(x: np.ndarray) -> np.ndarray:
    """(x - mean) / std over the finite entries; non-finite entries go below everything."""
    x = np.asarray(x, dtype=np.float64)
    ok = np.isfinite(x)
    if not ok.any():
        return np.zeros_like(x)
    mu, sd = float(x[ok].mean()), float(x[ok].std())
    z = (x - mu) / (sd if sd > 1e-12 else 1.0)
    return np.where(ok, z, z[ok].min() - 1.0 if ok.any() else 0.0)


def _measured_pairs(scores: ArrayLike, latencies: Sequence[float | None], new: Sequence[bool]) -> tuple[int, int]:
    """`_pair_counts` over the measured (finite, positive latency) entries; non-finite scores rank lowest."""
    lat = _finite_latencies(latencies)
    ok = np.isfinite(lat) & (lat > 0)
    return _pair_counts(zscore(np.asarray(scores))[ok], lat[ok], np.asarray(new, dtype=bool)[ok])


@dataclass
class ControlGate:
    """The share of each round drawn at random, from the model's accuracy on earlier random draws.

    share0: before any evidence (the first round always includes controls);
    low / high: the share when the model orders random schedules well / like chance;
    floor, span: pairwise accuracy <= floor counts as chance, >= floor + span as good;
    decay: weight of older evidence per round (the model adapts, so its old mistakes fade);
    kappa: weight of the ensemble members' spread (an upper-confidence bonus) in the scores.
    """

    share0: float = 0.25
    low: float = 0.125
    high: float = 0.5
    floor: float = 0.55
    span: float = 0.2
    decay: float = 0.7
    min_pairs: int = 6
    kappa: float = 0.25
    right: float = 0.0
    total: float = 0.0
    evidence: list[float] = field(default_factory=list)
    #: Decayed (right, total) pair counts of other scorers on the same controls (e.g. prior, online).
    tally: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.low <= self.share0 <= self.high <= 1.0:
            raise InputError(
                f"ControlGate needs 0 <= low <= share0 <= high <= 1, got {self.low}, {self.share0}, {self.high}"
            )
        if self.span <= 0 or not 0.0 <= self.decay <= 1.0 or self.kappa < 0:
            raise InputError("ControlGate needs span > 0, decay within [0, 1] and kappa >= 0")

    @property
    def accuracy(self) -> float | None:
        """Decayed pairwise accuracy on controls; None until `min_pairs` pairs were judged."""
        return self.right / self.total if self.total >= self.min_pairs else None

    @property
    def share(self) -> float:
        acc = self.accuracy
        if acc is None:
            return self.share0
        good = float(np.clip((acc - self.floor) / self.span, 0.0, 1.0))
        return self.high - (self.high - self.low) * good

    def controls(self, n: int) -> int:
        """How many of a round of `n` candidates are random controls (at least one of 2+)."""
        if n < 2:
            return 0
        return int(min(n - 1, max(1, round(self.share * n))))

    def judge(self, scores: ArrayLike, latencies: Sequence[float | None], new: Sequence[bool]) -> float | None:
        """Record how `scores` (made before the model saw the `new` controls) order them against
        each other and against earlier controls; returns this round's accuracy."""
        right, total = _measured_pairs(scores, latencies, new)
        if total == 0:
            return None
        self.right = self.decay * self.right + right
        self.total = self.decay * self.total + total
        self.evidence.append(right / total)
        return right / total

    def judge_scorer(
        self, name: str, scores: ArrayLike, latencies: Sequence[float | None], new: Sequence[bool]
    ) -> None:
        """Tally another scorer's pairwise accuracy on the same controls (decayed like the gate's)."""
        right, total = _measured_pairs(scores, latencies, new)
        t = self.tally.setdefault(name, [0.0, 0.0])
        t[0], t[1] = self.decay * t[0] + right, self.decay * t[1] + total

    def scorer_accuracy(self, name: str) -> float | None:
        t = self.tally.get(name)
        return t[0] / t[1] if t is not None and t[1] >= self.min_pairs else None

    def acquire(self, scores: np.ndarray, spread: np.ndarray | None = None) -> np.ndarray:
        """The search's score: the model's, plus a bonus where the ensemble's members disagree."""
        z = zscore(scores)
        if spread is not None and self.kappa > 0:
            z = z + self.kappa * zscore(spread)
        return z


@dataclass
class StallTracker:
    """Rounds in a row without a better best, and the share of random starts that follows.

    patience: stalled rounds before any widening (0: never widen);
    start: the share in the first widened round; it doubles with every further stalled round;
    cap: the largest share; tol: a best must improve by this fraction to count as progress.
    """

    patience: int = 2
    start: float = 0.125
    cap: float = 0.5
    tol: float = 0.01
    best: float = math.inf
    stalled: int = 0

    def __post_init__(self) -> None:
        if self.patience < 0:
            raise InputError(f"stall patience must be >= 0 (0 = never widen), got {self.patience}")
        if not 0.0 < self.start <= self.cap <= 1.0:
            raise InputError(f"StallTracker needs 0 < start <= cap <= 1, got start {self.start}, cap {self.cap}")
        if not 0.0 <= self.tol < 1.0:
            raise InputError(f"stall tolerance must be within [0, 1), got {self.tol}")

    def observe(self, latencies: Sequence[float | None]) -> bool:
        """Count one round (None = failed); True if it improved the best by at least `tol`."""
        lat = _finite_latencies(latencies)
        lat = lat[np.isfinite(lat) & (lat > 0)]
        improved = bool(lat.size) and float(lat.min()) < (1.0 - self.tol) * self.best
        self.stalled = 0 if improved else self.stalled + 1
        if lat.size:
            self.best = min(self.best, float(lat.min()))
        return improved

    @property
    def widened(self) -> bool:
        return self.patience > 0 and self.stalled >= self.patience

    def share(self, base: float = 0.0) -> float:
        """The random share of the next round: `base` until the search stalls, then start, 2x start, ... cap."""
        if not self.widened:
            return base
        k = self.stalled - self.patience
        return max(base, min(self.cap, self.start * 2.0**k))


class Exploration(ABC):
    """How a strategy explores past its model: a policy over a scorer (`search.adapter.ModelAdapter`
    or any object with its `score`, `score_spread`, `score_space`, `score_space_spread` and
    `score_parts` methods)."""

    #: Whether a candidate's score depends on the batch it is scored in (then a search must not
    #: reuse a score across batches).
    relative: bool = False

    def controls(self, n: int) -> int:
        """How many of a round of `n` are random controls."""
        return 0

    @property
    def state(self) -> float | None:
        """What the policy decided for the next round (history's `explore`), or None."""
        return None

    @abstractmethod
    def score(self, scorer: Any, feats: Sequence[np.ndarray]) -> np.ndarray:
        """The search's scores of candidates' feature matrices (higher = better)."""

    @abstractmethod
    def score_space(self, scorer: Any, space: Any, x: np.ndarray) -> np.ndarray:
        """The search's scores of decision vectors `x` of a `DecisionSpace`."""

    def judge(
        self, scorer: Any, group: str, feats: Sequence[np.ndarray], latencies: Sequence[float | None], ctrl: list[bool]
    ) -> None:
        """Record a round's results before the scorer learns them (`ctrl` marks the controls)."""
        return None  # nothing by default

    def verdict(self) -> tuple[float, float] | None:
        """(prior, online model) pairwise accuracy on what this policy judged, or None: what the
        scorer's online blend follows when the policy has unbiased evidence."""
        return None


class NoExploration(Exploration):
    """`--explore none`: the model's scores as they are, no controls."""

    def score(self, scorer: Any, feats: Sequence[np.ndarray]) -> np.ndarray:
        return np.asarray(scorer.score(feats), dtype=np.float64)

    def score_space(self, scorer: Any, space: Any, x: np.ndarray) -> np.ndarray:
        return np.asarray(scorer.score_space(space, x), dtype=np.float64)


class ControlExploration(Exploration):
    """`--explore control`: random controls each round, their share set by the model's accuracy on
    earlier controls (`ControlGate`), and an upper-confidence bonus where the ensemble disagrees."""

    relative = True  # z-scored per batch

    def __init__(self, seed: int = 0, gate: ControlGate | None = None, *, trained: bool = True) -> None:
        self.gate = gate or ControlGate()
        self.rng = np.random.default_rng(seed)
        #: A model fitted on the run alone has nothing to be judged on before its first fit: no controls.
        self.trained = trained
        self.history: dict[str, tuple[list[np.ndarray], list[float | None]]] = {}  # earlier controls per group

    def controls(self, n: int) -> int:
        return self.gate.controls(n) if self.trained else 0

    @property
    def state(self) -> float | None:
        return self.gate.share

    def score(self, scorer: Any, feats: Sequence[np.ndarray]) -> np.ndarray:
        return self.gate.acquire(*scorer.score_spread(feats))

    def score_space(self, scorer: Any, space: Any, x: np.ndarray) -> np.ndarray:
        return self.gate.acquire(*scorer.score_space_spread(space, x))

    def judge(
        self, scorer: Any, group: str, feats: Sequence[np.ndarray], latencies: Sequence[float | None], ctrl: list[bool]
    ) -> None:
        """Give the gate this round's controls, scored before the model learns them, against up to
        64 earlier controls of the group; the prior and the online model are tallied alone too."""
        if not self.trained or not any(ctrl):
            return
        old_feats, old_lats = self.history.setdefault(group, ([], []))
        idx = np.arange(len(old_lats))
        if idx.size > 64:
            idx = self.rng.choice(idx, 64, replace=False)
        new_feats = [f for f, c in zip(feats, ctrl) if c]
        new_lats = [x for x, c in zip(latencies, ctrl) if c]
        items = [*new_feats, *(old_feats[i] for i in idx)]
        lats = [*new_lats, *(old_lats[i] for i in idx)]
        new = [True] * len(new_feats) + [False] * len(idx)
        self.gate.judge(scorer.score(items), lats, new)
        for name, scores in scorer.score_parts(items).items():  # prior and online model, each alone
            self.gate.judge_scorer(name, scores, lats, new)
        for f, lat in zip(new_feats, new_lats):
            ok = lat is not None and np.isfinite(lat) and lat > 0
            old_feats.append(np.asarray(f, dtype=np.float32))
            old_lats.append(float(lat) if ok and lat is not None else None)

    def verdict(self) -> tuple[float, float] | None:
        a, b = self.gate.scorer_accuracy("prior"), self.gate.scorer_accuracy("online")
        return None if a is None or b is None else (a, b)


def make_exploration(mode: str, seed: int = 0, *, trained: bool = True) -> Exploration:
    """The policy of an `--explore` value past `auto` (`model_spec.make_cost_model` resolves that)."""
    if mode not in EXPLORE_MODES:
        raise InputError(f"explore must be one of {', '.join(EXPLORE_MODES)}, got {mode!r}")
    return ControlExploration(seed, trained=trained) if mode == "control" else NoExploration()
