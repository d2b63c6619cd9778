"""A prior blended with a model fitted on the run's own measurements (`--model PRIOR+KIND`).

Why: a pretrained prior knows operators in general but adapts slowly to the one at hand; a model
fitted from scratch on the run's own measurements (what MetaSchedule's XGBModel is) knows only
this operator. Once `warmup` results are measured, the online model is refitted at every retrain,
and the score is a blend of both (each z-normalised over the measured candidates).

The blend weight follows which of the two ordered the newest results better before either had
seen them (the last three retrains), or, where the search spends random controls, their verdict
on the controls: it starts at 0.5 and moves to whichever model predicts the run's fresh
measurements, by `gain` x the accuracy gap. Defaults 16 and 1 (the online model from the second
round, a weight that moves as far as the accuracy gap) found faster schedules than a later start
and a steeper gain (bench/HISTORY.md): the rounds blended near 0.5 were the best ones, and a
weight thrown to 0 or 1 by one noisy judgement of a round's results the worst.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autosearch.errors import InputError
from autosearch.search.retrain import RunResults, learnable, quiet_fit

if TYPE_CHECKING:
    from autosearch.models.base import CostModel
    from autosearch.training.batch import FeatureBatch

__all__ = ["ONLINE_KINDS", "OnlineBlend"]

#: Model kinds that can be fitted from scratch on a run's results (fresh or online models): the
#: `--model KIND` and `PRIOR+KIND` values.
ONLINE_KINDS = ("xgb", "mlp", "lgbm-rank")


class OnlineBlend:
    """The online half of a `PRIOR+KIND` scorer: its model, refitted on the run, and its share of
    the blended score (module docstring). kind: one of `ONLINE_KINDS`; warmup: results measured
    before it is first fitted; gain: how far the weight moves from 0.5 per unit of held-back
    pairwise accuracy the online model has over the prior (clipped to [0, 1]); seed: its fits'."""

    def __init__(self, kind: str, *, warmup: int = 16, gain: float = 1.0, seed: int = 0) -> None:
        if kind not in ONLINE_KINDS:
            raise InputError(
                f"an online model needs a trained prior and a kind among {', '.join(ONLINE_KINDS)}, got {kind!r}"
            )
        if warmup < 2:
            raise InputError(f"the online warm-up must be at least 2 results (one pair to order), got {warmup}")
        if not (np.isfinite(gain) and gain > 0):
            raise InputError(f"the online blend's gain must be a number > 0, got {gain}")
        self.kind, self.warmup, self.gain, self.seed = kind, int(warmup), float(gain), seed
        self.model: CostModel | None = None
        self.weight = 0.0
        #: (mean, sd) of the prior's and of the online model's scores over the measured candidates.
        self.norm: tuple[tuple[float, float], tuple[float, float]] = ((0.0, 1.0), (0.0, 1.0))
        self.held_back: list[tuple[float, float]] = []  # (prior, online) pairwise accuracy on unseen results

    @property
    def blends(self) -> bool:
        """Whether the online model takes part in the score now."""
        return self.model is not None and self.weight > 0

    @property
    def share(self) -> float | None:
        """The online model's share of the score (history's `online_weight`), None before its first fit."""
        return self.weight if self.model is not None else None

    def predict(self, batch: FeatureBatch) -> np.ndarray:
        assert self.model is not None  # callers ask `blends` first
        return np.asarray(self.model.predict(batch), dtype=np.float64)

    def mix(self, prior: np.ndarray, online: np.ndarray) -> np.ndarray:
        """The blended score of the prior's and the online model's scores of the same candidates."""
        w = self.weight
        (mp, sp), (mo, so) = self.norm
        with np.errstate(invalid="ignore"):
            return (1.0 - w) * (prior - mp) / sp + w * (online - mo) / so

    def judge(self, prior: CostModel, results: RunResults, verdict: tuple[float, float] | None = None) -> None:
        """Which of prior and online model orders the pending results (unseen by both) better;
        nothing before the online model's first fit. With random controls, their `verdict`
        decides (the model's own picks are a biased sample: a prior wrong about the fast region
        can order its favourites well)."""
        from autosearch.training.metrics import pairwise_accuracy

        if self.model is None:
            return
        if verdict is not None:
            a, b = verdict
            self.held_back.append((a, b))
            self.weight = float(np.clip(0.5 + self.gain * (b - a), 0.0, 1.0))
            return
        ds = results.dataset(pending=True)
        accs = []
        for gi in ds.groups if ds is not None else []:
            assert ds is not None
            idx = np.arange(gi.start, gi.stop)
            idx = idx[np.isfinite(ds.latencies[idx])]  # successful results only
            if idx.size < 2:
                continue
            batch, lats = ds.batch(idx), ds.latencies[idx]
            a = pairwise_accuracy(np.asarray(prior.predict(batch), dtype=np.float64), lats)
            b = pairwise_accuracy(np.asarray(self.model.predict(batch), dtype=np.float64), lats)
            if np.isfinite(a) and np.isfinite(b):
                accs.append((a, b))
        if not accs:
            return
        self.held_back.append((float(np.mean([a for a, _ in accs])), float(np.mean([b for _, b in accs]))))
        recent = np.array(self.held_back[-3:])
        gap = recent[:, 1].mean() - recent[:, 0].mean()
        self.weight = float(np.clip(0.5 + self.gain * gap, 0.0, 1.0))

    def fit(self, prior: CostModel, results: RunResults) -> None:
        """Refit the online model from scratch on everything measured once `warmup` results are;
        renew both score scales."""
        from autosearch.models import make_model, model_class

        if results.n_seen < self.warmup:
            return
        ds = results.dataset(pending=False)
        if ds is None or not learnable(ds):
            return
        model = make_model(self.kind, seed=self.seed, **model_class(self.kind).online_fit_options)
        quiet_fit(model, ds)
        batch = ds.batch(np.flatnonzero(np.isfinite(ds.latencies)))  # the measured (successful) candidates

        def stats(m: CostModel) -> tuple[float, float]:
            v = np.asarray(m.predict(batch), dtype=np.float64)
            v = v[np.isfinite(v)]
            sd = float(v.std()) if v.size else 0.0
            return (float(v.mean()) if v.size else 0.0, sd if sd > 1e-12 else 1.0)

        self.norm = (stats(prior), stats(model))
        if self.model is None:
            self.weight = 0.5  # no evidence yet either way
        self.model = model
