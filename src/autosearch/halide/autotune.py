"""Autotune one pipeline with Adams2019 the way Halide's `adams2019_autotune_loop.sh` does.

Why: one-shot Adams2019 with the stock weights schedules a new pipeline from what the model
learned elsewhere; the autotune loop spends machine time on *this* pipeline: batches of
`batch_size` schedules (sample 0 a beam search of 32 without dropout, the rest greedy with 1%
random dropout), and after every batch the weights are retrained (from the stock weights, on every
sample of the pipeline so far), so the next batch's search is steered by this machine's timings.
The fastest schedule measured is kept as Halide schedule source and as a compiled static library.

Layout of `out_dir` (everything needed to resume after a kill is on disk):

    samples/batch_<B>_0/...          the batches (`.sample` + `.schedule.h`), as retrain_cost_model
    samples/batch_<B>_0/done.json    written last: a batch without it is sampled again on resume
    weights/batch_<B>.weights        the weights batch B was sampled with (1 = stock)
    best.schedule.h, best.json       the fastest schedule so far and how to rebuild it exactly
    best/<name>.a, best/<name>.h     the best schedule compiled (Halide static library)
    autotune.json, convergence.png   per-batch log and the best runtime vs batch plot
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autosearch.backends.halide.autoschedule import autoschedule_and_benchmark
from autosearch.backends.halide.pipelines import PipelineSpec, resolve_pipeline
from autosearch.backends.halide.sample_io import load_from_dir
from autosearch.backends.halide.sampling import batch_params, check_name, describe_pipeline
from autosearch.backends.halide.toolchain import default_threads
from autosearch.backends.halide.weights import Weights
from autosearch.errors import AutosearchError, InputError
from autosearch.halide.autosampler import NoSamplesError, _open_store, sample_batch
from autosearch.models.adams2019 import Adams2019Trainer, group_samples

__all__ = ["AutotuneBatch", "AutotuneResult", "autotune", "plot_convergence"]


@dataclass
class AutotuneBatch:
    """One batch of the loop, as written to `done.json` and `autotune.json`."""

    batch_id: int
    weights: str
    ok: int
    failed: int
    batch_best_ms: float | None
    beam_ms: float | None
    best_so_far_ms: float | None
    sample_s: float
    train_s: float  # retraining after this batch (0 for the last one)


@dataclass
class AutotuneResult:
    """What `autotune` leaves: the batches, the best schedule and where everything is."""

    pipeline: str
    out_dir: str
    batches: list[AutotuneBatch] = field(default_factory=list)
    best_ms: float | None = None
    best: dict[str, Any] = field(default_factory=dict)  # batch, index, params, weights, schedule file, library
    resumed_from: int = 0  # batches already on disk when this call started

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _done_batches(samples: Path) -> dict[int, AutotuneBatch]:
    out = {}
    for f in sorted(samples.glob("batch_*_0/done.json")):
        try:
            d = json.loads(f.read_text())
            out[int(d["batch_id"])] = AutotuneBatch(**d)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(
                f"{f} is not an autotune batch record ({exc}); remove its batch folder to resample it"
            ) from None
    return out


def _retrain(samples: Path, batch_size: int, threads: int, lr: float, seed: int) -> tuple[Weights, float]:
    """Stock weights retrained on every sample so far (Halide's loop: epochs = batch size)."""
    t0 = time.perf_counter()
    groups = group_samples(load_from_dir(samples), min_schedules=2)
    if not groups:
        return Weights.baseline(), time.perf_counter() - t0
    res = Adams2019Trainer(lr, int(batch_size), num_cores=threads, seed=seed, threads=threads).fit(
        Weights.baseline(), groups
    )
    return res.weights, time.perf_counter() - t0


def _best_sample(samples: Path) -> tuple[float, Path] | None:
    best = None
    for s in load_from_dir(samples):
        if best is None or s.runtime_ms < best[0]:
            best = (s.runtime_ms, Path(s.path))
    return best


def _same_schedule(a: str, b: str) -> bool:
    """Equal up to the `_<n>` suffixes Halide appends to Func names (they count the Funcs of that
    name a process created before, so a rebuilt pipeline's differ; `stage_7` may come back as
    `stage_7_1`)."""
    return re.sub(r"(?:_\d+)+\b", "", a) == re.sub(r"(?:_\d+)+\b", "", b)


def _write_best(
    spec: PipelineSpec, out: Path, sample_path: Path, runtime_ms: float, threads: int, name: str, beam_size: int
) -> dict[str, Any]:
    """Copy the best schedule's source, and rebuild it exactly (same weights, same parameters:
    Adams2019 is deterministic) to write it as a static library."""
    bdir = sample_path.parent.parent  # batch_<B>_0
    batch, index = int(bdir.name.split("_")[1]), int(sample_path.parent.name)
    params = batch_params(index + 1, batch, threads, str(bdir / "used.weights"), beam_size)[index]
    source = sample_path.with_suffix(".schedule.h").read_text()
    (out / "best.schedule.h").write_text(source)
    lib_dir = out / "best"
    lib_dir.mkdir(exist_ok=True)
    res = autoschedule_and_benchmark(spec, [params], threads=threads, benchmark=False, libraries=[str(lib_dir / name)])[
        0
    ]
    info = {
        "batch": batch,
        "index": index,
        "runtime_ms": runtime_ms,
        "params": params,
        "schedule": str(out / "best.schedule.h"),
        "library": str(lib_dir / f"{name}.a") if res.status == "ok" else "",
        "rebuilt_identically": res.status == "ok" and _same_schedule(res.schedule_source, source),
        "error": res.error if res.status != "ok" else "",
    }
    (out / "best.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def plot_convergence(batches: list[AutotuneBatch], path: Path, title: str) -> None:
    """Best runtime so far (and each batch's best) against the batch number."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [b.batch_id for b in batches]
    ax.plot(xs, [b.best_so_far_ms or math.nan for b in batches], marker="o", label="best so far")
    ax.plot(xs, [b.batch_best_ms or math.nan for b in batches], marker="x", linestyle=":", label="best of the batch")
    ax.plot(xs, [b.beam_ms or math.nan for b in batches], marker=".", linestyle="--", label="beam search (sample 0)")
    ax.set_xlabel("batch")
    ax.set_ylabel("runtime (ms)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def autotune(
    pipeline: str | PipelineSpec,
    out_dir: str | os.PathLike[str],
    batches: int,
    batch_size: int = 32,
    *,
    pipeline_params: dict[str, Any] | None = None,
    threads: int | None = None,
    repeats: int = 5,
    learning_rate: float = 1e-4,
    beam_size: int = 32,
    name: str | None = None,
    store: Any = None,
    seed: int = 0,
    min_time_s: float = 0.002,
    per_iter_min: bool = False,
    progress: bool = False,
) -> AutotuneResult:
    """Run (or resume) the autotune loop until `out_dir` holds `batches` batches of `pipeline`."""
    if not isinstance(batches, int) or batches < 1:
        raise InputError(f"batches must be a positive integer, got {batches!r}")
    if int(batch_size) < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size!r}")
    spec = pipeline if isinstance(pipeline, PipelineSpec) else resolve_pipeline(pipeline, pipeline_params)
    if spec.kind == "random" and isinstance(pipeline, str):
        raise InputError("autotune tunes one pipeline: give a builtin, an app or a .py file, not 'random'")
    name = name or spec.label
    check_name(name)
    describe_pipeline(spec)  # a file that raises, crashes or hangs: one error line before anything is written
    threads = int(threads or default_threads())
    out = Path(out_dir)
    samples, wdir = out / "samples", out / "weights"
    samples.mkdir(parents=True, exist_ok=True)
    wdir.mkdir(exist_ok=True)
    meta = out / "pipeline.json"
    key = {
        "kind": spec.kind,
        "name": spec.name,
        "params": spec.params,
        "batch_size": int(batch_size),
        "threads": threads,
    }
    if meta.exists() and json.loads(meta.read_text()) != key:
        raise InputError(f"{out} holds an autotune run of another pipeline or setting ({meta}); use a new --out")
    meta.write_text(json.dumps(key, indent=1) + "\n")
    done = _done_batches(samples)
    result = AutotuneResult(spec.label, str(out), resumed_from=len(done))
    db, close = _open_store(store)
    try:
        for bid in range(1, batches + 1):
            if bid in done:
                continue
            bdir = samples / f"batch_{bid}_0"
            if bdir.exists():  # killed while sampling: sample this batch again
                shutil.rmtree(bdir)
            wpath = wdir / f"batch_{bid}.weights"
            train_s = 0.0
            if bid == 1:
                Weights.baseline().save(wpath)
            elif not wpath.exists():
                weights, train_s = _retrain(samples, batch_size, threads, learning_rate, seed)
                weights.save(wpath)
                if bid - 1 in done:  # the training time belongs to the batch it learned from
                    done[bid - 1].train_s = train_s
                    (samples / f"batch_{bid - 1}_0" / "done.json").write_text(json.dumps(asdict(done[bid - 1])) + "\n")
            t0 = time.perf_counter()
            rep = sample_batch(
                spec,
                samples,
                batch_size=int(batch_size),
                batch_id=bid,
                weights_path=wpath,
                threads=threads,
                name=name,
                store=db,
                repeats=repeats,
                beam_size=beam_size,
                progress=progress,
                min_time_s=min_time_s,
                per_iter_min=per_iter_min,
            )
            if rep.ok == 0:
                raise NoSamplesError(
                    f"autotune batch {bid} of {spec.label}: no schedule ran ({rep.errors[0] if rep.errors else '?'})"
                )
            best = _best_sample(samples)
            rec = AutotuneBatch(
                bid,
                str(wpath),
                rep.ok,
                rep.failed,
                rep.best_ms,
                rep.beam_ms,
                best[0] if best else None,
                time.perf_counter() - t0,
                0.0,
            )
            (bdir / "done.json").write_text(json.dumps(asdict(rec)) + "\n")
            done[bid] = rec
    finally:
        if close:
            db.close()
    result.batches = [done[b] for b in sorted(done) if b <= batches]
    best = _best_sample(samples)
    if best is None:
        raise AutosearchError(f"{samples} holds no successful sample")
    result.best_ms = best[0]
    result.best = _write_best(spec, out, best[1], best[0], threads, name, beam_size)
    (out / "autotune.json").write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    plot_convergence(result.batches, out / "convergence.png", f"autotune {spec.label}")
    return result
