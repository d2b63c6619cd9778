"""`autosearch halide ...`: sample schedules, retrain the Adams2019 weights, autotune one pipeline,
print a schedule.

Every command takes `--json` for a machine-readable summary; a user-caused failure prints one
line on stderr and exits with status 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from autosearch.cli.common import check_number, console, err, one_line_errors, parse_params
from autosearch.cli.options import HALIDE_THREADS_OPT, deprecated_spelling, renamed
from autosearch.errors import AutosearchError

__all__ = ["app"]

app = typer.Typer(
    help="Halide Adams2019: sample schedules, retrain the cost model, schedule a pipeline.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

PIPELINE_ARG = typer.Argument(
    ..., help="'random', a builtin or classic app (blur, matmul, unsharp, harris, bilateral_grid, ...) or a .py file."
)
PARAM_OPT = typer.Option(None, "--param", "-p", help="Pipeline parameter KEY=VALUE (repeatable), e.g. -p width=256.")
THREADS_OPT = HALIDE_THREADS_OPT
JSON_OPT = typer.Option(False, "--json", help="Print a JSON summary.")


def _fmt_ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.4g} ms"


def _close_store(store: Any, created: bool) -> None:
    """Close the store; one this run created and wrote nothing to is removed, so that a run that
    failed before its first sample leaves no empty database behind."""
    empty = created and not store.workloads()
    store.close()
    if empty:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{store.path}{suffix}").unlink(missing_ok=True)


@app.command()
@one_line_errors
def sample(
    pipeline: str = PIPELINE_ARG,
    param: Optional[list[str]] = PARAM_OPT,
    batches: int = typer.Option(1, "--batches", help="Number of batches to sample."),
    batch_size: int = typer.Option(
        32, "--batch-size", help="Schedules per batch (1 beam search + greedy probes; Halide's loop: 32)."
    ),
    samples_dir: Path = typer.Option(Path("./default_samples"), "--samples-dir", help="Where .sample files go."),
    weights: Optional[Path] = typer.Option(None, "--weights", help="Adams2019 .weights (default: Halide's built-in)."),
    name: Optional[str] = typer.Option(None, "--name", help="Name used in sample file names."),
    threads: Optional[int] = THREADS_OPT,
    repeats: int = typer.Option(5, "--repeats", help="Interleaved benchmark rounds (min is kept)."),
    db: str = typer.Option("autosearch.db", "--db", help="SQLite records database ('' to skip)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Autoschedule and benchmark batches of schedules; write .sample files and the store."""
    from dataclasses import asdict

    from autosearch.backends.halide.pipelines import resolve_pipeline
    from autosearch.backends.halide.sampling import describe_pipeline
    from autosearch.halide.autosampler import next_batch_id, sample_batch
    from autosearch.store.db import Store

    params = parse_params(param)
    base = None if pipeline == "random" else resolve_pipeline(pipeline, params)
    if base is not None:  # a file that raises, crashes or hangs: one error line before the store is made
        describe_pipeline(base)
    new_store = bool(db) and not Path(db).exists()
    store = Store(db) if db else None
    reports = []
    try:
        for _ in range(batches):
            bid = next_batch_id(samples_dir)
            spec = base or resolve_pipeline("random", {**params, "seed": int(params.get("seed", 0)) + bid})
            reports.append(
                sample_batch(
                    spec,
                    samples_dir,
                    batch_size=batch_size,
                    batch_id=bid,
                    weights_path=weights,
                    threads=threads,
                    name=name,
                    store=store,
                    repeats=repeats,
                    progress=not json_out,
                )
            )
    finally:
        if store is not None:
            _close_store(store, new_store)
    if json_out:
        console.print_json(json.dumps([asdict(r) for r in reports]))
        return
    table = Table(title=f"Halide samples in {samples_dir}")
    for col in ("batch", "pipeline", "pipeline_id", "ok", "failed", "best", "beam search"):
        table.add_column(col)
    for r in reports:
        table.add_row(
            str(r.batch_id),
            r.pipeline,
            str(r.pipeline_id),
            str(r.ok),
            str(r.failed),
            _fmt_ms(r.best_ms),
            _fmt_ms(r.beam_ms),
        )
    console.print(table)
    for r in reports:
        for e in r.errors:
            err.print(f"batch {r.batch_id}: {e}", highlight=False)


@app.command()
@one_line_errors
def retrain(
    pipeline: str = PIPELINE_ARG,
    demo_name: str = typer.Argument("demo", help="Name used in sample file names."),
    batches: int = typer.Option(
        1, "--batches", help="Batches to sample before each retraining (0: retrain on existing samples)."
    ),
    batch_size: int = typer.Option(32, "--batch-size", help="Schedules per batch (Halide's loop: 32)."),
    samples_dir: Path = typer.Option(Path("./default_samples"), "--samples-dir"),
    weights: Path = typer.Option(
        Path("./random_init.weights"), "--weights", help="Weights to train; created at random if missing."
    ),
    learning_rate: float = typer.Option(0.001, "--lr"),
    train_iters: int = typer.Option(200, "--iters", help="Epochs over all samples after each batch."),
    param: Optional[list[str]] = PARAM_OPT,
    threads: Optional[int] = THREADS_OPT,
    repeats: int = typer.Option(5, "--repeats"),
    seed: int = typer.Option(0, "--seed", help="Random init / random pipeline seed base."),
    db: str = typer.Option("autosearch.db", "--db", help="SQLite records database ('' to skip)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Sample, then retrain the Adams2019 weights on every sample so far (Halide's autotune loop)."""
    from autosearch.halide.autosampler import retrain_cost_model

    check_number(learning_rate, "--lr", low_open=True)
    rep = retrain_cost_model(
        pipeline,
        demo_name,
        batches,
        batch_size,
        str(samples_dir),
        str(weights),
        learning_rate,
        train_iters,
        threads=threads,
        store=db or None,
        pipeline_params=parse_params(param),
        seed=seed,
        repeats=repeats,
        progress=not json_out,
    )
    if json_out:
        console.print_json(json.dumps(rep.to_dict()))
        return
    table = Table(title=f"retrained {rep.weights_path}", show_header=False)
    table.add_row("samples / pipelines", f"{rep.samples} / {rep.groups}")
    table.add_row("final loss", "-" if rep.final_loss is None else f"{rep.final_loss:.4g}")
    for k in ("pairwise", "top1", "top5", "halide_rate"):
        if k in rep.metrics:
            table.add_row(k, f"{rep.metrics[k]:.3f}")
    table.add_row("skipped files", str(len(rep.skipped_files)))
    console.print(table)


@app.command()
@one_line_errors
def schedule(
    pipeline: str = PIPELINE_ARG,
    param: Optional[list[str]] = PARAM_OPT,
    weights: Optional[Path] = typer.Option(None, "--weights", help="Adams2019 .weights (default: Halide's built-in)."),
    beam_size: int = typer.Option(32, "--beam-size"),
    threads: Optional[int] = THREADS_OPT,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the .schedule.h here."),
    output_old: Optional[Path] = renamed("--output", "--out"),
    benchmark: bool = typer.Option(False, "--benchmark", help="Also compile and time the schedule."),
    repeats: int = typer.Option(5, "--repeats"),
    json_out: bool = JSON_OPT,
) -> None:
    """Print the schedule Adams2019 picks for a pipeline (optionally timed)."""

    from autosearch.backends.halide.autoschedule import autoschedule_and_benchmark
    from autosearch.backends.halide.pipelines import resolve_pipeline
    from autosearch.backends.halide.toolchain import default_threads

    output = deprecated_spelling(out, output_old, "--output", "--out")
    spec = resolve_pipeline(pipeline, parse_params(param))
    n = int(threads or default_threads())
    p: dict[str, Any] = {"parallelism": n, "beam_size": beam_size}
    if weights:
        p["weights_path"] = str(weights)
    res = autoschedule_and_benchmark(spec, [p], threads=n, repeats=repeats, benchmark=benchmark)[0]
    if res.status != "ok":
        raise AutosearchError(f"scheduling {spec.label} failed ({res.status}): {res.error}")
    if output:
        output.write_text(res.schedule_source)
    runtime_ms = res.runtime_s * 1000.0 if benchmark else None
    if json_out:
        console.print_json(
            json.dumps(
                {
                    "pipeline": spec.label,
                    "pipeline_id": spec.pipeline_id(),
                    "params": res.params,
                    "schedule": res.schedule_source,
                    "stages": len(res.featurization) // (4 * 326),
                    "runtime_ms": runtime_ms,
                    "output": str(output) if output else None,
                }
            )
        )
        return
    console.print(res.schedule_source, highlight=False, markup=False)
    if runtime_ms is not None:
        console.print(f"runtime: {runtime_ms:.4g} ms (min of {repeats})")


@app.command()
@one_line_errors
def autotune(
    pipeline: str = PIPELINE_ARG,
    batches: int = typer.Option(..., "--batches", help="Batches K (the loop runs until the folder holds K)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Schedules per batch (1 beam search + greedy probes)."),
    out: Path = typer.Option(Path("./autotune"), "--out", help="Run folder (resumes what is there)."),
    param: Optional[list[str]] = PARAM_OPT,
    threads: Optional[int] = THREADS_OPT,
    repeats: int = typer.Option(5, "--repeats", help="Interleaved benchmark rounds per sample (min is kept)."),
    lr: float = typer.Option(1e-4, "--lr", help="Retraining learning rate (Halide's loop: 1e-4)."),
    finalists: int = typer.Option(
        5, "--finalists", help="The fastest distinct samples measured again at the end; the lowest median wins."
    ),
    final_repeats: int = typer.Option(7, "--final-repeats", help="Interleaved rounds of that re-measurement."),
    db: str = typer.Option("autosearch.db", "--db", help="SQLite records database ('' to skip)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Autotune one pipeline with Halide's sample-retrain loop; keep the best schedule (source + library).

    The best is not the fastest noisy sample: the --finalists fastest are rebuilt and measured
    again side by side (--final-repeats rounds), and the lowest median wins."""
    from autosearch.halide.autotune import autotune as run

    check_number(lr, "--lr", low_open=True)
    res = run(
        pipeline,
        out,
        batches,
        batch_size,
        pipeline_params=parse_params(param),
        threads=threads,
        repeats=repeats,
        learning_rate=lr,
        store=db or None,
        progress=not json_out,
        finalists=finalists,
        final_repeats=final_repeats,
    )
    if json_out:
        console.print_json(json.dumps(res.to_dict()))
        return
    table = Table(title=f"autotune {res.pipeline} in {res.out_dir}")
    cols = (
        "batch",
        "ok",
        "failed",
        "beam search",
        "batch best",
        "fastest sample so far",
        "sample s",
        "of it compile s",
    )
    for col in (*cols, "train s"):
        table.add_column(col)
    for b in res.batches:
        table.add_row(
            str(b.batch_id),
            str(b.ok),
            str(b.failed),
            _fmt_ms(b.beam_ms),
            _fmt_ms(b.batch_best_ms),
            _fmt_ms(b.best_so_far_ms),
            f"{b.sample_s:.1f}",
            f"{b.schedule_s + b.compile_s:.1f}",
            f"{b.train_s:.2f}",
        )
    console.print(table)
    console.print(
        f"finalists re-measured ({final_repeats} interleaved rounds, median): "
        + ", ".join(
            f"batch {f['batch']} #{f['index']} {_fmt_ms(f['median_ms'])} (sampled {_fmt_ms(f['sample_ms'])})"
            for f in res.finalists
        ),
        highlight=False,
    )
    console.print(
        f"best: {_fmt_ms(res.best_ms)} -> {res.best.get('schedule')} and {res.best.get('library') or '(no library)'}"
    )
