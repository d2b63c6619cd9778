"""Exploration that follows the evidence: how far to trust the cost model, decided by what it got right.

A pretrained prior is right about some operators and badly wrong about others, and nothing tells
which before measuring. So every round, before the model learns from the new measurements, we ask
how well it *had* ordered them (pairwise accuracy on results it never saw). That accuracy sets the
trust `t` in [0, 1] used for the next rounds' scores:

    score = t * (z(model) + kappa * z(ensemble spread)) + (1 - t) * noise

- a prior that orders fresh results no better than chance (accuracy <= `floor`) gets t = 0: the
  search samples the design space like random search (what TVM-XGB's random warm-up does well);
- a prior that orders them well (accuracy >= `floor + span`) gets t = 1: pure exploitation plus an
  upper-confidence bonus where the ensemble's members disagree;
- before any evidence, t = `trust0`, so the first round covers the space and still leans on the prior.

Pure NumPy, testable without TVM; `search.adapter.ModelAdapter` owns one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from autosearch.errors import InputError

__all__ = ["EXPLORE_MODES", "TrustGate", "zscore"]

#: `--explore` values: "none" (scores as the model gives them), "trust" (this module).
EXPLORE_MODES = ("none", "trust")


def _pairwise_with_new(s: np.ndarray, lat: np.ndarray, new: np.ndarray) -> float | None:
    """Share of pairs (at least one of them new, different latencies) that `s` orders like the
    latencies (higher score = faster)."""
    ds = np.sign(s[:, None] - s[None, :])
    dl = np.sign(lat[None, :] - lat[:, None])  # +1 where i is faster than j
    mask = np.triu(np.ones(ds.shape, bool), 1) & (dl != 0) & (new[:, None] | new[None, :])
    if not mask.any():
        return None
    return float(np.mean(ds[mask] == dl[mask]))


def zscore(x: np.ndarray) -> np.ndarray:
    """(x - mean) / std over the finite entries; non-finite entries go below everything."""
    x = np.asarray(x, dtype=np.float64)
    ok = np.isfinite(x)
    if not ok.any():
        return np.zeros_like(x)
    mu, sd = float(x[ok].mean()), float(x[ok].std())
    z = (x - mu) / (sd if sd > 1e-12 else 1.0)
    return np.where(ok, z, z[ok].min() - 1.0 if ok.any() else 0.0)


@dataclass
class TrustGate:
    """Trust in the model, from its pairwise accuracy on each round's unseen results."""

    trust0: float = 0.3
    floor: float = 0.5
    span: float = 0.2
    window: int = 3
    kappa: float = 0.5
    seed: int = 0
    evidence: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0.0 <= self.trust0 <= 1.0:
            raise InputError(f"trust0 must be within [0, 1], got {self.trust0}")
        if self.span <= 0 or self.window < 1 or self.kappa < 0:
            raise InputError("TrustGate needs span > 0, window >= 1 and kappa >= 0")
        self._rng = np.random.default_rng(self.seed)

    @property
    def trust(self) -> float:
        if not self.evidence:
            return self.trust0
        acc = float(np.mean(self.evidence[-self.window :]))
        return float(np.clip((acc - self.floor) / self.span, 0.0, 1.0))

    def judge(
        self, scores: ArrayLike, latencies: Sequence[float | None], new: Sequence[bool] | None = None
    ) -> float | None:
        """Record how well `scores` (made before the model saw the `new` results) ordered them.

        With `new`, only pairs that involve a new result count, and the others may be earlier
        measurements: a round's picks are the model's own favourites, so ordering them among
        themselves says little; ordering them against what was measured before (random picks
        included) says whether its favourites really are faster."""
        lat = np.array([np.inf if x is None else float(x) for x in latencies], dtype=np.float64)
        fresh = np.ones(lat.shape, bool) if new is None else np.asarray(new, dtype=bool)
        ok = np.isfinite(lat) & (lat > 0)
        if (ok & fresh).sum() < 2 or ok.sum() < 3:
            return None  # too few successes to say anything
        acc = _pairwise_with_new(np.asarray(scores, dtype=np.float64)[ok], lat[ok], fresh[ok])
        if acc is None:
            return None
        self.evidence.append(acc)
        return acc

    def mix(self, scores: np.ndarray, spread: np.ndarray | None = None) -> np.ndarray:
        """Scores for the search: trusted model (+ uncertainty bonus) blended with fresh noise."""
        t = self.trust
        z = zscore(scores)
        if spread is not None and self.kappa > 0:
            z = z + self.kappa * zscore(spread)
        if t >= 1.0:
            return z
        return t * z + (1.0 - t) * self._rng.standard_normal(z.shape[0])
