"""`--search evolutionary`: MetaSchedule's EvolutionarySearch (eps-greedy, ranked by the tuning
model through its exploration policy), with the first round screened by a trained model.

Random controls (`--explore control`) come from a second evolutionary search that scores at
random (TVM XGBModel's warm-up). With `--screen K` and a trained model, the first round's picks are
the model's best of K uniform draws instead of the evolution's (`screen_picks`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autosearch.errors import InputError
from autosearch.search.scorer import runner_results
from autosearch.search.strategies.base import (
    Link,
    RandomDraws,
    SearchStrategy,
    StrategyFactory,
    design_space,
    nothing_to_decide,
)

__all__ = ["EvolutionarySettings", "EvolutionaryStrategy", "screen_picks"]


@dataclass(frozen=True)
class EvolutionarySettings(StrategyFactory):
    """`--search evolutionary`: MetaSchedule's EvolutionarySearch knobs, and its factory.

    population, genetic_num_iters, init_measured_ratio: EvolutionarySearch's own. screen: the
    first round's picks are the cost model's best of this many uniform draws from the design space
    instead of the evolution's (`screen_picks`); 0 = off. Only with a trained model (a prior): a
    model fitted on the run alone scores at random before it. `tune`'s CLI default is 512
    (bench/README.md, "A first round screened by the prior"); `tune-model` leaves it off (a
    network's many tasks would each pay the draws)."""

    name = "evolutionary"
    explore: str = "none"
    population: int = 256
    genetic_num_iters: int = 3
    init_measured_ratio: float = 0.2
    screen: int = 0

    def __post_init__(self) -> None:
        self.check()  # once, where the settings are made: a bad value fails before any work

    def check(self) -> None:
        if self.population < 2:
            raise InputError(f"--population must be at least 2, got {self.population}")
        if self.screen < 0:
            raise InputError(f"--screen must be >= 0 (0 = off), got {self.screen}")
        super().check()

    def check_settings(self, settings: Any) -> None:
        if self.population < settings.trials_per_round:
            raise InputError(f"--population {self.population} is smaller than one round ({settings.trials_per_round})")

    def chain(self, scorer: Any, target: Any) -> list[Link]:
        return [Link(EvolutionaryStrategy, self)]  # it searches any workload with a design space


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


class EvolutionaryStrategy(SearchStrategy):
    """MetaSchedule's EvolutionarySearch behind `SearchStrategy` (its knobs: `EvolutionarySettings`)."""

    kind = "evolutionary"
    knobs = EvolutionarySettings
    options: EvolutionarySettings

    def _start(self, workload: Any, target: Any) -> None:
        from tvm.s_tir import meta_schedule as ms

        opts, settings = self.options, self.settings
        strategy = ms.search_strategy.EvolutionarySearch(
            population_size=opts.population,
            init_measured_ratio=opts.init_measured_ratio,
            init_min_unmeasured=min(50, opts.population),
            genetic_num_iters=opts.genetic_num_iters,
            eps_greedy=settings.eps_greedy,
        )
        self.context, self.spaces = design_space(workload, target, settings, strategy)
        self.database = ms.database.MemoryDatabase()
        self._ms_workload = self.database.commit_workload(self.context.mod)
        self.context.pre_tuning(
            max_trials=settings.trials,
            num_trials_per_iter=settings.trials_per_round,
            design_spaces=self.spaces,
            database=self.database,
            cost_model=self.scorer.ms_cost_model(self.policy),
        )
        self._target = target
        self.draws = RandomDraws(self.context, self.spaces, settings.seed)
        self._explorer: Any = None
        self._proposed = False
        #: Nothing to decide (`TuneSettings.fixed_spaces`): the sketches' schedules are the space.
        self.fixed = nothing_to_decide(self.spaces)

    def _screen_score(self, candidates: list[Any]) -> Any:
        """Screening scores: the model alone, without the exploration bonus (the uniform draws
        are the exploration)."""
        return self.scorer.screen_scores(self.context, candidates)

    def propose(self, n: int) -> list[Any]:
        if n <= 0:
            return []
        if self.fixed:
            # MetaSchedule's evolution fills its population with copies of the one schedule until
            # it gives up: 81 s a round for RegNet-Y's 6x6-tile Winograd input transform (Intel
            # `rocketlake`), 175-420 s of 10-minute RegNet-Y, ResNet-50 and DenseNet-121 runs
            return self.draws.claim(self.draws.each_sketch(), n)
        first, self._proposed = not self._proposed, True
        if first and self.options.screen > n and self.scorer.trained:
            with self.section("search:screen"):
                return screen_picks(self.draws, n, self.options.screen, self._screen_score)
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
        if k <= 0 or self.fixed:  # a space with one schedule has no random control
            return []
        out = self.draws.claim(list(self._random_evolution().generate_measure_candidates() or []), k)
        if len(out) < k:
            out += self.draws.draw(k - len(out))
        return out

    def _random_evolution(self) -> Any:
        """The controls' search: same space, database and settings as ours, MetaSchedule's RandomModel."""
        if self._explorer is None:
            from tvm.s_tir import meta_schedule as ms

            from autosearch.backends.tvm.lowp import space_generator

            st = self.settings
            # Random scores make a large population and many generations pointless: a small one
            # with one generation mutates the measured best and samples afresh at a fraction of the
            # cost (measured on a depthwise conv: the full-size copy doubled the run's search time).
            pop = max(2 * st.trials_per_round, 32)
            strategy = ms.search_strategy.EvolutionarySearch(
                population_size=pop,
                init_measured_ratio=self.options.init_measured_ratio,
                init_min_unmeasured=min(16, pop),
                genetic_num_iters=1,
                eps_greedy=st.eps_greedy,
            )
            ctx = ms.TuneContext(
                mod=self.context.mod,
                target=self._target,
                space_generator=space_generator(self.context.mod, self._target),
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

    def seed(self, rows: list[Any]) -> list[tuple[Any, Any]]:
        """Commit stored schedules to the database the evolution starts from; returns (row, candidate) pairs."""
        from tvm.s_tir import meta_schedule as ms

        pairs = super().seed(rows)
        for r, c in pairs:
            self.database.commit_tuning_record(
                ms.database.TuningRecord(c.sch.trace, self._ms_workload, r.latencies, self._target, c.args_info)
            )
        return pairs

    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        from tvm.s_tir import meta_schedule as ms

        self.context.notify_runner_results(candidates, runner_results(measured))
        if self._explorer is not None:
            self._explorer.notify_runner_results(candidates, runner_results(measured))
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
