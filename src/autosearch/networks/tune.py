"""`autosearch tune-model`: a whole network, tuned under a budget in minutes, exported as a library.

Steps (each module of this package does one):
1. `graph`: load the model (`FILE.py:FUNC` or `.onnx`), import it into Relax, run the graph passes,
   extract the tasks.
2. `prior`: every task gets the prior's best-scored schedule first (`prior_pass.PriorPass`, in
   worker processes). Why before the rounds: a task's first round of 16 trials ran slower than
   the prior's pick on most of DenseNet-121's tasks (bench/README.md "The prior's picks first").
3. Tuning: one `TuneRun` per task, a round at a time, its first measurement the prior's pick
   (`TuneRun.start_from`: the search starts from it); `search.scheduler.TaskScheduler` gives every
   task one round, then each next round to the task whose weighted latency falls fastest, until
   the trials or the minutes (less `prior_pass.end_reserve` for verifying, building and timing)
   are spent. Every measurement goes to the store, and each task first takes the store's best
   schedules of its workload: a killed run, run again, continues.
4. Each task is built with its best measured schedule, or TVM's default where that measured faster,
   or an earlier run's best, or the prior's; `graph.build_network` pre-packs the weights.
5. The output is checked against the original model relative to its scale (`check`), the build is
   timed beside PyTorch eager, and `artifact` writes the library and its input description.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosearch import interrupts
from autosearch.errors import InputError, WorkloadError, one_line
from autosearch.networks.check import PRECISION_RTOL, OutputCheck, compare_outputs, flatten_outputs
from autosearch.networks.graph import quiet_import
from autosearch.networks.inputs import InputSpec, example_arrays, load_samples
from autosearch.networks.options import NetworkBudget, NetworkTuneOptions
from autosearch.networks.prior_pass import PriorPass, end_reserve
from autosearch.networks.progress import TaskProgress
from autosearch.networks.timing import time_vm, torch_latency_isolated
from autosearch.search.assemble import network_explore
from autosearch.search.pooled import TaskScorers
from autosearch.search.strategies import Fallback, StrategyFactory
from autosearch.search.tune import TuneSettings

__all__ = [
    "FoundSchedules",
    "ImportedNetwork",
    "NetworkJob",
    "NetworkResult",
    "network_evaluator",
    "network_explore",
    "reference_outputs",
    "time_vm",
    "torch_latency_isolated",
    "tune_network",
]


def network_evaluator(target: Any) -> Any:
    """How a network's tasks are timed. On a CPU every run starts with the operator's weights
    flushed from the caches (MetaSchedule's `enable_cpu_cache_flush`; Ansor's x86 network recipe):
    in the network each layer's weights arrive cold, so a kernel timed warm and repeated looks
    markedly faster than it runs there (a BERT matmul timed warm, flushed and inside the network),
    and the search ranks schedules by a speed the network never sees."""
    from autosearch.backends.tvm.measure import TUNE_EVALUATOR, EvaluatorSettings
    from autosearch.backends.tvm.target import is_gpu

    if is_gpu(target):
        return TUNE_EVALUATOR
    return EvaluatorSettings(number=1, repeat=5, min_repeat_ms=0, enable_cpu_cache_flush=True)


#: Per-task trial cap when only minutes bound the run (a task's space is never that large).
_UNBOUNDED = 1_000_000


@dataclass
class NetworkResult:
    spec: str
    model: str
    inputs: list[InputSpec] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    trials: int = 0
    tuned_latency: float | None = None
    torch_latency: float | None = None
    check: OutputCheck | None = None
    interrupted: bool = False
    seconds: float = 0.0
    breakdown: dict[str, float] = field(default_factory=dict)
    artifact: str | None = None
    #: Whether the build uses the fast-math approximations (False: asked so, or they moved the
    #: output past the check's tolerance and the network was rebuilt with the exact functions).
    fast_math: bool = False
    fast_math_fell_back: bool = False
    #: What the dense layers compute in (`--precision`), and so the output check's tolerance.
    precision: str = "fp32"
    #: How many samples int8's activation ranges were calibrated on (0: not int8).
    calibration_samples: int = 0
    #: On a GPU: the network built with TVM's default schedules everywhere (dlight), timed beside the
    #: tuned build; `kept_default` when it ran faster and was kept (see `_keep_the_faster_build`).
    default_latency: float | None = None
    kept_default: bool = False
    #: The tuned build (`library.compile_network`: `.module` for a VM, `.export_library(path)`),
    #: for callers that time it beside other builds.
    executable: Any = field(default=None, repr=False)
    #: Seconds of one run of the built network outside every task (the VM's own calls, libraries).
    outside_tasks_s: float | None = None

    @property
    def correct(self) -> bool:
        return self.check is not None and self.check.ok

    def summary(self) -> dict[str, Any]:
        c = self.check
        return {
            "model_file": self.spec,
            "cost_model": self.model,
            "inputs": [s.to_json() for s in self.inputs],
            "tasks": self.tasks,
            "trials_measured": self.trials,
            "tuned_latency_s": self.tuned_latency,
            "pytorch_latency_s": self.torch_latency,
            "max_abs_err": c.max_abs_err if c else None,
            "output_scale": c.scale if c else None,
            "relative_err": c.relative_err if c else None,
            "output_matches": self.correct,
            "interrupted": self.interrupted,
            "seconds": self.seconds,
            "time_breakdown": self.breakdown,
            "artifact": self.artifact,
            "fast_math": self.fast_math,
            "fast_math_fell_back": self.fast_math_fell_back,
            "precision": self.precision,
            "calibration_samples": self.calibration_samples,
            "default_latency_s": self.default_latency,
            "kept_default": self.kept_default,
            "outside_tasks_s": self.outside_tasks_s,
        }


def _is_onnx(source: Any) -> bool:
    """Whether a loaded model (`graph.load_source`) is an ONNX model: loading one imported onnx."""
    onnx = sys.modules.get("onnx")
    return onnx is not None and isinstance(source, onnx.ModelProto)


def reference_outputs(source: Any, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The original model's outputs: PyTorch for an `nn.Module`; for an ONNX model ONNX Runtime
    where it is installed (the `[bench]` extra), else ONNX's reference evaluator.

    Why ONNX Runtime first: the reference evaluator computed PP-OCRv4's detector (opset 12) off by
    0.55 of its scale, its first BatchNormalization 0.31 from the operator's formula, where ONNX
    Runtime, OpenVINO and our build agree with the formula to 1e-6 (and it took minutes on a
    640x640 input, ONNX Runtime a tenth of a second)."""
    if _is_onnx(source):
        names = [i.name for i in source.graph.input if i.name not in {t.name for t in source.graph.initializer}]
        feeds = dict(zip(names, arrays))
        try:
            try:
                import onnxruntime as ort
            except ImportError:
                from onnx.reference import ReferenceEvaluator

                return flatten_outputs(list(ReferenceEvaluator(source).run(None, feeds)))
            opts = ort.SessionOptions()
            opts.log_severity_level = 3
            session = ort.InferenceSession(source.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            return flatten_outputs(list(session.run(None, feeds)))
        except Exception as exc:
            raise InputError(f"the ONNX model cannot run on the given inputs: {one_line(exc)}") from None
    import torch

    try:
        with torch.no_grad():
            return flatten_outputs(source(*[torch.from_numpy(a) for a in arrays]))
    except Exception as exc:
        raise InputError(f"the model cannot run on the given inputs: {type(exc).__name__}: {one_line(exc)}") from None


def _commit(database: Any, workload: Any, trace: str, latency: float, target: Any) -> None:
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace

    sch = Schedule(workload.mod())
    Trace.apply_json_to_schedule(json.loads(trace), sch)
    rec = database.commit_workload(workload.mod())
    args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
    database.commit_tuning_record(ms.database.TuningRecord(sch.trace, rec, [latency], target, args))


#: Measured schedules of a task tried, fastest first, until one computes what the task computes.
VERIFY_RANKS = 24


def _ranked_in_store(store: Any, workload: Any, target: Any) -> list[Any]:
    """The store's `VERIFY_RANKS` fastest records of the task on this target, fastest first."""
    from autosearch.backends.tvm.target import canonical_target

    return list(store.best(workload.key, canonical_target(target), VERIFY_RANKS))


def _stored_bests(
    store: Any, workloads: list[Any], target: Any, finished: dict[int, Any]
) -> dict[int, tuple[str, float]]:
    """The store's fastest schedule that computes what the task computes (up to `VERIFY_RANKS`
    tried, as `_choose` does) of each task this run did not tune: a rerun that stops before
    reaching a task still builds it with what an earlier run measured."""
    from autosearch.networks.verify import schedule_matches

    out: dict[int, tuple[str, float]] = {}
    for i, wl in enumerate(workloads):
        if i not in finished:
            for row in _ranked_in_store(store, wl, target):
                if schedule_matches(wl, row.schedule, target):
                    out[i] = (row.schedule, row.median)
                    break
    return out


def _record_run(info: dict[str, Any], r: Any) -> None:
    """A task's summary figures from its measured rounds (`TuneResult`)."""
    info.update(trials=r.trials, best_latency_s=r.best_latency, untuned_latency_s=r.untuned_latency)


#: A schedule a task may be built with: (latency, how it was found, trace; None: TVM's default).
Option = tuple[float, str, str | None]


def _options(info: dict[str, Any], workload: Any, r: Any, prior: str | None, target: Any, store: Any) -> list[Option]:
    """What a task may be built with, fastest first: its measured schedules (this run's best and
    the store's, `VERIFY_RANKS` of them), TVM's default where it was measured; the prior's where the
    task had no measured round. Read here, in the run's thread: the store is its connection."""
    if r is not None:
        _record_run(info, r)
    options: list[Option] = []
    if r is not None and r.best_trace is not None and r.best_latency is not None:
        options.append((r.best_latency, "tuned", r.best_trace))
        if store is not None:
            rows = _ranked_in_store(store, workload, target)
            options += [(row.median, "tuned", row.schedule) for row in rows if row.schedule != r.best_trace]
        if r.untuned_latency is not None:
            options.append((r.untuned_latency, "untuned (measured faster)", None))
    elif prior is not None:
        options.append((1.0, "prior", prior))  # the one record of its workload: its latency is moot
    return sorted(options, key=lambda o: o[0])


def _choose(
    info: dict[str, Any], workload: Any, options: list[Option], prior: str | None, target: Any
) -> tuple[str, float] | None:
    """The trace and latency of the fastest of `options` that computes what the task computes
    (`verify.schedule_matches`; the prior's was checked when it was chosen); None where TVM's
    default is built (measured faster, or nothing else). Why not only the best: most of the fast
    schedules of MobileNetV2's convolutions fused with a padded output compute something else (the
    fastest right one was far down the list), and TVM's default there is far slower."""
    from autosearch.networks.verify import schedule_matches

    refused = 0
    for latency, how, trace in options:
        if trace is not None and trace != prior and not schedule_matches(workload, trace, target):
            refused += 1
            info["refused"] = f"{refused} faster {how} schedule(s) compute a different result"
            continue
        if trace is None and refused:
            how = "untuned"  # not measured faster: every faster schedule was refused
        info["built_with"] = how
        return (trace, latency) if trace is not None else None
    return None


@dataclass(frozen=True)
class NetworkJob:
    """What a `tune_network` call asks, checked once: the model file and its target; `strategy`
    (made per task) and `scorer` (called once per task: a scorer learns its task's measurements,
    and the pooled prior, where there is one, every task's; `search.pooled`);
    `settings`, each task's `TuneSettings` (the trial cap and `fixed_spaces` set); the budget
    (`trials`, the cap over all tasks, and `deadline`, a `time.perf_counter()` instant); where
    measurements go (`store`, `evaluator`, `rpc`) and what is reported (`console`)."""

    spec: str
    target: Any
    strategy: StrategyFactory
    scorer: TaskScorers
    settings: TuneSettings
    #: Whether any round is measured (trials or minutes to spend; neither: the prior alone).
    measures: bool = True
    trials: int | None = None
    deadline: float | None = None
    store: Any = None
    evaluator: Any = None
    console: Any = None
    rpc: tuple[str, int, str] | None = None
    seed: int = 0
    fast_math: bool = True
    blocked: bool = True
    precision: str = "fp32"
    time_torch: bool = True
    check_input: tuple[str, ...] = ()
    calibration: tuple[str, ...] = ()


@dataclass
class ImportedNetwork:
    """The import stage's output: the loaded model (`source`), the example inputs and the original
    model's outputs on them, the Relax graph after its passes with its tasks (`graph`), and int8's
    calibration samples (None: the example inputs)."""

    source: Any
    specs: list[InputSpec]
    arrays: list[np.ndarray]
    expected: list[np.ndarray]
    graph: Any
    calibration: list[list[np.ndarray]] | None = None


@dataclass
class FoundSchedules:
    """What the search stages found per task (index): the measured rounds' runs and results
    (`finished`), the prior's schedules (`priors`), and an earlier run's best from the store for
    a task this run did not reach (`earlier`: trace, latency)."""

    finished: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    priors: dict[int, str] = field(default_factory=dict)
    earlier: dict[int, tuple[str, float]] = field(default_factory=dict)


def _import_stage(job: NetworkJob, specs: Sequence[InputSpec], result: NetworkResult) -> ImportedNetwork:
    """Import, graph passes and tasks (`graph.import_network`); the tasks' rows of `result`. The
    example inputs (what the build is checked and timed on, and int8 calibrated on unless a set is
    given) are `--check-input`'s first sample, else drawn at random."""
    from autosearch.networks.graph import import_network, load_source

    arrays = (
        load_samples(job.check_input, specs, "--check-input")[0] if job.check_input else example_arrays(specs, job.seed)
    )
    samples = load_samples(job.calibration, specs) if job.calibration else None
    result.precision = job.precision
    if job.precision == "int8":
        result.calibration_samples = len(samples) if samples else 1
    with quiet_import():
        source = load_source(job.spec, job.deadline)  # the budget covers the user's import and call
        expected = reference_outputs(source, arrays)
        t0 = time.perf_counter()
        graph = import_network(
            job.spec,
            source,
            specs,
            arrays,
            job.target,
            fast_math=job.fast_math,
            blocked=job.blocked,
            precision=job.precision,
            calibration=samples,
        )
    result.breakdown["import"] = time.perf_counter() - t0
    specs = [s.indexing(graph.index_bounds.get(s.name)) for s in specs]  # the artifact refuses ids past a table
    result.inputs = list(specs)
    result.tasks = [
        {
            "name": wl.name,
            "weight": int(t.weight),
            "flops": wl.flops,
            "trials": 0,
            "best_latency_s": None,
            "built_with": "untuned",
        }
        for t, wl in zip(graph.tasks, graph.workloads)
    ]
    return ImportedNetwork(source, specs, list(arrays), expected, graph, samples)


class _TaskRuns:
    """Each task's `TuneRun`, set up the first time the scheduler picks it (seconds each: a time
    budget spends them only on the tasks it reaches); None where it has nothing to tune. A task
    the decision search cannot read (a reshape or transpose: nothing to decide) is searched by its
    evolutionary fallback, and counted (`fell_back`), not announced one line a task."""

    def __init__(self, job: NetworkJob, workloads: list[Any], result: NetworkResult) -> None:
        self.job, self.workloads, self.result = job, workloads, result
        self.runs: dict[int, Any] = {}
        self.failed: set[int] = set()
        self.fell_back = 0

    def get(self, i: int) -> Any:
        from autosearch.search.tune import TuneRun

        job = self.job
        if i not in self.runs and i not in self.failed:
            try:
                scorer = job.scorer()
                self.result.model = scorer.label
                self.runs[i] = TuneRun(
                    self.workloads[i],
                    job.target,
                    job.strategy,
                    scorer,
                    job.settings,
                    store=job.store,
                    evaluator=job.evaluator,
                    console=job.console,
                    rpc=job.rpc,
                    on_fallback=self._fallback,
                )
            except WorkloadError as exc:
                self.result.tasks[i]["note"] = str(exc)
                self.failed.add(i)
                return None
            if job.store is not None:
                self.result.tasks[i]["warm_started_from"] = self.runs[i].warm_start(job.store)
        return self.runs.get(i)

    def _fallback(self, note: Fallback) -> None:
        if note.counted:
            self.fell_back += 1
        elif self.job.console is not None:
            self.job.console.print(note.line)

    def summary(self) -> None:
        """The one line that says how many tasks the decision search handed to its fallback."""
        if self.fell_back and self.job.console is not None:
            n = self.fell_back
            self.job.console.print(
                f"{n} task{'s' if n != 1 else ''} outside the decision space {'were' if n != 1 else 'was'} "
                "searched by evolutionary search",
                highlight=False,
            )


def _rounds_stage(
    job: NetworkJob, workloads: list[Any], result: NetworkResult, bar: TaskProgress, prior: PriorPass
) -> dict[int, tuple[Any, Any]]:
    """Measured rounds until the trials or the minutes (less `end_reserve`) are spent, each task's
    first round started from the prior's pick (`TuneRun.start_from`), where the prior pass found
    one; a task gets no more rounds once less than half of what its last one took is left (the run
    ends within half a round of the reserve, not a whole round past it). Each task's run and
    TuneResult."""
    from autosearch.networks.register_blocks import register_blocks, simd_registers
    from autosearch.networks.row_reductions import row_reduction_forms
    from autosearch.networks.siblings import SiblingSchedules
    from autosearch.networks.spatial import register_lanes, spatial_forms
    from autosearch.search.scheduler import TaskScheduler, task_kind

    lanes, registers = register_lanes(job.target), simd_registers(job.target)
    tasks = _TaskRuns(job, workloads, result)
    siblings = SiblingSchedules(workloads)
    n = len(workloads)
    weights = [float(t["weight"]) for t in result.tasks]
    sched = TaskScheduler(
        weights,
        flops=[wl.flops for wl in workloads],
        kinds=[task_kind(t["name"]) for t in result.tasks],
        seed=job.settings.seed,
    )
    bar.stage("tasks measured", n)
    round_s = 0.0  # the last round's seconds: the next one may run that far into the reserve
    seconds_of: dict[int, float] = {}  # each task's last round (its search only): how far its next will run
    started: set[int] = set()  # tasks whose first round began with the prior's pick
    formed: set[int] = set()  # tasks whose loop nests or register blocks were measured (beside their first round)
    left = float("inf")
    try:
        while True:
            if job.trials is not None and result.trials >= job.trials:
                break
            if job.deadline is not None:
                left = job.deadline - end_reserve(n, len(tasks.runs), job.precision) - time.perf_counter()
                if left <= 0:
                    break
            j = sched.pick()
            if j is None:
                break
            if left < seconds_of.get(j, round_s) / 2:  # expected to end past the reserve: not begun
                sched.close(j)  # another task's shorter round may still fit
                continue
            t_round = time.perf_counter()  # a task's first round sets its search up: counted
            run = tasks.get(j)
            if run is None:
                sched.record(j, 0, None, done=True)
                continue
            before = run.result.trials
            if j not in started and j in prior.traces:
                started.add(j)
                run.start_from([prior.traces[j]], "prior")
            t_step = time.perf_counter()
            advanced = run.step()
            seconds_of[j] = time.perf_counter() - t_step  # its next round: no setup, no baseline
            if j not in formed and lanes:  # beside its first round: the forms its design space lacks
                formed.add(j)
                mod = run.workload.mod()
                loop_nests = spatial_forms(mod, lanes)  # none where the task has a reduction
                run.measure_schedules(loop_nests, "spatial")
                if not loop_nests:
                    run.measure_schedules(register_blocks(mod, job.target, lanes, registers), "register-block")
                    run.measure_schedules(row_reduction_forms(mod, lanes), "row-reduction")
            run.measure_schedules(siblings.offers(j, tasks.runs, run.strategy.postprocs), "sibling")
            k = run.result.trials - before
            result.trials += k
            run.measure_untuned()  # its seconds count with the rounds', not past the deadline
            if run.result.interrupted:  # a Ctrl-C while it was timed: caught there
                result.interrupted = True
                break
            round_s = time.perf_counter() - t_round
            sched.record(j, k, run.result.best_latency, done=not advanced)
            bar.update(len(tasks.runs), n, f"{result.trials} trials | {run.workload.name[4:40]}")
    except BaseException as exc:
        if not interrupts.handled(exc):
            raise
        result.interrupted = True
    tasks.summary()
    done: dict[int, tuple[Any, Any]] = {}
    for i, run in tasks.runs.items():  # a Ctrl-C while a task's untuned schedule is timed stops it and the network
        done[i] = (run, run.finish(baseline=not result.interrupted and run.result.trials > 0, reference=False))
        result.interrupted = result.interrupted or done[i][1].interrupted
    return done


def _tasks_in_store(job: NetworkJob, workloads: list[Any]) -> set[int]:
    """Tasks an earlier run measured: without a round in this one they are built from the store."""
    if not job.store:
        return set()
    return {i for i, wl in enumerate(workloads) if _ranked_in_store(job.store, wl, job.target)}


def _prior_stage(
    workloads: list[Any], result: NetworkResult, bar: TaskProgress, prior: PriorPass, todo: Sequence[int]
) -> None:
    """The prior's schedules of the tasks in `todo` not yet passed; a Ctrl-C marks the result
    interrupted and keeps what was found."""
    todo = [i for i in todo if i not in prior.passed]
    if not todo or not prior.enabled:
        return
    bar.stage("prior schedules", len(todo))
    passed = 0

    def each(i: int) -> None:
        nonlocal passed
        passed += 1
        bar.update(passed, len(todo), f"prior {workloads[i].name}")

    try:
        prior.run_all(todo, each)
    except BaseException as exc:
        if not interrupts.handled(exc):
            raise
        result.interrupted = True


def _search_stage(job: NetworkJob, workloads: list[Any], result: NetworkResult, progress: bool) -> FoundSchedules:
    """Rounds (with the prior pass of the tasks they will not reach fitted in, see `_rounds_stage`),
    then the prior for the tasks left, and an earlier run's best for a task this run did not
    reach. Stops where a Ctrl-C came (`result.interrupted`)."""
    found = FoundSchedules()
    n = len(workloads)
    prior = PriorPass(workloads, job.target, job.seed)
    with TaskProgress(job.console, progress, job.deadline) as bar:
        if job.measures:
            t0 = time.perf_counter()
            stored = _tasks_in_store(job, workloads)
            _prior_stage(workloads, result, bar, prior, [i for i in range(n) if i not in stored])
            if not result.interrupted:
                found.finished = _rounds_stage(job, workloads, result, bar, prior)
            result.breakdown["tune"] = time.perf_counter() - t0 - prior.seconds
        if not result.interrupted:
            if job.store:  # tasks this run did not reach, built with an earlier run's best
                found.earlier = _stored_bests(job.store, workloads, job.target, found.finished)
            for i, (_trace, latency) in found.earlier.items():
                result.tasks[i].update(built_with="tuned (earlier run)", best_latency_s=latency)
            done = set(found.finished) | set(found.earlier)  # the prior for the tasks left
            _prior_stage(workloads, result, bar, prior, [i for i in range(n) if i not in done])
    found.priors = {i: t for i, t in prior.traces.items() if i not in found.finished}
    result.breakdown["prior"] = prior.seconds
    return found


def _verify_stage(job: NetworkJob, workloads: list[Any], found: FoundSchedules, result: NetworkResult) -> Any:
    """The schedule each task is built with (`_choose`: the fastest that computes what the task
    computes, an earlier run's, the prior's, or TVM's default), in a MetaSchedule database. The
    tasks are checked in threads, one a physical core: one after another they took 39 s of
    DenseNet-121's 10-minute run on an Intel `rocketlake` (86 tuned tasks), one core idle."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.intrinsics import register_tensor_intrinsics
    from autosearch.backends.tvm.target import physical_cores

    register_tensor_intrinsics(job.target)  # a bf16 pick made in a prior worker tensorizes with ours
    database = ms.database.MemoryDatabase()
    for i, (trace, latency) in found.earlier.items():
        _commit(database, workloads[i], trace, latency, job.target)
    todo = [i for i in range(len(workloads)) if i not in found.earlier]
    options = {
        i: _options(
            result.tasks[i],
            workloads[i],
            found.finished.get(i, (None, None))[1],
            found.priors.get(i),
            job.target,
            job.store,
        )
        for i in todo
    }

    def choose(i: int) -> tuple[str, float] | None:
        return _choose(result.tasks[i], workloads[i], options[i], found.priors.get(i), job.target)

    pool = ThreadPoolExecutor(physical_cores())  # each check is an LLVM build, which frees the GIL
    try:
        picks = list(pool.map(choose, todo))
    finally:
        pool.shutdown(cancel_futures=True)  # a Ctrl-C waits for the checks under way, not the rest
    for i, pick in zip(todo, picks):
        if pick is not None:
            _commit(database, workloads[i], *pick, job.target)
    return database


def _build_stage(job: NetworkJob, net: ImportedNetwork, database: Any, result: NetworkResult) -> None:
    """Build and check (`_build_and_check`); where the fast-math approximations moved the output
    past the tolerance, the network is imported again with the exact functions and built with the
    same schedules (`net.graph` is then that graph). Not where fast math approximated nothing
    (`NetworkGraph.approximated`): that build is the exact one already, and building it again
    had cost an int8 DenseNet-121 80 of its 158 s of build and timing, past its budget, to fail
    the same check (bench/README.md, "int8 built once, inside its budget")."""
    result.fast_math = job.fast_math
    _build_and_check(result, net.graph, database, job.target, net.arrays, net.expected)
    if job.fast_math and net.graph.approximated and not result.correct and not result.interrupted:
        from autosearch.networks.graph import import_network

        with quiet_import():
            net.graph = import_network(
                job.spec,
                net.source,
                net.specs,
                net.arrays,
                job.target,
                fast_math=False,
                blocked=job.blocked,
                precision=job.precision,
                calibration=net.calibration,
            )
        result.fast_math, result.fast_math_fell_back = False, True
        _build_and_check(result, net.graph, database, job.target, net.arrays, net.expected)


def _network_job(
    spec: str,
    target: Any,
    strategy: StrategyFactory,
    scorer: TaskScorers,
    settings: TuneSettings | None,
    *,
    budget: NetworkBudget,
    options: NetworkTuneOptions,
    t_start: float,
    **rest: Any,
) -> NetworkJob:
    """The checked `NetworkJob` of `tune_network`'s arguments (a bad value fails in one line)."""
    if not isinstance(strategy, StrategyFactory) or not isinstance(scorer, TaskScorers):
        raise InputError("tune_network() takes a StrategyFactory and TaskScorers (search.assemble_network)")
    if not isinstance(budget, NetworkBudget) or not isinstance(options, NetworkTuneOptions):
        raise InputError("tune_network() takes a NetworkBudget and NetworkTuneOptions (networks.options)")
    per_task = settings or TuneSettings()
    if budget.measures:
        per_task = dataclasses.replace(
            per_task, trials=budget.trials or _UNBOUNDED, fixed_spaces=True, seed=options.seed
        )
    return NetworkJob(
        spec,
        target,
        strategy,
        scorer,
        per_task,
        budget.measures,
        budget.trials,
        budget.deadline(t_start),
        seed=options.seed,
        fast_math=options.fast_math,
        blocked=options.blocked,
        precision=options.precision,
        time_torch=options.time_torch,
        check_input=options.check_input,
        calibration=options.calibration,
        **rest,
    )


def tune_network(
    spec: str,
    specs: Sequence[InputSpec],
    target: Any,
    strategy: StrategyFactory,
    scorer: TaskScorers,
    settings: TuneSettings | None = None,
    *,
    budget: NetworkBudget | None = None,
    options: NetworkTuneOptions | None = None,
    store: Any = None,
    evaluator: Any = None,
    console: Any = None,
    rpc: tuple[str, int, str] | None = None,
) -> NetworkResult:
    """Import, prior schedules, tune under `budget` (`NetworkBudget`; default: none, the prior
    alone), build, check, time and (with `options.out_dir`) export; see the module doc.
    `strategy`: the search every task runs (`search.assemble.choose_strategy`); `scorer`: the
    task scorers (`search.pooled`: a fresh `Scorer` for each task, pooled where the prior updates
    in place); `options`: how the network is built, timed and reported
    (`NetworkTuneOptions`). With `rpc=(host, port, key)` the measurements go to the tracker's
    devices (as many at once as it holds); the network is still built, checked and timed here."""
    from rich.console import Console

    from autosearch.backends.tvm.target import use_physical_cores
    from autosearch.networks.artifact import export_artifact
    from autosearch.search.tune import check_out_dir

    budget = budget if budget is not None else NetworkBudget()
    options = options if options is not None else NetworkTuneOptions()
    if options.out_dir is not None:
        check_out_dir(options.out_dir)
    t_start = time.perf_counter()
    job = _network_job(
        spec,
        target,
        strategy,
        scorer,
        settings,
        budget=budget,
        options=options,
        t_start=t_start,
        store=store,
        evaluator=evaluator or network_evaluator(target),
        console=console or Console(stderr=True),
        rpc=rpc,
    )
    use_physical_cores()  # the network is timed in this process: every core, not TVM's half
    result = NetworkResult(spec=spec, model="", inputs=list(specs))
    net = _import_stage(job, specs, result)
    found = _search_stage(job, net.graph.workloads, result, options.progress)
    if result.interrupted:
        return _stopped(result, found.finished, t_start)
    t0 = time.perf_counter()
    database = _verify_stage(job, net.graph.workloads, found, result)
    result.breakdown["verify"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    _build_stage(job, net, database, result)
    _time(result, net.graph, target, net.arrays, net.expected, spec, options.time_torch, options.seed)
    result.breakdown["build_and_time"] = time.perf_counter() - t0
    if options.out_dir is not None and result.executable is not None:
        result.artifact = str(export_artifact(result.executable, options.out_dir, net.specs, target, result.summary()))
    result.seconds = time.perf_counter() - t_start
    return result


def _stopped(result: NetworkResult, finished: dict[int, tuple[Any, Any]], t_start: float) -> NetworkResult:
    """An interrupted run ends here, unbuilt: checking, building and timing the network took tens of
    seconds after a Ctrl-C (measured on a BERT layer), and everything measured is already in the store, where
    the same command run again (or with `--trials 0`) builds from it."""
    for i, (_run, r) in finished.items():
        _record_run(result.tasks[i], r)
    result.seconds = time.perf_counter() - t_start
    return result


def _on_device(target: Any, arrays: list[np.ndarray]) -> tuple[Any, list[Any]]:
    """The target's device and the example inputs copied onto it."""
    import tvm

    dev = tvm.cpu() if target.kind.name == "llvm" else tvm.device(target.kind.name)
    return dev, [tvm.runtime.tensor(a, dev) for a in arrays]


def _build_and_check(
    result: NetworkResult, graph: Any, database: Any, target: Any, arrays: list[np.ndarray], expected: list[np.ndarray]
) -> None:
    """Build with the chosen schedules (a task missing from `database`: TVM's untuned form) and
    check the output against the original model's."""
    from tvm import relax

    from autosearch.networks.graph import build_network
    from autosearch.networks.library import compile_network

    dev, args = _on_device(target, arrays)
    build = result.executable = compile_network(build_network(graph, database, target), target)
    out = flatten_outputs(relax.VirtualMachine(build.module, dev)["main"](*args))
    result.check = compare_outputs(out, expected, PRECISION_RTOL[result.precision])


def _time(
    result: NetworkResult,
    graph: Any,
    target: Any,
    arrays: list[np.ndarray],
    expected: list[np.ndarray],
    spec: str,
    time_torch: bool,
    seed: int,
) -> None:
    """Time the build (on a GPU beside TVM's default build, the faster kept), and PyTorch in a
    fresh process."""
    from tvm import relax

    from autosearch.backends.tvm.target import is_gpu
    from autosearch.reference import torch_device

    dev, args = _on_device(target, arrays)
    if is_gpu(target) and result.correct:
        _keep_the_faster_build(result, graph, target, dev, args, expected)
    else:
        result.tuned_latency = time_vm(relax.VirtualMachine(result.executable.module, dev), dev, args)
    if result.executable is not None:
        _profile(result, graph, dev, args)
    device = torch_device(target) if time_torch else None
    if device:
        result.torch_latency = torch_latency_isolated(spec, result.inputs, device=device, seed=seed)


def _profile(result: NetworkResult, graph: Any, dev: Any, args: list[Any]) -> None:
    """Each task's seconds in a run of the built network (`profile.task_seconds`) into its summary
    (`network_s`), the rest as `outside_tasks_s`: which task a slow build loses its time in."""
    from autosearch.networks.profile import task_seconds

    spent = task_seconds(result.executable.module, dev, args, graph)
    for info in result.tasks:
        info["network_s"] = spent.get(info["name"].removeprefix("net/"), 0.0)
    result.outside_tasks_s = spent.get("other", 0.0)


#: Interleaved timings of each build in `_keep_the_faster_build` (the median is compared).
DEFAULT_GUARD_ROUNDS = 5


def _keep_the_faster_build(
    result: NetworkResult, graph: Any, target: Any, dev: Any, args: list[Any], expected: list[np.ndarray]
) -> None:
    """On a GPU TVM's default schedules (dlight) are a real build, and a network of tasks each
    measured faster than their default can still run slower end to end (a BERT layer on an H100
    after a short tune): the two builds are timed interleaved and the
    faster is kept, so a tuned network is never slower than TVM's default. Not on a CPU, where the
    default is unscheduled loops (seconds a call) and each task already fell back where it measured
    faster."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from autosearch.networks.graph import build_network
    from autosearch.networks.library import compile_network

    default = compile_network(build_network(graph, ms.database.MemoryDatabase(), target), target)
    vms = {
        "tuned": relax.VirtualMachine(result.executable.module, dev),
        "default": relax.VirtualMachine(default.module, dev),
    }
    times: dict[str, list[float]] = {k: [] for k in vms}
    for _ in range(DEFAULT_GUARD_ROUNDS):
        for k, vm in vms.items():
            times[k].append(time_vm(vm, dev, args, repeat=3))
    result.tuned_latency, result.default_latency = (float(np.median(times[k])) for k in ("tuned", "default"))
    if result.default_latency < result.tuned_latency:
        check = compare_outputs(
            flatten_outputs(vms["default"]["main"](*args)), expected, PRECISION_RTOL[result.precision]
        )
        if check.ok:
            result.executable, result.check, result.kept_default = default, check, True
            result.tuned_latency = result.default_latency
            for task in result.tasks:
                task["built_with"] = "default (the network's default build ran faster)"
