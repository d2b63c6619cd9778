"""`autosearch tune-model`: tune a whole PyTorch network's tasks under one measurement budget.

Pipeline (each step as measured to work with TVM 0.27):
1. `torch.export.export(model, inputs)` -> `tvm.relax.frontend.torch.from_exported_program`
   (parameters kept as inputs, then detached); with `--fast-math`, `fast_math_module`.
2. Tasks: `extract_tasks` only finds them after BindParams + LegalizeOps + AnnotateTIROpPattern
   + FoldConstant + FuseOps + FuseTIR, so those passes run first.
3. Budget: one `TuneRun` per task, stepped a round at a time; `search.scheduler.TaskScheduler`
   gives every task one round, then each next round to the task whose best latency x weight is
   falling fastest per trial (Ansor's gradient rule). With a store, every task first takes the
   store's best schedules of its workload (a second run starts where the first ended). Every
   measurement goes to the store.
4. Build: the best record of every task goes into a MetaSchedule database; `compile_relax` gets
   the *original* module and the parameters (it runs the same preparation itself).
5. Check the output against PyTorch, then time tuned, untuned (empty database) and PyTorch eager.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosearch import interrupts
from autosearch.errors import InputError, WorkloadError, one_line
from autosearch.search.model_spec import TuneModel

__all__ = [
    "NetworkResult",
    "fast_math_module",
    "import_network",
    "import_torch_model",
    "parse_shapes",
    "prepared_module",
    "time_vm",
    "torch_latency_isolated",
    "tune_network",
]


def parse_shapes(items: Sequence[str]) -> list[tuple[int, ...]]:
    """`["1,3,224,224", "1x16"]` -> [(1, 3, 224, 224), (1, 16)]."""
    shapes = []
    for item in items:
        parts = [p for p in item.replace("x", ",").split(",") if p.strip()]
        try:
            shape = tuple(int(p) for p in parts)
        except ValueError:
            raise InputError(f"--input-shape must be integers separated by commas, got {item!r}") from None
        if not shape or any(d < 1 for d in shape):
            raise InputError(f"--input-shape must have positive dimensions, got {item!r}")
        shapes.append(shape)
    if not shapes:
        raise InputError("give at least one --input-shape")
    return shapes


def import_torch_model(spec: str, shapes: Sequence[tuple[int, ...]]) -> tuple[Any, list[Any]]:
    """(nn.Module in eval mode, example inputs) from `file.py:make_model`."""
    import torch

    from autosearch.workloads.module import load_module_object

    obj, _ = load_module_object(spec)
    if not isinstance(obj, torch.nn.Module):
        raise InputError(f"{spec} returned {type(obj).__name__}, not a torch.nn.Module")
    g = torch.Generator().manual_seed(0)
    inputs = [torch.rand(*s, generator=g) for s in shapes]
    return obj.eval(), inputs


@dataclass
class NetworkResult:
    spec: str
    model: str
    tasks: list[dict[str, Any]] = field(default_factory=list)
    trials: int = 0
    tuned_latency: float | None = None
    untuned_latency: float | None = None
    torch_latency: float | None = None
    max_abs_err: float = float("nan")
    correct: bool = False
    interrupted: bool = False
    seconds: float = 0.0
    breakdown: dict[str, float] = field(default_factory=dict)
    #: The tuned build (relax executable), for callers that time it beside other builds.
    executable: Any = field(default=None, repr=False)

    def summary(self) -> dict[str, Any]:
        return {
            "model_file": self.spec,
            "cost_model": self.model,
            "tasks": self.tasks,
            "trials_measured": self.trials,
            "tuned_latency_s": self.tuned_latency,
            "untuned_latency_s": self.untuned_latency,
            "pytorch_latency_s": self.torch_latency,
            "max_abs_err": self.max_abs_err,
            "output_matches": self.correct,
            "interrupted": self.interrupted,
            "seconds": self.seconds,
            "time_breakdown": self.breakdown,
        }


def time_vm(vm: Any, dev: Any, args: list[Any]) -> float:
    ev = vm.time_evaluator("main", dev, number=1, repeat=5, min_repeat_ms=20)
    return float(np.median(ev(*args).results))


def torch_latency_isolated(spec: str, shapes: Sequence[tuple[int, ...]], device: str = "cpu") -> float | None:
    """PyTorch eager latency of the model in a fresh process: on the CPU the faster of the default
    thread count and one thread; with `device="cuda"` on GPU 0, or None without a CUDA PyTorch (a
    GPU network is never compared with PyTorch's CPU time).

    Why a fresh process: see `autosearch.reference.run_isolated`.
    """
    from autosearch.reference import check_torch_device, run_isolated

    check_torch_device(device)
    code = (
        "import json, torch\n"
        "from autosearch.search.network import import_torch_model\n"
        "from autosearch.reference import time_callable\n"
        f"net, inputs = import_torch_model({spec!r}, {[tuple(s) for s in shapes]!r})\n"
        "best = None\n"
        f"if {device!r} == 'cuda' and torch.cuda.is_available():\n"
        "    net, inputs = net.to('cuda'), [x.to('cuda') for x in inputs]\n"
        "    best = time_callable(lambda: net(*inputs), sync=torch.cuda.synchronize)\n"
        f"elif {device!r} == 'cpu':\n"
        "    for t in dict.fromkeys([torch.get_num_threads(), 1]):\n"
        "        torch.set_num_threads(t)\n"
        "        lat = time_callable(lambda: net(*inputs))\n"
        "        best = lat if best is None else min(best, lat)\n"
        "print(json.dumps(best))\n"
    )
    out = run_isolated(code)
    return float(out) if isinstance(out, (int, float)) else None


def _first_output(out: Any) -> np.ndarray:
    while isinstance(out, (list, tuple)) or (hasattr(out, "__len__") and not hasattr(out, "numpy")):
        out = out[0]
    return out.numpy()


def tune_network(
    spec: str,
    shapes: Sequence[tuple[int, ...]],
    target: Any,
    model: Callable[[], TuneModel],
    settings: Any = None,
    *,
    store: Any = None,
    evaluator: Any = None,
    console: Any = None,
    progress: bool = True,
    warm_start: bool = True,
    fast_math: bool = False,
) -> NetworkResult:
    """Import, extract tasks, tune them under one budget, build, check and time; see module doc."""
    import torch
    from rich.console import Console

    from autosearch.backends.tvm.target import use_physical_cores
    from autosearch.search.tune import TuneSettings

    use_physical_cores()  # the network is timed in this process: every core, not TVM's half
    t_start = time.perf_counter()
    settings = settings or TuneSettings(trials=128)
    settings.validate()
    console = console or Console(stderr=True)
    net, inputs = import_torch_model(spec, shapes)
    result = NetworkResult(spec=spec, model="")
    with torch.no_grad():
        expected = net(*inputs)
    expected_np = (expected[0] if isinstance(expected, (tuple, list)) else expected).detach().numpy()
    t0 = time.perf_counter()
    mod, params_main, tasks, workloads = import_network(spec, net, inputs, target, fast_math=fast_math)
    result.breakdown["import"] = time.perf_counter() - t0
    t_tune = time.perf_counter()
    database = _tune_tasks(
        result, tasks, workloads, target, model, settings, store, evaluator, console, progress, warm_start
    )
    result.breakdown["tune_total"] = time.perf_counter() - t_tune
    # Each task's run spans the whole interleaved loop, so its "other" is mostly the other tasks'
    # time: the network's "other" is what the task sections leave of the tuning's wall time.
    inside = sum(v for k, v in result.breakdown.items() if k not in ("import", "tune_total", "other"))
    result.breakdown["other"] = max(0.0, result.breakdown["tune_total"] - inside)
    t0 = time.perf_counter()
    _build_check_time(result, database, mod, params_main, target, inputs, expected_np, spec, shapes)
    result.breakdown["build_and_time"] = time.perf_counter() - t0
    result.seconds = time.perf_counter() - t_start
    return result


def prepared_module(mod: Any, params_main: dict[str, Any]) -> Any:
    """The module as `compile_relax` lowers it: parameters bound, ops legalized and fused into TIR.
    MetaSchedule's `extract_tasks` (ours and `tune_relax`'s) finds tasks only in this form."""
    import tvm
    from tvm import relax

    return tvm.transform.Sequential(
        [
            relax.transform.BindParams("main", params_main),
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )(mod)


def fast_math_module(mod: Any) -> Any:
    """`--fast-math`: GELU, `erf`, `exp`, `tanh` and softmax as TVM's polynomial approximations
    (`topi.fast_erf`, `fast_exp`, `fast_tanh`, `fast_softmax`), the rewrite of TVM's own
    `FastMathTransform`, which misses GELU: the PyTorch frontend emits `relax.nn.gelu`, whose
    legalization calls the exact `erf` (`relax.nn.gelu_tanh`: `tanh`), so GELU is rewritten here
    first (float32 only).

    Why: the exact `erf` is 60x slower than the polynomial here: a BERT FFN's GELU
    (1x128x3072) took 10.3 ms in its one scheduled form, 0.17 ms with `fast_erf` (largest
    difference 7.2e-7; bench/README.md "`tune-model --fast-math`")."""
    from tvm import relax, tirx, topi
    from tvm.relax import expr_functor

    def gelu(x: Any) -> Any:
        erf = topi.fast_erf(x * tirx.const(0.5**0.5, x.dtype))
        return x * (tirx.const(0.5, x.dtype) + erf * tirx.const(0.5, x.dtype))

    def gelu_tanh(x: Any) -> Any:
        c = tirx.const(math.sqrt(2.0 / math.pi), x.dtype)
        inner = topi.fast_tanh(c * x * (tirx.const(1.0, x.dtype) + tirx.const(0.044715, x.dtype) * x * x))
        return tirx.const(0.5, x.dtype) * x * (tirx.const(1.0, x.dtype) + inner)

    rewrites = {"relax.nn.gelu": gelu, "relax.nn.gelu_tanh": gelu_tanh}

    @expr_functor.mutator
    class FastGelu(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            fn = rewrites.get(str(getattr(call.op, "name", "")))
            if fn is not None and getattr(getattr(call.args[0], "ty", None), "dtype", None) == "float32":
                return self.builder_.call_te(fn, call.args[0], primfunc_name_hint="fast_gelu")
            return super().visit_call_(call)

    rewriter = FastGelu(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return relax.transform.FastMathTransform()(rewriter.builder_.get())


def import_network(
    spec: str, net: Any, inputs: list[Any], target: Any, *, fast_math: bool = False
) -> tuple[Any, dict[str, Any], list[Any], list[Any]]:
    """(Relax module, parameters, MetaSchedule tasks, one workload per task) of a torch model;
    `fast_math`: with `fast_math_module` applied (tasks, build and check all see the same module)."""
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks

    from autosearch.workloads.module import ModuleWorkload

    try:
        ep = torch.export.export(net, tuple(inputs))
        mod = from_exported_program(ep, keep_params_as_input=True)
    except Exception as exc:
        raise InputError(f"cannot import {spec} into TVM Relax: {type(exc).__name__}: {one_line(exc)}") from None
    mod, params = relax.frontend.detach_params(mod)
    if fast_math:
        mod = fast_math_module(mod)
    values = list(params.get("main", [])) if params else []
    fparams = list(mod["main"].params)
    n_in = len(fparams) - len(values)
    params_main = {str(getattr(p, "name_hint", None) or p.name): v for p, v in zip(fparams[n_in:], values)}
    tasks = list(extract_tasks(prepared_module(mod, params_main), target))
    if not tasks:
        raise WorkloadError(f"{spec}: TVM found no tunable operator in the model")
    workloads = [
        ModuleWorkload(
            name=f"net/{t.task_name}",
            ir_module=t.dispatched[0],
            source=spec,
            family="network",
            params={"task": t.task_name, "weight": int(t.weight)},
        )
        for t in tasks
    ]
    return mod, params_main, tasks, workloads


def _tune_tasks(
    result: NetworkResult,
    tasks: list[Any],
    workloads: list[Any],
    target: Any,
    model: Callable[[], TuneModel],
    settings: Any,
    store: Any,
    evaluator: Any,
    console: Any,
    progress: bool,
    warm_start: bool,
) -> Any:
    """Share `settings.trials` over the tasks, a round at a time (TaskScheduler); returns the
    MetaSchedule database holding every task's best schedule for the build."""
    from tvm.s_tir import meta_schedule as ms

    runs, infos = _start_runs(result, tasks, workloads, target, model, settings, store, evaluator, console, warm_start)
    try:
        _schedule_rounds(result, runs, infos, settings, console, progress)
    except BaseException as exc:
        if not interrupts.handled(exc):
            raise
        result.interrupted = True
    database = ms.database.MemoryDatabase()
    for run, info in zip(runs, infos):
        r = run.finish(baseline=not result.interrupted, reference=False)
        info.update(trials=r.trials, best_latency_s=r.best_latency, untuned_latency_s=r.untuned_latency)
        for k, v in r.breakdown["seconds"].items():
            if k != "other":
                result.breakdown[k] = result.breakdown.get(k, 0.0) + v
        if r.best_trace is None:
            continue
        if r.best_latency is not None and r.untuned_latency is not None and r.untuned_latency < r.best_latency:
            # TVM's default schedule measured faster (e.g. a small reduction that parallel loops only
            # slow down): the build keeps it rather than the best tuned one.
            info["kept_default"] = True
            continue
        _commit_best(database, run.workload, r, target)
    return database


def _start_runs(
    result: NetworkResult,
    tasks: list[Any],
    workloads: list[Any],
    target: Any,
    model: Callable[[], TuneModel],
    settings: Any,
    store: Any,
    evaluator: Any,
    console: Any,
    warm_start: bool,
) -> tuple[list[Any], list[dict[str, Any]]]:
    """One TuneRun per task. A task with nothing to decide still has its one scheduled form (the
    design-space rules parallelise and vectorise it) measured, as MetaSchedule does: 1 trial."""
    import dataclasses

    from autosearch.search.tune import TuneRun

    settings = dataclasses.replace(settings, fixed_spaces=True)
    runs: list[Any] = []
    infos: list[dict[str, Any]] = []
    for t, wl in zip(tasks, workloads):
        info: dict[str, Any] = {"name": wl.name, "weight": int(t.weight), "trials": 0, "best_latency_s": None}
        result.tasks.append(info)
        try:
            task_model = model()
            result.model = task_model.label
            run = TuneRun(wl, target, task_model, settings, store=store, evaluator=evaluator, console=console)
        except WorkloadError as exc:
            info["note"] = str(exc)
            continue
        if warm_start and store is not None:
            info["warm_started_from"] = run.warm_start(store)
        runs.append(run)
        infos.append(info)
    return runs, infos


def _schedule_rounds(
    result: NetworkResult,
    runs: list[Any],
    infos: list[dict[str, Any]],
    settings: Any,
    console: Any,
    progress: bool,
) -> None:
    """Step the task the scheduler picks until the network's budget is spent."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from autosearch.search.scheduler import TaskScheduler, task_kind

    sched = TaskScheduler(
        [float(i["weight"]) for i in infos],
        flops=[r.workload.flops for r in runs],
        kinds=[task_kind(i["name"]) for i in infos],
        seed=settings.seed,
    )
    columns = [
        TextColumn("[bold]tune-model[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, console=console, disable=not progress, transient=False) as bar:
        task = bar.add_task(f"{len(runs)} tasks", total=settings.trials)
        while result.trials < settings.trials:
            i = sched.pick()
            if i is None:
                break
            before = runs[i].result.trials
            advanced = runs[i].step()
            n = runs[i].result.trials - before
            result.trials += n
            sched.record(i, n, runs[i].result.best_latency, done=not advanced)
            best = runs[i].result.best_latency or 0.0
            bar.update(
                task,
                completed=result.trials,
                description=f"{len(runs)} tasks | {infos[i]['name'][:40]} best {best:.2e}s",
            )


def _commit_best(database: Any, wl: Any, r: Any, target: Any) -> None:
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace

    sch = Schedule(wl.mod())
    Trace.apply_json_to_schedule(json.loads(r.best_trace), sch)
    rec_wl = database.commit_workload(wl.mod())
    args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
    database.commit_tuning_record(ms.database.TuningRecord(sch.trace, rec_wl, [r.best_latency], target, args))


def _build_check_time(
    result: NetworkResult,
    database: Any,
    mod: Any,
    params_main: dict[str, Any],
    target: Any,
    inputs: list[Any],
    expected_np: np.ndarray,
    spec: str,
    shapes: Sequence[tuple[int, ...]],
) -> None:
    """Compile with the tuned database, check the output against PyTorch, time tuned/untuned/PyTorch."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.relax_integration import compile_relax

    dev = tvm.cpu() if target.kind.name == "llvm" else tvm.device(target.kind.name)
    args = [tvm.runtime.tensor(x.numpy(), dev) for x in inputs]
    ex_tuned = result.executable = compile_relax(database, mod, target, params_main)
    vm = relax.VirtualMachine(ex_tuned, dev)
    got = _first_output(vm["main"](*args))
    result.max_abs_err = (
        float(np.max(np.abs(got.astype(np.float64) - expected_np.astype(np.float64)))) if got.size else 0.0
    )
    result.correct = bool(got.shape == expected_np.shape and np.allclose(got, expected_np, rtol=1e-4, atol=1e-4))
    result.tuned_latency = time_vm(vm, dev, args)
    ex_plain = compile_relax(ms.database.MemoryDatabase(), mod, target, params_main)
    result.untuned_latency = time_vm(relax.VirtualMachine(ex_plain, dev), dev, args)
    from autosearch.reference import torch_device

    device = torch_device(target)
    if device:
        result.torch_latency = torch_latency_isolated(spec, shapes, device=device)
