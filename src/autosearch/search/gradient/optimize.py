"""Gradient search (Felix) behind the tuning loop's propose / observe interface.

One round (`propose(n)`):
1. for every sketch, `starts` relaxed points — half random valid decisions, half the best measured
   ones perturbed (once there are measurements) — each tile knob as logits z (factor_i =
   E^softmax(z)_i), each categorical knob as logits over its candidates;
2. Adam on  -score(features(knobs)) + penalty  for `steps` steps, where the penalty is the squared
   excess of the innermost factor over its `max_innermost_factor` (a limit the design space
   enforces; rounding never crosses it) — and, on a GPU target, of threads per block;
3. at a few checkpoints along the way every start is rounded to the nearest valid factorisation
   (and the most likely candidate), deduplicated against everything proposed before;
4. the rounded points are scored with exact features (tau=0) and the top `n` (1 - eps) are kept,
   the eps share filled with uniformly random unseen decisions; each becomes a MeasureCandidate
   (trace replayed, MetaSchedule's post-processors applied; a failing one is replaced).
`observe` fine-tunes the model on everything measured in this run (rank loss per sketch).

Stalls: descents that start from the measured best converge on the model's optimum next to it,
and once the model is wrong there every round measures that neighbourhood again (a 1x1
convolution stayed at one latency for most of its trials while TVM-XGB's random warm-up led it to
a faster one). So
after `stall_patience` rounds in which the run's best improved by less than 1%, the search widens
(`exploration`): the random share doubles with every further stalled round (up to `eps_max`) and
only a quarter of the descents start from the best, the rest from random points (restarts). The
random schedules also give the online model the unbiased evidence its own picks cannot. The first
round that improves the best again returns to `eps_greedy`.
`last_search_seconds` is the wall time of the last `propose` (search only: no build, no run).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from autosearch.errors import InputError
from autosearch.search.explore import StallTracker
from autosearch.search.gradient.data import SketchSet, sketch_set
from autosearch.search.gradient.model import GradientCostModel, Group
from autosearch.search.gradient.sketch import Decisions, relax_reason, to_json
from autosearch.search.gradient.structure import StructureError

__all__ = ["PRETRAINED", "GradientSearch", "relax_reason"]

#: The prior shipped with the package (pretrained on the reference dataset's training split).
PRETRAINED = Path(__file__).resolve().parent / "pretrained"

_Key = tuple[int, Decisions]


class GradientSearch:
    """Propose candidates by gradient descent on a cost model of the sketches' knobs."""

    def __init__(
        self, ctx: Any, spaces: list[Any], *, model: Any = None, seed: int = 0, eps_greedy: float = 0.05, **opts: Any
    ) -> None:
        reason = relax_reason(spaces)
        if reason is not None:
            raise StructureError(reason)
        if not 0.0 <= eps_greedy <= 1.0:
            raise InputError(f"eps_greedy must be within [0, 1], got {eps_greedy}")
        unknown = set(opts) - {
            "starts",
            "steps",
            "lr",
            "tau",
            "checkpoints",
            "update_epochs",
            "penalty",
            "stall_patience",
            "eps_max",
        }
        if unknown:
            raise InputError(f"GradientSearch: unknown option(s) {', '.join(sorted(unknown))}")
        self.ctx = ctx
        self.seed = seed
        self.eps = eps_greedy
        self.starts = int(opts.get("starts", 16))
        self.steps = int(opts.get("steps", 30))
        self.lr = float(opts.get("lr", 0.15))
        self.tau = float(opts.get("tau", 0.5))
        self.checkpoints = tuple(opts.get("checkpoints", (10, 20)))
        self.update_epochs = int(opts.get("update_epochs", 10))
        self.penalty = float(opts.get("penalty", 10.0))
        eps_max = float(opts.get("eps_max", max(0.5, eps_greedy)))
        if not eps_greedy <= eps_max <= 1.0:
            raise InputError(f"eps_max must be within [eps_greedy, 1], got {eps_max}")
        self.stall = StallTracker(patience=int(opts.get("stall_patience", 2)), cap=eps_max)
        self.rng = random.Random(seed)
        torch.manual_seed(seed)
        self.model = self._model(model, seed)
        self.sset: SketchSet = sketch_set(ctx.mod, spaces, seed=seed)
        if not self.sset.sketches:
            raise StructureError("no sketch could be relaxed: " + "; ".join(self.sset.skipped))
        self.postprocs = list(ctx.space_generator.postprocs) if ctx.space_generator is not None else []
        self.seen: set[_Key] = set()
        self.measured: dict[int, list[tuple[Decisions, float | None]]] = {}
        self._pending: dict[int, _Key] = {}
        self.last_search_seconds = 0.0
        self.search_seconds: list[float] = []
        self.eps_history: list[float] = []  # the random share of every `propose`

    @staticmethod
    def _model(model: Any, seed: int) -> GradientCostModel:
        """A GradientCostModel as given, loaded from a directory, else the shipped pretrained one.

        Any other model (e.g. the tuning loop's own PerStoreFeature model) cannot be
        differentiated in the knobs, so the shipped prior (or a fresh model) takes its place."""
        if isinstance(model, GradientCostModel):
            return model
        if isinstance(model, (str, Path)):
            return GradientCostModel.load(model)
        if (PRETRAINED / "config.json").is_file():
            return GradientCostModel.load(PRETRAINED)
        return GradientCostModel(seed=seed)

    # -- proposing -------------------------------------------------------------------------------
    def exploration(self) -> tuple[float, float]:
        """(random share of the next round, share of descents started from the measured best).

        `eps_greedy` and 1/2 while the run's best keeps improving; after `stall_patience` stalled
        rounds it is at least 1/8 and doubles with every further stalled round (at most `eps_max`),
        and a quarter of the descents start from the best (`StallTracker`)."""
        return self.stall.share(self.eps), 0.25 if self.stall.widened else 0.5

    def propose(self, n: int) -> list[Any]:
        """Up to n new, deduplicated MeasureCandidates."""
        t0 = time.perf_counter()
        torch.set_num_threads(1)  # tiny tensors: threads only contend with the builders
        eps, _ = self.exploration()
        self.eps_history.append(eps)
        n_rand = round(n * eps) if self.model.n_trained else n  # an untrained model ranks at random
        ranked = self._gradient_pool() if n_rand < n else []
        out: list[Any] = []
        for _, key in ranked:
            if len(out) >= n - n_rand:
                break
            self._add(key, out)
        tries = 0
        while len(out) < n and tries < 20 * n:
            tries += 1
            s = self.rng.randrange(len(self.sset.sketches))
            self._add((s, self.sset.sketches[s].random_decisions(self.rng)), out)
        self.last_search_seconds = time.perf_counter() - t0
        self.search_seconds.append(self.last_search_seconds)
        return out

    def _add(self, key: _Key, out: list[Any]) -> None:
        if key in self.seen:
            return
        self.seen.add(key)
        cand = self._candidate(key)
        if cand is not None:
            self._pending[id(cand)] = key
            out.append(cand)

    def _candidate(self, key: _Key) -> Any:
        from tvm.s_tir.meta_schedule import MeasureCandidate
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        try:
            sch = self.sset.sketches[key[0]].apply(key[1])
            sch.enter_postproc()  # as MetaSchedule does: the stored trace separates decisions from post-processing
            for p in self.postprocs:
                if not p.apply(sch):
                    return None
        except Exception:
            return None
        return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))

    def _gradient_pool(self) -> list[tuple[float, _Key]]:
        """Rounded, unseen points from Adam runs on every sketch, best predicted first."""
        pool: list[tuple[float, _Key]] = []
        for s, (_sk, fn) in enumerate(zip(self.sset.sketches, self.sset.fns)):
            found = self._descend(s)
            keys = [k for k in dict.fromkeys(found) if k not in self.seen]
            if not keys:
                continue
            scores = self.model.predict(fn.of_decisions([k[1] for k in keys]))
            pool.extend(zip(scores.tolist(), keys))
        pool.sort(key=lambda x: -x[0])
        return pool

    def _init_points(self, s: int) -> list[Decisions]:
        sk = self.sset.sketches[s]
        pts = [sk.random_decisions(self.rng) for _ in range(self.starts)]
        done = [x for x in self.measured.get(s, []) if x[1] is not None]
        if done:
            done.sort(key=lambda x: x[1])  # type: ignore[arg-type,return-value]
            for i in range(int(self.starts * self.exploration()[1])):
                pts[i] = done[i % min(len(done), 4)][0]
        return pts

    def _descend(self, s: int) -> list[_Key]:
        sk, fn = self.sset.sketches[s], self.sset.fns[s]
        pts = self._init_points(s)
        B = len(pts)
        logE = [math.log(t.extent) for t in sk.tiles]
        zs = []
        for ti, t in enumerate(sk.tiles):
            share = torch.tensor(
                [[math.log(f) / logE[ti] if logE[ti] > 0 else 1.0 / t.n for f in p[0][ti]] for p in pts],
                dtype=torch.float64,
            )
            z = torch.log(share + 0.05) + 0.3 * torch.randn(B, t.n, dtype=torch.float64)
            zs.append(z.requires_grad_(True))
        ws = []
        for ci, c in enumerate(sk.cats):
            w = torch.full((B, len(c.candidates)), -1.0, dtype=torch.float64)
            for b, p in enumerate(pts):
                w[b, p[1][ci]] = 1.0
            ws.append((w + 0.3 * torch.randn_like(w)).requires_grad_(True))
        params = zs + ws
        out: list[_Key] = []
        if not params:
            return [(s, p) for p in pts]
        opt = torch.optim.Adam(params, lr=self.lr)
        for step in range(1, self.steps + 1):
            logf = self._log_factors(sk, zs, logE, B)
            cats = [torch.softmax(w, 1) for w in ws]
            feats = fn(logf, cats, tau=self.tau)
            loss = -self.model.score(feats).sum() + self.penalty * self._violation(sk, logf).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step in self.checkpoints or step == self.steps:
                out.extend(self._round(s, zs, ws, logE, B))
        return out

    @staticmethod
    def _log_factors(sk: Any, zs: list[torch.Tensor], logE: list[float], B: int) -> torch.Tensor:
        if not zs:
            return torch.zeros(B, 0, dtype=torch.float64)
        return torch.cat([torch.softmax(z, 1) * le for z, le in zip(zs, logE)], 1)

    @staticmethod
    def _violation(sk: Any, logf: torch.Tensor) -> torch.Tensor:
        """Squared excess of each innermost factor over its limit (hardware / design-space limits)."""
        terms = []
        pos = 0
        for t in sk.tiles:
            pos += t.n
            if t.max_innermost > 0:
                terms.append(torch.relu(logf[:, pos - 1] - math.log(t.max_innermost)) ** 2)
        return torch.stack(terms, 1).sum(1) if terms else torch.zeros(logf.shape[0], dtype=logf.dtype)

    def _round(self, s: int, zs: list[torch.Tensor], ws: list[torch.Tensor], logE: list[float], B: int) -> list[_Key]:
        sk = self.sset.sketches[s]
        with torch.no_grad():
            tiles_per_b: list[list[tuple[int, ...]]] = [[] for _ in range(B)]
            for ti, (t, z) in enumerate(zip(sk.tiles, zs)):
                lf = (torch.softmax(z, 1) * logE[ti]).numpy()
                ch = t.choices
                lc = np.log(np.array(ch, dtype=np.float64))  # (C, n)
                best = ((lf[:, None, :] - lc[None, :, :]) ** 2).sum(-1).argmin(1)
                for b in range(B):
                    tiles_per_b[b].append(ch[int(best[b])])
            cats = [w.argmax(1).tolist() for w in ws]
        return [(s, (tuple(tiles_per_b[b]), tuple(int(c[b]) for c in cats))) for b in range(B)]

    # -- learning --------------------------------------------------------------------------------
    def observe(self, candidates: Sequence[Any], latencies: Sequence[float | None]) -> None:
        """Record measured results (None = failed) and fine-tune the model on this run's data."""
        if len(candidates) != len(latencies):
            raise InputError(f"observe: {len(candidates)} candidates but {len(latencies)} latencies")
        for c, lat in zip(candidates, latencies):
            key = self._pending.pop(id(c), None)
            if key is None:
                hit = self.sset.match(to_json(c.sch.trace), strict=False)
                if hit is None:
                    continue
                key = hit
                self.seen.add(key)
            self.measured.setdefault(key[0], []).append((key[1], lat))
        self.stall.observe(latencies)
        groups = []
        for s, rows in self.measured.items():
            if len(rows) >= 2 and any(r[1] is not None for r in rows):
                feats = self.sset.fns[s].of_decisions([r[0] for r in rows]).to(torch.float32)
                groups.append(Group(f"run/{s}", feats, [r[1] for r in rows]))
        if groups:
            self.model.update(groups, epochs=self.update_epochs)

    def best(self) -> tuple[float, Any] | None:
        """(best latency, its MeasureCandidate-able key) measured so far."""
        rows = [(lat, (s, d)) for s, xs in self.measured.items() for d, lat in xs if lat is not None]
        return min(rows, key=lambda x: x[0]) if rows else None
