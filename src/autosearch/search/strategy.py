"""Where a tuning round's candidates come from: MetaSchedule's evolutionary search, or gradient search.

Both are `CandidateSource`s: `propose(n)` returns up to n new candidates, `notify` tells the
search (and MetaSchedule's in-memory database, which the evolutionary search mutates from) what
they measured. `tune()` drives either the same way.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Protocol

from autosearch.errors import AutosearchError, WorkloadError, one_line

__all__ = ["CandidateSource", "EvolutionarySource", "GradientSource", "make_source"]


class CandidateSource(Protocol):
    """What `tune()` needs of a search strategy."""

    context: Any  # the TuneContext (features and TVM's own cost models read it)

    def propose(self, n: int) -> list[Any]: ...

    def notify(self, candidates: list[Any], measured: list[Any]) -> None: ...

    def runner_results(self, measured: list[Any]) -> list[Any]: ...

    def seed(self, rows: list[Any]) -> list[Any]: ...

    def close(self) -> None: ...


def _replay(context: Any, rows: list[Any]) -> list[Any]:
    """MeasureCandidates of stored schedules (trace replay); rows whose trace no longer applies are skipped."""
    from autosearch.features.per_store import candidate_from_trace

    out = []
    for r in rows:
        try:
            out.append(candidate_from_trace(context.mod, r.schedule))
        except Exception:  # a trace from another TVM version: not a seed, not an error
            continue
    return out


def _runner_results(measured: list[Any]) -> list[Any]:
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    return [
        RunnerResult(r.latencies if r.status == "ok" else None, None if r.status == "ok" else (r.error or r.status))
        for r in measured
    ]


def _design_space(workload: Any, target: Any, settings: Any, strategy: Any) -> tuple[Any, list[Any]]:
    """(TuneContext, design spaces) of the workload; a workload with nothing to decide is refused."""
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
    if not spaces or not any(len(sch.trace.decisions) > 0 for sch in spaces):
        raise WorkloadError(
            f"{workload.name} has no tunable design space on {target.kind.name}: "
            "MetaSchedule offers no schedule decision to search over"
        )
    return ctx, spaces


class EvolutionarySource:
    """MetaSchedule's EvolutionarySearch (eps-greedy, cost-model ranking) behind `CandidateSource`."""

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

    def propose(self, n: int) -> list[Any]:
        return list(self.context.generate_measure_candidates() or [])[:n]

    def runner_results(self, measured: list[Any]) -> list[Any]:
        return _runner_results(measured)

    def seed(self, rows: list[Any]) -> list[Any]:
        """Commit stored schedules to the database the evolution starts from; returns their candidates."""
        from tvm.s_tir import meta_schedule as ms

        cands = _replay(self.context, rows)
        for c, r in zip(cands, rows):
            self.database.commit_tuning_record(
                ms.database.TuningRecord(c.sch.trace, self._ms_workload, r.latencies, self._target, c.args_info)
            )
        return cands

    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        from tvm.s_tir import meta_schedule as ms

        self.context.notify_runner_results(candidates, _runner_results(measured))
        for c, r in zip(candidates, measured):
            if r.status == "ok":
                self.database.commit_tuning_record(
                    ms.database.TuningRecord(c.sch.trace, self._ms_workload, r.latencies, self._target, c.args_info)
                )

    def close(self) -> None:
        with contextlib.suppress(Exception):  # cleanup only; the run's results are already kept
            self.context.post_tuning()


class GradientSource:
    """Gradient-descent search over the relaxed knobs of the design space (search/gradient)."""

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

    def propose(self, n: int) -> list[Any]:
        return list(self.search.propose(n))

    def runner_results(self, measured: list[Any]) -> list[Any]:
        return _runner_results(measured)

    def seed(self, rows: list[Any]) -> list[Any]:
        cands = _replay(self.context, rows)
        self.search.observe(cands, [r.median for r in rows[: len(cands)]])
        return cands

    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        import numpy as np

        self.search.observe(candidates, [float(np.median(r.latencies)) if r.status == "ok" else None for r in measured])

    def close(self) -> None:
        pass


def make_source(workload: Any, target: Any, model: Any, settings: Any, *, console: Any = None) -> CandidateSource:
    """The settings' search strategy; a sketch gradient search cannot relax falls back, with the reason."""
    if settings.search == "gradient":
        from autosearch.search.gradient import relax_reason

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
    return EvolutionarySource(workload, target, model, settings)
