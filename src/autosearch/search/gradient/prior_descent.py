"""Gradient search (Felix) on the shipped prior: Adam on the `tlp` score of relaxed decision vectors.

Why: `--search gradient`'s own knob-feature MLP does not carry to operators it has not seen
(issue 48: its best was several times slower than what the decision search on the prefix prior
found in the same trials), while the prefix prior is the model that transfers. `prior_tokens.RelaxedTokens` writes
the prior's input as a function of a sketch's relaxed knobs, so its score can be descended.

One round (`PriorGradientSearch.propose(n)`), per sketch (`DecisionSpace`, the decision search's
sketches: the design spaces and the compute locations of a few uniform draws):
1. `screen` uniform vectors and one- and two-knob mutants of the sketch's fastest measured ones
   are scored from the prior's tables (`score_space`: tens of thousands a second); a sketch with
   at most `whole` vectors (softmax's: 4 to 196) has every one scored and is not descended;
2. on the `descend_sketches` sketches with the best scores (and every sketch holding one of the
   run's four fastest schedules), `starts` descents begin: the sketch's fastest measured vectors,
   the best-scored vectors of step 1 up to half, the rest uniform ones; each tile knob is z with
   log2 factors log2(E) softmax(z) (Felix: the product stays the loop's extent), each categorical
   knob a softmax over its candidates (`descend`);
3. Adam on -score + penalty x (innermost factor over its limit)^2 for `steps` steps (each step on
   one ensemble member in turn: `cycle_members`), every descended sketch's starts in one batch
   (`descend_many`: one network pass and one backward a step, on one torch thread); at every
   checkpoint each point is rounded to the nearest valid factorisation (log space) and most
   likely choice, the rounded vectors deduplicated and scored exactly;
4. the round's picks are the best-scored of steps 1-3, spread over loop structures and covering
   the sketches in the first round as the decision search does (its `_spread`, `_cover_sketches`),
   with an `eps_greedy` share of uniform vectors; they are replayed, post-processed and built.
The prior is fine-tuned on the run's measurements by the tuning loop (the adapter's incremental
update, as for the decision search), so later descents follow the updated score; measured
schedules become the next rounds' starting points (`DecisionSearch.adopt`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from autosearch.errors import InputError
from autosearch.search.decision_search import _PER_STRUCTURE, _SKETCH_COVER, DecisionSearch, _cover_sketches, _spread
from autosearch.search.gradient.prior_tokens import RelaxedTokens, check_prior, prior_scores_many

__all__ = ["DescentOptions", "PriorGradientSearch", "descend", "descend_many"]


@dataclass(frozen=True)
class DescentOptions:
    """How each round descends (see the module docstring)."""

    starts: int = 16  #: descents per descended sketch
    #: Adam steps per descent. 14 rather than 20: on three validation operators (not the tuning
    #: benchmark's six), 64 trials x 2 seeds, re-measured bests 0.6% faster in geomean and 17% less
    #: search time (bench/HISTORY.md "Gradient-descent search": descent steps)
    steps: int = 14
    lr: float = 0.3
    checkpoints: tuple[int, ...] = (7,)  #: steps at which points are also rounded (and the last)
    penalty: float = 10.0  #: weight of the squared innermost-limit excess (log2 units)
    noise: float = 0.3  #: scale of the random offset of a start's logits (descents from one start differ)
    screen: int = 128  #: uniform vectors scored per sketch per round (step 1)
    elite_mutants: int = 16  #: step 1's one-knob mutants of each of a sketch's fastest measured vectors
    whole: int = 256  #: a sketch with at most this many vectors has every one scored, none descended
    descend_sketches: int = 6  #: sketches descended per round, by their best screened score
    #: each step follows one member of the ensemble in turn (a third of the cost of the mean's
    #: gradient with three members; the rounded points are ranked by the whole ensemble)
    cycle_members: bool = True

    def validate(self) -> None:
        if self.starts < 1 or self.steps < 1 or self.screen < 1 or self.descend_sketches < 1 or self.whole < 0:
            raise InputError("gradient search: starts, steps, screen and descend_sketches must be >= 1, whole >= 0")
        if self.elite_mutants < 0:
            raise InputError("gradient search: elite_mutants must be >= 0")
        if not (self.lr > 0 and self.penalty >= 0 and self.noise >= 0):
            raise InputError("gradient search: lr must be > 0, penalty and noise >= 0")


def descend(
    relaxed: RelaxedTokens, nets: list[Any], starts: np.ndarray, opts: DescentOptions, generator: torch.Generator
) -> np.ndarray:
    """Unique rounded decision vectors (m, knobs) met by Adam runs on the networks' mean score
    (or each member's in turn: `cycle_members`) from each of `starts` (n, knobs), rounded at
    every checkpoint and at the last step (`descend_many` on one sketch)."""
    return descend_many([relaxed], nets, [starts], opts, generator)[0]


class _Descent:
    """One sketch's share of a batched descent: its relaxed knobs' leaves and their rounded points."""

    def __init__(self, relaxed: RelaxedTokens, starts: np.ndarray, opts: DescentOptions, generator: torch.Generator):
        space = self.space = relaxed.space
        self.relaxed, self.starts = relaxed, space.validate(starts)
        self.u0, self.p0 = relaxed.integral(self.starts)
        self.tile_z: dict[int, tuple[torch.Tensor, float]] = {}
        self.cat_w: dict[int, torch.Tensor] = {}
        for j in relaxed.tile_knobs:
            total = relaxed.log2_extent[j]
            if len(space.knobs[j].options) < 2 or total <= 0:
                continue  # nothing to move: the knob stays at its start
            start = self.u0[j]
            assert start is not None
            share = start / total
            z = torch.log(share + 0.05) + opts.noise * torch.randn(
                share.shape, generator=generator, dtype=torch.float64
            )
            self.tile_z[j] = (z.requires_grad_(True), total)
        for j in relaxed.cat_knobs:
            if len(space.knobs[j].options) < 2:
                continue
            p0 = self.p0[j]
            assert p0 is not None
            w = 2.0 * p0 - 1.0 + opts.noise * torch.randn(p0.shape, generator=generator, dtype=torch.float64)
            self.cat_w[j] = w.requires_grad_(True)
        self.params = [z for z, _ in self.tile_z.values()] + list(self.cat_w.values())
        self.found: list[np.ndarray] = []

    def point(self) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
        """(u, p): the leaves' relaxed knobs, the fixed ones at their starts."""
        u, p = list(self.u0), list(self.p0)
        for j, (z, total) in self.tile_z.items():
            u[j] = torch.softmax(z, 1) * total
        for j, w in self.cat_w.items():
            p[j] = torch.softmax(w, 1)
        return u, p

    def checkpoint(self) -> None:
        """Round the current points."""
        with torch.no_grad():
            self.found.append(self.relaxed.round(*self.point()))


def descend_many(
    relaxed: list[RelaxedTokens],
    nets: list[Any],
    starts: list[np.ndarray],
    opts: DescentOptions,
    generator: torch.Generator,
) -> list[np.ndarray]:
    """`descend` on several sketches at once: every sketch's starts step together, one pass of
    the network (and of its backward) per step for all of them (`prior_scores_many`)."""
    runs = [_Descent(r, x, opts, generator) for r, x in zip(relaxed, starts)]
    live = [d for d in runs if d.params]
    params = [t for d in live for t in d.params]
    if live:
        for net in nets:
            net.eval()
        adam = _Adam(params, opts.lr)
        for step in range(1, opts.steps + 1):
            points = [d.point() for d in live]
            members = [nets[(step - 1) % len(nets)]] if opts.cycle_members else nets
            scores = prior_scores_many(members, [d.relaxed.tokens(u, p) for d, (u, p) in zip(live, points)])
            loss = -torch.cat(scores).sum()
            for d, (u, _p) in zip(live, points):
                loss = loss + opts.penalty * d.relaxed.violation(u).sum()
            grads = torch.autograd.grad(loss, params)  # the networks' own weights get no gradient
            adam.step([torch.nan_to_num(g) for g in grads])
            if step in opts.checkpoints or step == opts.steps:
                for d in live:
                    d.checkpoint()
    return [np.unique(np.concatenate(d.found), axis=0) if d.found else np.unique(d.starts, axis=0) for d in runs]


class PriorGradientSearch(DecisionSearch):
    """The decision search's sketches, bookkeeping and building, with candidates from gradient
    descent on the prior's score (module docstring). Takes what `DecisionSearch` takes but its
    `DecisionSettings` (the decision search's evolution is not run here), plus `options`
    (`DescentOptions`)."""

    def __init__(
        self, context: Any, spaces: list[Any], draws: Any, adapter: Any, settings: Any, options: Any = None
    ) -> None:
        from autosearch.search.strategies.decision import DecisionSettings

        super().__init__(context, spaces, draws, adapter, settings, DecisionSettings())
        check_prior(adapter.model)
        self.options = options if options is not None else DescentOptions()
        self.options.validate()
        self.generator = torch.Generator().manual_seed(int(settings.seed))
        self._relaxed: dict[int, RelaxedTokens] = {}
        self.last_search_seconds = 0.0
        self.descended: list[int] = []  # rounded vectors the descents gave, per round (after dedupe)
        self.picked: list[int] = []  # of each round's picks, how many a descent gave

    def relaxed(self, s: int) -> RelaxedTokens:
        """The sketch's tokens as a function of relaxed knobs (made once per sketch)."""
        hit = self._relaxed.get(s)
        if hit is None:
            hit = self._relaxed[s] = RelaxedTokens(self.sketches[s], self._ir)
        return hit

    def propose(self, n: int) -> list[Any]:
        """Up to n new candidates: the best-scored of the screened and the descended vectors of
        every sketch, spread over loop structures, and an `eps_greedy` share of random ones."""
        if n <= 0:
            return []
        t0 = time.perf_counter()
        self._scored.clear()  # the model was fine-tuned since the last round
        opts = self.options
        screened: list[tuple[np.ndarray, np.ndarray]] = []
        whole: set[int] = set()  # sketches small enough to score every vector of: nothing to descend
        for s, space in enumerate(self.sketches):
            if float(np.prod(space.sizes.astype(np.float64))) <= opts.whole:
                x = _every_vector(space.sizes)
                whole.add(s)
            else:
                x = np.unique(self._initial_screen(s, space), axis=0)
            screened.append((x, self._score(s, x)))
        # the sketches to descend: the best screened scores, and those of the run's fastest schedules
        order = sorted(set(range(len(self.sketches))) - whole, key=lambda s: -float(screened[s][1].max()))
        fastest = [s for _, s, _ in self.best[:4] if s not in whole]
        chosen = list(dict.fromkeys([*order[: opts.descend_sketches], *fastest]))
        pool: list[tuple[float, int, np.ndarray, bytes]] = []
        descended: set[tuple[int, bytes]] = set()
        nets = list(self.adapter.model.nets)
        starts = [self._starts(s, *screened[s]) for s in chosen]
        with _threads(1):
            found = (
                descend_many([self.relaxed(s) for s in chosen], nets, starts, opts, self.generator) if chosen else []
            )
        for s, f in zip(chosen, found):
            x, _scores = screened[s]
            descended.update((s, v.tobytes()) for v in f)
            both = np.unique(np.concatenate([x, f]), axis=0)
            screened[s] = (both, self._score(s, both))  # one batch: a relative policy's scores compare
        self.descended.append(len(descended))
        for s, (x, scores) in enumerate(screened):
            shapes = self.sketches[s].structure(x)
            pool += [(float(sc), s, v, shape.tobytes()) for sc, v, shape in zip(scores, x, shapes)]
        pool.sort(key=lambda t: -t[0])
        n_random = round(self.settings.eps_greedy * n)
        ordered = _spread(pool, max(1, math.ceil(_PER_STRUCTURE * n)))
        if not self.tried:  # the first round covers the sketches before the prior's top
            ordered = _cover_sketches(pool, max(1, int(_SKETCH_COVER * n)), ordered)
        out = self._build(ordered, n - n_random)
        self.picked.append(sum((o[0], o[1].tobytes()) in descended for c in out if (o := self._origin.get(id(c)))))
        if len(out) < n:
            out += self._build(self._random_vectors(), n - len(out))
        self.last_search_seconds = time.perf_counter() - t0
        return out

    def _initial_screen(self, s: int, space: Any) -> np.ndarray:
        """Step 1's vectors: uniform ones, the sketch's fastest measured ones, and their
        `elite_mutants` one-knob mutants each with a further move of each (`_local_moves`, the
        decision search's own; 16 and two steps rather than 4 and one: bench/HISTORY.md "local
        moves around the elites")."""
        elites = self._elites(s)
        pop = space.sample(self.options.screen, self.rng)
        if elites:
            moves = [self._local_moves(space, elites, self.options.elite_mutants)] if self.options.elite_mutants else []
            pop = np.concatenate([pop, np.stack(elites), *moves])
        return pop

    def _starts(self, s: int, x: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """The descents' starting points: the sketch's fastest measured vectors, then the
        best-scored screened ones up to half, the rest uniform."""
        k = self.options.starts
        elites = self._elites(s)[: max(1, k // 4)]
        top = x[np.argsort(-scores, kind="stable")[: max(0, k // 2 - len(elites))]]
        rand = self.sketches[s].sample(max(0, k - len(elites) - len(top)), self.rng)
        parts = [np.stack(elites)] if elites else []
        return np.concatenate([*parts, top, rand])[:k]


def _every_vector(sizes: np.ndarray) -> np.ndarray:
    """(prod(sizes), knobs) every decision vector of a space with `sizes` options per knob."""
    grids = np.meshgrid(*[np.arange(int(n)) for n in sizes], indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], 1).astype(np.int64).reshape(-1, len(sizes))


class _Adam:
    """Adam (Kingma & Ba, torch's defaults) on a few leaf tensors. Why not `torch.optim.Adam`: its
    constructor imports torch._dynamo, seconds on the first round of every process."""

    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999)) -> None:
        self.params, self.lr, self.betas, self.t = params, lr, betas, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor]) -> None:
        b1, b2 = self.betas
        self.t += 1
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v / (1 - b2**self.t)).sqrt_().add_(1e-8)
            p.addcdiv_(m, denom, value=-self.lr / (1 - b1**self.t))


class _threads:
    """torch on `n` threads inside the block. The descent runs on one: its tensors are small (a
    step is ~100 sequences of ~17 tokens), and on a shared 2-core machine a two-thread pool
    waits on the busy core (a round's descent ran many times slower on two threads than on one
    while another process held a core)."""

    def __init__(self, n: int) -> None:
        self.n, self.old = max(1, int(n)), 0

    def __enter__(self) -> None:
        self.old = torch.get_num_threads()
        torch.set_num_threads(self.n)

    def __exit__(self, *exc: Any) -> None:
        torch.set_num_threads(self.old)
