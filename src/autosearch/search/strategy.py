"""Where a tuning round's candidates come from: MetaSchedule's evolutionary search, gradient search,
both side by side (`PortfolioSource`), or an evolutionary search over decision vectors
(`DecisionSource`, for models that read `trace-prefix-tokens`).

All are `CandidateSource`s: `propose(n)` returns up to n new candidates, `draw(k)` up to k
schedules sampled uniformly from the design space (the random controls of `--explore control`),
`notify` tells the search (and MetaSchedule's in-memory database, which the evolutionary search
mutates from) what they measured. `tune()` drives them all the same way.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any, Protocol

from autosearch.errors import AutosearchError, WorkloadError, one_line

__all__ = [
    "CandidateSource",
    "DecisionSource",
    "EvolutionarySource",
    "GradientSource",
    "PortfolioSource",
    "RandomDraws",
    "ScreenPool",
    "decision_signature",
    "make_source",
    "portfolio_share",
    "spread_picks",
]


class CandidateSource(Protocol):
    """What `tune()` needs of a search strategy."""

    context: Any  # the TuneContext (features and TVM's own cost models read it)
    kind: str  # the `--search` value it runs (what a run reports, fallbacks included)

    def propose(self, n: int) -> list[Any]: ...

    def draw(self, k: int) -> list[Any]: ...

    def notify(self, candidates: list[Any], measured: list[Any]) -> None: ...

    def runner_results(self, measured: list[Any]) -> list[Any]: ...

    def seed(self, rows: list[Any]) -> list[tuple[Any, Any]]: ...

    def close(self) -> None: ...


def _replay(context: Any, rows: list[Any]) -> list[tuple[Any, Any]]:
    """(row, MeasureCandidate) of stored schedules (trace replay); rows whose trace no longer
    applies are skipped, so the pairs keep each candidate with its own row."""
    from autosearch.features.per_store import candidate_from_trace

    out = []
    for r in rows:
        try:
            out.append((r, candidate_from_trace(context.mod, r.schedule)))
        except Exception:  # a trace from another TVM version: not a seed, not an error
            continue
    return out


def _mod_hash(mod: Any) -> int:
    import tvm_ffi

    return int(tvm_ffi.structural_hash(mod))


class RandomDraws:
    """Schedules sampled uniformly from the design spaces, as MetaSchedule's ReplayTrace does: a
    sketch's trace replayed with every decision sampled afresh, then the postprocessors (a
    schedule they reject is drawn again). Never one already proposed or measured in this run."""

    def __init__(self, context: Any, spaces: list[Any], seed: int) -> None:
        import numpy as np

        self.context, self.rng = context, np.random.default_rng([seed, 0x5EED])
        self.traces = [s.trace.simplified(remove_postproc=True) for s in spaces]
        self.postprocs = list(context.space_generator.postprocs)
        self.seen: set[int] = set()

    def fresh(self, candidate: Any) -> bool:
        return _mod_hash(candidate.sch.mod) not in self.seen

    def mark(self, candidates: list[Any]) -> None:
        for c in candidates:
            self.seen.add(_mod_hash(c.sch.mod))

    def claim(self, candidates: list[Any], limit: int) -> list[Any]:
        """Up to `limit` of the candidates not yet proposed or measured in this run, now marked seen."""
        out: list[Any] = []
        for c in candidates:
            if len(out) >= limit:
                break
            h = _mod_hash(c.sch.mod)
            if h not in self.seen:
                self.seen.add(h)
                out.append(c)
        return out

    def draw(self, k: int, tries: int = 8, mark: bool = True) -> list[Any]:
        """Up to k fresh schedules; `mark=False` leaves them free to be proposed later (screening
        draws many and measures few: the rest must not be barred from the search)."""
        return list(self.draw_keyed(k, tries, mark).values())

    def draw_keyed(self, k: int, tries: int = 8, mark: bool = True) -> dict[int, Any]:
        """`draw`, keyed by each schedule's structural hash (in the order drawn)."""
        from tvm.s_tir.meta_schedule import MeasureCandidate
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.schedule import Trace

        from autosearch.backends.tvm.space import replay_postprocessed

        out: dict[int, Any] = {}
        misses = 0  # draws in a row that gave nothing new: a small space is spent, stop asking
        for _ in range(max(0, k) * tries):
            if len(out) >= k or misses >= 128:
                break
            misses += 1
            trace = self.traces[int(self.rng.integers(len(self.traces)))]
            sch = replay_postprocessed(
                self.context.mod,
                self.postprocs,
                lambda s, t=trace: Trace(t.insts, {}).apply_to_schedule(s, remove_postproc=True),
                seed=int(self.rng.integers(1, 2**31 - 1)),
            )
            if sch is None:  # a sampled decision the sketch cannot take: draw again
                continue
            h = _mod_hash(sch.mod)
            if h in self.seen or h in out:
                continue
            misses = 0
            out[h] = MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
        if mark:
            self.seen.update(out)
        return out


class ScreenPool:
    """Uniform draws from the design space that the model ranks, kept across rounds (`--screen K`,
    `--rescreen S`).

    Why: the prior was trained on uniform samples of MetaSchedule's design spaces, and it orders
    such samples well even on operators and CPUs it never saw (bench/online_replay.py: top-1 0.73
    among random schedules of held-out families on a Zen 3). The evolutionary search, led by the
    same scores, climbs to schedules unlike any it was trained on, where it can be badly wrong, and
    where the prior is right it stays near what the model already liked (on a Zen 4, the prior's
    own CPU, the rounds after a screened first round rarely found anything faster). The first
    round takes the model's best of K draws; a later round may take a share of its picks from the
    same pool, re-ranked by the model as it has learned since (the prior + online blend), with
    K/4 fresh draws added each time. The draws' features are cached, so re-ranking costs a
    prediction, not a lowering."""

    def __init__(self, draws: RandomDraws, spread: float = 0.0) -> None:
        self.draws, self.spread = draws, spread
        self._pool: dict[int, Any] = {}  # structural hash -> candidate, in the order drawn

    @property
    def pool(self) -> list[Any]:
        """The draws neither picked nor measured so far."""
        return list(self._pool.values())

    def pick(self, n: int, k: int, score: Callable[[list[Any]], Any]) -> list[Any]:
        """The n best-scored of the pool's unmeasured draws after adding up to k fresh ones; the
        picks are marked seen (never proposed again), the rest stay open to the search."""
        import numpy as np

        seen = self.draws.seen
        self._pool = {h: c for h, c in self._pool.items() if h not in seen}  # measured since: out
        for h, c in self.draws.draw_keyed(k, mark=False).items():
            self._pool.setdefault(h, c)
        if n <= 0 or not self._pool:
            return []
        keys = list(self._pool)
        if len(keys) > n:
            s = np.asarray(score([self._pool[h] for h in keys]), dtype=np.float64)
            order = [int(i) for i in np.argsort(-s, kind="stable")]
            if self.spread > 0:  # best first, then each next one unlike those already picked
                ranked = [self._pool[keys[i]] for i in order]
                order = [order[j] for j in spread_picks(ranked, n, self.spread)]
            keys = [keys[i] for i in order[:n]]
        picks = [self._pool.pop(h) for h in keys]
        seen.update(keys)
        return picks


def decision_signature(candidate: Any) -> frozenset[tuple[int, str]]:
    """(instruction index, sampled value) of every decision in a candidate's trace: two schedules
    of one sketch agree where these agree."""
    trace = candidate.sch.trace
    decisions = trace.decisions
    return frozenset((i, str(decisions[inst])) for i, inst in enumerate(trace.insts) if inst in decisions)


def spread_picks(ranked: list[Any], n: int, weight: float) -> list[int]:
    """Indices of n of the best-first `ranked` candidates: greedily the one with the best
    (1 - rank share) - weight x (largest share of decisions it has in common with a pick so far).

    Why (`--screen-spread`): the prior's best-scored draws can all share a decision it is wrong
    about (on a Zen 4 it gave a depthwise conv's innermost channel tile 32 in 307 of 368 measured
    schedules, while every fast one had 16), and the online model, fitted on those picks, never
    learns otherwise. Spreading the first round over unlike schedules gives it the contrast."""
    if n >= len(ranked):
        return list(range(len(ranked)))
    sigs = [decision_signature(c) for c in ranked]
    size = [max(len(x), 1) for x in sigs]
    m = len(ranked)
    picked = [0]
    overlap = [0.0] * m  # largest share of decisions in common with any pick so far
    while len(picked) < n:
        last = sigs[picked[-1]]
        best, best_value = -1, float("-inf")
        for i in range(m):
            if i in picked:
                continue
            overlap[i] = max(overlap[i], len(sigs[i] & last) / max(size[i], len(last), 1))
            value = (1.0 - i / m) - weight * overlap[i]
            if value > best_value:
                best, best_value = i, value
        picked.append(best)
    return picked


def _runner_results(measured: list[Any]) -> list[Any]:
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    return [
        RunnerResult(r.latencies if r.status == "ok" else None, None if r.status == "ok" else (r.error or r.status))
        for r in measured
    ]


def _design_space(workload: Any, target: Any, settings: Any, strategy: Any) -> tuple[Any, list[Any]]:
    """(TuneContext, design spaces) of the workload; one with nothing to decide is refused unless
    `settings.fixed_spaces` (then its spaces' single schedule is what the search measures)."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.intrinsics import register_tensor_intrinsics

    register_tensor_intrinsics(target)
    ctx = ms.TuneContext(
        mod=workload.mod(),
        target=target,
        space_generator="post-order-apply",
        search_strategy=strategy,
        task_name=workload.name,
        rand_state=settings.seed,
        num_threads=max(1, os.cpu_count() or 1),
    )
    try:
        spaces = list(ctx.generate_design_space())
    except Exception as exc:
        raise WorkloadError(f"MetaSchedule cannot build a design space for {workload.name}: {one_line(exc)}") from None
    if not spaces or not (settings.fixed_spaces or any(len(sch.trace.decisions) > 0 for sch in spaces)):
        raise WorkloadError(
            f"{workload.name} has no tunable design space on {target.kind.name}: "
            "MetaSchedule offers no schedule decision to search over"
        )
    return ctx, spaces


class EvolutionarySource:
    """MetaSchedule's EvolutionarySearch (eps-greedy, cost-model ranking) behind `CandidateSource`."""

    kind = "evolutionary"

    def __init__(self, workload: Any, target: Any, model: Any, settings: Any) -> None:
        from tvm.s_tir import meta_schedule as ms

        strategy = ms.search_strategy.EvolutionarySearch(
            population_size=settings.population,
            init_measured_ratio=settings.init_measured_ratio,
            init_min_unmeasured=min(50, settings.population),
            genetic_num_iters=settings.genetic_num_iters,
            eps_greedy=settings.eps_greedy,
        )
        self.context, self.spaces = _design_space(workload, target, settings, strategy)
        self.database = ms.database.MemoryDatabase()
        self._ms_workload = self.database.commit_workload(self.context.mod)
        self.context.pre_tuning(
            max_trials=settings.trials,
            num_trials_per_iter=settings.trials_per_round,
            design_spaces=self.spaces,
            database=self.database,
            cost_model=model.cost_model,
        )
        self._target = target
        self._settings = settings
        self.draws = RandomDraws(self.context, self.spaces, settings.seed)
        self._explorer: Any = None

    def propose(self, n: int) -> list[Any]:
        if n <= 0:
            return []
        # MetaSchedule only skips what it picked itself or finds among the database's best: a
        # schedule measured as a control (or a stored seed) can come back, and would be measured twice.
        raw = list(self.context.generate_measure_candidates() or [])
        out = self.draws.claim(raw, n)
        if raw and not out:  # every pick a repeat: the space is not spent, so the round is drawn instead
            out = self.draws.draw(n)
        return out

    def draw(self, k: int) -> list[Any]:
        """k controls from a second evolutionary search that scores at random (TVM XGBModel's
        warm-up: mutations of the best measured schedules and fresh samples, none chosen by our
        model); uniform draws when it has nothing new."""
        if k <= 0:
            return []
        out = self.draws.claim(list(self._random_evolution().generate_measure_candidates() or []), k)
        if len(out) < k:
            out += self.draws.draw(k - len(out))
        return out

    def _random_evolution(self) -> Any:
        """The controls' search: same space, database and settings as ours, MetaSchedule's RandomModel."""
        if self._explorer is None:
            from tvm.s_tir import meta_schedule as ms

            st = self._settings
            # Random scores make a large population and many generations pointless: a small one
            # with one generation mutates the measured best and samples afresh at a fraction of the
            # cost (measured on a depthwise conv: the full-size copy doubled the run's search time).
            pop = max(2 * st.trials_per_round, 32)
            strategy = ms.search_strategy.EvolutionarySearch(
                population_size=pop,
                init_measured_ratio=st.init_measured_ratio,
                init_min_unmeasured=min(16, pop),
                genetic_num_iters=1,
                eps_greedy=st.eps_greedy,
            )
            ctx = ms.TuneContext(
                mod=self.context.mod,
                target=self._target,
                space_generator="post-order-apply",
                search_strategy=strategy,
                task_name=f"{self.context.task_name}:controls",
                rand_state=st.seed + 1,
                num_threads=self.context.num_threads,
            )
            ctx.pre_tuning(
                max_trials=1 << 30,  # it only ever serves our rounds' controls
                num_trials_per_iter=st.trials_per_round,
                design_spaces=self.spaces,
                database=self.database,
                cost_model=ms.cost_model.RandomModel(seed=st.seed + 1),
            )
            self._explorer = ctx
        return self._explorer

    def runner_results(self, measured: list[Any]) -> list[Any]:
        return _runner_results(measured)

    def seed(self, rows: list[Any]) -> list[tuple[Any, Any]]:
        """Commit stored schedules to the database the evolution starts from; returns (row, candidate) pairs."""
        from tvm.s_tir import meta_schedule as ms

        pairs = _replay(self.context, rows)
        self.draws.mark([c for _, c in pairs])
        for r, c in pairs:
            self.database.commit_tuning_record(
                ms.database.TuningRecord(c.sch.trace, self._ms_workload, r.latencies, self._target, c.args_info)
            )
        return pairs

    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        from tvm.s_tir import meta_schedule as ms

        self.context.notify_runner_results(candidates, _runner_results(measured))
        if self._explorer is not None:
            self._explorer.notify_runner_results(candidates, _runner_results(measured))
        for c, r in zip(candidates, measured):
            if r.status == "ok":
                self.database.commit_tuning_record(
                    ms.database.TuningRecord(c.sch.trace, self._ms_workload, r.latencies, self._target, c.args_info)
                )

    def close(self) -> None:
        for ctx in (self.context, self._explorer):
            if ctx is not None:
                with contextlib.suppress(Exception):  # cleanup only; the run's results are already kept
                    ctx.post_tuning()


class _OwnSearchSource:
    """What a source with a search of its own shares: uniform draws for the controls, TVM's runner
    results, stored schedules replayed as seeds and marked as seen."""

    context: Any
    draws: RandomDraws

    def draw(self, k: int) -> list[Any]:
        return self.draws.draw(k)

    def runner_results(self, measured: list[Any]) -> list[Any]:
        return _runner_results(measured)

    def seed(self, rows: list[Any]) -> list[tuple[Any, Any]]:
        pairs = _replay(self.context, rows)
        self.draws.mark([c for _, c in pairs])
        return pairs

    def close(self) -> None:
        pass


class GradientSource(_OwnSearchSource):
    """Gradient-descent search over the relaxed knobs of the design space (search/gradient)."""

    kind = "gradient"

    def __init__(self, context: Any, spaces: list[Any], model: Any, settings: Any) -> None:
        from autosearch.search.gradient import GradientSearch

        self.context, self.spaces = context, spaces
        self.search = GradientSearch(
            self.context,
            self.spaces,
            model=model,
            seed=settings.seed,
            eps_greedy=settings.eps_greedy,
        )
        self.draws = RandomDraws(context, spaces, settings.seed)

    def propose(self, n: int) -> list[Any]:
        return self.draws.claim(list(self.search.propose(n)), n) if n > 0 else []

    def seed(self, rows: list[Any]) -> list[tuple[Any, Any]]:
        pairs = super().seed(rows)
        self.search.observe([c for _, c in pairs], [r.median for r, _ in pairs])
        return pairs

    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        import numpy as np

        self.search.observe(candidates, [float(np.median(r.latencies)) if r.status == "ok" else None for r in measured])


#: The searches a portfolio runs side by side (`PortfolioSource.origin` values).
PORTFOLIO_MEMBERS = ("evolutionary", "gradient")


class DecisionSource(_OwnSearchSource):
    """Evolutionary search over decision vectors, scored without building schedules (search/decision_search)."""

    kind = "decision"

    def __init__(self, workload: Any, target: Any, model: Any, settings: Any) -> None:
        from autosearch.search.decision_search import DecisionSearch

        self.context, self.spaces = _design_space(workload, target, settings, None)
        self.draws = RandomDraws(self.context, self.spaces, settings.seed)
        self.search = DecisionSearch(self.context, self.spaces, self.draws, getattr(model, "adapter", None), settings)

    def propose(self, n: int) -> list[Any]:
        return self.search.propose(n)

    def seed(self, rows: list[Any]) -> list[tuple[Any, Any]]:
        pairs = super().seed(rows)
        self.search.adopt([c for _, c in pairs], [r.median for r, _ in pairs])
        return pairs

    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        self.search.notify(candidates, measured)


def portfolio_share(origins: list[str], latencies: list[float | None], *, floor: float = 0.25) -> float:
    """Share of the next round for the gradient search, from who proposed the run's fastest schedules.

    Of the measured picks (`origins` "gradient" / "evolutionary", None latency = failed), the top
    quarter (at least 4) is counted per search; the share is the Beta(1, 1) posterior mean of
    "the gradient search supplies a top schedule", kept within [floor, 1 - floor] so the search
    that is behind keeps a foothold (the two learn from each other's results and can change places).
    """
    ok = sorted((lat, o) for o, lat in zip(origins, latencies) if lat is not None and o in PORTFOLIO_MEMBERS)
    top = ok[: max(4, len(ok) // 4)]
    g = sum(1 for _, o in top if o == "gradient")
    share = (g + 1) / (len(top) + 2)
    return min(max(share, floor), 1.0 - floor)


class PortfolioSource:
    """Evolutionary search ranked by the tuning model *and* gradient search ranked by its own
    differentiable model, sharing every measurement.

    The two models read different features (lowered-program PerStoreFeature vs. expressions of the
    sketch's knobs) and are wrong about different operators, and nothing says beforehand which is
    right about this one. So each round is split between them by `portfolio_share` (half each at
    first), and each learns from both searches' results: MetaSchedule's database (which the
    evolution mutates from) and the gradient search's starting points both include the other's
    finds. `origin` tells which search proposed a candidate.
    """

    kind = "portfolio"

    def __init__(self, evolutionary: EvolutionarySource, gradient: GradientSource) -> None:
        self.evo, self.grad = evolutionary, gradient
        self.grad.draws = self.evo.draws  # one "seen in this run" for both
        self.context = self.evo.context
        self.origin: dict[int, str] = {}
        self._origins: list[str] = []
        self._latencies: list[float | None] = []

    def share(self) -> float:
        return portfolio_share(self._origins, self._latencies)

    def propose(self, n: int) -> list[Any]:
        self.origin = {}  # this round's only: ids of freed candidates are reused
        if n <= 0:
            return []
        k = min(n, max(1, round(n * self.share()))) if n > 1 else 0
        picks = [(c, "gradient") for c in self.grad.propose(k)]
        picks += [(c, "evolutionary") for c in self.evo.propose(n - len(picks))]
        if len(picks) < n:  # one search ran dry: the other fills the round
            picks += [(c, "gradient") for c in self.grad.propose(n - len(picks))]
        for c, o in picks:
            self.origin[id(c)] = o
        return [c for c, _ in picks]

    def draw(self, k: int) -> list[Any]:
        return self.evo.draw(k)

    def runner_results(self, measured: list[Any]) -> list[Any]:
        return _runner_results(measured)

    def seed(self, rows: list[Any]) -> list[tuple[Any, Any]]:
        pairs = self.evo.seed(rows)
        self.grad.search.observe([c for _, c in pairs], [r.median for r, _ in pairs])
        return pairs

    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        import numpy as np

        self.evo.notify(candidates, measured)
        self.grad.notify(candidates, measured)
        for c, r in zip(candidates, measured):
            o = self.origin.get(id(c))
            if o is not None:
                self._origins.append(o)
                self._latencies.append(float(np.median(r.latencies)) if r.status == "ok" and r.latencies else None)

    def close(self) -> None:
        self.evo.close()


def make_source(workload: Any, target: Any, model: Any, settings: Any, *, console: Any = None) -> CandidateSource:
    """The settings' search strategy (`auto` resolved by `model_spec.resolve_search`); a sketch
    gradient search cannot relax falls back to evolutionary search alone, with the reason, and so
    does a workload the decision search cannot read where `auto` chose it."""
    from autosearch.search.model_spec import resolve_search

    search = resolve_search(settings.search, model, target)
    if search in ("gradient", "portfolio"):
        from autosearch.search.gradient import relax_reason

        evo = EvolutionarySource(workload, target, model, settings) if search == "portfolio" else None
        ctx, spaces = (evo.context, evo.spaces) if evo is not None else _design_space(workload, target, settings, None)
        reason = relax_reason(spaces)
        if reason is None:
            try:
                grad = GradientSource(ctx, spaces, model, settings)
                return PortfolioSource(evo, grad) if evo is not None else grad
            except AutosearchError as exc:  # a structure only reading the replays can refuse
                reason = one_line(exc)
        if console is not None:
            console.print(
                f"[yellow]gradient search cannot relax {workload.name}: {reason}; using evolutionary search[/]"
            )
        if evo is not None:
            return evo
    if search == "decision":
        try:
            return DecisionSource(workload, target, model, settings)
        except WorkloadError as exc:
            # Asked for by name: say why it cannot run. But a network's task with nothing to decide
            # (`fixed_spaces`) still has its one scheduled form measured, by the evolutionary source.
            if settings.search != "auto" and not settings.fixed_spaces:
                raise
            if console is not None:
                console.print(f"[yellow]{workload.name}: {one_line(exc)}; using evolutionary search[/]")
    return EvolutionarySource(workload, target, model, settings)
