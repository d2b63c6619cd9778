"""Where a tuning round's candidates come from: MetaSchedule's evolutionary search, gradient search,
or an evolutionary search over decision vectors (`DecisionSource`, for models that read
`trace-prefix-tokens`).

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
    "PriorGradientSource",
    "RandomDraws",
    "make_source",
    "screen_picks",
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


def screen_picks(draws: RandomDraws, n: int, k: int, score: Callable[[list[Any]], Any]) -> list[Any]:
    """The n best-scored of k uniform draws from the design space (`--screen K`); the picks are
    marked seen (never proposed again), the rest stay open to the search.

    Why: the prior was trained on uniform samples of MetaSchedule's design spaces, and it orders
    such samples well even on operators and CPUs it never saw (bench/online_replay.py: top-1 0.73
    among random schedules of held-out families on a Zen 3). The evolutionary search, led by the
    same scores, climbs to schedules unlike any it was trained on, where it can be badly wrong
    (bench/README.md, "A first round screened by the prior")."""
    import numpy as np

    pool = draws.draw_keyed(k, mark=False)
    if n <= 0 or not pool:
        return []
    keys = list(pool)
    if len(keys) > n:
        s = np.asarray(score([pool[h] for h in keys]), dtype=np.float64)
        keys = [keys[int(i)] for i in np.argsort(-s, kind="stable")[:n]]
    draws.seen.update(keys)
    return [pool[h] for h in keys]


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


class PriorGradientSource(DecisionSource):
    """Gradient search (Felix) on the tuning model itself, a `tlp` prior over trace-prefix tokens:
    the decision search's sketches and bookkeeping, candidates from Adam on the prior's score of
    relaxed decision vectors (search/gradient/prior_descent). The prior learns the run's
    measurements as under the decision search (the loop's adapter update)."""

    kind = "gradient"

    def __init__(self, workload: Any, target: Any, model: Any, settings: Any) -> None:
        from autosearch.search.gradient.prior_descent import PriorGradientSearch

        self.context, self.spaces = _design_space(workload, target, settings, None)
        self.draws = RandomDraws(self.context, self.spaces, settings.seed)
        self.search = PriorGradientSearch(self.context, self.spaces, self.draws, model.adapter, settings)


def make_source(workload: Any, target: Any, model: Any, settings: Any, *, console: Any = None) -> CandidateSource:
    """The settings' search strategy (`auto`: `TuneModel.search`). `gradient` descends the tuning
    model itself where it is a `tlp` prior over trace-prefix tokens on a CPU (`PriorGradientSource`),
    else its own knob model (`GradientSource`); a sketch that
    gradient search cannot relax falls back to evolutionary search alone, with the reason, and so
    does a workload the decision search cannot read where `auto` chose it."""
    from autosearch.search.model_spec import resolve_search

    search = resolve_search(settings.search, model)
    if search == "gradient":
        from autosearch.search.gradient import relax_reason
        from autosearch.search.gradient.prior_tokens import prior_reason

        if prior_reason(model, target) is None:  # the tuning model's own score is descended
            try:
                return PriorGradientSource(workload, target, model, settings)
            except WorkloadError as exc:  # no sketch the decision space reads: the knob model's search may
                if console is not None:
                    console.print(f"[yellow]{workload.name}: {one_line(exc)}; gradient search on its knob model[/]")
        ctx, spaces = _design_space(workload, target, settings, None)
        reason = relax_reason(spaces)
        if reason is None:
            try:
                return GradientSource(ctx, spaces, model, settings)
            except AutosearchError as exc:  # a structure only reading the replays can refuse
                reason = one_line(exc)
        if console is not None:
            console.print(
                f"[yellow]gradient search cannot relax {workload.name}: {reason}; using evolutionary search[/]"
            )
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
