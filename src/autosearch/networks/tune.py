"""`autosearch tune-model`: a whole network, tuned under a budget in minutes, exported as a library.

Steps (each module of this package does one):
1. `graph`: load the model (`FILE.py:FUNC` or `.onnx`), import it into Relax, run the graph passes,
   extract the tasks.
2. Tuning: one `TuneRun` per task, a round at a time; `search.scheduler.TaskScheduler` gives every
   task one round, then each next round to the task whose weighted latency falls fastest, until
   the trials or the minutes are spent. Every measurement goes to the store, and each task first
   takes the store's best schedules of its workload: a killed run, run again, continues.
3. `prior`: every task no round reached (every task with `--trials 0`) gets the prior's
   best-scored schedule; under a budget in minutes the rounds stop early enough to leave it
   `PRIOR_SECONDS_PER_TASK` a task. Why after the rounds, not before: a task's first round already
   measures what the prior ranks best (the decision search scores with the same prior), and a
   prior pass over every task cost 92 s of ResNet-50's 10 minutes and 150 s of MobileNetV2's.
   Except where the budget left after the import is no more than that reserve for every task
   (ConvNext-tiny's 44 tasks in 3 minutes): the rounds would never start and the seconds the pass
   does not use would be idle (it measured 0 trials and finished 96 s early), so the pass runs
   first and the rounds get the rest.
4. Each task is built with its best measured schedule, or TVM's default where that measured faster,
   or an earlier run's best, or the prior's; `graph.build_network` pre-packs the weights.
5. The output is checked against the original model relative to its scale (`check`), the build is
   timed beside PyTorch eager, and `artifact` writes the library and its input description.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosearch import interrupts
from autosearch.errors import InputError, WorkloadError, one_line
from autosearch.networks.check import OutputCheck, compare_outputs, flatten_outputs
from autosearch.networks.inputs import InputSpec, example_arrays

__all__ = [
    "NetworkResult",
    "network_evaluator",
    "network_explore",
    "reference_outputs",
    "time_vm",
    "torch_latency_isolated",
    "tune_network",
]


def network_explore(search: str) -> str:
    """`--explore` of a network's measured rounds: random controls under the evolutionary search (a
    task gets few trials, so a prior wrong about it costs its whole budget: ResNet-18 end to end
    0.700 -> 0.827 of `tune_relax`'s time), `tune`'s own rule otherwise (the decision search
    explores by its random vectors; controls made it 1.08x slower)."""
    return "control" if search == "evolutionary" else "auto"


def network_evaluator(target: Any) -> Any:
    """How a network's tasks are timed. On a CPU every run starts with the operator's weights
    flushed from the caches (MetaSchedule's `enable_cpu_cache_flush`; Ansor's x86 network recipe):
    in the network each layer's weights arrive cold, so a kernel timed warm and repeated looks up to
    1.4x faster than it runs there (BERT's 768x3072 matmul: 1.27 ms warm, 1.81 ms flushed, 2.08 ms
    inside the network), and the search ranks schedules by a speed the network never sees."""
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
    #: On a GPU: the network built with TVM's default schedules everywhere (dlight), timed beside the
    #: tuned build; `kept_default` when it ran faster and was kept (see `_keep_the_faster_build`).
    default_latency: float | None = None
    kept_default: bool = False
    #: The tuned build (relax executable), for callers that time it beside other builds.
    executable: Any = field(default=None, repr=False)

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
            "default_latency_s": self.default_latency,
            "kept_default": self.kept_default,
        }


def time_vm(vm: Any, dev: Any, args: list[Any], repeat: int = 5) -> float:
    """Median seconds of one call of the VM's `main` (TVM's own timer, at least 20 ms a repeat)."""
    ev = vm.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=20)
    return float(np.median(ev(*args).results))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Third-party deprecation noise (torch.export, transformers) kept off the user's screen."""
    with warnings.catch_warnings():
        for cat in (FutureWarning, DeprecationWarning, UserWarning):
            warnings.simplefilter("ignore", cat)
        yield


def reference_outputs(source: Any, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The original model's outputs: PyTorch for an `nn.Module`, ONNX's reference evaluator for an
    ONNX model."""
    if hasattr(source, "graph"):
        from onnx.reference import ReferenceEvaluator

        names = [i.name for i in source.graph.input if i.name not in {t.name for t in source.graph.initializer}]
        try:
            return flatten_outputs(list(ReferenceEvaluator(source).run(None, dict(zip(names, arrays)))))
        except Exception as exc:
            raise InputError(f"the ONNX model cannot run on the given inputs: {one_line(exc)}") from None
    import torch

    try:
        with torch.no_grad():
            return flatten_outputs(source(*[torch.from_numpy(a) for a in arrays]))
    except Exception as exc:
        raise InputError(f"the model cannot run on the given inputs: {type(exc).__name__}: {one_line(exc)}") from None


def torch_timing(
    spec: str, specs: Sequence[InputSpec], *, device: str = "cpu", seed: int = 0, compiled: bool = False
) -> dict[str, Any]:
    """PyTorch's latency of the model in a fresh process (`{"latency": s, "compile_s": s}`): eager
    on the CPU the faster of the default thread count and one thread; `compiled`: `torch.compile`
    (inductor) with the default threads, its compile time measured; with `device="cuda"` on GPU 0,
    latency None without a CUDA PyTorch (a GPU network is never compared with PyTorch's CPU time).
    Latency None for an ONNX file (no PyTorch model).

    Why a fresh process: see `autosearch.reference.run_isolated`."""
    from autosearch.reference import check_torch_device, run_isolated

    if spec.endswith(".onnx"):
        return {"latency": None, "compile_s": None}
    check_torch_device(device)
    code = (
        "import json, time, warnings, torch\n"
        "warnings.simplefilter('ignore')\n"
        "from autosearch.networks.graph import load_source\n"
        "from autosearch.networks.inputs import InputSpec, example_arrays\n"
        "from autosearch.reference import time_callable\n"
        f"specs = [InputSpec.from_json(d) for d in json.loads({json.dumps([s.to_json() for s in specs])!r})]\n"
        f"net = load_source({spec!r})\n"
        f"xs = [torch.from_numpy(a) for a in example_arrays(specs, {seed})]\n"
        "best, compile_s, sync = None, None, None\n"
        f"if {device!r} == 'cuda':\n"
        "    if not torch.cuda.is_available():\n"
        "        print(json.dumps({'latency': None, 'compile_s': None})); raise SystemExit\n"
        "    net, xs, sync = net.to('cuda'), [x.to('cuda') for x in xs], torch.cuda.synchronize\n"
        "with torch.no_grad():\n"
        f"    if {compiled!r}:\n"
        "        t0 = time.perf_counter(); net = torch.compile(net); net(*xs); compile_s = time.perf_counter() - t0\n"
        f"    threads = [torch.get_num_threads()] + ([1] if {device!r} == 'cpu' and not {compiled!r} else [])\n"
        "    for t in dict.fromkeys(threads):\n"
        "        torch.set_num_threads(t)\n"
        "        lat = time_callable(lambda: net(*xs), sync=sync)\n"
        "        best = lat if best is None else min(best, lat)\n"
        "print(json.dumps({'latency': best, 'compile_s': compile_s}))\n"
    )
    out = run_isolated(code, timeout=1800.0)
    return out if isinstance(out, dict) else {"latency": None, "compile_s": None}


def torch_latency_isolated(spec: str, specs: Sequence[InputSpec], device: str = "cpu", seed: int = 0) -> float | None:
    """PyTorch eager seconds of the model in a fresh process (`torch_timing`), or None."""
    lat = torch_timing(spec, specs, device=device, seed=seed).get("latency")
    return float(lat) if isinstance(lat, (int, float)) else None


class _Progress:
    """A bar over the network's tasks with the time left; on a terminal a live rich bar, elsewhere
    (a pipe, `--json`) a plain line on stderr at most every 15 s, so a long run is never silent."""

    def __init__(self, console: Any, enabled: bool, deadline: float | None) -> None:
        self.console, self.enabled, self.deadline = console, enabled, deadline
        self.live = enabled and bool(getattr(console, "is_terminal", False))
        self._bar: Any = None
        self._task: Any = None
        self._last = 0.0

    def __enter__(self) -> _Progress:
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("[bold]tune-model[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[left]}"),
                console=self.console,
                transient=False,
            )
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def left(self) -> str:
        if self.deadline is None:
            return ""
        s = max(0, int(self.deadline - time.perf_counter()))
        return f"{s // 60}:{s % 60:02d} left"

    def stage(self, name: str, total: int) -> None:
        if self._bar is not None:
            self._task = self._bar.add_task(name, total=total, left=self.left())
        elif self.enabled:
            self.console.print(f"tune-model: {name} ({total}) {self.left()}", highlight=False)
            self._last = time.perf_counter()

    def update(self, done: int, total: int, what: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done, description=what[:70], left=self.left())
        elif self.enabled and (time.perf_counter() - self._last >= 15 or done == total):
            self._last = time.perf_counter()
            self.console.print(f"tune-model: {what} {done}/{total} {self.left()}", highlight=False)


def _commit(database: Any, workload: Any, trace: str, latency: float, target: Any) -> None:
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace

    sch = Schedule(workload.mod())
    Trace.apply_json_to_schedule(json.loads(trace), sch)
    rec = database.commit_workload(workload.mod())
    args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
    database.commit_tuning_record(ms.database.TuningRecord(sch.trace, rec, [latency], target, args))


#: Seconds the prior pass takes a task, reserved at the end of a budget for each task the measured
#: rounds have not reached (3.0-3.8 s a task on ResNet-50 and MobileNetV2, AMD Zen 5, 2 cores).
PRIOR_SECONDS_PER_TASK = 4.0


def prior_seconds_per_task(target: Any) -> float:
    """What the rounds leave at the end of a budget for each task they have not reached: the prior
    pass's time on a CPU, nothing on a GPU (no prior pass there; reserving it had left a 2-minute
    ResNet-50 run on an H200 no round at all)."""
    from autosearch.backends.tvm.target import is_gpu

    return 0.0 if is_gpu(target) else PRIOR_SECONDS_PER_TASK


def _prior_pass(workloads: list[Any], target: Any, seed: int, bar: _Progress, todo: Sequence[int]) -> dict[int, str]:
    """The prior's schedule of each task in `todo` (where it has one); none on a GPU (the shipped
    prior knows CPU records only: an untuned GPU task gets TVM's default GPU schedule, dlight's)."""
    from autosearch.backends.tvm.target import is_gpu
    from autosearch.networks.prior import PriorRanker, prior_schedule

    if is_gpu(target) or not todo:
        return {}
    ranker = PriorRanker(target)
    traces: dict[int, str] = {}
    bar.stage("prior schedules", len(todo))
    for k, i in enumerate(todo):
        with interrupts.deferred():
            trace = prior_schedule(workloads[i], target, ranker, seed)
        if trace is not None:
            traces[i] = trace
        bar.update(k + 1, len(todo), f"prior {workloads[i].name}")
    return traces


def _tune(
    result: NetworkResult,
    graph: Any,
    target: Any,
    model: Callable[[], Any],
    settings: Any,
    store: Any,
    evaluator: Any,
    console: Any,
    deadline: float | None,
    cap: int | None,
    bar: _Progress,
    rpc: tuple[str, int, str] | None = None,
    reserve: float = 0.0,
) -> dict[int, tuple[Any, Any]]:
    """Measured rounds until the trials or the minutes are spent, leaving `reserve` seconds for each
    task no round has reached (its prior pass, after the rounds); each task's run and TuneResult."""
    from autosearch.search.scheduler import TaskScheduler, task_kind
    from autosearch.search.tune import TuneRun

    runs: dict[int, Any] = {}
    failed: set[int] = set()

    def run_of(i: int) -> Any:
        """Task i's TuneRun, set up the first time the scheduler picks it (seconds each: a time
        budget spends them only on the tasks it reaches); None where it has nothing to tune."""
        if i not in runs and i not in failed:
            try:
                tm = model()
                result.model = tm.label
                runs[i] = TuneRun(
                    graph.workloads[i], target, tm, settings, store=store, evaluator=evaluator, console=console, rpc=rpc
                )
            except WorkloadError as exc:
                result.tasks[i]["note"] = str(exc)
                failed.add(i)
                return None
            if store is not None:
                result.tasks[i]["warm_started_from"] = runs[i].warm_start(store)
        return runs.get(i)

    n = len(graph.workloads)
    sched = TaskScheduler(
        [float(t["weight"]) for t in result.tasks],
        flops=[wl.flops for wl in graph.workloads],
        kinds=[task_kind(t["name"]) for t in result.tasks],
        seed=settings.seed,
    )
    bar.stage("tasks measured", n)
    try:
        # the tasks no round reaches are built with the prior's schedule, computed after the rounds
        while deadline is None or time.perf_counter() < deadline - reserve * (n - len(runs) - len(failed)):
            if cap is not None and result.trials >= cap:
                break
            j = sched.pick()
            if j is None:
                break
            run = run_of(j)
            if run is None:
                sched.record(j, 0, None, done=True)
                continue
            before = run.result.trials
            advanced = run.step()
            k = run.result.trials - before
            result.trials += k
            sched.record(j, k, run.result.best_latency, done=not advanced)
            bar.update(len(runs), n, f"{result.trials} trials | {run.workload.name[4:40]}")
    except BaseException as exc:
        if not interrupts.handled(exc):
            raise
        result.interrupted = True
    done: dict[int, tuple[Any, Any]] = {}
    for i, run in runs.items():  # a Ctrl-C while a task's untuned schedule is timed stops it and the network
        done[i] = (run, run.finish(baseline=not result.interrupted and run.result.trials > 0, reference=False))
        result.interrupted = result.interrupted or done[i][1].interrupted
    return done


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


def _choose(
    info: dict[str, Any], workload: Any, r: Any, prior: str | None, database: Any, target: Any, store: Any = None
) -> None:
    """Build a task with the fastest of its measured schedules that computes what the task computes
    (`verify.schedule_matches`), or TVM's default where that measured faster; with the prior's
    (checked when it was chosen) where the task had no measured round. Why not only the best:
    most of the fast schedules of MobileNetV2's convolutions fused with a padded output compute
    something else (the fastest right one was the 20th of 32), and TVM's default there is 64x slower."""
    from autosearch.networks.verify import schedule_matches

    if r is not None:
        _record_run(info, r)
    options: list[tuple[float, str, str | None]] = []
    if r is not None and r.best_trace is not None and r.best_latency is not None:
        options.append((r.best_latency, "tuned", r.best_trace))
        if store is not None:
            rows = _ranked_in_store(store, workload, target)
            options += [(row.median, "tuned", row.schedule) for row in rows if row.schedule != r.best_trace]
        if r.untuned_latency is not None:
            options.append((r.untuned_latency, "untuned (measured faster)", None))
    elif prior is not None:
        options.append((1.0, "prior", prior))  # the one record of its workload: its latency is moot
    refused = 0
    for latency, how, trace in sorted(options, key=lambda o: o[0]):
        if trace is not None and trace != prior and not schedule_matches(workload, trace, target):
            refused += 1
            info["refused"] = f"{refused} faster {how} schedule(s) compute a different result"
            continue
        if trace is None and refused:
            how = "untuned"  # not measured faster: every faster schedule was refused
        info["built_with"] = how
        if trace is not None:
            _commit(database, workload, trace, latency, target)
        return


def tune_network(
    spec: str,
    specs: Sequence[InputSpec],
    target: Any,
    model: Callable[[], Any],
    settings: Any = None,
    *,
    trials: int | None = None,
    minutes: float | None = None,
    store: Any = None,
    evaluator: Any = None,
    console: Any = None,
    progress: bool = True,
    fast_math: bool = True,
    time_torch: bool = True,
    out_dir: str | None = None,
    seed: int = 0,
    rpc: tuple[str, int, str] | None = None,
    blocked: bool = True,
) -> NetworkResult:
    """Import, prior schedules, tune under `trials` and/or `minutes` (both None or 0: the prior
    alone), build, check, time and (with `out_dir`) export; see the module doc. With `rpc=(host,
    port, key)` the measurements go to the tracker's devices (as many at once as it holds); the
    network is still built, checked and timed here. `blocked=False`: convolutions in the layout
    they were imported in (`graph.import_network`; what bench/network.py compares against)."""
    from rich.console import Console

    from autosearch.backends.tvm.target import use_physical_cores
    from autosearch.networks.artifact import export_artifact
    from autosearch.networks.graph import import_network, load_source
    from autosearch.search.tune import TuneSettings, check_out_dir

    if out_dir is not None:
        check_out_dir(out_dir)
    if trials is not None and trials < 0:
        raise InputError(f"--trials must be >= 0, got {trials}")
    if minutes is not None and minutes < 0:
        raise InputError(f"--budget-minutes must be >= 0, got {minutes}")
    use_physical_cores()  # the network is timed in this process: every core, not TVM's half
    t_start = time.perf_counter()
    deadline = t_start + 60.0 * minutes if minutes else None
    console = console or Console(stderr=True)
    result = NetworkResult(spec=spec, model="", inputs=list(specs))
    arrays = example_arrays(specs, seed)
    with _quiet():
        source = load_source(spec)
        expected = reference_outputs(source, arrays)
        t0 = time.perf_counter()
        graph = import_network(spec, source, specs, arrays, target, fast_math=fast_math, blocked=blocked)
    result.breakdown["import"] = time.perf_counter() - t0
    specs = [s.indexing(graph.index_bounds.get(s.name)) for s in specs]  # the artifact refuses ids past a table
    result.inputs = list(specs)
    result.tasks = [
        {"name": wl.name, "weight": int(t.weight), "trials": 0, "best_latency_s": None, "built_with": "untuned"}
        for t, wl in zip(graph.tasks, graph.workloads)
    ]
    from tvm.s_tir import meta_schedule as ms

    database = ms.database.MemoryDatabase()
    budget = bool(trials) or (trials is None and bool(minutes))
    finished: dict[int, tuple[Any, Any]] = {}
    priors: dict[int, str] = {}
    reserve = prior_seconds_per_task(target)
    # a budget shorter than the prior pass's reserve for every task would measure nothing and leave
    # the time the pass does not use idle: then the prior pass runs first and the rounds get the rest
    prior_first = deadline is not None and deadline - time.perf_counter() <= reserve * len(graph.workloads)
    with _Progress(console, progress, deadline) as bar:

        def prior_pass(todo: Sequence[int]) -> None:
            t0 = time.perf_counter()
            try:
                priors.update(_prior_pass(graph.workloads, target, seed, bar, todo))
            except BaseException as exc:
                if not interrupts.handled(exc):
                    raise
                result.interrupted = True
            result.breakdown["prior"] = result.breakdown.get("prior", 0.0) + time.perf_counter() - t0

        if prior_first:  # not for a task an earlier run measured: it is built from the store (below)
            stored = {i for i, wl in enumerate(graph.workloads) if store and _ranked_in_store(store, wl, target)}
            prior_pass([i for i in range(len(graph.workloads)) if i not in stored])
        if budget and not result.interrupted:
            run_settings = dataclasses.replace(
                settings or TuneSettings(), trials=trials or _UNBOUNDED, fixed_spaces=True, seed=seed
            )
            t0 = time.perf_counter()
            finished = _tune(
                result,
                graph,
                target,
                model,
                run_settings,
                store,
                evaluator or network_evaluator(target),
                console,
                deadline,
                trials,
                bar,
                rpc,
                0.0 if prior_first else reserve,
            )
            result.breakdown["tune"] = time.perf_counter() - t0
        if result.interrupted:
            return _stopped(result, finished, t_start)
        earlier: set[int] = set()  # tasks this run did not reach, built with an earlier run's best
        for i, (trace, latency) in (_stored_bests(store, graph.workloads, target, finished) if store else {}).items():
            _commit(database, graph.workloads[i], trace, latency, target)
            result.tasks[i].update(built_with="tuned (earlier run)", best_latency_s=latency)
            earlier.add(i)
        done = set(finished) | earlier | set(priors)  # the prior for the tasks left (all of them at 0 trials)
        prior_pass([i for i in range(len(graph.workloads)) if i not in done])
        if result.interrupted:
            return _stopped(result, finished, t_start)
    for i, wl in enumerate(graph.workloads):
        if i not in earlier:
            _choose(result.tasks[i], wl, finished.get(i, (None, None))[1], priors.get(i), database, target, store)
    t0 = time.perf_counter()
    result.fast_math = fast_math
    _build_and_check(result, graph, database, target, arrays, expected)
    if fast_math and not result.correct and not result.interrupted:
        # the approximations moved the output past the tolerance: the exact functions, same schedules
        with _quiet():
            graph = import_network(spec, source, specs, arrays, target, fast_math=False, blocked=blocked)
        result.fast_math, result.fast_math_fell_back = False, True
        _build_and_check(result, graph, database, target, arrays, expected)
    _time(result, graph, target, arrays, expected, spec, time_torch, seed)
    result.breakdown["build_and_time"] = time.perf_counter() - t0
    if out_dir is not None and result.executable is not None:
        result.artifact = str(export_artifact(result.executable, out_dir, specs, target, result.summary()))
    result.seconds = time.perf_counter() - t_start
    return result


def _stopped(result: NetworkResult, finished: dict[int, tuple[Any, Any]], t_start: float) -> NetworkResult:
    """An interrupted run ends here, unbuilt: checking, building and timing the network took 18-51 s
    after a Ctrl-C (measured on a BERT layer), and everything measured is already in the store, where
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

    dev, args = _on_device(target, arrays)
    ex = result.executable = build_network(graph, database, target)
    result.check = compare_outputs(flatten_outputs(relax.VirtualMachine(ex, dev)["main"](*args)), expected)


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
        result.tuned_latency = time_vm(relax.VirtualMachine(result.executable, dev), dev, args)
    device = torch_device(target) if time_torch else None
    if device:
        result.torch_latency = torch_latency_isolated(spec, result.inputs, device=device, seed=seed)


#: Interleaved timings of each build in `_keep_the_faster_build` (the median is compared).
DEFAULT_GUARD_ROUNDS = 5


def _keep_the_faster_build(
    result: NetworkResult, graph: Any, target: Any, dev: Any, args: list[Any], expected: list[np.ndarray]
) -> None:
    """On a GPU TVM's default schedules (dlight) are a real build, and a network of tasks each
    measured faster than their default can still run slower end to end (a BERT layer on an H100
    after 96 trials: 0.485 ms tuned, 0.442 ms default): the two builds are timed interleaved and the
    faster is kept, so a tuned network is never slower than TVM's default. Not on a CPU, where the
    default is unscheduled loops (seconds a call) and each task already fell back where it measured
    faster."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from autosearch.networks.graph import build_network

    default = build_network(graph, ms.database.MemoryDatabase(), target)
    vms = {"tuned": relax.VirtualMachine(result.executable, dev), "default": relax.VirtualMachine(default, dev)}
    times: dict[str, list[float]] = {k: [] for k in vms}
    for _ in range(DEFAULT_GUARD_ROUNDS):
        for k, vm in vms.items():
            times[k].append(time_vm(vm, dev, args, repeat=3))
    result.tuned_latency, result.default_latency = (float(np.median(times[k])) for k in ("tuned", "default"))
    if result.default_latency < result.tuned_latency:
        check = compare_outputs(flatten_outputs(vms["default"]["main"](*args)), expected)
        if check.ok:
            result.executable, result.check, result.kept_default = default, check, True
            result.tuned_latency = result.default_latency
            for task in result.tasks:
                task["built_with"] = "default (the network's default build ran faster)"
