"""`autosearch tune | apply | report-tuning`: tuning with a cost model in the loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from autosearch.errors import InputError, TargetError

__all__ = ["app"]

from autosearch.cli.common import check_number, console, emit_json, err, one_line_errors, parse_rpc
from autosearch.cli.options import TVM_THREADS_OPT, apply_threads, deprecated_spelling, renamed
from autosearch.formatting import format_seconds


def _print_result(r: Any) -> None:
    title = f"tuned {r.workload} with {r.model}" + (f" ({r.search} search)" if r.search else "")
    t = Table(title=f"{title}: {r.trials} trials measured ({r.ok} ok)", show_header=False)
    t.add_row(
        "best latency", f"{format_seconds(r.best_latency)}" + (f"  (trial {r.best_trial})" if r.best_trial else "")
    )
    t.add_row("GFLOP/s", f"{r.gflops:.1f}" if r.gflops else "-")
    if r.untuned_latency:
        t.add_row(
            "untuned default schedule",
            f"{format_seconds(r.untuned_latency)}  -> speed-up x{r.speedup:.2f}"
            if r.speedup
            else format_seconds(r.untuned_latency),
        )
    else:
        t.add_row("untuned default schedule", "-")
    ref = r.reference
    if ref:
        ratio = ref["latency"] / r.best_latency if r.best_latency else None
        t.add_row(
            ref["name"],
            format_seconds(ref["latency"])
            + (f" ({ref['threads']} threads)" if ref.get("threads") else "")
            + (f"  -> tuned is x{ratio:.2f} of its speed" if ratio else ""),
        )
    else:
        t.add_row("NumPy/PyTorch reference", "none for this operator")
    t.add_row("model retrains", str(r.retrains))
    t.add_row("stopped", r.stop_reason or "-")
    if r.out_dir:
        t.add_row("saved", f"{r.out_dir}/best.json, best_schedule.py, breakdown.json, history.json")
    console.print(t)
    from autosearch.search.breakdown import TimeBreakdown

    console.print(TimeBreakdown.from_dict(r.breakdown).table("where the time went (seconds, exclusive)"))


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


# Long by nature: a Typer command's signature is its option list.
@app.command()
@one_line_errors
def tune(
    workload: Optional[str] = typer.Argument(None, help="Registry name, family member, or random:SEED."),
    module: Optional[str] = typer.Option(None, "--module", help="FILE.py:FUNC returning a TIR PrimFunc / IRModule."),
    model: Optional[str] = typer.Option(
        None,
        "--model",
        help="pretrained-prefix (default on CPUs), pretrained (default elsewhere), a model DIR, xgb, mlp, lgbm-rank, "
        "tvm-xgb or random; PRIOR+xgb blends a pretrained prior with XGBoost fitted on this run.",
    ),
    trials: int = typer.Option(64, "--trials", help="Measurement budget (schedules built and run)."),
    trials_per_round: int = typer.Option(16, "--trials-per-round", help="Schedules measured per search round."),
    eps_greedy: float = typer.Option(0.05, "--eps-greedy", help="Share of each round picked at random."),
    population: int = typer.Option(256, "--population", help="Evolutionary search population."),
    genetic_iters: int = typer.Option(3, "--genetic-iters", help="Evolution iterations per round."),
    target: Optional[str] = typer.Option(None, "--target", help="JSON dict, TVM tag or preset; default: this CPU."),
    db: Path = typer.Option(Path("autosearch.db"), "--db", help="Records database: every measured schedule is added."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Output directory (default tuned/<workload>-<model>-s<seed>)."
    ),
    seed: int = typer.Option(0, "--seed", help="Search seed."),
    repeats: int = typer.Option(3, "--repeats", help="Timed repeats per schedule (median)."),
    repeat_old: Optional[int] = renamed("--repeat", "--repeats"),
    min_repeat_ms: int = typer.Option(10, "--min-repeat-ms", help="Each repeat lasts at least this long."),
    threads: Optional[int] = TVM_THREADS_OPT,
    retrain_fraction: float = typer.Option(
        0.2, "--retrain-fraction", help="Retrain when new results reach this share of what the model was trained on."
    ),
    baseline: bool = typer.Option(
        True, "--baseline/--no-baseline", help="Measure the untuned schedule and the PyTorch reference."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON summary instead of tables."),
    search: str = typer.Option(
        "auto",
        "--search",
        help="auto (decision with a trace-prefix-tokens prior on a CPU, else evolutionary), evolutionary "
        "(MetaSchedule's), gradient (relaxed knobs, Adam) or decision (decision vectors scored without building "
        "schedules; needs a model trained on trace-prefix-tokens:v2).",
    ),
    explore: str = typer.Option(
        "auto",
        "--explore",
        help="auto: control where the model never saw the target's device (none under the decision search), "
        "else none; none; control: a share of each round comes from a random-scored search, and the model's "
        "accuracy on those sets the share.",
    ),
    screen: int = typer.Option(
        512,
        "--screen",
        help="The first round's picks are the trained model's best of this many uniform draws from the "
        "design space, not the evolutionary search's (0: off; ignored by models fitted on the run alone and by "
        "the decision search, which scores thousands of draws itself).",
    ),
    online_warmup: int = typer.Option(
        16,
        "--online-warmup",
        help="With PRIOR+KIND (e.g. pretrained+xgb): results measured before the online model is first "
        "fitted and blended in.",
    ),
    precision: str = typer.Option(
        "fp32",
        "--precision",
        help="fp32; bf16 (a dense layer's operands in bfloat16, weights packed, sums in fp32: AVX512_BF16 "
        "vdpbf16ps) or int8 (u8 x i8, sums in int32: AVX512_VNNI). Same as naming WORKLOAD@bf16 / @int8.",
    ),
    rpc_tracker: Optional[str] = typer.Option(None, "--rpc-tracker", help="HOST:PORT of a TVM RPC tracker."),
    rpc_key: Optional[str] = typer.Option(None, "--rpc-key", help="Device key at the tracker."),
) -> None:
    """Tune one operator with a cost model in the loop; save and report the best schedule."""
    from autosearch.backends.tvm.lowp import get_precision, module_precision, precision_target
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.backends.tvm.target import parse_target
    from autosearch.search.assemble import assemble, check_search
    from autosearch.search.model_spec import default_model
    from autosearch.search.results import safe_name
    from autosearch.search.strategies import EvolutionarySettings
    from autosearch.search.tune import TuneSettings, check_out_dir
    from autosearch.search.tune import tune as run_tune
    from autosearch.store import Store
    from autosearch.workloads.lowp import with_precision
    from autosearch.workloads.module import resolve_workload_spec

    check_number(retrain_fraction, "--retrain-fraction")
    settings = TuneSettings(trials=trials, trials_per_round=trials_per_round, eps_greedy=eps_greedy, seed=seed)
    # the strategies' knobs, before anything loads
    EvolutionarySettings(population=population, genetic_num_iters=genetic_iters, screen=screen).check_settings(settings)
    check_search(search)
    rpc = parse_rpc(rpc_tracker, rpc_key)
    wl = with_precision(resolve_workload_spec(workload, module), get_precision(precision).name)
    tgt = apply_threads(threads, parse_target(target), rpc)
    tgt = precision_target(module_precision(wl.mod()), tgt, measured_here=rpc is None, native=target is None)
    model = model or default_model(tgt)
    repeats = deprecated_spelling(repeats, repeat_old, "--repeat", "--repeats")
    evaluator = EvaluatorSettings(number=1, repeat=repeats, min_repeat_ms=min_repeat_ms)
    strategy, scorer = assemble(
        model,
        search,
        explore,
        target=tgt,
        seed=seed,
        retrain_fraction=retrain_fraction,
        online_warmup=online_warmup,
        population=population,
        genetic_num_iters=genetic_iters,
        screen=screen,
    )
    out_dir = check_out_dir(out or Path("tuned") / f"{safe_name(wl.name)}-{safe_name(scorer.label)}-s{seed}")
    if not json_out:
        err.print(
            f"tuning {wl.name} ({wl.key}) with --model {model}: {trials} trials, {trials_per_round} per round -> {db}"
        )
    with Store(db) as store:
        r = run_tune(
            wl,
            tgt,
            strategy,
            scorer,
            settings,
            store=store,
            evaluator=evaluator,
            out_dir=out_dir,
            baseline=baseline,
            reference=baseline,
            console=err,
            progress=not json_out,
            rpc=rpc,
        )
    if json_out:
        emit_json(r.summary())
    else:
        _print_result(r)
    if r.interrupted:
        err.print(f"interrupted: the {r.trials} measured schedules are in {db}; best so far saved to {out_dir}")
        raise typer.Exit(130)


@app.command()
@one_line_errors
def apply(
    path: Path = typer.Argument(..., help="A `tune` output directory or its best.json."),
    module: Optional[str] = typer.Option(
        None, "--module", help="FILE.py:FUNC of a schedule tuned on a user module (its code is run)."
    ),
    measure: bool = typer.Option(False, "--measure", help="Build and time the schedule on --target."),
    target: Optional[str] = typer.Option(None, "--target", help="Default: the target it was tuned on."),
    show: bool = typer.Option(True, "--show/--no-show", help="Print the scheduled TIR."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Re-apply a saved best schedule (trace replay): print its TIR, optionally time it."""
    from autosearch.backends.tvm.target import parse_target
    from autosearch.search.apply import apply_best, load_best, measure_schedule

    best = load_best(path)
    wl, sch = apply_best(best, module=module)
    info: dict[str, Any] = {"workload": wl.name, "workload_key": wl.key, "saved_latency_s": best.get("best_latency_s")}
    if measure:
        saved = best.get("target")
        if target is None and saved is not None and not isinstance(saved, str):
            raise InputError("best.json: the field 'target' must be a string (a target JSON, tag or preset)")
        try:
            tgt = parse_target(target if target is not None else saved)
        except TargetError as exc:
            raise TargetError(f"{exc} (the target {'given' if target is not None else 'in best.json'})") from None
        info["measured_latency_s"] = measure_schedule(sch, tgt)
    if json_out:
        emit_json(info)
        return
    if show:
        console.print(sch.mod.script(), highlight=False, markup=False)
    line = f"{wl.name}: schedule re-applied from {path} (tuned latency {format_seconds(info['saved_latency_s'])})"
    if measure:
        line += f"; measured now {format_seconds(info['measured_latency_s'])}"
    console.print(line)


@app.command("report-tuning")
@one_line_errors
def report_tuning(
    runs: list[Path] = typer.Argument(..., help="Tuning output directories (or history.json / bench JSON files)."),
    out: Path = typer.Option(Path("report/convergence.png"), "--out", help="PNG to write."),
    title: Optional[str] = typer.Option(None, "--title", help="Plot title."),
) -> None:
    """Convergence plot: best latency vs. measured trials, one line per model."""
    from autosearch.reports.convergence import load_histories, plot_convergence

    path = plot_convergence(load_histories(runs), out, title=title)
    console.print(f"wrote {path}")


_ = (InputError,)
