"""`autosearch sparse ...`: sparse format + schedule co-search (SpMV / SpMM / SDDMM on TVM, the CPU).

collect -> train -> eval -> tune, plus `check` (every configuration vs scipy on one matrix) and
`plots`. A user-caused failure prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

__all__ = ["app"]

app = typer.Typer(
    help="Sparse SpMV / SpMM / SDDMM: format + schedule co-search with a learned cost model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
from autosearch.cli.common import console, err, one_line_errors  # noqa: E402 - after app, as the sibling apps

DB_OPT = typer.Option(Path("autosearch.db"), "--db", help="SQLite records database.")
OPS_OPT = typer.Option("spmv,spmm,sddmm", "--ops", help="Comma-separated operators.")
THREADS_OPT = typer.Option(None, "--threads", help="Threads for TVM and torch (default: physical cores).")


def _ops(text: str) -> tuple[str, ...]:
    from autosearch.errors import InputError
    from autosearch.sparse.space import OPS

    ops = tuple(o.strip().lower() for o in text.split(",") if o.strip())
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise InputError(f"--ops: unknown operator(s) {bad or text!r}; choose from {', '.join(OPS)}")
    return ops


def _threads(n: Optional[int]) -> None:
    from autosearch.sparse.measure import set_threads, threads

    if n is not None:
        set_threads(n)
    else:
        threads()


@app.command()
@one_line_errors
def collect(
    db: Path = DB_OPT,
    matrices: int = typer.Option(300, "--matrices", help="Matrices in the plan (generator families in turn)."),
    configs: int = typer.Option(50, "--configs", help="Applicable configurations measured per operator and matrix."),
    ops: str = OPS_OPT,
    dense: int = typer.Option(32, "--dense", "-N", help="SpMM columns of B / SDDMM inner dimension."),
    seed: int = typer.Option(0, "--seed", help="Plan seed (matrix i is a function of seed and i)."),
    start: int = typer.Option(0, "--start", help="First matrix index of the plan."),
    budget_minutes: float = typer.Option(0.0, "--budget-minutes", help="Stop starting new matrices after this long."),
    max_rows: int = typer.Option(30000, "--max-rows", help="Largest generated matrix (rows, log-uniform from 1000)."),
    max_nnz: int = typer.Option(300_000, "--max-nnz", help="Cap on a generated matrix's nonzeros."),
    threads: Optional[int] = THREADS_OPT,
    json_out: bool = typer.Option(False, "--json", help="Print a JSON summary."),
) -> None:
    """Measure configurations x generated matrices into the store (resumable: reruns skip what is there)."""
    from dataclasses import asdict

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from autosearch.sparse.collect import collect as run_collect
    from autosearch.store.db import Store

    _threads(threads)
    with (
        Store(db) as store,
        Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=False,
        ) as bar,
    ):
        task = bar.add_task("matrices", total=max(matrices - start, 0))

        def tick(i: int, name: str) -> None:
            bar.update(task, advance=1, description=f"{name[:40]:40s}")

        rep = run_collect(
            store,
            matrices,
            configs,
            _ops(ops),
            dense,
            seed,
            budget_minutes,
            start=start,
            progress=tick,
            max_rows=max_rows,
            max_nnz=max_nnz,
        )
    if json_out:
        console.print_json(json.dumps(asdict(rep)))
        return
    console.print(
        f"{rep.matrices} matrices, {rep.workloads} workloads: {rep.measured} measured ({rep.failed} failed), "
        f"{rep.skipped} already stored, {rep.rejected} rejected as not applicable, {rep.seconds:.0f} s"
        + (" (stopped by --budget-minutes)" if rep.stopped_by_budget else "")
    )
    if rep.reasons:
        console.print("rejections: " + ", ".join(f"{k} x{v}" for k, v in sorted(rep.reasons.items())))
