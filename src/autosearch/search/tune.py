"""`autosearch tune`: find a fast schedule with few measurements, a cost model in the loop.

The loop is MetaSchedule's own, driven at the TuneContext level so that every stage can be timed
and every measured candidate reaches our store:

    EvolutionarySearch.generate_measure_candidates   (mutation + cost-model ranking, eps-greedy)
      -> build (fast_build) -> run (LocalRunner)     (real hardware)
      -> search.notify_runner_results + database.commit_tuning_record
      -> cost model update (adaptive)                (see adapter.py)
      -> store.add_measurements (records + PerStoreFeature)  one transaction per round

Ctrl-C ends the loop between (or inside) rounds: every completed round is already in the store,
and the result holds the best schedule found so far.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from autosearch.errors import AutosearchError, InputError, WorkloadError
from autosearch.formatting import format_seconds
from autosearch.search.breakdown import TimeBreakdown

__all__ = [
    "MODEL_CHOICES",
    "ModuleWorkload",
    "TuneResult",
    "TuneSettings",
    "load_module_object",
    "make_cost_model",
    "pretrained_dir",
    "resolve_tune_workload",
    "tune",
]

#: Named `--model` values (anything else must be a model directory).
MODEL_CHOICES = ("pretrained", "xgb", "mlp", "lgbm-rank", "tvm-xgb", "random")


# -- workloads -----------------------------------------------------------------------------------
def _estimate_flops(mod: Any) -> float | None:
    try:
        from tvm.s_tir.analysis import estimate_tir_flops

        v = float(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001 - TVM raises many error types
        return None
    return v if v > 0 else None


@dataclass
class ModuleWorkload:
    """A user's PrimFunc / IRModule (from `--module file.py:func`) behaving like a `Workload`."""

    name: str
    ir_module: Any
    source: str = ""
    family: str = "custom"
    params: dict[str, Any] = field(default_factory=dict)

    def mod(self) -> Any:
        return self.ir_module

    @property
    def key(self) -> str:
        import tvm_ffi

        return f"{int(tvm_ffi.structural_hash(self.ir_module['main'])) & 0xFFFF_FFFF_FFFF_FFFF:016x}"

    @property
    def flops(self) -> float | None:
        return _estimate_flops(self.ir_module)

    def record(self) -> Any:
        from autosearch.store import WorkloadRecord

        return WorkloadRecord(
            key=self.key, name=self.name, family=self.family, backend="tvm",
            params={"module": self.source, **self.params}, ir=self.ir_module.script(), flops=self.flops,
        )


def load_module_object(spec: str) -> tuple[Any, str]:
    """Call `file.py:func` (or import `pkg.module:func`) and return (its result, absolute spec)."""
    import importlib
    import importlib.util

    if ":" not in spec:
        raise InputError(f"--module must be FILE.py:FUNCTION, got {spec!r}")
    path, _, func = spec.rpartition(":")
    if not func.isidentifier():
        raise InputError(f"--module {spec!r}: {func!r} is not a function name")
    p = Path(path)
    if path.endswith(".py") or os.sep in path:
        if not p.is_file():
            raise InputError(f"module file {path} does not exist")
        name = f"_autosearch_user_{abs(hash(str(p.resolve()))):x}"
        try:
            sp = importlib.util.spec_from_file_location(name, p)
            if sp is None or sp.loader is None:
                raise InputError(f"cannot import {path} as a Python file")
            module = importlib.util.module_from_spec(sp)
            sp.loader.exec_module(module)
        except AutosearchError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the user's code may raise anything
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise InputError(f"importing {path} failed: {type(exc).__name__}: {_first_line(exc)}") from None
        full = f"{p.resolve()}:{func}"
    else:
        try:
            module = importlib.import_module(path)
        except Exception as exc:  # noqa: BLE001
            raise InputError(f"cannot import module {path}: {type(exc).__name__}: {_first_line(exc)}") from None
        full = spec
    fn = getattr(module, func, None)
    if fn is None:
        raise InputError(f"{path} has no attribute {func!r}")
    if not callable(fn):
        return fn, full
    try:
        return fn(), full
    except Exception as exc:  # noqa: BLE001 - the user's code may raise anything
        raise InputError(f"{spec} raised {type(exc).__name__}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else "(no message)"


def _as_irmodule(obj: Any, spec: str) -> Any:
    import tvm
    from tvm.tirx import PrimFunc

    if isinstance(obj, PrimFunc):
        return tvm.IRModule({"main": obj})
    if isinstance(obj, tvm.IRModule):
        funcs = [gv for gv, f in obj.functions.items() if isinstance(f, PrimFunc)]
        if len(funcs) != 1 or len(obj.functions) != 1:
            raise InputError(f"{spec} returned an IRModule with {len(obj.functions)} functions: give one PrimFunc")
        gv = funcs[0]
        return obj if gv.name_hint == "main" else tvm.IRModule({"main": obj[gv]})
    raise InputError(f"{spec} returned {type(obj).__name__}, not a TIR PrimFunc or IRModule")


def resolve_tune_workload(spec: str | None, module: str | None = None) -> Any:
    """A registry name, `random:SEED` / `random/SEED`, or a `--module file.py:func` workload."""
    from autosearch.workloads import get_workload

    if module is not None:
        obj, full = load_module_object(module)
        mod = _as_irmodule(obj, module)
        name = spec or f"custom/{Path(module.rpartition(':')[0]).stem}.{module.rpartition(':')[2]}"
        return ModuleWorkload(name=name, ir_module=mod, source=full)
    if not spec:
        raise InputError("name a workload (e.g. batch_matmul/1x128x128x128, random:3) or pass --module FILE.py:FUNC")
    m = re.fullmatch(r"random[:/](\d+)", spec.strip())
    if m:
        return get_workload(f"random/{m.group(1)}")
    return get_workload(spec)


# -- cost models ---------------------------------------------------------------------------------
def pretrained_dir() -> Path:
    """The model shipped as package data (`autosearch/pretrained/model`)."""
    return Path(__file__).resolve().parent.parent / "pretrained" / "model"


def make_cost_model(spec: str, *, seed: int = 0, timer: Callable[[str], Any] | None = None,
                    retrain_fraction: float = 0.2) -> tuple[Any, Any, str]:
    """(MetaSchedule cost model, ModelAdapter or None, label) for a `--model` value."""
    from autosearch.backends.tvm.features import EXTRACTOR, FEATURE_WIDTH
    from autosearch.search.adapter import ONLINE_KINDS, ModelAdapter, check_extractor, ms_cost_model

    if spec == "random":
        from tvm.s_tir.meta_schedule.cost_model import RandomModel

        return RandomModel(seed=seed), None, "random"
    if spec == "tvm-xgb":  # exactly MetaSchedule's default: XGBModel with adaptive training
        from tvm.s_tir.meta_schedule.cost_model import CostModel

        return CostModel.create("xgb", num_tuning_cores=os.cpu_count() or 1), None, "tvm-xgb"
    if spec in ONLINE_KINDS:  # fitted from scratch on this run only
        kw: dict[str, Any] = {"seed": seed}
        adapter = ModelAdapter(kind=spec, model_kw=kw, seed=seed, timer=timer, retrain_fraction=retrain_fraction)
        return ms_cost_model(adapter), adapter, spec
    from autosearch.models import load_model

    prior, plus, online = ("", "", "") if Path(spec).exists() else spec.rpartition("+")  # a dir may contain '+'
    if plus:  # PRIOR+KIND: the prior blended with a model fitted on this run (ModelAdapter online=)
        if online not in ONLINE_KINDS:
            raise InputError(f"--model {spec!r}: the part after '+' must be one of {', '.join(ONLINE_KINDS)}")
        if prior in MODEL_CHOICES and prior != "pretrained":
            raise InputError(f"--model {spec!r}: the part before '+' must be pretrained or a model directory")
        spec = prior
    if spec == "pretrained":
        path = pretrained_dir()
        if not (path / "config.json").is_file():
            raise InputError(f"no pretrained model is installed at {path}: reinstall autosearch or pass --model DIR")
        label = "pretrained"
    else:
        path = Path(spec)
        if not path.exists():
            raise InputError(f"--model {spec!r} is neither a model directory nor one of {', '.join(MODEL_CHOICES)}")
        label = path.name
    model = load_model(path)
    check_extractor(model, EXTRACTOR, FEATURE_WIDTH)
    adapter = ModelAdapter(model, seed=seed, timer=timer, retrain_fraction=retrain_fraction, online=online if plus else None)
    return ms_cost_model(adapter), adapter, f"{label}+{online}" if plus else label


# -- settings and result -------------------------------------------------------------------------
@dataclass(frozen=True)
class TuneSettings:
    """Search budget and MetaSchedule EvolutionarySearch knobs."""

    trials: int = 64
    trials_per_round: int = 16
    eps_greedy: float = 0.05
    population: int = 256
    genetic_num_iters: int = 3
    init_measured_ratio: float = 0.2
    seed: int = 0
    retrain_fraction: float = 0.2

    def validate(self) -> None:
        if self.trials_per_round < 1:
            raise InputError(f"--trials-per-round must be at least 1, got {self.trials_per_round}")
        if self.trials < self.trials_per_round:
            raise InputError(
                f"--trials {self.trials} is smaller than one round (--trials-per-round {self.trials_per_round})"
            )
        if not 0.0 <= self.eps_greedy <= 1.0:
            raise InputError(f"--eps-greedy must be within [0, 1], got {self.eps_greedy}")
        if self.population < 2:
            raise InputError(f"--population must be at least 2, got {self.population}")
        if self.population < self.trials_per_round:
            raise InputError(f"--population {self.population} is smaller than one round ({self.trials_per_round})")


@dataclass
class TuneResult:
    """What one tuning run found, and what it cost."""

    workload: str
    workload_key: str
    family: str
    model: str
    target: str
    seed: int
    trials: int = 0
    ok: int = 0
    best_latency: float | None = None
    best_trace: str | None = None
    best_trial: int | None = None
    flops: float | None = None
    untuned_latency: float | None = None
    reference: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    breakdown: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    stop_reason: str = ""
    run_id: str = ""
    out_dir: str | None = None
    retrains: int = 0
    module: str | None = None

    @property
    def gflops(self) -> float | None:
        if self.flops and self.best_latency:
            return self.flops / self.best_latency / 1e9
        return None

    @property
    def speedup(self) -> float | None:
        if self.untuned_latency and self.best_latency:
            return self.untuned_latency / self.best_latency
        return None

    def best_after(self, n: int) -> float | None:
        """Best latency among the first n measured trials."""
        vals = [h["latency"] for h in self.history[:n] if h["latency"] is not None]
        return min(vals) if vals else None

    def summary(self) -> dict[str, Any]:
        """The one machine-readable summary `--json` prints."""
        ref = self.reference or {}
        return {
            "workload": self.workload,
            "workload_key": self.workload_key,
            "model": self.model,
            "target": self.target,
            "seed": self.seed,
            "trials_measured": self.trials,
            "trials_ok": self.ok,
            "best_latency_s": self.best_latency,
            "best_gflops": self.gflops,
            "untuned_latency_s": self.untuned_latency,
            "speedup_vs_untuned": self.speedup,
            "reference": ref.get("name"),
            "reference_latency_s": ref.get("latency"),
            "interrupted": self.interrupted,
            "stop_reason": self.stop_reason,
            "model_retrains": self.retrains,
            "time_breakdown": self.breakdown,
            "out_dir": self.out_dir,
            "run_id": self.run_id,
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- measuring -----------------------------------------------------------------------------------
def _pool_build(mod: Any, target: Any) -> str:
    """Build + export one candidate inside a builder worker; returns the artifact path."""
    import tempfile

    from tvm.support.tar import tar

    from autosearch.backends.tvm.measure import fast_build, uses_tensor_intrin  # noqa: F401

    try:
        rt = fast_build(mod, target, None)
    except Exception:  # noqa: BLE001 - a tensorizing schedule needs the intrinsics registered
        import tvm.s_tir.tensor_intrin  # noqa: F401

        rt = fast_build(mod, target, None)
    path = os.path.join(tempfile.mkdtemp(prefix="autosearch-build-"), "tvm_tmp_mod." + tar.output_format)
    rt.export_library(path, fcompile=tar)
    return path


class PoolBuilder:
    """Builds candidates in a worker pool that lives as long as the tuning process.

    Why not MetaSchedule's LocalBuilder: it starts a fresh pool for every batch, and each worker
    imports TVM (~13 s per batch on a loaded 2-core machine). Why not in the tuning process
    itself: a rare schedule sends TVM's lowering into a practically endless recursion (seen here
    on softmax: > 8 minutes for one build), and only a worker process can be killed after
    `timeout` seconds (the candidate is then a `timeout` result).
    """

    def __init__(self, max_workers: int | None = None, timeout: float = 60.0) -> None:
        from tvm.support.popen_pool import PopenPoolExecutor

        self.timeout = timeout
        self.pool = PopenPoolExecutor(max_workers=max_workers or min(2, os.cpu_count() or 1), timeout=timeout)

    def build(self, candidates: list[Any], target: Any) -> list[Any]:
        from tvm.s_tir.meta_schedule.builder import BuilderResult
        from tvm.support.popen_pool import StatusKind

        out = []
        mods = [c.sch.mod for c in candidates]
        for res in self.pool.map_with_error_catching(lambda m: _pool_build(m, target), mods):
            if res.status == StatusKind.COMPLETE:
                out.append(BuilderResult(res.value, None))
            elif res.status == StatusKind.TIMEOUT:
                out.append(BuilderResult(None, f"Timeout: build killed after {self.timeout:g} s"))
            else:
                out.append(BuilderResult(None, f"build failed: {_first_line(res.value) if isinstance(res.value, BaseException) else str(res.value).strip().splitlines()[-1][:300]}"))
        return out


_BUILDERS: dict[Any, PoolBuilder] = {}


def pool_builder(timeout: float = 60.0) -> PoolBuilder:
    """The process-wide PoolBuilder (its workers start once)."""
    if timeout not in _BUILDERS:
        _BUILDERS[timeout] = PoolBuilder(timeout=timeout)
    return _BUILDERS[timeout]


def build_in_process(candidates: list[Any], target: Any) -> list[Any]:
    """BuilderResults built in this process (no isolation, no timeout: for single trusted
    schedules such as a saved best one; tuning uses `PoolBuilder`)."""
    from tvm.s_tir.meta_schedule.builder import BuilderResult

    out = []
    for c in candidates:
        try:
            out.append(BuilderResult(_pool_build(c.sch.mod, target), None))
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - any TVM/LLVM failure is a build error of this candidate
            out.append(BuilderResult(None, f"{type(exc).__name__}: {_first_line(exc)}"))
    return out


def measure_untuned(mod: Any, target: Any, measurer: Any) -> float | None:
    """Median latency of the unscheduled program as TVM builds it by default (no MetaSchedule)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    sch = Schedule(mod)
    cand = MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
    (res,) = measurer.run_built([cand], pool_builder().build([cand], target))
    return float(np.median(res.latencies)) if res.status == "ok" else None


_MEASURERS: dict[Any, Any] = {}


def _has_decisions(spaces: list[Any]) -> bool:
    return any(len(sch.trace.decisions) > 0 for sch in spaces)


# -- the loop ------------------------------------------------------------------------------------
def tune(
    workload: Any,
    target: Any,
    model: str = "pretrained",
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
) -> TuneResult:
    """Tune one workload on `target` with `model` in the loop; see the module docstring.

    Every measured candidate (ok or failed) is written to `store` with its features. When
    `out_dir` is given, the best schedule (best.json + a runnable best_schedule.py), the
    history and the time breakdown are saved there. Candidates are built in a persistent worker
    pool (`PoolBuilder`); a build longer than `build_timeout` seconds is a `timeout` result.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from autosearch.backends.tvm.features import EXTRACTOR, extract_features
    from autosearch.backends.tvm.measure import EvaluatorSettings, Measurer
    from autosearch.backends.tvm.space import trace_json
    from autosearch.backends.tvm.target import canonical_target, device_fingerprint
    from autosearch.search.adapter import group_key
    from autosearch.store import MeasurementRecord, schedule_hash

    settings = settings or TuneSettings()
    settings.validate()
    console = console or Console(stderr=True)
    evaluator = evaluator or EvaluatorSettings(number=1, repeat=3, min_repeat_ms=10)
    timer = TimeBreakdown()
    run_id = uuid.uuid4().hex[:12]
    tgt = canonical_target(target)
    device = device_fingerprint(target)
    mod = workload.mod()
    result = TuneResult(
        workload=workload.name, workload_key=workload.key, family=getattr(workload, "family", ""), model=model,
        target=tgt, seed=settings.seed, flops=workload.flops, run_id=run_id,
        module=getattr(workload, "source", None) or None,
    )

    with timer.section("setup"):
        with timer.section("setup:model"):
            cost_model, adapter, label = make_cost_model(
                model, seed=settings.seed, timer=timer.section, retrain_fraction=settings.retrain_fraction,
            )
        result.model = label
        with timer.section("setup:space"):
            strategy = ms.search_strategy.EvolutionarySearch(
                population_size=settings.population,
                init_measured_ratio=settings.init_measured_ratio,
                init_min_unmeasured=min(50, settings.population),
                genetic_num_iters=settings.genetic_num_iters,
                eps_greedy=settings.eps_greedy,
            )
            ctx = ms.TuneContext(
                mod=mod, target=target, space_generator="post-order-apply", search_strategy=strategy,
                task_name=workload.name, rand_state=settings.seed, num_threads=max(1, os.cpu_count() or 1),
            )
            try:
                spaces = ctx.generate_design_space()
            except Exception as exc:  # noqa: BLE001 - TVM errors
                raise WorkloadError(f"MetaSchedule cannot build a design space for {workload.name}: {_first_line(exc)}") from None
            if not spaces or not _has_decisions(spaces):
                raise WorkloadError(
                    f"{workload.name} has no tunable design space on {target.kind.name}: "
                    "MetaSchedule offers no schedule decision to search over"
                )
            database = ms.database.MemoryDatabase()
            ms_workload = database.commit_workload(mod)
            ctx.pre_tuning(
                max_trials=settings.trials, num_trials_per_iter=settings.trials_per_round,
                design_spaces=spaces, database=database, cost_model=cost_model,
            )
        with timer.section("setup:runner"):
            key = (str(target), evaluator)
            if key not in _MEASURERS:  # LocalRunner's start-up check costs seconds: one per process
                _MEASURERS[key] = Measurer(target, evaluator)
            measurer = _MEASURERS[key]
            builder = pool_builder(build_timeout)
        if store is not None:
            store.add_workload(workload.record())
    gkey = group_key(mod)
    columns = [
        TextColumn(f"[bold]tune[/] {workload.name[:36]} [{label}]"), BarColumn(), MofNCompleteColumn(),
        TextColumn("best {task.fields[best]}"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
    ]
    seen_hashes: set[str] = set()
    try:
        with Progress(*columns, console=console, disable=not progress, transient=False) as bar:
            task = bar.add_task("tune", total=settings.trials, best="-")
            while result.trials < settings.trials:
                with timer.section("search"):
                    cands = ctx.generate_measure_candidates()
                if not cands:
                    result.stop_reason = "search space exhausted"
                    break
                cands = list(cands)[: settings.trials - result.trials]
                with timer.section("build"):
                    built = builder.build(cands, target)
                with timer.section("run"):
                    measured = measurer.run_built(cands, built)
                runner_results = [
                    RunnerResult(r.latencies if r.status == "ok" else None, None if r.status == "ok" else (r.error or r.status))
                    for r in measured
                ]
                with timer.section("search"):
                    ctx.notify_runner_results(cands, runner_results)
                    for c, r in zip(cands, measured):
                        if r.status == "ok":
                            database.commit_tuning_record(
                                ms.database.TuningRecord(c.sch.trace, ms_workload, r.latencies, target, c.args_info)
                            )
                with timer.section("features"):
                    feats = extract_features(ctx, cands)
                lats = [float(np.median(r.latencies)) if r.status == "ok" else None for r in measured]
                with timer.section("update"):
                    if adapter is not None:
                        adapter.observe(gkey, feats, lats)
                    else:
                        cost_model.update(ctx, cands, runner_results)
                texts = [trace_json(c.sch) for c in cands]
                rnd = (result.history[-1]["round"] + 1) if result.history else 0
                with timer.section("store"):
                    if store is not None:
                        records = [
                            MeasurementRecord(
                                workload_key=workload.key, target=tgt, device=device, schedule=t,
                                status=r.status, latencies=r.latencies, error=r.error,
                                source=f"tune:{label}:{run_id}", extra={"round": rnd},
                            )
                            for t, r in zip(texts, measured)
                        ]
                        store.add_measurements(records, feats, EXTRACTOR)
                for t, r, lat in zip(texts, measured, lats):
                    result.trials += 1
                    seen_hashes.add(schedule_hash(t))
                    if lat is not None:
                        result.ok += 1
                        if result.best_latency is None or lat < result.best_latency:
                            result.best_latency, result.best_trace, result.best_trial = lat, t, result.trials
                    result.history.append({"trial": result.trials, "round": rnd, "latency": lat, "best": result.best_latency})
                bar.update(task, completed=result.trials, best=format_seconds(result.best_latency))
                if on_round is not None:
                    on_round(result)
            else:
                result.stop_reason = "budget reached"
    except KeyboardInterrupt:
        result.interrupted = True
        result.stop_reason = "interrupted"
    finally:
        try:
            ctx.post_tuning()
        except Exception:  # noqa: BLE001 - cleanup only
            pass
    if adapter is not None:
        result.retrains = adapter.n_retrains

    if not result.interrupted:
        try:
            if baseline:
                with timer.section("baseline"):
                    result.untuned_latency = measure_untuned(mod, target, measurer)
            if reference:
                from autosearch.search.reference import reference_latency

                with timer.section("baseline"):
                    result.reference = reference_latency(workload)
        except KeyboardInterrupt:
            result.interrupted = True
    timer.stop()
    result.breakdown = timer.to_dict()
    if out_dir is not None:
        save_result(result, workload, out_dir, timer)
    return result


# -- saving --------------------------------------------------------------------------------------
def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "workload"


def save_result(result: TuneResult, workload: Any, out_dir: str | os.PathLike[str], timer: TimeBreakdown | None = None) -> Path:
    """best.json (+ best_schedule.py when a schedule was found), history.json, breakdown.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if timer is not None:
        timer.save(out / "breakdown.json")
    (out / "history.json").write_text(json.dumps(
        {"workload": result.workload, "model": result.model, "seed": result.seed, "history": result.history}, indent=1,
    ) + "\n")
    summary = result.summary()
    summary["out_dir"] = str(out)
    result.out_dir = str(out)
    if result.best_trace is not None:
        from autosearch.search.apply import write_script

        best = {
            **summary,
            "format": "autosearch-best-schedule",
            "format_version": 1,
            "workload_name": workload.name,
            "module": result.module,
            "trace": json.loads(result.best_trace),
            "best_trial": result.best_trial,
            "flops": result.flops,
        }
        (out / "best.json").write_text(json.dumps(best, indent=1) + "\n")
        write_script(out / "best.json", workload)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return out
