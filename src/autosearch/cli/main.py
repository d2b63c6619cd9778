"""The `autosearch` command. Every user-caused failure prints one line and exits with status 2."""

from __future__ import annotations

import atexit
import gc
import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from autosearch import interrupts
from autosearch.backends.tvm.target import use_physical_cores
from autosearch.cli.common import check_number, console, emit_json, err, parse_rpc
from autosearch.cli.options import TVM_THREADS_OPT, apply_threads, deprecated_spelling, renamed
from autosearch.errors import AutosearchError, InputError, one_line
from autosearch.formatting import format_seconds

__all__ = ["app", "main"]

app = typer.Typer(
    name="autosearch",
    help="Learned cost models for tensor-program auto-scheduling (TVM MetaSchedule, Halide).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Inspect, import and export the records database.", no_args_is_help=True)
app.add_typer(db_app, name="db")

DB_OPT = typer.Option(Path("autosearch.db"), "--db", help="SQLite records database.")


@app.command()
def target(
    target: Optional[str] = typer.Option(None, "--target", help="JSON dict, TVM tag or preset; default: this CPU."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    profile: bool = typer.Option(
        False, "--profile", help="Add the device descriptor (measured once per machine, cached in --db)."
    ),
    refresh: bool = typer.Option(False, "--refresh", help="With --profile: measure again even if the store has it."),
    db: Path = DB_OPT,
) -> None:
    """Print the detected (or given) target: what measurements will be made on."""
    from autosearch.backends.tvm.target import PRESETS, describe_target, parse_target

    tgt = parse_target(target)
    info = describe_target(tgt)
    if profile:
        from autosearch.features.device import device_descriptor
        from autosearch.store import Store

        with Store(db) as store:
            info["descriptor"] = device_descriptor(store, tgt, refresh=refresh)
    if json_out:
        emit_json(info)
        return
    table = Table(title="target", show_header=False)
    for k, v in info.items():
        table.add_row(k, json.dumps(v) if isinstance(v, dict) else str(v))
    table.add_row("presets", ", ".join(PRESETS))
    console.print(table)


@app.command()
def workloads(
    family: Optional[str] = typer.Option(None, "--family", help="Only this family."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the registered workloads by family (random programs: `random:N`)."""
    from autosearch.workloads import families

    fams = families()
    if family is not None:
        match = {k: v for k, v in fams.items() if k.lower() == family.lower()}
        if not match:
            raise AutosearchError(f"unknown family {family!r}; families: {', '.join(fams)}")
        fams = match
    if json_out:
        emit_json({k: [w.name for w in v] for k, v in fams.items()})
        return
    table = Table(title=f"{sum(len(v) for v in fams.values())} workloads in {len(fams)} families (+ random:N)")
    table.add_column("family")
    table.add_column("n", justify="right")
    table.add_column("workloads")
    for fam, wls in fams.items():
        table.add_row(fam, str(len(wls)), "\n".join(w.name for w in wls))
    console.print(table)


#: How `collect --network` times the tasks by default (its help).
_NETWORK_TIMING = (
    "timed as tune-model times a network's tasks (networks.tune.network_evaluator: on a CPU 5 runs, each "
    "started with the weights flushed from the caches, as they arrive in the network), so the labels mean "
    "what tune-model's do"
)


# Long by nature: a Typer command's signature is its option list.
@app.command()
def collect(
    workloads: Optional[str] = typer.Option(
        None, "--workloads", "-w", help="Comma list: names, families, random:N (or --network)."
    ),
    network: Optional[str] = typer.Option(
        None,
        "--network",
        help="FILE.py:FUNC returning a torch.nn.Module, or FILE.onnx: collect the tasks tune-model tunes "
        "(imported as tune-model imports it: the same graph passes and blocked convolutions; the same "
        f"workload names and keys, so the records join tune-model's), costliest first (weight x FLOPs), "
        f"{_NETWORK_TIMING}; tasks with nothing to decide are skipped. Instead of --workloads.",
    ),
    inputs: list[str] = typer.Option(
        [],
        "--input",
        help="With --network: NAME:DTYPE:SHAPE[:LOW..HIGH], as for tune-model (repeat per input, in order; an "
        "ONNX file's static input shapes are read from it).",
    ),
    input_shape: list[str] = typer.Option(
        [], "--input-shape", help="With --network: shorthand for float32 inputs, as for tune-model."
    ),
    fast_math: bool = typer.Option(
        True,
        "--fast-math/--no-fast-math",
        help="With --network: the tasks of tune-model run with the same flag (on by default there too).",
    ),
    precision: str = typer.Option(
        "fp32",
        "--precision",
        help="With --network: fp32, bf16 or int8, as for tune-model: the tasks of its build in that precision "
        "(int8's ranges calibrated on the example input), sampled from the tensorized design space tune-model "
        "searches (a CPU without the instructions is refused).",
    ),
    per_workload: int = typer.Option(
        64, "--per-workload", "-n", help="Top each workload (each task of --network) up to N schedules."
    ),
    db: Path = DB_OPT,
    target: Optional[str] = typer.Option(None, "--target", help="JSON dict, TVM tag or preset; default: this CPU."),
    budget_minutes: Optional[float] = typer.Option(
        None, "--budget-minutes", help="Stop after this long (with --network, the model's import counts)."
    ),
    batch_size: int = typer.Option(16, "--batch-size", help="Schedules per build/run/write batch."),
    number: Optional[int] = typer.Option(None, "--number", help="Runs averaged into one repeat (default 1)."),
    repeats: Optional[int] = typer.Option(
        None, "--repeats", help="Repeats kept per schedule, the median is the label (default 5)."
    ),
    repeat_old: Optional[int] = renamed("--repeat", "--repeats"),
    min_repeat_ms: Optional[int] = typer.Option(
        None, "--min-repeat-ms", help="Each repeat lasts at least this long (default 20; --network: 0)."
    ),
    cache_flush: Optional[bool] = typer.Option(
        None,
        "--cache-flush/--no-cache-flush",
        help="Flush CPU caches between runs (default off; --network: on, on a CPU).",
    ),
    rpc_tracker: Optional[str] = typer.Option(None, "--rpc-tracker", help="HOST:PORT of a TVM RPC tracker."),
    rpc_key: Optional[str] = typer.Option(None, "--rpc-key", help="Device key at the tracker."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed."),
    threads: Optional[int] = TVM_THREADS_OPT,
) -> None:
    """Measure random schedules of workloads, or of a network's tasks (--network), into the database
    (resumable: re-run to continue)."""
    import time

    from autosearch.backends.tvm.lowp import get_precision, precision_target
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.backends.tvm.target import canonical_target, parse_target
    from autosearch.collect import collect as run_collect
    from autosearch.store import Store

    t_start = time.monotonic()
    if workloads is not None and network is not None:
        raise InputError("give --workloads or --network, not both")
    if workloads is None and network is None:
        raise InputError("give --workloads or --network (see autosearch collect --help)")
    if network is None and (inputs or input_shape or precision != "fp32"):
        raise InputError("--input, --input-shape and --precision go with --network")
    check_number(budget_minutes, "--budget-minutes")
    lowp = get_precision(precision)
    specs = _network_inputs(network, inputs, input_shape) if network is not None else []
    rpc = parse_rpc(rpc_tracker, rpc_key)
    tgt = apply_threads(threads, parse_target(target), rpc)
    tgt = precision_target(lowp, tgt, measured_here=rpc is None, native=target is None)
    repeats = deprecated_spelling(repeats, repeat_old, "--repeat", "--repeats")
    base = EvaluatorSettings()
    if network is not None:
        from autosearch.networks.tune import network_evaluator

        base = network_evaluator(tgt)
    evaluator = _collect_evaluator(base, number, repeats, min_repeat_ms, cache_flush)
    if network is not None:
        err.print(f"importing {network} as tune-model does ...", highlight=False)
        wls = _network_tasks(network, specs, tgt, fast_math, lowp.name)
        what = f"{len(wls)} task{'s' if len(wls) != 1 else ''} of {network}"
        if budget_minutes:  # the import counts: what is left, never 0 (which would mean no limit)
            budget_minutes = max(budget_minutes - (time.monotonic() - t_start) / 60, 1e-3)
    else:
        from autosearch.workloads import resolve_workloads

        wls = resolve_workloads(workloads or "")
        what = f"{len(wls)} workloads"
    err.print(f"collecting {what} x {per_workload} schedules on {canonical_target(tgt)} -> {db}", highlight=False)
    if network is not None:
        same = "tune-model's network timing" if evaluator == base else "not tune-model's network timing"
        err.print(
            f"each schedule: {evaluator.repeat} repeat(s) of {evaluator.number} run(s), at least "
            f"{evaluator.min_repeat_ms} ms, caches {'flushed' if evaluator.enable_cpu_cache_flush else 'warm'} "
            f"({same})",
            highlight=False,
        )
    with Store(db) as store:
        s = run_collect(
            wls,
            store,
            tgt,
            per_workload=per_workload,
            batch_size=batch_size,
            budget_minutes=budget_minutes,
            evaluator=evaluator,
            rpc=rpc,
            seed=seed,
            console=err,
            skip_fixed=network is not None,
        )
    _print_collect_summary(s, tasks=network is not None)
    if s.interrupted:
        console.print("every completed batch is stored; run the same command again to resume")
        raise typer.Exit(130)


def _print_collect_summary(s: Any, *, tasks: bool) -> None:
    """The summary table and its lines. A network's tasks (`tasks`): only those measured or with a
    note get a row; the full ones, those with nothing to decide and those the budget did not reach
    are counted in a line each (a network has tens of each)."""
    from autosearch.collect import NOTHING_TO_DECIDE

    table = Table(title="collect summary")
    for col in ("task" if tasks else "workload", "had", "measured", "ok", "note"):
        table.add_column(col)
    idle = 0
    for name, info in s.per_workload.items():
        if info["note"] == NOTHING_TO_DECIDE:
            continue
        if tasks and not info["measured"] and not info["note"]:
            idle += 1
            continue
        table.add_row(name, str(info["before"]), str(info["measured"]), str(info["ok"]), info["note"])
    console.print(table)
    if s.nothing_to_decide:
        n = s.nothing_to_decide
        console.print(
            f"{n} task{'s' if n != 1 else ''} with nothing to decide (one fixed schedule: a layout transform, a "
            "reshape) skipped"
        )
    if idle > s.skipped_full:
        n = idle - s.skipped_full
        console.print(f"{n} task{'s' if n != 1 else ''} not reached: run the same command again to continue")
    state = "interrupted" if s.interrupted else ("budget reached" if s.budget_exhausted else "done")
    console.print(
        f"{state}: {s.measured} measured ({s.ok} ok, {s.failed} failed) in {s.seconds:.0f} s, "
        f"{s.rate:.2f} candidates/s; {s.skipped_full} {'tasks' if tasks else 'workloads'} already full"
    )


def _network_inputs(network: str, inputs: list[str], input_shape: list[str]) -> list[Any]:
    """`--network`'s model spec and inputs checked as tune-model checks them, before any import."""
    from autosearch.networks.inputs import parse_inputs
    from autosearch.workloads.module import check_module_spec

    onnx = network.endswith(".onnx")
    if not onnx:
        check_module_spec(network)
    elif not Path(network).is_file():
        raise InputError(f"ONNX file {network} does not exist")
    return parse_inputs(inputs, input_shape, onnx=network if onnx else None)


def _collect_evaluator(
    base: Any, number: Optional[int], repeats: Optional[int], min_repeat_ms: Optional[int], flush: Optional[bool]
) -> Any:
    """`base` (`EvaluatorSettings`) with the options that were given in place of its fields."""
    import dataclasses

    given = {
        "number": number,
        "repeat": repeats,
        "min_repeat_ms": min_repeat_ms,
        "enable_cpu_cache_flush": flush,
    }
    return dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})


def _network_tasks(network: str, specs: list[Any], target: Any, fast_math: bool, precision: str) -> list[Any]:
    """The workloads of a model's tasks, as `tune-model --precision` imports the model
    (`graph.load_source`, `graph.import_network` with tune-model's defaults; int8 calibrated on
    its default example input) and names and keys them (`net/<task>`), costliest first: weight x
    FLOPs, ties as imported."""
    from autosearch.networks.graph import import_network, load_source, quiet_import
    from autosearch.networks.inputs import example_arrays
    from autosearch.networks.options import NetworkTuneOptions

    defaults = NetworkTuneOptions()
    arrays = example_arrays(specs, defaults.seed)
    with quiet_import():
        source = load_source(network)
        graph = import_network(
            network, source, specs, arrays, target, fast_math=fast_math, blocked=defaults.blocked, precision=precision
        )

    def cost(wl: Any) -> float:
        return float(wl.params.get("weight", 1)) * float(wl.flops or 0.0)

    return sorted(graph.workloads, key=cost, reverse=True)  # stable: ties keep the import's order


@db_app.command("stats")
def db_stats(db: Path = DB_OPT, json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Per workload: records, ok, failed, best latency, GFLOP/s, spread of repeats, features."""
    from autosearch.store import Store

    with Store(db, readonly=True) as store:
        rows = store.stats()
    if json_out:
        emit_json(rows)
        return
    table = Table(title=f"{db}: {len(rows)} workload groups")
    for col in ("workload", "family", "records", "ok", "failed", "best", "GFLOP/s", "spread", "features"):
        table.add_column(col, justify="left" if col in ("workload", "family") else "right")
    for r in rows:
        table.add_row(
            r["workload"],
            r["family"],
            str(r["records"]),
            str(r["ok"]),
            str(r["failed"]),
            format_seconds(r["best_latency_s"]),
            f"{r['gflops']:.1f}" if r["gflops"] else "-",
            f"{100 * r['repeat_spread']:.1f}%" if r["repeat_spread"] is not None else "-",
            str(r["features"]),
        )
    console.print(table)


@db_app.command("import")
def db_import(
    workload_file: Path = typer.Argument(..., help="MetaSchedule database_workload.json"),
    record_file: Path = typer.Argument(..., help="MetaSchedule database_tuning_record.json"),
    db: Path = DB_OPT,
    features: bool = typer.Option(True, "--features/--no-features", help="Recompute PerStoreFeature."),
) -> None:
    """Import a MetaSchedule JSONDatabase (workload + tuning-record files) into the store."""
    from autosearch.features.per_store import EXTRACTOR, featurize_trace
    from autosearch.store import Store
    from autosearch.store.metaschedule_json import import_json_database

    with Store(db) as store:
        n = import_json_database(
            store,
            workload_file,
            record_file,
            featurize=featurize_trace if features else None,
            extractor=EXTRACTOR if features else None,
        )
    skipped = (
        f"; skipped {n.duplicates:,} duplicate{'s' if n.duplicates != 1 else ''} (repeated in the log or already "
        "in the store)"
        if n.duplicates
        else ""
    )
    console.print(
        f"imported {n.records} records of {n.workloads} workloads ({n.failed} failed runs) into {db}{skipped}",
        highlight=False,
        soft_wrap=True,
    )


@db_app.command("import-ncu")
def db_import_ncu(
    csv_file: Path = typer.Argument(..., help="Nsight Compute `--csv` output (--page raw or details)."),
    db: Path = DB_OPT,
) -> None:
    """Attach Nsight Compute metrics to records by kernel name (autosearch_<id> or a schedule-hash prefix)."""
    from autosearch.features.device import NCU_EXTRACTOR, import_ncu_csv
    from autosearch.store import Store

    with Store(db) as store:
        res = import_ncu_csv(store, csv_file)
    console.print(
        f"attached metrics of {res['attached']} of {res['kernels']} kernels to records in {db}"
        f" as {':'.join(NCU_EXTRACTOR)}"
    )
    if res["unmatched"]:
        shown = ", ".join(res["unmatched"][:5]) + (" ..." if len(res["unmatched"]) > 5 else "")
        console.print(f"{len(res['unmatched'])} kernel(s) match no record: {shown}")


@db_app.command("export")
def db_export(
    workload_file: Path = typer.Argument(..., help="MetaSchedule database_workload.json to write"),
    record_file: Path = typer.Argument(..., help="MetaSchedule database_tuning_record.json to write"),
    db: Path = DB_OPT,
) -> None:
    """Export the TVM records to a MetaSchedule JSONDatabase that `ms.database.JSONDatabase` reads."""
    from autosearch.store import Store
    from autosearch.store.metaschedule_json import export_json_database

    with Store(db, readonly=True) as store:
        n = export_json_database(store, workload_file, record_file)
    console.print(f"exported {n.records} records of {n.workloads} workloads to {workload_file}, {record_file}")


def _mount_subcommands() -> None:
    """Every other command module is a Typer app of its own; nameless ones add top-level commands."""
    from autosearch.cli import halide, models, network, sparse, tune

    app.add_typer(models.app)
    app.add_typer(tune.app)
    app.add_typer(network.app)
    app.add_typer(halide.app, name="halide")
    app.add_typer(sparse.app, name="sparse")


_mount_subcommands()


def _release_workers() -> None:
    """After Ctrl-C or an internal error: stop TVM's worker pools here, in the main thread. A pool
    left to the garbage collector may be finalized on one of its own threads ("cannot join current
    thread"). The measuring worker goes too: left open, the exit waited for the kernel it was
    timing (measured: 17.7 s after a Ctrl-C during a 12 s run)."""
    import gc

    if "autosearch.backends.tvm.build" in sys.modules:
        from autosearch.backends.tvm.build import close_builders

        close_builders()
    if "autosearch.backends.tvm.measure" in sys.modules:
        from autosearch.backends.tvm.measure import close_shared_measurers

        close_shared_measurers()
    gc.collect()


def main(argv: list[str] | None = None) -> Any:
    """Entry point: every failure the user can cause ends in one line on stderr and a nonzero exit.

    AutosearchError and usage errors exit 2, Ctrl-C 130. An unexpected exception also prints one
    line (its type and first line) and exits 1; `AUTOSEARCH_TRACEBACK=1` shows the whole trace.
    The build workers outlive a call that ended cleanly, so a program that calls `main` again
    does not start them again (each imports TVM: ~1.6 s of CPU without torch, `backends.tvm.worker`);
    they are closed at exit.
    """
    _exit_without_the_last_collections()
    try:
        rv = _run(argv)
        if isinstance(rv, int) and rv:  # a command that returns its status (an interrupted collect: 130)
            sys.exit(rv)
    except SystemExit as exc:
        if exc.code not in (None, 0, 2):  # interrupted (130) or an internal error (1)
            _release_workers()
        raise
    except BaseException:
        _release_workers()
        raise
    return rv


def _exit_without_the_last_collections() -> None:
    """At exit, keep the objects alive then out of the interpreter's last garbage collections.
    Why: torch's and TVM's object graphs made those collections take 1.1-1.4 s after a command's
    last line (a Ctrl-C ended the run 1.5 s after the key on a quiet machine, 2.5 s on a loaded
    one); frozen, the exit takes 0.3 s. Objects are still freed as their references go; only
    cycles among them are left to the OS, which reclaims the process anyway. Registered once."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


#: The line for a run that ran out of memory, made before it is needed: when memory has run out,
#: formatting a message (rich's rendering, a lazy import) failed in turn and Python printed both
#: tracebacks instead (a 101-line trace under `ulimit -v`).
_OUT_OF_MEMORY = (
    "error: out of memory: this run needed more memory than the process may use (`ulimit -v`, the machine's "
    "RAM); a smaller workload, batch or model needs less\n"
)
_OUT_OF_MEMORY_BYTES = _OUT_OF_MEMORY.encode()
#: What an exception says when an allocation failed below Python: C++ (TVM, Halide), the dynamic
#: loader mapping a library, a thread's stack.
_OOM_WORDS = ("bad_alloc", "cannot allocate memory", "out of memory", "failed to map segment", "can't start new thread")


def _run(argv: list[str] | None) -> Any:
    """The app, with every way it can fail turned into one line and an exit status; running out of
    memory, in the command or in reporting its failure, is one pre-made line and exit 2."""
    import os

    try:
        return _run_app(argv)
    except MemoryError:
        if os.environ.get("AUTOSEARCH_TRACEBACK"):
            raise
        _say_out_of_memory()
        sys.exit(2)


def _say_out_of_memory() -> None:
    """Write `_OUT_OF_MEMORY` allocating next to nothing: the text stream, else the raw descriptor."""
    import contextlib
    import os

    try:
        sys.stderr.write(_OUT_OF_MEMORY)
        sys.stderr.flush()
    except BaseException:  # anything at all: the descriptor is the last resort
        with contextlib.suppress(OSError):
            os.write(2, _OUT_OF_MEMORY_BYTES)


def _out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is memory running out: a MemoryError in its chain (an import that failed for
    want of memory raises SystemError or ImportError from one), or a C++ allocation failure."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, MemoryError):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    text = str(exc)[:2000].lower()
    return any(w in text for w in _OOM_WORDS) or (isinstance(exc, (ImportError, SystemError)) and _near_memory_limit())


def _near_memory_limit() -> bool:
    """Whether this process has an address-space limit (`ulimit -v`) and used at least half of it:
    an import that fails then (a module left half-imported by an allocation that failed, a
    SystemError from an extension) failed for want of memory, not for a missing name."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY or soft <= 0:
            return False
        with open("/proc/self/status") as fh:
            peak = next((int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("VmPeak:")), 0)
        return peak >= soft // 2
    except (ImportError, OSError, ValueError):
        return False


def _usage_line(exc: Any) -> str:
    """A Click usage error (unknown option, missing argument, bad choice or type) as one line that
    names the command's help, instead of Click's usage block and `Try ... --help` hint."""
    ctx = getattr(exc, "ctx", None)
    option = getattr(exc, "option_name", None)
    if type(exc).__name__ == "NoSuchOption" and option:
        import difflib

        text = f"no such option {option}"
        # Click's own suggestions compare the leading dashes too (`--bogus`: "--out"); these do not
        names = {p.lstrip("-"): p for p in getattr(exc, "possibilities", None) or ()}
        close = difflib.get_close_matches(option.lstrip("-"), list(names), n=2, cutoff=0.75)
        if close:
            text += f"; did you mean {' or '.join(names[c] for c in close)}?"
    else:
        fmt = getattr(exc, "format_message", None)
        text = " ".join(str(fmt() if callable(fmt) else exc).split()).rstrip(".")
        text = text[:1].lower() + text[1:]
    path = getattr(ctx, "command_path", None)
    return f"error: {text} (see {path} --help)" if path else f"error: {text}"


def _run_app(argv: list[str] | None) -> Any:
    import os

    # typer vendors click (there is no `click` package): its errors are TyperException subclasses.
    from typer.exceptions import Abort, TyperException

    from autosearch.backends.tvm.target import user_threads_warning

    interrupts.install()
    use_physical_cores()  # before any TVM kernel runs here or in a worker started from here
    warning = user_threads_warning()
    if warning:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
    try:
        rv = app(args=argv, prog_name="autosearch", standalone_mode=False)
        if rv == 130 and interrupts.interrupted():  # typer made a Ctrl-C nobody handled a silent Exit(130)
            err.print("interrupted")
        return rv
    except AutosearchError as exc:
        err.print(f"[red]error:[/] {one_line(exc)}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except (KeyboardInterrupt, Abort):
        err.print("interrupted")
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except TyperException as exc:  # usage errors: bad option, missing argument, bad value
        if type(exc).__name__ == "NoArgsIsHelpError":  # a group called bare: its help is the answer
            exc.show()  # type: ignore[attr-defined]
        else:
            err.print(_usage_line(exc), highlight=False, markup=False, soft_wrap=True)
        sys.exit(getattr(exc, "exit_code", 2) or 2)
    except Exception as exc:
        if interrupts.interrupted():  # a Ctrl-C that TVM's C++ side turned into an error of its own
            err.print("interrupted")
            sys.exit(130)
        if _out_of_memory(exc):
            raise MemoryError from exc  # `_run` says it in its pre-made line
        if os.environ.get("AUTOSEARCH_TRACEBACK"):
            raise
        err.print(
            f"[red]internal error:[/] {type(exc).__name__}: {one_line(exc)} (AUTOSEARCH_TRACEBACK=1 shows the trace)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(1)
