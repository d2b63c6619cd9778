"""`autosearch train | eval | report`: train a cost model on held-out-split data, score it, plot it.

`train` saves the model directory with its split (`split.json`) and history (`train_report.json`),
so `eval` and `report` on that directory default to the same held-out workloads.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from autosearch.errors import AutosearchError, InputError
from autosearch.training.batch import DEFAULT_EXTRACTOR

__all__ = ["app", "train_command_data"]

from autosearch.cli.common import check_number, console, emit_json, err, one_line_errors, parse_params

SPLIT_FILE = "split.json"
REPORT_FILE = "train_report.json"
_EXTRACTOR = ":".join(DEFAULT_EXTRACTOR)


def _csv(items: Optional[list[str]]) -> list[str]:
    return [x.strip() for item in items or [] for x in item.split(",") if x.strip()]


def _extractor(text: str) -> tuple[str, str]:
    if ":" not in text:
        raise InputError(f"--extractor must be NAME:VERSION, got {text!r}")
    name, version = text.split(":", 1)
    return name, version


def _fmt(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def load_model_data(
    db: str, extractor: tuple[str, str], device: bool = False, *, readonly: bool = False, **kw: Any
) -> Any:
    """`load_dataset` after computing trace tokens the store lacks (traces are stored), with each
    group's device descriptor appended to its rows when the model reads it (`-p device=true`).

    `readonly` (eval, report): the store is only ever opened read-only (SQLite `mode=ro`, or
    `immutable=1` on read-only media); tokens or a device descriptor it lacks are computed in a
    private temporary copy, deleted after. A `.xz` store is read through its cached copy, which
    is ours to write."""
    import tempfile

    from autosearch.training.dataset import resolve_db

    path = resolve_db(db)
    if not readonly or str(db).endswith(".xz") or not _lacks_data(path, extractor, device):
        return _load_model_data(path, extractor, device, **kw)
    with tempfile.TemporaryDirectory(prefix="autosearch-") as tmp:
        copy = str(Path(tmp) / "copy.db")
        _copy_store(path, copy)
        err.print(
            f"note: {db} lacks {':'.join(extractor)} features: computing them in a temporary copy "
            "(eval and report never write to the store)",
            highlight=False,
            soft_wrap=True,
        )
        try:
            return _load_model_data(copy, extractor, device, **kw)
        except AutosearchError as exc:  # name the user's store, not the copy
            raise type(exc)(str(exc).replace(copy, str(db))) from None


def _lacks_data(path: str, extractor: tuple[str, str], device: bool) -> bool:
    """Whether loading would write to the store: trace tokens to compute, or a device to profile."""
    from autosearch.features.trace_tokens import TOKEN_EXTRACTORS
    from autosearch.store import Store

    if device:
        return True
    key = (extractor[0], extractor[1])
    if key not in TOKEN_EXTRACTORS:
        return False
    with Store(path, readonly=True) as ro:
        return bool(ro.missing_features(key))


def _copy_store(path: str, copy: str) -> None:
    """A consistent copy of a store read through a read-only connection (SQLite's backup API)."""
    import sqlite3

    from autosearch.store import Store

    with Store(path, readonly=True) as ro:
        dst = sqlite3.connect(copy)
        try:
            ro._conn.backup(dst)
        finally:
            dst.close()


def _load_model_data(path: str, extractor: tuple[str, str], device: bool, **kw: Any) -> Any:
    from autosearch.features.trace_tokens import ensure_features
    from autosearch.training.dataset import load_dataset

    ensure_features(path, extractor)
    ds = load_dataset(path, extractor=extractor, **kw)
    if device:
        from autosearch.features.device import target_descriptors, with_device
        from autosearch.store import Store

        with Store(path) as store:  # writable: a missing descriptor of this machine's targets is measured and kept
            ds = with_device(ds, target_descriptors(store, [g.target for g in ds.groups], profile_missing=True))
    return ds


def train_command_data(
    db: str,
    extractor: tuple[str, str],
    target: Optional[str],
    holdout: list[str],
    fraction: float,
    seed: int,
    split_file: Optional[Path],
    max_groups: Optional[int],
    device: bool = False,
    train_dbs: Sequence[str] = (),
) -> tuple[Any, Any, Any]:
    """(dataset, split, (train, test)) as `train` builds them; shared with the benchmark. Groups of
    `train_dbs` join the training set (never a held-out workload, family or name)."""
    from autosearch.training.splits import Split, apply_split, join_training, split_workloads

    ds = load_model_data(db, extractor, device, target=target, max_groups=max_groups)
    if split_file is not None:
        split = Split.load(split_file)
    else:
        split = split_workloads(ds, holdout=holdout or None, fraction=fraction, seed=seed)
    tr, te = apply_split(ds, split)
    if train_dbs:
        extra = [load_model_data(x, extractor, device, target=target) for x in train_dbs]
        split, tr = join_training(split, tr, extra)
    return ds, split, (tr, te)


def _metrics_table(title: str, per_group: list[dict[str, Any]], mean: dict[str, float]) -> Table:
    t = Table(title=title)
    for col in ("workload", "n", "top-1", "top-5", "pairwise", "kendall", "rmse"):
        t.add_column(col, justify="left" if col == "workload" else "right")
    for g in per_group:
        t.add_row(g["workload"], str(g["n"]), *(_fmt(g[k]) for k in ("top1", "top5", "pairwise", "kendall", "rmse")))
    t.add_section()
    t.add_row(
        f"mean of {int(mean['groups'])} groups",
        "",
        *(_fmt(mean[k]) for k in ("top1", "top5", "pairwise", "kendall", "rmse")),
        style="bold",
    )
    return t


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


# Long by nature: a Typer command's signature is its option list.
@app.command()
@one_line_errors
def train(
    model: str = typer.Option(
        "mlp", "--model", help="xgb, lgbm-rank, mlp, tlp (with --extractor trace-tokens:v1), tvm-xgb or tvm-mlp."
    ),
    loss: Optional[str] = typer.Option(None, "--loss", help="mlp only: mse, pairwise or lambdarank (default)."),
    db: str = typer.Option("autosearch.db", "--db", help="Records database (.db, or .db.xz)."),
    train_db: Optional[list[str]] = typer.Option(
        None,
        "--train-db",
        help="More training data: this store's groups join the training set (repeatable); its held-out "
        "families, names and workloads are left out, and nothing in it is evaluated on.",
    ),
    out: Path = typer.Option(..., "--out", help="Model directory to write."),
    holdout: Optional[list[str]] = typer.Option(
        None, "--holdout", help="Held-out families / workload names (repeat or comma-separate)."
    ),
    fraction: float = typer.Option(
        0.2, "--fraction", help="Without --holdout: fraction of workloads held out (seeded)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the split and of training."),
    split: Optional[Path] = typer.Option(None, "--split", help="Use a saved split.json instead."),
    epochs: Optional[int] = typer.Option(
        None, "--epochs", help="Epochs (mlp, tvm-mlp) or boosting rounds (xgb, lgbm-rank)."
    ),
    valid_fraction: float = typer.Option(
        0.15, "--valid-fraction", help="Training workloads set aside for early stopping."
    ),
    refit: bool = typer.Option(
        True,
        "--refit/--no-refit",
        help="After early stopping, retrain on all training workloads for the chosen epochs.",
    ),
    param: Optional[list[str]] = typer.Option(None, "--param", "-p", help="Hyper-parameter KEY=VALUE (repeatable)."),
    extractor: str = typer.Option(_EXTRACTOR, "--extractor", help="Feature extractor NAME:VERSION in the store."),
    target: Optional[str] = typer.Option(None, "--target", help="Only measurements on this target (JSON as stored)."),
    max_groups: Optional[int] = typer.Option(None, "--max-groups", help="Use only the first N groups (quick runs)."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON summary."),
) -> None:
    """Train a cost model on the training workloads; report held-out metrics; save it to --out."""
    from autosearch.training.trainer import evaluate, valid_carve_out

    check_number(fraction, "--fraction", high=1.0, low_open=True, high_open=True)
    check_number(valid_fraction, "--valid-fraction", high=1.0, high_open=True)
    cost_model = _new_model(model, loss, epochs, parse_params(param), seed)
    ds, sp, (tr, te) = train_command_data(
        db,
        _extractor(extractor),
        target,
        _csv(holdout),
        fraction,
        seed,
        split,
        max_groups,
        device=bool(getattr(cost_model, "device", False)),
        train_dbs=train_db or (),
    )
    fit_set, valid = valid_carve_out(tr, valid_fraction, seed)
    if not json_out:
        console.print(
            f"{ds.n_groups} groups, {ds.n_candidates} candidates"
            + (f" (+{tr.n_groups - (ds.n_groups - te.n_groups)} training groups from --train-db)" if train_db else "")
            + f"; train {fit_set.n_groups} groups"
            f" (+{valid.n_groups if valid else 0} for early stopping{', then refit on all' if refit else ''}), held out {te.n_groups}"
        )
    report = _fit_with_progress(cost_model, model, tr, fit_set, valid, refit, valid_fraction, seed, show=not json_out)
    cost_model.trained_on = sorted({g.target for g in tr.groups})
    cost_model.save(out)
    sp.save(Path(out) / SPLIT_FILE)
    (Path(out) / REPORT_FILE).write_text(json.dumps(report.to_dict(), indent=1) + "\n")
    res = evaluate(cost_model, te) if te.n_groups else None
    summary = {
        "model": model,
        "out": str(out),
        "train_groups": fit_set.n_groups,
        "valid_groups": valid.n_groups if valid else 0,
        "test_groups": te.n_groups,
        "train_time_s": report.train_time_s,
        "best_epoch": report.best_epoch,
        "held_out": res.mean if res else None,
        "candidates_per_s": res.candidates_per_s if res else None,
    }
    if json_out:
        emit_json(summary)
        return
    if res is not None:
        m = res.mean
        console.print(
            f"held-out ({te.n_groups} groups): top-1 {_fmt(m['top1'])}  top-5 {_fmt(m['top5'])}  pairwise {_fmt(m['pairwise'])}"
            f"  kendall {_fmt(m['kendall'])}  |  trained in {report.train_time_s:.1f} s, {res.candidates_per_s:,.0f} predictions/s"
        )
    console.print(f"saved {model} model to {out}")


def _model_dir(path: Path) -> Path:
    """A model directory; `pretrained` or `pretrained-prefix` (with no such folder here) is a shipped
    one, as in `tune`."""
    from autosearch.search.model_spec import PRETRAINED, pretrained_dir

    return pretrained_dir(str(path)) if str(path) in PRETRAINED and not path.exists() else path


def _new_model(model: str, loss: Optional[str], epochs: Optional[int], kw: dict[str, Any], seed: int) -> Any:
    """An untrained model of `model` with the CLI's hyper-parameters, checked before any data is read."""
    from autosearch.models import make_model, model_class

    if loss is not None:
        if model != "mlp":
            raise InputError("--loss applies to --model mlp only")
        kw["loss"] = loss
    if epochs is not None:
        if epochs < 1:
            raise InputError(f"--epochs must be at least 1, got {epochs}")
        key = model_class(model).length_param
        if key is None:
            raise InputError(f"--epochs does not apply to {model} (it stops on its own criterion)")
        kw[key] = epochs
    if model != "tvm-xgb":
        kw.setdefault("seed", seed)
    return make_model(model, **kw)


def _fit_with_progress(
    cost_model: Any,
    model: str,
    tr: Any,
    fit_set: Any,
    valid: Any,
    refit: bool,
    valid_fraction: float,
    seed: int,
    *,
    show: bool,
) -> Any:
    """Train with a progress bar over epochs / rounds; returns the TrainReport."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from autosearch.training.trainer import fit_refit

    length = cost_model.length_param
    reports_progress = "progress" in inspect.signature(cost_model.fit).parameters
    with Progress(
        TextColumn(f"[bold]{model}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=err,
        disable=not show,
        transient=False,
    ) as bar:
        task = bar.add_task(model, total=getattr(cost_model, length) if length and reports_progress else None, info="")

        def progress(epoch: int, rec: dict[str, float]) -> None:
            info = "  ".join(f"{k.replace('valid_', 'val ')} {v:.3f}" for k, v in rec.items() if k != "epoch")
            bar.update(task, completed=epoch + 1, info=info)

        fit_kw = {"progress": progress} if reports_progress else {}
        if refit and not model.startswith("tvm-"):
            bar.update(task, info="early stopping on the carve-out, then refit on all training workloads")
            report = fit_refit(cost_model, tr, valid_fraction, seed, **fit_kw)
            done = getattr(cost_model, length) if length else None
            bar.update(
                task,
                total=done,
                completed=done,
                info=f"refit on {tr.n_groups} groups for {(report.best_epoch or 0) + 1} epochs/rounds",
            )
        elif fit_kw:
            report = cost_model.fit(fit_set, valid, **fit_kw)
        elif model.startswith("tvm-"):  # TVM selects (or not) on its own: it gets every training group
            bar.update(task, info="training (TVM's own loop)")
            report = cost_model.fit(tr)
            bar.update(task, total=1, completed=1, info="done")
        else:
            bar.update(task, info="training")
            report = cost_model.fit(fit_set, valid)
            bar.update(
                task, total=1, completed=1, info=f"{len(report.history)} evaluations, best at round {report.best_epoch}"
            )
    return report


def _check_finite(model: Path, ds: Any, scores: Sequence[Any]) -> None:
    """A model that predicts NaN (or inf) ranks nothing: its metrics would be noise, so it is an error."""
    import numpy as np

    for g, sc in zip(ds.groups, scores):
        bad = int((~np.isfinite(np.asarray(sc, dtype=np.float64))).sum())
        if bad:
            raise InputError(
                f"{model} predicts NaN or infinite scores ({bad} of {len(sc)} candidates of {g.name}): "
                "NaN predictions are an error (a diverged or damaged model; retrain it)"
            )


@app.command("eval")
@one_line_errors
def eval_(
    model: Path = typer.Option(
        ...,
        "--model",
        help="Model directory written by `autosearch train`, or `pretrained` / `pretrained-prefix` (the shipped ones).",
    ),
    db: str = typer.Option("autosearch.db", "--db", help="Records database (.db, or .db.xz)."),
    workloads: Optional[list[str]] = typer.Option(
        None, "--workloads", help="Workload names/families (default: the model's held-out split, else all)."
    ),
    target: Optional[str] = typer.Option(None, "--target", help="Only measurements on this target."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Score a saved model on held-out workloads: per-workload table and the means."""
    from autosearch.models import load_model
    from autosearch.training.splits import Split
    from autosearch.training.trainer import evaluate

    model = _model_dir(model)
    m = load_model(model)
    wl = _csv(workloads)
    scope = "selected workloads"
    if not wl and (model / SPLIT_FILE).exists():
        wl, scope = Split.load(model / SPLIT_FILE).test, "held-out workloads of the model's split"
    elif not wl:
        scope = "all workloads"
    ds = load_model_data(
        db, m.extractor, bool(getattr(m, "device", False)), readonly=True, target=target, workloads=wl or None
    )
    res = evaluate(m, ds, keep_scores=True)
    _check_finite(model, ds, res.scores)
    if json_out:
        emit_json({"model": str(model), "kind": m.kind, **res.to_dict()})
        return
    console.print(_metrics_table(f"{m.kind} on {ds.n_groups} {scope}", res.per_group, res.mean))
    console.print(f"prediction throughput: {res.candidates_per_s:,.0f} candidates/s")


@app.command()
@one_line_errors
def report(
    model: list[Path] = typer.Option(
        ...,
        "--model",
        help="Model directories (repeatable; `pretrained` and `pretrained-prefix` are the shipped ones).",
    ),
    db: str = typer.Option("autosearch.db", "--db", help="Records database (.db, or .db.xz)."),
    out: Path = typer.Option(Path("report"), "--out", help="Folder for the PNG files."),
    workloads: Optional[list[str]] = typer.Option(
        None, "--workloads", help="Evaluate on these (default: first model's held-out split)."
    ),
    scatter: Optional[str] = typer.Option(
        None, "--scatter", help="Workload for the scatter plot (default: the first evaluated)."
    ),
) -> None:
    """PNG plots: loss curves, top-1/top-5 per model, predicted vs. measured for one workload."""
    from autosearch.models import load_model
    from autosearch.reports.plots import plot_loss_curves, plot_pred_vs_measured, plot_topk_bars
    from autosearch.training.splits import Split
    from autosearch.training.trainer import evaluate

    models = {}
    model = [_model_dir(d) for d in model]
    for d in model:
        name = d.name
        while name in models:
            name += "'"
        models[name] = (d, load_model(d))
    wl = _csv(workloads)
    first = model[0]
    if not wl and (first / SPLIT_FILE).exists():
        wl = Split.load(first / SPLIT_FILE).test
    extractor = next(iter(models.values()))[1].extractor
    ds = load_model_data(
        db,
        extractor,
        bool(getattr(next(iter(models.values()))[1], "device", False)),
        readonly=True,
        workloads=wl or None,
    )
    histories, means, scores = {}, {}, {}
    for name, (d, m) in models.items():
        if (d / REPORT_FILE).exists():
            histories[name] = json.loads((d / REPORT_FILE).read_text()).get("history", [])
        res = evaluate(m, ds, keep_scores=True)
        means[name], scores[name] = res.mean, res.scores
    paths = [plot_loss_curves(histories, out / "loss_curves.png"), plot_topk_bars(means, out / "topk.png")]
    gi = 0
    if scatter is not None:
        hits = [i for i, g in enumerate(ds.groups) if scatter in (g.name, g.workload_key)]
        if not hits:
            raise InputError(f"--scatter {scatter!r} is not among the evaluated workloads")
        gi = hits[0]
    g = ds.groups[gi]
    for name in models:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        paths.append(
            plot_pred_vs_measured(
                scores[name][gi], ds.latencies[g.start : g.stop], out / f"scatter_{safe}.png", title=f"{name}: {g.name}"
            )
        )
    for p in paths:
        console.print(f"wrote {p}")
