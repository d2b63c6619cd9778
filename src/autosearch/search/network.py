"""`autosearch tune-model`: tune a whole PyTorch network's tasks under one measurement budget.

Pipeline (each step as measured to work with TVM 0.27):
1. `torch.export.export(model, inputs)` -> `tvm.relax.frontend.torch.from_exported_program`
   (parameters kept as inputs, then detached).
2. Tasks: `extract_tasks` only finds them after BindParams + LegalizeOps + AnnotateTIROpPattern
   + FoldConstant + FuseOps + FuseTIR, so those passes run first.
3. Budget: the trial budget is cut into rounds; every task gets one round, the remaining rounds go
   to tasks in proportion to weight x FLOPs (the share of end-to-end time they are likely to
   hold). Each task is tuned by `autosearch.search.tune.tune` with the chosen cost model, and its
   measurements go to the store.
4. Build: the best record of every task goes into a MetaSchedule database; `compile_relax` gets
   the *original* module and the parameters (it runs the same preparation itself).
5. Check the output against PyTorch, then time tuned, untuned (empty database) and PyTorch eager.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosearch.errors import InputError, WorkloadError, one_line
from autosearch.search.model_spec import TuneModel

__all__ = ["NetworkResult", "import_torch_model", "parse_shapes", "split_budget", "tune_network"]


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


def split_budget(trials: int, per_round: int, costs: Sequence[float]) -> list[int]:
    """Trials per task: one round each (as far as the budget goes), the rest by cost share."""
    n_rounds = trials // per_round
    n = len(costs)
    if n == 0:
        return []
    rounds = [0] * n
    order = sorted(range(n), key=lambda i: -costs[i])
    for i in order[:n_rounds]:
        rounds[i] = 1
    left = n_rounds - sum(rounds)
    if left > 0:
        total = float(sum(costs)) or 1.0
        want = [left * c / total for c in costs]
        extra = [int(w) for w in want]
        rest = left - sum(extra)
        for i in sorted(range(n), key=lambda i: -(want[i] - extra[i]))[:rest]:
            extra[i] += 1
        rounds = [r + e for r, e in zip(rounds, extra)]
    return [r * per_round for r in rounds]


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

    def summary(self) -> dict[str, Any]:
        return {
            "model_file": self.spec, "cost_model": self.model, "tasks": self.tasks, "trials_measured": self.trials,
            "tuned_latency_s": self.tuned_latency, "untuned_latency_s": self.untuned_latency,
            "pytorch_latency_s": self.torch_latency, "max_abs_err": self.max_abs_err, "output_matches": self.correct,
            "interrupted": self.interrupted, "seconds": self.seconds, "time_breakdown": self.breakdown,
        }


def _time_vm(vm: Any, dev: Any, args: list[Any]) -> float:
    ev = vm.time_evaluator("main", dev, number=1, repeat=5, min_repeat_ms=20)
    return float(np.median(ev(*args).results))


def torch_latency_isolated(spec: str, shapes: Sequence[tuple[int, ...]]) -> float | None:
    """PyTorch eager latency of the model in a fresh process (faster of default / 1 thread).

    Why a fresh process: see `autosearch.search.reference.run_isolated`.
    """
    from autosearch.search.reference import run_isolated

    code = (
        "import json, torch\n"
        "from autosearch.search.network import import_torch_model, _time_torch\n"
        f"net, inputs = import_torch_model({spec!r}, {[tuple(s) for s in shapes]!r})\n"
        "best = None\n"
        "for t in dict.fromkeys([torch.get_num_threads(), 1]):\n"
        "    torch.set_num_threads(t)\n"
        "    lat = _time_torch(net, inputs)\n"
        "    best = lat if best is None else min(best, lat)\n"
        "print(json.dumps(best))\n"
    )
    out = run_isolated(code)
    return float(out) if isinstance(out, (int, float)) else None


def _time_torch(model: Any, inputs: list[Any], min_time: float = 0.2, repeat: int = 5) -> float:
    import torch

    with torch.no_grad():
        model(*inputs)
        t0 = time.perf_counter()
        model(*inputs)
        one = max(time.perf_counter() - t0, 1e-7)
        number = max(1, int(min_time / repeat / one))
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                model(*inputs)
            times.append((time.perf_counter() - t0) / number)
    return float(np.min(times))


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
) -> NetworkResult:
    """Import, extract tasks, tune them under one budget, build, check and time; see module doc."""
    import torch
    import tvm
    from rich.console import Console
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.relax_integration import compile_relax, extract_tasks
    from tvm.s_tir.schedule import Trace

    from autosearch.search.tune import TuneSettings, tune
    from autosearch.workloads.module import ModuleWorkload

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
    try:
        ep = torch.export.export(net, tuple(inputs))
        mod = from_exported_program(ep, keep_params_as_input=True)
    except Exception as exc:
        raise InputError(f"cannot import {spec} into TVM Relax: {type(exc).__name__}: {one_line(exc)}") from None
    mod, params = relax.frontend.detach_params(mod)
    values = list(params.get("main", [])) if params else []
    fparams = list(mod["main"].params)
    n_in = len(fparams) - len(values)
    params_main = {str(getattr(p, "name_hint", None) or p.name): v for p, v in zip(fparams[n_in:], values)}
    prep = tvm.transform.Sequential([
        relax.transform.BindParams("main", params_main),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ])
    tasks = extract_tasks(prep(mod), target)
    if not tasks:
        raise WorkloadError(f"{spec}: TVM found no tunable operator in the model")
    result.breakdown["import"] = time.perf_counter() - t0

    workloads = []
    for t in tasks:
        m = t.dispatched[0]
        name = f"{t.task_name}"
        workloads.append(ModuleWorkload(name=f"net/{name}", ir_module=m, source=spec, family="network",
                                        params={"task": name, "weight": int(t.weight)}))
    costs = [float(t.weight) * float(w.flops or 1.0) for t, w in zip(tasks, workloads)]
    budget = split_budget(settings.trials, settings.trials_per_round, costs)
    database = ms.database.MemoryDatabase()
    t_tune = time.perf_counter()
    for t, wl, n in zip(tasks, workloads, budget):
        info: dict[str, Any] = {"name": wl.name, "weight": int(t.weight), "trials": 0, "best_latency_s": None}
        result.tasks.append(info)
        if n == 0 or result.interrupted:
            info["note"] = "no budget left: default schedule"
            continue
        s = TuneSettings(**{**settings.__dict__, "trials": n})
        try:
            task_model = model()
            result.model = task_model.label
            r = tune(wl, target, task_model, s, store=store, evaluator=evaluator, baseline=True, reference=False,
                     console=console, progress=progress)
        except WorkloadError as exc:
            info["note"] = str(exc)
            continue
        info.update(trials=r.trials, best_latency_s=r.best_latency, untuned_latency_s=r.untuned_latency)
        result.trials += r.trials
        for k, v in r.breakdown["seconds"].items():
            result.breakdown[k] = result.breakdown.get(k, 0.0) + v
        if r.interrupted:
            result.interrupted = True
        if r.best_trace is not None:
            sch = Schedule(wl.mod())
            Trace.apply_json_to_schedule(json.loads(r.best_trace), sch)
            rec_wl = database.commit_workload(wl.mod())
            args = ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
            database.commit_tuning_record(ms.database.TuningRecord(sch.trace, rec_wl, [r.best_latency], target, args))
    result.breakdown["tune_total"] = time.perf_counter() - t_tune

    t0 = time.perf_counter()
    dev = tvm.cpu() if target.kind.name == "llvm" else tvm.device(target.kind.name)
    args = [tvm.runtime.tensor(x.numpy(), dev) for x in inputs]
    ex_tuned = compile_relax(database, mod, target, params_main)
    vm = relax.VirtualMachine(ex_tuned, dev)
    got = _first_output(vm["main"](*args))
    result.max_abs_err = float(np.max(np.abs(got.astype(np.float64) - expected_np.astype(np.float64)))) if got.size else 0.0
    result.correct = bool(got.shape == expected_np.shape and np.allclose(got, expected_np, rtol=1e-4, atol=1e-4))
    result.tuned_latency = _time_vm(vm, dev, args)
    ex_plain = compile_relax(ms.database.MemoryDatabase(), mod, target, params_main)
    result.untuned_latency = _time_vm(relax.VirtualMachine(ex_plain, dev), dev, args)
    result.torch_latency = torch_latency_isolated(spec, shapes)
    result.breakdown["build_and_time"] = time.perf_counter() - t0
    result.seconds = time.perf_counter() - t_start
    return result
