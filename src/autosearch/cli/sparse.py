"""`autosearch sparse ...`: sparse format + schedule co-search (SpMV / SpMM / SDDMM on TVM, the CPU).

collect -> train -> eval -> tune, plus `check` (every configuration vs scipy on one matrix) and
`plots`. A user-caused failure prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table

if TYPE_CHECKING:
    import scipy.sparse as sp

    from autosearch.sparse.matrices import MatrixSpec
    from autosearch.sparse.search import TuneResult
    from autosearch.sparse.space import SuperSchedule

__all__ = ["app"]

app = typer.Typer(
    help="Sparse SpMV / SpMM / SDDMM: format + schedule co-search with a learned cost model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
from autosearch.cli.common import check_number, console, emit_json, err, one_line_errors  # noqa: E402 - after app, as the sibling apps
from autosearch.cli.options import SPARSE_THREADS_OPT, deprecated_spelling, renamed  # noqa: E402

DB_OPT = typer.Option(Path("autosearch.db"), "--db", help="SQLite records database.")
OPS_OPT = typer.Option("spmv,spmm,sddmm", "--ops", help="Comma-separated operators.")
THREADS_OPT = SPARSE_THREADS_OPT
JSON_OPT = typer.Option(False, "--json", help="Print a JSON document instead of the table.")


def _ops(text: str) -> tuple[str, ...]:
    from autosearch.errors import InputError
    from autosearch.sparse.space import OPS

    ops = tuple(o.strip().lower() for o in text.split(",") if o.strip())
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise InputError(f"--ops: unknown operator(s) {bad or text!r}; choose from {', '.join(OPS)}")
    return ops


def _families(text: str) -> tuple[str, ...]:
    from autosearch.errors import InputError
    from autosearch.sparse.matrices import FAMILIES

    fams = tuple(f.strip() for f in text.split(",") if f.strip())
    bad = [f for f in fams if f not in FAMILIES]
    if bad:
        raise InputError(
            f"--holdout-family: unknown famil{'y' if len(bad) == 1 else 'ies'} {bad}; choose from {', '.join(FAMILIES)}"
        )
    return fams


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
    json_out: bool = JSON_OPT,
) -> None:
    """Measure configurations x generated matrices into the store (resumable: reruns skip what is there)."""
    from dataclasses import asdict

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from autosearch.sparse.collect import collect as run_collect
    from autosearch.store.db import Store

    check_number(budget_minutes, "--budget-minutes")
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
        emit_json(asdict(rep))
        return
    console.print(
        f"{rep.matrices} matrices, {rep.workloads} workloads: {rep.measured} measured ({rep.failed} failed), "
        f"{rep.skipped} already stored, {rep.rejected} rejected as not applicable, {rep.seconds:.0f} s"
        + (" (stopped by --budget-minutes)" if rep.stopped_by_budget else "")
    )
    if rep.reasons:
        console.print("rejections: " + ", ".join(f"{k} x{v}" for k, v in sorted(rep.reasons.items())))


@app.command()
@one_line_errors
def train(
    out: Path = typer.Argument(..., help="Model directory to write (config.json + model.safetensors)."),
    db: Path = DB_OPT,
    model: str = typer.Option(
        "AutoSparseNet", "--model", help="WACONet, AutoSparseNet, AutoSparseNet_WACONet or AutoSparseNet_Full."
    ),
    op: str = typer.Option("spmm", "--op", help="Operator to train on (ignored by AutoSparseNet_Full: all)."),
    placement: str = typer.Option("token", "--placement", help="Matrix embedding: 'token' or 'concat'."),
    layers: int = typer.Option(1, "--layers", help="Transformer layers (1 or 2)."),
    epochs: int = typer.Option(20, "--epochs"),
    seed: int = typer.Option(0, "--seed"),
    holdout_family: str = typer.Option(
        "community", "--holdout-family", help="Families never trained on, comma-separated ('' = none)."
    ),
    json_out: bool = JSON_OPT,
) -> None:
    """Train a sparse cost model on the store's sparse records (held-out matrices excluded)."""
    from autosearch.sparse.baselines import bestformat_by_op
    from autosearch.sparse.models import save_model
    from autosearch.sparse.records import load_groups
    from autosearch.sparse.train import fit, split_groups
    from autosearch.store.db import Store
    from autosearch.training.dataset import resolve_db

    ops = None if model == "AutoSparseNet_Full" else _ops(op)
    with Store(resolve_db(db), readonly=True) as store:  # a committed .db.xz is unpacked once
        groups = load_groups(store, ops=ops, min_configs=4)
    tr, te = split_groups(groups, _families(holdout_family))
    hyper: dict[str, object] = {} if model == "WACONet" else {"placement": placement, "layers": layers}
    res = fit(model, tr, None, epochs=epochs, seed=seed, hyper=hyper)
    save_model(res.model, out, {"trained_on": op if ops else "all", "train_groups": len(tr), "epochs": epochs,
                                "seed": seed, "holdout_family": holdout_family,
                                "bestformat": bestformat_by_op(tr)})  # fmt: skip
    if json_out:
        emit_json({"model": model, "out": str(out), "train_groups": len(tr), "held_out_groups": len(te),
                   "losses": res.losses, "seconds": res.seconds, "peak_rss_mb": res.peak_rss_mb})  # fmt: skip
        return
    console.print(
        f"{model} on {len(tr)} groups ({len(te)} held out): loss {res.losses[0]:.4f} -> {res.losses[-1]:.4f} in "
        f"{res.seconds:.0f} s, peak memory {res.peak_rss_mb:.0f} MB; saved {out}"
    )


@app.command("eval")
@one_line_errors
def eval_(
    model_dir: Path = typer.Argument(..., help="A directory written by `autosearch sparse train`."),
    db: Path = DB_OPT,
    op: str = typer.Option("spmv,spmm,sddmm", "--ops", help="Operators to evaluate on."),
    holdout_family: str = typer.Option("community", "--holdout-family", help="Held-out families, comma-separated."),
    all_groups: bool = typer.Option(False, "--all", help="Evaluate on every group, not only the held-out ones."),
    json_out: bool = JSON_OPT,
) -> None:
    """Top-1 / top-5 / pairwise of a model on the held-out groups (seed notes' top-k definition)."""
    from autosearch.sparse.models import load_model
    from autosearch.sparse.records import load_groups
    from autosearch.sparse.train import evaluate, split_groups
    from autosearch.store.db import Store
    from autosearch.training.dataset import resolve_db

    m, _cfg = load_model(model_dir)
    with Store(resolve_db(db), readonly=True) as store:  # a committed .db.xz is unpacked once
        groups = load_groups(store, ops=_ops(op), min_configs=4)
    test = groups if all_groups else split_groups(groups, _families(holdout_family))[1]
    rows = {}
    for o in _ops(op):
        gs = [g for g in test if g.op == o]
        if gs:
            rows[o] = {"groups": len(gs), **evaluate(m, gs)}
    if json_out:
        emit_json({"model": str(model_dir), "ops": rows})
        return
    t = Table("op", "groups", "top-1", "top-5", "pairwise", "kendall")
    for o, r in rows.items():
        t.add_row(
            o, str(r["groups"]), f"{r['top1']:.3f}", f"{r['top5']:.3f}", f"{r['pairwise']:.3f}", f"{r['kendall']:.3f}"
        )
    console.print(t)


@app.command()
@one_line_errors
def tune(
    matrix: Path = typer.Argument(..., help="A Matrix Market (.mtx) file."),
    op: str = typer.Option("spmm", "--op", help="spmv, spmm or sddmm."),
    dense: int = typer.Option(64, "-N", "--dense", help="SpMM columns of B / SDDMM inner dimension."),
    model_dir: Optional[str] = typer.Option(
        None,
        "--model",
        help="Sparse cost model directory, or 'random' for random search "
        "(default: the shipped model chosen by validation, data/sparse/models/selected.json).",
    ),
    trials: int = typer.Option(20, "--trials", help="Configurations measured at most."),
    eps_greedy: float = typer.Option(0.15, "--eps-greedy", help="Share of each round measured at random."),
    eps_old: Optional[float] = renamed("--eps", "--eps-greedy"),
    online: bool = typer.Option(True, "--online/--no-online", help="Fine-tune the model on this matrix's results."),
    out: Path = typer.Option(Path("sparse-best.json"), "--out", help="Where the best configuration is saved."),
    db: Optional[Path] = typer.Option(None, "--db", help="Also write every measured configuration to this store."),
    seed: int = typer.Option(0, "--seed"),
    threads: Optional[int] = THREADS_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Co-search format + schedule for one matrix; time the best beside oneMKL, torch.sparse, scipy."""
    from autosearch.errors import InputError
    from autosearch.sparse.baselines import (
        LIBRARY,
        break_even_runs,
        confirm_best,
        contenders_for,
        side_by_side,
        speedup_over_best,
    )
    from autosearch.sparse.matrices import MatrixSpec, load_mtx
    from autosearch.sparse.measure import MatrixBench
    from autosearch.sparse.measure import threads as n_threads
    from autosearch.sparse.mkl import available as mkl_available
    from autosearch.sparse.models import load_model, shipped_model
    from autosearch.sparse.search import tune as run_tune

    (o,) = _ops(op) if "," not in op else (None,)
    if o is None:
        raise InputError("--op takes one operator")
    if trials < 1:
        raise InputError("--trials must be >= 1")
    eps = deprecated_spelling(eps_greedy, eps_old, "--eps", "--eps-greedy")
    if not 0.0 <= eps <= 1.0:
        raise InputError(f"--eps-greedy must be in [0, 1], got {eps}")
    _threads(threads)
    a = load_mtx(matrix)
    mb = MatrixBench(o, a, dense)  # refuses, in one line, operands that would not fit in memory
    if model_dir is None:
        path = shipped_model(o)
        if path is None:
            err.print("no shipped sparse model found (data/sparse/models/selected.json): random search")
    else:
        path = None if model_dir.strip().lower() == "random" else Path(model_dir)
    model, cfg = load_model(path) if path is not None else (None, {})
    bestformat = _bestformat_for(cfg, o, mb.dense)
    res = run_tune(a, o, dense, model=model, trials=trials, eps=eps, online=online, seed=seed, bench=mb)
    if res.best is None:
        raise InputError(f"no configuration ran on {matrix} ({res.rejected} rejected as not applicable)")
    best = confirm_best(mb, res.measured) or res.best  # re-time the 3 fastest (noise), no new configuration
    cons, why = contenders_for(mb, best, bestformat, mkl=mkl_available())
    if not mkl_available():
        why["mkl"] = "oneMKL's libmkl_rt not found (pip install mkl)"
    times = side_by_side(mb, cons)
    prep = {k: c.prepare_s for k, c in cons.items()}
    ratio, base = speedup_over_best(times)
    doc = {
        "matrix": str(matrix), "shape": list(a.shape), "nnz": int(a.nnz), "op": o, "dense": mb.dense,
        "model": str(path) if path is not None else None, "threads": n_threads(),
        "config": json.loads(best.to_json()), "short": best.short(), "measured": len(res.measured),
        "search_seconds": res.seconds, "times_s": times, "prepare_s": prep, "missing": why,
        "speedup_over_best_baseline": ratio, "best_baseline": base,
        "break_even_runs": break_even_runs(prep.get("ours", 0.0), times.get("ours", float("inf")),
                                           prep.get(base, 0.0), times.get(base, float("inf"))) if base else None,
    }  # fmt: skip
    out.write_text(json.dumps(doc, indent=1, default=lambda x: None))
    if db is not None:
        _save_tune_records(db, o, mb.dense, MatrixSpec("mtx", a.shape[0], a.shape[1], path=str(matrix)), a, res)
    if json_out:
        emit_json(doc)
        return
    t = Table("kernel", "ms", "ours is", "prepare ms", "what")
    for k, v in sorted(times.items(), key=lambda kv: kv[1]):
        t.add_row(k, f"{v * 1e3:.4f}", f"{v / times['ours']:.2f}x faster" if k != "ours" else "",
                  f"{prep[k] * 1e3:.2f}", LIBRARY.get(k, k))  # fmt: skip
    console.print(f"{matrix.name}: {a.shape[0]}x{a.shape[1]}, nnz {a.nnz}; {o} N={mb.dense}; {n_threads()} threads; "
                  f"{len(res.measured)} measured in {res.seconds:.1f} s ({'model ' + str(path) if path else 'random search'})")  # fmt: skip
    console.print(f"best: {best.short()}  {best.to_json()}")
    console.print(t)
    for k, reason in why.items():
        console.print(f"{k}: not timed ({reason})")
    if base:
        console.print(f"speed-up over the best baseline ({base}): {ratio:.2f}x; break-even after "
                      f"{doc['break_even_runs']:.0f} runs counting format conversion")  # fmt: skip
    console.print(f"saved {out}")


def _bestformat_for(cfg: dict, op: str, dense: int) -> SuperSchedule | None:
    """The BestFormat a model's training data chose for `op`, at this N / D (None if it cannot apply)."""
    from autosearch.errors import InputError
    from autosearch.sparse.space import SuperSchedule, with_dense

    text = (cfg.get("bestformat") or {}).get(op)
    if not text:
        return None
    try:
        return with_dense(SuperSchedule.from_json(text), dense)
    except InputError:
        return None


def _save_tune_records(db: Path, op: str, dense: int, spec: MatrixSpec, a: sp.csr_matrix, res: TuneResult) -> None:
    """The measured configurations of a tune run, as records of the (op, matrix) workload."""
    import math

    from autosearch.sparse.records import sparse_target, workload_record
    from autosearch.store.db import MeasurementRecord, Store

    tgt = sparse_target()
    wl = workload_record(op, dense, spec, a)
    recs = [
        MeasurementRecord(
            wl.key,
            tgt[0],
            tgt[1],
            c.to_json(),
            "ok" if math.isfinite(t) else "run_error",
            [t] if math.isfinite(t) else [],
            source="tune",
        )
        for c, t in res.measured
    ]
    with Store(db) as store:
        store.add_workload(wl)
        store.add_measurements(recs)


@app.command()
@one_line_errors
def check(
    matrix: Optional[Path] = typer.Argument(None, help="A .mtx file (default: a small generated matrix)."),
    op: str = OPS_OPT,
    n: int = typer.Option(20, "--n", help="Random configurations per operator."),
    dense: int = typer.Option(16, "-N", "--dense"),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = JSON_OPT,
) -> None:
    """Run random configurations once and compare each result with scipy (what the property test does)."""
    import numpy as np

    from autosearch.sparse.matrices import MatrixSpec, generate, load_mtx
    from autosearch.sparse.measure import MatrixBench, config_reason
    from autosearch.sparse.space import sample_config

    a = load_mtx(matrix) if matrix else generate(MatrixSpec("powerlaw", 500, 400, 6.0, seed))
    rng = np.random.default_rng(seed)
    bad = 0
    report: dict[str, dict[str, object]] = {}
    for o in _ops(op):
        mb = MatrixBench(o, a, dense)
        ok = rej = 0
        wrong: list[dict[str, str]] = []
        for _ in range(n):
            c = sample_config(rng, o, dense)
            if config_reason(c, a):
                rej += 1
                continue
            why = mb.check(c)
            if why:
                bad += 1
                wrong.append({"config": c.to_json(), "error": why})
                if not json_out:
                    err.print(f"{o} {c.to_json()}: {why}")
            else:
                ok += 1
        report[o] = {"match": ok, "not_applicable": rej, "wrong": wrong}
        if not json_out:
            console.print(f"{o}: {ok} configurations match scipy, {rej} not applicable to this matrix")
    if json_out:
        emit_json({"matrix": str(matrix) if matrix else None, "ops": report})
    if bad:
        raise typer.Exit(1)


@app.command()
@one_line_errors
def plots(
    results: Path = typer.Argument(..., help="A bench/sparse.py results JSON."),
    out: Path = typer.Option(Path("."), "--out", help="Folder for the PNG files."),
    out_dir_old: Optional[Path] = renamed("--out-dir", "--out"),
    json_out: bool = JSON_OPT,
) -> None:
    """Draw the seed's figures (loss curves, top-k bars, search time, convergence, time breakdown)."""
    from autosearch.sparse.plots import plot_all

    paths = plot_all(results, deprecated_spelling(out, out_dir_old, "--out-dir", "--out"))
    if json_out:
        emit_json({"plots": [str(p) for p in paths]})
        return
    for p in paths:
        console.print(str(p))
