"""`autosearch tune`: find a fast schedule with few measurements, a cost model in the loop.

The loop is MetaSchedule's own, driven at the TuneContext level so that every stage can be timed
and every measured candidate reaches our store:

    candidates = strategy.propose(n - k)    (a `SearchStrategy`, search/strategies: MetaSchedule's
                                             evolutionary search, the decision search or gradient search)
               + strategy.draw(k)           (k random controls: its exploration policy, search/explore.py)
      -> build (PoolBuilder) -> run (Runner) (real hardware)
      -> strategy.notify(...)                (the search and MetaSchedule's database learn the result)
      -> strategy.learn(...)                 (the scorer's adaptive update, search/scorer.py)
      -> store.add_measurements              (records + PerStoreFeature, one transaction per round)

Ctrl-C ends the loop between (or inside) rounds: every completed round is already in the store,
and the result holds the best schedule found so far. The search and the cost model arrive as typed
objects, a `StrategyFactory` and a `Scorer` (`search.assemble` makes them from `--search`,
`--explore` and `--model` at the CLI edge); the loop asks neither its kind.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autosearch import interrupts
from autosearch.atomic_write import SCRATCH_PREFIX
from autosearch.backends.tvm.build import pool_builder
from autosearch.errors import InputError, TargetError
from autosearch.formatting import format_seconds
from autosearch.search.breakdown import TimeBreakdown
from autosearch.search.results import TuneResult, save_result
from autosearch.search.scorer import Scorer
from autosearch.search.strategies import Fallback, StrategyFactory

__all__ = [
    "TuneRun",
    "TuneSettings",
    "check_out_dir",
    "default_schedule",
    "measure_untuned",
    "tune",
    "untuned_over_best",
]


# -- settings ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TuneSettings:
    """What every search strategy runs under: the budget, the seed, the random share, the caps.
    A strategy's own knobs are its factory's (`strategies.EvolutionarySettings`, ...)."""

    trials: int = 64
    trials_per_round: int = 16
    #: The share of each round's picks drawn at random (every strategy has one).
    eps_greedy: float = 0.05
    seed: int = 0
    #: A build slower than this many times the run's median build is cut off (a `timeout` result
    #: the model learns from); 0 keeps only the fixed build timeout.
    build_cap: float = 6.0
    #: A run on the device slower than this many times the run's median run (at least 5 s) is cut
    #: off the same way (`backends.tvm.measure.adaptive_run_timeout`); 0 keeps only the fixed timeout.
    run_cap: float = 10.0
    #: Measure a design space with nothing to decide (its one schedule, e.g. an elementwise op
    #: parallelised and vectorised by MetaSchedule's rules) instead of refusing it. `tune-model`
    #: sets it: such a task's scheduled form can beat TVM's default by far or lose to it; the
    #: decision search hands such a task to its evolutionary fallback.
    fixed_spaces: bool = False

    def __post_init__(self) -> None:
        self.validate()  # once, where the settings are made: a bad value fails before any work

    def validate(self) -> None:
        if self.trials_per_round < 1:
            raise InputError(f"--trials-per-round must be at least 1, got {self.trials_per_round}")
        if self.trials < self.trials_per_round:
            raise InputError(
                f"--trials {self.trials} is smaller than one round (--trials-per-round {self.trials_per_round})"
            )
        if not 0.0 <= self.eps_greedy <= 1.0:
            raise InputError(f"--eps-greedy must be within [0, 1], got {self.eps_greedy}")
        if self.build_cap < 0:
            raise InputError(f"build_cap must be >= 0, got {self.build_cap}")
        if self.run_cap < 0:
            raise InputError(f"run_cap must be >= 0, got {self.run_cap}")


# -- measuring ---------------------------------------------------------------------------------
def default_schedule(mod: Any, target: Any) -> Any | None:
    """The program as TVM compiles it when nothing is tuned, or None where we do not know that form.

    A CPU builds the unscheduled loops as they are. A GPU cannot (no thread binding): Relax's CUDA
    pipeline schedules every untuned function with dlight's default rules, so those rules give the
    baseline a tuned schedule must beat (and which `tune-model` keeps for a task where it wins)."""
    from autosearch.backends.tvm.target import is_gpu

    if not is_gpu(target):
        return mod
    if target.kind.name != "cuda":
        return None
    import tvm
    from tvm.s_tir import dlight as dl

    rules = (dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback())
    # A copy: the pass updates the module it is given in place, and a network task's module is
    # the one its tuned traces replay on (a dlight-scheduled one made that replay fail).
    copy = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    with target:  # the same rules, in the same order, as tvm.relax.backend.cuda.pipeline.legalize_passes
        return dl.ApplyDefaultSchedule(*rules)(copy)


def measure_untuned(mod: Any, target: Any, measurer: Any) -> float | None:
    """Median latency of the program as TVM builds it by default (no MetaSchedule; `default_schedule`)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    mod = default_schedule(mod, target)
    if mod is None:
        return None
    sch = Schedule(mod)
    cand = MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
    (res,) = measurer.run_built([cand], pool_builder().build([cand], target))
    return float(np.median(res.latencies)) if res.status == "ok" else None


#: Turns of the side-by-side check (`untuned_over_best`): untuned, best, untuned, best, ...
SIDE_BY_SIDE_TURNS = 3


def untuned_over_best(mod: Any, target: Any, measurer: Any, best_trace: str) -> float | None:
    """Untuned latency / the best schedule's, the two timed in turns in one call (None where
    either fails). Why: the best was timed in its round and the default at the end, and under
    a load that came and went between them (a 2-core machine shared for a minute) the default
    measured faster by chance: a network built with it ran 3x slower than from the prior alone."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from autosearch.features.per_store import candidate_from_trace

    default = default_schedule(mod, target)
    if default is None:
        return None
    untuned = Schedule(default)
    cands = [
        MeasureCandidate(untuned, ArgInfo.from_entry_func(untuned.mod, remove_preproc=True)),
        candidate_from_trace(mod, best_trace),
    ]
    results = measurer.run_built(cands * SIDE_BY_SIDE_TURNS, measurer.build(cands) * SIDE_BY_SIDE_TURNS)
    if any(r.status != "ok" or not r.latencies for r in results):
        return None
    return float(
        np.median([x for r in results[0::2] for x in r.latencies])
        / np.median([x for r in results[1::2] for x in r.latencies])
    )


#: The files `tune --out` and `tune-model --out` write, by the manifest that vouches for them: a
#: folder given as --out must be empty or hold our own artifact, and none of these may be a
#: symbolic link (writing through one would put our files wherever it points).
_OUT_FILES = {
    "model.json": "model.json",
    "model.so": "model.json",
    "best.json": "tune",
    "summary.json": "tune",
    "history.json": "tune",
    "breakdown.json": "tune",
    "best_schedule.py": "tune",
}
#: A manifest larger than this is no manifest of ours (and is not read whole to find out).
_MANIFEST_MAX_BYTES = 16 << 20


def _json_dict(path: Path) -> dict[str, Any] | None:
    import json

    try:
        if path.stat().st_size > _MANIFEST_MAX_BYTES:
            return None
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _ours(out: Path, manifest: str) -> bool:
    """Whether `out` holds the manifest of our own artifact of that kind, known by its format
    fields: model.json of `tune-model` ("format": "autosearch-network"), best.json of `tune`
    ("format": "autosearch-best-schedule") or, where no schedule was found, its summary.json."""
    if manifest == "model.json":
        d = _json_dict(out / "model.json")
        return d is not None and d.get("format") == "autosearch-network"
    best = _json_dict(out / "best.json") if (out / "best.json").is_file() else None
    if best is not None and best.get("format") == "autosearch-best-schedule":
        return True
    summary = _json_dict(out / "summary.json") if (out / "summary.json").is_file() else None
    return summary is not None and {"workload_key", "trials_measured", "run_id"} <= summary.keys()


def _scratch(name: str) -> bool:
    """Our own leftovers: the write probe and the temporary files of an export killed midway."""
    return name.startswith(SCRATCH_PREFIX)


def check_out_dir(out_dir: str | os.PathLike[str]) -> Path:
    """Create `out_dir` (or fail in one line) *before* the budget is spent, not after.

    Refused: an --out that is a symbolic link, or in which one of the files we write is one (the
    write would follow it out of the folder), or that is not empty and holds no artifact of ours,
    or that holds a file under one of our names that is not ours (a user's own model.json): a run
    only ever replaces its own artifact, never a file it did not write."""
    out = Path(out_dir)
    if out.is_symlink():
        raise InputError(f"--out {out} is a symbolic link (to {os.readlink(out)}): give the folder itself")
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file, not a directory")
    if out.is_dir():
        try:
            names = sorted(p.name for p in out.iterdir())
        except OSError as exc:
            raise InputError(f"--out {out} cannot be listed: {exc.strerror or exc}") from None
        ours = [n for n in names if n in _OUT_FILES]
        for name in ours:
            path = out / name
            if path.is_symlink():
                raise InputError(f"--out {out}: {path} is a symbolic link; refusing to write through it")
            if not path.is_file():
                raise InputError(f"--out {out}: {path} is not a regular file; refusing to replace it")
        for name in ours:
            path = out / name
            if not _ours(out, _OUT_FILES[name]):
                raise InputError(
                    f"--out {out}: {path} is not part of an autosearch artifact; refusing to overwrite it "
                    "(give an empty or new folder)"
                )
        if not ours and any(not _scratch(n) for n in names):
            raise InputError(
                f"--out {out} is not empty and holds no autosearch artifact; give an empty or new folder "
                "(nothing in it is overwritten)"
            )
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".autosearch-write-test"
        if probe.is_symlink() or probe.is_file():  # left by a run killed between these lines
            probe.unlink()
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        os.close(fd)
        probe.unlink()
    except OSError as exc:
        raise InputError(f"--out {out} is not writable: {exc.strerror or exc}") from None
    return out


def _check_device(target: Any) -> None:
    """A GPU target with no GPU would turn the whole budget into run errors: refuse it up front."""
    from autosearch.backends.tvm.target import is_gpu

    if not is_gpu(target):
        return
    import tvm

    kind = target.kind.name
    if not tvm.device(kind, 0).exist:
        raise TargetError(
            f"target {kind} has no device on this machine: nothing could be measured "
            "(use --rpc for a remote device, or a CPU target)"
        )


# -- the loop ------------------------------------------------------------------------------------
class TuneRun:
    """One workload's tuning state, advanced a round at a time (`step`).

    `tune()` steps one run to its budget; `tune-model` steps many, a round at a time each, in the
    order its task scheduler chooses. `warm_start(store)` seeds the search with the store's best
    schedules of this workload (a second run of the same network starts where the first ended).
    """

    def __init__(
        self,
        workload: Any,
        target: Any,
        strategy: StrategyFactory,
        scorer: Scorer,
        settings: TuneSettings,
        *,
        store: Any = None,
        evaluator: Any = None,
        build_timeout: float = 60.0,
        console: Any = None,
        rpc: tuple[str, int, str] | None = None,
        on_fallback: Callable[[Fallback], None] | None = None,
    ) -> None:
        """`on_fallback`: told of each strategy the workload did not suit (default: its line on
        `console`)."""
        from autosearch.backends.tvm import measure
        from autosearch.backends.tvm.target import canonical_target, physical_cores, runtime_threads
        from autosearch.search.ms_face import group_key
        from autosearch.store import WorkloadRecord

        if not isinstance(strategy, StrategyFactory) or not isinstance(scorer, Scorer):
            raise InputError("tune() takes a StrategyFactory and a Scorer: make them with search.assemble.assemble")
        strategy.check_settings(settings)
        if rpc is None:  # a remote device is checked by the tracker, not here
            _check_device(target)
        self.workload, self.target, self.scorer, self.settings, self.store = workload, target, scorer, settings, store
        self.timer = TimeBreakdown()
        # features / predict / update inside the search are timed too; the search scores while
        # nothing else of the run works: on every core, which scores markedly faster
        scorer.attach(self.timer.section, physical_cores())
        self.result = TuneResult(
            workload=workload.name,
            workload_key=workload.key,
            family=getattr(workload, "family", ""),
            model=scorer.label,
            target=canonical_target(target),
            seed=settings.seed,
            flops=workload.flops,
            run_id=uuid.uuid4().hex[:12],
            module=getattr(workload, "source", None) or None,
            runtime_threads=runtime_threads(target),
        )
        with self.timer.section("setup"):
            with self.timer.section("setup:space"):
                self.fallbacks: list[Fallback] = []
                self.strategy = strategy.make(
                    workload, target, scorer, settings, timer=self.timer.section, fallbacks=self.fallbacks
                )
            for note in self.fallbacks:
                if on_fallback is not None:
                    on_fallback(note)
                elif console is not None:
                    console.print(note.line)
            self.result.search = self.strategy.kind
            with self.timer.section("setup:runner"):
                self.measurer = measure.shared_measurer(target, evaluator or measure.TUNE_EVALUATOR, rpc)
                self.builder = pool_builder(build_timeout)
            if store is not None:
                store.add_workload(WorkloadRecord.from_workload(workload))
        self.group = group_key(workload.mod())
        self.done = False
        self.run_seconds: list[float] = []  # wall seconds of each successful run on the device (the run cap)
        self.untuned_measured = False
        self.measured: set[str] = set()  # the traces measured in this run: none is measured twice

    def warm_start(self, store: Any, k: int = 16) -> int:
        """Give the search the store's `k` best schedules of this workload on this target; returns
        how many it took. The best of them is the run's best so far (trial 0)."""
        rows = store.best(self.workload.key, self.result.target, k)
        pairs = self.strategy.seed(rows) if rows else []
        if not pairs:
            return 0
        self.strategy.learn_seeds(self.group, pairs)  # the model learns them as evidence
        best = pairs[0][0]  # the fastest that replays (rows are fastest first)
        self.result.best_latency, self.result.best_trace, self.result.best_trial = best.median, best.schedule, 0
        return len(pairs)

    @property
    def trials_left(self) -> int:
        return self.settings.trials - self.result.trials

    def step(self) -> bool:
        """Propose, build, run and learn one round; False once the budget or the space is spent."""
        if self.done or self.trials_left <= 0:
            self.done = True
            self.result.stop_reason = self.result.stop_reason or "budget reached"
            return False
        n = min(self.settings.trials_per_round, self.trials_left)
        k = self.strategy.n_controls(n)
        with self.timer.section("search"), interrupts.deferred():
            picks = self.strategy.propose(n - k)
            controls = self.strategy.draw(k) if k else []
        if not picks and not controls:
            self.done = True
            self.result.stop_reason = "search space exhausted"
            return False
        _round(self, picks + controls, [False] * len(picks) + [True] * len(controls))
        return True

    def measure_untuned(self) -> None:
        """The untuned schedule's latency (`finish`'s baseline), once, as soon as a round has
        measured a schedule. Why: `tune-model` steps many runs under one deadline, and measured at
        their finish, after the last round, the baselines of DenseNet-121's 86 tuned tasks ran its
        10-minute budget 25-37 s over; measured here their seconds count with the rounds'."""
        if self.untuned_measured or self.result.interrupted or not self.result.trials:
            return
        self.untuned_measured = True
        _baselines(self, True, False)

    def measure_schedules(self, schedules: list[Any], source: str) -> list[tuple[str, float]]:
        """Measure schedules written outside the search (`source` names where from) as trials of
        this run: built, run, stored and counted for the best like a round's, not taught to the
        search or the model (they are not of its design space). Why: a network's layout moves and
        element-wise tasks have one design-space form, and the loop nest `networks.spatial` writes
        ran 5-10x faster than it on Swin-tiny's window partitions (bench/README.md); measured here
        by the rounds' own runner, the faster is built. One this run measured already (the prior's
        pick among a task's loop nests) is not measured again. Returns (trace, seconds) of each
        that ran."""
        from tvm.s_tir.meta_schedule import MeasureCandidate
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        from autosearch.backends.tvm.space import trace_json

        fresh = [(t, s) for s in schedules if (t := trace_json(s)) not in self.measured]  # e.g. the prior's pick
        if not fresh or self.result.interrupted:
            return []
        cands = [MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True)) for _, sch in fresh]
        start = len(self.result.history)
        try:
            _round(self, cands, [False] * len(cands), source=source)
        except BaseException as exc:
            if not interrupts.handled(exc):
                raise
            self.result.interrupted = True
        return [(t, h["latency"]) for (t, _), h in zip(fresh, self.result.history[start:]) if h["latency"] is not None]

    def start_from(self, traces: list[str], source: str) -> int:
        """Measure schedules found outside the search (stored traces; `source` names where from,
        e.g. the prior's pick) as trials of this run, then start the search from those that ran,
        as `warm_start` starts it from a store's; returns how many it took. Why: a task's first
        round of 16 trials ran slower than the prior's pick on most of DenseNet-121's tasks
        (bench/README.md "The prior's picks first"); measured here by the rounds' own runner, the
        faster is built, and the search mutates from the prior's pick."""
        from autosearch.backends.tvm.space import replayed
        from autosearch.store import MeasurementRecord

        mod = self.workload.mod()
        ran = self.measure_schedules([s for t in traces if (s := replayed(mod, t)) is not None], source)
        records = [MeasurementRecord(self.workload.key, self.result.target, "", t, "ok", [lat]) for t, lat in ran]
        pairs = self.strategy.seed(records) if records else []
        self.strategy.learn_seeds(self.group, pairs)
        return len(pairs)

    def finish(self, *, baseline: bool = True, reference: bool = True) -> TuneResult:
        """Close the search, measure the baselines (unless interrupted, or `measure_untuned` did)
        and the time breakdown."""
        self.strategy.close()
        self.result.retrains = self.scorer.n_retrains
        if not self.result.interrupted:
            _baselines(self, baseline and not self.untuned_measured, reference)
        self.timer.stop()
        self.result.breakdown = self.timer.to_dict()
        return self.result


def tune(
    workload: Any,
    target: Any,
    strategy: StrategyFactory,
    scorer: Scorer,
    settings: TuneSettings | None = None,
    *,
    store: Any = None,
    evaluator: Any = None,
    out_dir: str | os.PathLike[str] | None = None,
    baseline: bool = True,
    reference: bool = True,
    console: Any = None,
    progress: bool = True,
    on_round: Callable[[TuneResult], None] | None = None,
    build_timeout: float = 60.0,
    rpc: tuple[str, int, str] | None = None,
) -> TuneResult:
    """Tune one workload on `target` with `strategy` (made for it) searching and `scorer` in the
    loop; see the module docstring.

    Every measured candidate (ok or failed) is written to `store` with its features. When
    `out_dir` is given (checked before the first build), the best schedule (best.json + a runnable
    best_schedule.py), the history and the time breakdown are saved there. A build longer than
    `build_timeout` seconds is a `timeout` result.
    """
    from rich.console import Console

    settings = settings or TuneSettings()
    if out_dir is not None:
        check_out_dir(out_dir)
    console = console or Console(stderr=True)
    run = TuneRun(
        workload,
        target,
        strategy,
        scorer,
        settings,
        store=store,
        evaluator=evaluator,
        build_timeout=build_timeout,
        console=console,
        rpc=rpc,
    )
    try:
        _loop(run, console, progress, on_round)
    except BaseException as exc:
        if not interrupts.handled(exc):
            raise
        run.result.interrupted = True
        run.result.stop_reason = "interrupted"
    result = run.finish(baseline=baseline, reference=reference)
    if out_dir is not None:
        save_result(result, workload, out_dir, run.timer)
    return result


def _loop(run: TuneRun, console: Any, progress: bool, on_round: Callable[[TuneResult], None] | None) -> None:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    result = run.result
    columns = [
        TextColumn(f"[bold]tune[/] {run.workload.name[:36]} [{run.scorer.label}]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("best {task.fields[best]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, disable=not progress, transient=False) as bar:
        task = bar.add_task("tune", total=run.settings.trials, best="-")
        while run.step():
            bar.update(task, completed=result.trials, best=format_seconds(result.best_latency))
            if on_round is not None:
                on_round(result)


def _round(run: TuneRun, cands: list[Any], controls: list[bool], *, source: str = "") -> None:
    """Build, run, notify, featurize, update the model, store and account for one round
    (`controls` marks the candidates drawn at random, not picked by the search); schedules from
    outside the search (`source` names where) are neither notified to it nor learned."""
    from autosearch.backends.tvm.measure import adaptive_run_timeout
    from autosearch.backends.tvm.space import trace_json
    from autosearch.backends.tvm.target import device_fingerprint
    from autosearch.features.per_store import EXTRACTOR
    from autosearch.store import MeasurementRecord

    timer, result = run.timer, run.result
    with timer.section("build"):
        cap = run.builder.adaptive_timeout(run.settings.build_cap) if run.settings.build_cap > 0 else None
        built = run.builder.build(cands, run.target, timeout=cap)
    with timer.section("run"):
        rcap = None
        if run.settings.run_cap > 0:
            rcap = adaptive_run_timeout(run.run_seconds, run.measurer.run_timeout, run.settings.run_cap)
        measured = run.measurer.run_built(cands, built, timeout=rcap)
    run.run_seconds += [r.seconds for r in measured if r.status == "ok" and r.seconds > 0]
    lats = [float(np.median(r.latencies)) if r.status == "ok" else None for r in measured]
    strategy = run.strategy
    learn = not source
    if learn:
        with timer.section("search"):
            strategy.notify(cands, measured)
    # the store keeps PerStoreFeature; the model's cache of them already holds what the search scored
    with timer.section("features"), interrupts.deferred():
        feats = run.scorer.store_features(strategy.context, cands)
    if learn:
        with timer.section("update"):
            strategy.learn(run.group, cands, measured, feats, controls)
    texts = [trace_json(c.sch) for c in cands]
    run.measured.update(texts)
    rnd = (result.history[-1]["round"] + 1) if result.history else 0
    if run.store is not None:
        with timer.section("store"):
            device = device_fingerprint(run.target)
            records = [
                MeasurementRecord(
                    workload_key=run.workload.key,
                    target=result.target,
                    device=device,
                    schedule=t,
                    status=r.status,
                    latencies=r.latencies,
                    error=r.error,
                    source=f"tune:{run.scorer.label}:{result.run_id}",
                    extra={"round": rnd, "control": True}
                    if c
                    else {"round": rnd, **({"form": source} if source else {})},
                )
                for t, r, c in zip(texts, measured, controls)
            ]
            run.store.add_measurements(records, feats, EXTRACTOR)
    now = round(timer.elapsed(), 3)
    state, share = strategy.explore_state, run.scorer.online_share
    explore = round(state, 3) if state is not None else None
    online_w = round(share, 3) if share is not None else None
    for t, lat, c in zip(texts, lats, controls):
        result.trials += 1
        if lat is not None:
            result.ok += 1
            if result.best_latency is None or lat < result.best_latency:
                result.best_latency, result.best_trace, result.best_trial = lat, t, result.trials
        by = "control" if c else (source or None)
        result.history.append(_entry(result, rnd, lat, now, by, explore=explore, control=c, online_weight=online_w))


def _entry(
    result: TuneResult,
    rnd: int,
    lat: float | None,
    now: float,
    by: str | None,
    *,
    explore: float | None = None,
    control: bool = False,
    online_weight: float | None = None,
) -> dict[str, Any]:
    """The history entry of the trial just counted: `explore` is the control share after its round, `online_weight` the online model's share of the score (PRIOR+xgb), `by` which
    proposed it ("control" for a random control, None for the search's own pick)."""
    return {
        "trial": result.trials,
        "round": rnd,
        "latency": lat,
        "best": result.best_latency,
        "t": now,
        "explore": explore,
        "control": control,
        "online_weight": online_weight,
        "by": by,
    }


def _baselines(run: TuneRun, baseline: bool, reference: bool) -> None:
    """The untuned schedule's and PyTorch's latency, for the speed-up lines of the summary."""
    try:
        if baseline:
            with run.timer.section("baseline"):
                r = run.result
                r.untuned_latency = measure_untuned(run.workload.mod(), run.target, run.measurer)
                if r.untuned_latency and r.best_latency and r.best_trace and r.untuned_latency < r.best_latency:
                    ratio = untuned_over_best(run.workload.mod(), run.target, run.measurer, r.best_trace)
                    r.untuned_latency = None if ratio is None else ratio * r.best_latency
        if reference:
            from autosearch.reference import reference_latency, torch_device

            device = torch_device(run.target)
            if device:
                with run.timer.section("baseline"):
                    run.result.reference = reference_latency(run.workload, device=device)
    except BaseException as exc:
        if not interrupts.handled(exc):
            raise
        run.result.interrupted = True
