"""`autosearch tune-model | run`: a whole network tuned under a budget in minutes, and its artifact run."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from autosearch.cli.common import check_number, console, emit_json, err, one_line_errors, parse_rpc
from autosearch.cli.options import TVM_THREADS_OPT, apply_threads, deprecated_spelling, renamed
from autosearch.errors import InputError
from autosearch.formatting import format_seconds

__all__ = ["app"]

app = typer.Typer(add_completion=False)


def _no_empty_out(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A run that fails (or stops before the export) does not leave behind an empty --out folder
    it created itself: each folder of the path that did not exist before the run and is still
    empty after it is removed, deepest first; a folder that was there before is never touched."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = kwargs.get("out")
        created: list[Path] = []
        if out is not None:
            p = Path(out).absolute()
            while not os.path.lexists(p) and p != p.parent:
                created.append(p)
                p = p.parent
        try:
            return fn(*args, **kwargs)
        finally:
            for d in created:  # deepest first
                try:
                    d.rmdir()  # only an empty folder: an exported artifact is kept
                except OSError:
                    break

    return wrapper


# Long by nature: a Typer command's signature is its option list.
@app.command("tune-model")
@one_line_errors
@_no_empty_out
def tune_model(
    spec: str = typer.Argument(..., help="FILE.py:FUNC returning a torch.nn.Module, or FILE.onnx."),
    inputs: list[str] = typer.Option(
        [],
        "--input",
        help="NAME:DTYPE:SHAPE[:LOW..HIGH], e.g. input_ids:int64:1,128 (repeat per input, in order); an ONNX file's static input shapes are read from it.",
    ),
    input_shape: list[str] = typer.Option([], "--input-shape", help="Shorthand for float32 inputs: 1,3,224,224."),
    budget_minutes: float = typer.Option(
        10.0, "--budget-minutes", help="Wall time for import, prior and measurements (0: no time limit)."
    ),
    trials: Optional[int] = typer.Option(
        None, "--trials", help="Cap on measured trials over all tasks; 0 builds from the prior alone."
    ),
    model: Optional[str] = typer.Option(
        None,
        "--model",
        help="Cost model in the measured rounds, as for `tune` (default: pretrained-prefix on a CPU, pretrained "
        "elsewhere).",
    ),
    search: str = typer.Option(
        "auto",
        "--search",
        help="Search in the measured rounds, as for `tune`: auto (decision with a trace-prefix-tokens prior on a "
        "CPU, else evolutionary), evolutionary (MetaSchedule's), decision or gradient (both need a "
        "trace-prefix-tokens prior such as pretrained-prefix).",
    ),
    trials_per_round: int = typer.Option(16, "--trials-per-round", help="Schedules per round of one task."),
    target: Optional[str] = typer.Option(None, "--target", help="Default: this CPU."),
    db: Path = typer.Option(Path("autosearch.db"), "--db", help="Records database (a rerun resumes from it)."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Folder for the deployable artifact (model.so, model.json)."
    ),
    seed: int = typer.Option(0, "--seed", help="Search seed (and the example inputs' seed)."),
    fast_math: bool = typer.Option(
        True,
        "--fast-math/--no-fast-math",
        help="GELU, sigmoid, SiLU, erf, exp, tanh and softmax as TVM's polynomial approximations (a BERT GELU 60x "
        "faster, a SiLU 9x); "
        "where the output then fails the check, the network is rebuilt with the exact functions (docs/networks.md).",
    ),
    precision: str = typer.Option(
        "fp32",
        "--precision",
        help="fp32, bf16 or int8. bf16: every matmul by a constant weight (a transformer's dense layers) and every "
        "blocked convolution of one group computes on bf16 operands with fp32 sums (AVX512_BF16); the output check's "
        "tolerance is then 2e-2 of the output's scale. int8: the same dense layers and convolutions, and an RGB stem, on "
        "uint8 activations (ranges calibrated on the example inputs or --calibration) and int8 weights (one scale an "
        "output channel), int32 sums (AVX512_VNNI); tolerance 1e-1. The rest stays fp32 (docs/networks.md).",
    ),
    check_input: list[str] = typer.Option(
        [],
        "--check-input",
        help="FILE.npy (a one-input model) or NAME=FILE.npy per input: the example input the build is checked "
        "and timed on (a file of N samples: the first). Default: random, which a trained model may answer with "
        "saturated outputs too small to check against.",
    ),
    calibration: list[str] = typer.Option(
        [],
        "--calibration",
        help="int8's calibration set: FILE.npy (a one-input model) or NAME=FILE.npy per input, N samples each "
        "(N x the input's shape; N x the rest where the batch is 1); the activation ranges cover every sample. "
        "Default: the example input.",
    ),
    rpc_tracker: Optional[str] = typer.Option(
        None, "--rpc-tracker", help="HOST:PORT of a TVM RPC tracker: measurements go to its devices."
    ),
    rpc_key: Optional[str] = typer.Option(None, "--rpc-key", help="Device key at the tracker."),
    threads: Optional[int] = TVM_THREADS_OPT,
    json_out: bool = typer.Option(False, "--json", help="Print one JSON summary (progress still on stderr)."),
) -> None:
    """Tune a whole model: every task starts from the prior's schedule, measured rounds improve the
    tasks that matter most until the budget is spent; then build, check against the original model,
    time against PyTorch and (with --out) export."""
    from autosearch.backends.tvm.lowp import get_precision, precision_target
    from autosearch.backends.tvm.target import parse_target
    from autosearch.networks.inputs import parse_inputs
    from autosearch.networks.options import NetworkBudget, NetworkTuneOptions
    from autosearch.networks.tune import tune_network
    from autosearch.search.assemble import assemble_network
    from autosearch.search.model_spec import default_model
    from autosearch.search.tune import TuneSettings, check_out_dir
    from autosearch.store import Store
    from autosearch.workloads.module import check_module_spec

    if not spec.endswith(".onnx"):
        check_module_spec(spec)  # before the model, whose device warning would bury this error
    elif not Path(spec).is_file():
        raise InputError(f"ONNX file {spec} does not exist")
    check_number(budget_minutes, "--budget-minutes")
    specs = parse_inputs(inputs, input_shape, onnx=spec if spec.endswith(".onnx") else None)
    rpc = parse_rpc(rpc_tracker, rpc_key)
    tgt = apply_threads(threads, parse_target(target), rpc)
    if out is not None:
        check_out_dir(out)
    model = model or default_model(tgt)
    settings = TuneSettings(trials_per_round=trials_per_round, seed=seed)
    budget = NetworkBudget(trials=trials, minutes=budget_minutes or None)
    options = NetworkTuneOptions(
        fast_math=fast_math,
        precision=precision,
        progress=True,
        seed=seed,
        out_dir=str(out) if out is not None else None,
        check_input=tuple(check_input),
        calibration=tuple(calibration),
    )
    tgt = precision_target(get_precision(precision), tgt, measured_here=rpc is None, native=target is None)
    strategy, task_scorer = assemble_network(model, search, target=tgt, seed=seed)  # fails before the import
    strategy.check_settings(settings)
    with Store(db) as store:
        r = tune_network(
            spec,
            specs,
            tgt,
            strategy,
            task_scorer,
            settings,
            budget=budget,
            options=options,
            store=store,
            console=err,
            rpc=rpc,
        )
    if json_out:
        emit_json(r.summary())
    else:
        _print_network(r)
    if r.interrupted:
        err.print(
            f"interrupted: every schedule measured so far is in {db}; the same command again goes on "
            "from them, or with --trials 0 builds the network from them now",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(130)
    if not r.correct:
        raise typer.Exit(3)


def _fallback_note(r: Any) -> str:
    return " (its output failed the check: rebuilt with the exact functions)" if r.fast_math_fell_back else ""


def _print_network(r: Any) -> None:
    t = Table(title=f"{r.spec}: {len(r.tasks)} tasks, {r.trials} trials measured in {r.seconds:.0f} s")
    for col in ("task", "weight", "trials", "best", "untuned", "in network", "built with"):
        t.add_column(col, justify="left" if col in ("task", "built with") else "right")
    for task in r.tasks:
        t.add_row(
            task["name"],
            str(task["weight"]),
            str(task["trials"]),
            format_seconds(task["best_latency_s"]),
            format_seconds(task.get("untuned_latency_s")),
            format_seconds(task.get("network_s")),
            task["built_with"],
        )
    console.print(t)
    if r.interrupted:  # stopped before the build: nothing else to report
        return
    if r.outside_tasks_s is not None:
        console.print(
            "in network: a run of the built network's seconds in the task (all its calls, warm caches); "
            f"outside the tasks {format_seconds(r.outside_tasks_s)}"
        )
    console.print(f"output vs the original model: {r.check.describe() if r.check else '-'}")
    calibrated = f" (ranges calibrated on {r.calibration_samples} sample(s))" if r.calibration_samples else ""
    console.print(
        f"fast math: {'on' if r.fast_math else 'off'}{_fallback_note(r)}; dense layers and convolutions in "
        f"{r.precision}{calibrated}"
    )
    line = f"end-to-end: tuned TVM {format_seconds(r.tuned_latency)} | PyTorch eager {format_seconds(r.torch_latency)}"
    if r.tuned_latency and r.torch_latency:
        line += f" -> x{r.torch_latency / r.tuned_latency:.2f} PyTorch's speed"
    console.print(line)
    if r.default_latency is not None:
        kept = "kept: it ran faster" if r.kept_default else "the tuned build kept"
        console.print(f"TVM's default schedules everywhere: {format_seconds(r.default_latency)} ({kept})")
    if r.artifact:
        console.print(f"artifact: {r.artifact} (autosearch run {r.artifact})")


@app.command("run")
@one_line_errors
def run(
    artifact: Path = typer.Argument(..., help="Folder written by `tune-model --out`."),
    inputs: list[str] = typer.Option(
        [], "--input", help="NAME=FILE.npy (repeat per input); inputs not given are random, as tune-model drew them."
    ),
    repeats: int = typer.Option(10, "--repeats", help="Timing repeats (median; each at least 20 ms)."),
    repeat_old: Optional[int] = renamed("--repeat", "--repeats"),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON summary."),
) -> None:
    """Load a tuned network, run it once on the inputs and time it."""
    import numpy as np

    from autosearch.networks.artifact import load_artifact
    from autosearch.networks.inputs import example_arrays

    repeat = deprecated_spelling(repeats, repeat_old, "--repeat", "--repeats")
    if repeat < 1:
        raise InputError(f"--repeats must be at least 1, got {repeat}")
    m = load_artifact(artifact)
    arrays = example_arrays(m.inputs, seed)
    names = [s.name for s in m.inputs]
    for item in inputs:
        name, sep, path = item.partition("=")
        if not sep or name not in names:
            raise InputError(f"--input must be NAME=FILE.npy with NAME one of {', '.join(names)}; got {item!r}")
        try:
            arrays[names.index(name)] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"--input {name}: cannot read {path} as a .npy array: {exc}") from None
    outs = m(*arrays)
    latency = m.latency(*arrays, repeat=repeat)
    info = {
        "artifact": str(artifact),
        "inputs": [s.to_json() for s in m.inputs],
        "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outs],
        "latency_s": latency,
    }
    if json_out:
        emit_json(info)
        return
    shapes = ", ".join("x".join(map(str, o.shape)) + f" {o.dtype}" for o in outs)
    console.print(f"{artifact}: outputs {shapes}; {format_seconds(latency)} a call (median of {repeat})")
