"""Autotune one pipeline with Adams2019 the way Halide's `adams2019_autotune_loop.sh` does.

Why: one-shot Adams2019 with the stock weights schedules a new pipeline from what the model
learned elsewhere; the autotune loop spends machine time on *this* pipeline: batches of
`batch_size` schedules (sample 0 a beam search of 32 without dropout, the rest greedy with 1%
random dropout; 32 a batch, as Halide's loop), and after every batch the weights are retrained on
every sample of the pipeline so far, continuing from the weights that sampled the batch (Halide's
loop: `--initial_weights=$WEIGHTS --weights_out=$WEIGHTS`, epochs = batch size, rate 1e-4), so
the next batch's search is steered by this machine's timings.

The best schedule is never the single fastest sample: among hundreds of noisy samples the fastest
is biased low (bilateral_grid: 40.5 ms while sampling, 70.8 ms when measured again). The
`finalists` fastest distinct samples are rebuilt exactly (same weights and parameters: Adams2019
is deterministic) and measured again side by side, interleaved, `final_repeats` rounds; the lowest
median wins. It is kept as Halide schedule source and as a compiled static library.

Layout of `out_dir` (everything needed to resume after a kill is on disk):

    samples/batch_<B>_0/...          the batches (`.sample` + `.schedule.h`), as retrain_cost_model
    samples/batch_<B>_0/done.json    written last: a batch without it is sampled again on resume
    weights/batch_<B>.weights        the weights batch B was sampled with (1 = stock)
    best.schedule.h, best.json       the best schedule (re-measured finalists) and how to rebuild it exactly
    best/<name>.a, best/<name>.h     the best schedule compiled (Halide static library)
    autotune.json, convergence.png   per-batch log and the best runtime vs batch plot
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import statistics
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
from autosearch.halide.autosampler import TRAIN_THREADS, NoSamplesError, _open_store, sample_batch
from autosearch.models.adams2019 import Adams2019Trainer, group_samples

__all__ = [
    "AutotuneBatch",
    "AutotuneResult",
    "autotune",
    "choose_best",
    "finalists_of",
    "plot_convergence",
    "rebuild_params",
]


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
    schedule_s: float = 0.0  # autoscheduling (Adams2019 search), summed over the candidates (overlapping)
    compile_s: float = 0.0  # JIT compilation, summed likewise
    benchmark_s: float = 0.0  # running the candidates, one at a time


@dataclass
class AutotuneResult:
    """What `autotune` leaves: the batches, the best schedule and where everything is."""

    pipeline: str
    out_dir: str
    batches: list[AutotuneBatch] = field(default_factory=list)
    best_ms: float | None = None  # the winner's median in the re-measurement of the finalists
    best: dict[str, Any] = field(default_factory=dict)  # batch, index, params, weights, schedule file, library
    finalists: list[dict[str, Any]] = field(default_factory=list)  # the re-measured candidates
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


def _retrain(
    samples: Path, start: Weights, batch_size: int, threads: int, lr: float, seed: int
) -> tuple[Weights, float]:
    """`start` (the weights that sampled the last batch) retrained on every sample so far, epochs =
    batch size: Halide's loop."""
    t0 = time.perf_counter()
    groups = group_samples(load_from_dir(samples), min_schedules=2)
    if not groups:
        return start, time.perf_counter() - t0
    res = Adams2019Trainer(lr, int(batch_size), num_cores=threads, seed=seed, threads=TRAIN_THREADS).fit(start, groups)
    return res.weights, time.perf_counter() - t0


def _where(sample_path: str | Path) -> tuple[int, int, Path]:
    """(batch, index, batch folder) of `samples/batch_<B>_0/<index>/<name>.sample`."""
    p = Path(sample_path)
    bdir = p.parent.parent
    return int(bdir.name.split("_")[1]), int(p.parent.name), bdir


def finalists_of(samples: Path, count: int, max_batch: int | None = None) -> list[tuple[float, Path]]:
    """The `count` fastest distinct schedules among the samples of batches 1..max_batch:
    (sample runtime in ms, sample file), fastest first. Identical schedules (same features) count once."""
    seen: set[bytes] = set()
    out = []
    for s in sorted(load_from_dir(samples), key=lambda s: s.runtime_ms):
        if max_batch is not None and _where(s.path)[0] > max_batch:
            continue
        key = s.schedule_features.tobytes()
        if key in seen:
            continue
        seen.add(key)
        out.append((s.runtime_ms, Path(s.path)))
        if len(out) >= count:
            break
    return out


def rebuild_params(sample_path: str | Path, threads: int, beam_size: int = 32) -> dict[str, Any]:
    """The Adams2019 parameters (weights included) that produced a sample, to rebuild it exactly."""
    batch, index, bdir = _where(sample_path)
    weights = bdir / "used.weights"
    return batch_params(index + 1, batch, threads, str(weights) if weights.exists() else None, beam_size)[index]


def choose_best(
    spec: PipelineSpec,
    samples: Path,
    *,
    threads: int,
    finalists: int = 5,
    repeats: int = 7,
    max_batch: int | None = None,
    beam_size: int = 32,
    min_time_s: float = 0.01,
    per_iter_min: bool = False,
) -> list[dict[str, Any]]:
    """Rebuild the `finalists` fastest distinct samples and measure them again side by side,
    `repeats` interleaved rounds, one measurement at a time. Returns one record per finalist, the
    winner first: the lowest median among those rebuilt identically to their sample (what is
    shipped must be what was measured), then the others; one that fails now (`median_ms` None) last."""
    picks = finalists_of(samples, max(1, int(finalists)), max_batch)
    if not picks:
        return []
    params = [rebuild_params(p, threads, beam_size) for _, p in picks]
    res = autoschedule_and_benchmark(
        spec,
        params,
        threads=threads,
        repeats=repeats,
        min_time_s=min_time_s,
        per_iter_min=per_iter_min,
        build_workers=default_threads(),
    )
    rows = []
    for (sample_ms, path), prm, r in zip(picks, params, res):
        batch, index, _ = _where(path)
        ok = r.status == "ok" and bool(r.latencies)
        rows.append(
            {
                "batch": batch,
                "index": index,
                "sample": str(path),
                "sample_ms": sample_ms,
                "median_ms": statistics.median(r.latencies) * 1000.0 if ok else None,
                "min_ms": min(r.latencies) * 1000.0 if ok else None,
                "rounds_ms": [x * 1000.0 for x in r.latencies],
                "params": prm,
                "rebuilt_identically": ok
                and _same_schedule(r.schedule_source, path.with_suffix(".schedule.h").read_text()),
                "error": "" if ok else f"{r.status}: {r.error}",
            }
        )
    rows.sort(key=lambda d: (d["median_ms"] is None, not d["rebuilt_identically"], d["median_ms"] or 0.0))
    return rows


def _same_schedule(a: str, b: str) -> bool:
    """Equal up to the `_<n>` suffixes Halide appends to Func names (they count the Funcs of that
    name a process created before, so a rebuilt pipeline's differ; `stage_7` may come back as
    `stage_7_1`)."""
    return re.sub(r"(?:_\d+)+\b", "", a) == re.sub(r"(?:_\d+)+\b", "", b)


def _write_best(spec: PipelineSpec, out: Path, winner: dict[str, Any], threads: int, name: str) -> dict[str, Any]:
    """Copy the winner's schedule source and rebuild it exactly (same weights, same parameters:
    Adams2019 is deterministic) as a static library."""
    sample_path = Path(winner["sample"])
    source = sample_path.with_suffix(".schedule.h").read_text()
    (out / "best.schedule.h").write_text(source)
    lib_dir = out / "best"
    lib_dir.mkdir(exist_ok=True)
    res = autoschedule_and_benchmark(
        spec, [winner["params"]], threads=threads, benchmark=False, libraries=[str(lib_dir / name)]
    )[0]
    info = {
        "batch": winner["batch"],
        "index": winner["index"],
        "runtime_ms": winner["median_ms"],
        "sample_ms": winner["sample_ms"],
        "params": winner["params"],
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
    finalists: int = 5,
    final_repeats: int = 7,
    final_min_time_s: float = 0.01,
) -> AutotuneResult:
    """Run (or resume) the autotune loop until `out_dir` holds `batches` batches of `pipeline`,
    then re-measure the `finalists` fastest samples (`final_repeats` interleaved rounds of at
    least `final_min_time_s` each) and keep the lowest median."""
    if not isinstance(batches, int) or batches < 1:
        raise InputError(f"batches must be a positive integer, got {batches!r}")
    if int(batch_size) < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size!r}")
    if int(finalists) < 1 or int(final_repeats) < 1:
        raise InputError(f"finalists and final_repeats must be >= 1, got {finalists!r} and {final_repeats!r}")
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
                previous = wdir / f"batch_{bid - 1}.weights"
                start = Weights.load(previous) if previous.exists() else Weights.baseline()
                weights, train_s = _retrain(samples, start, batch_size, threads, learning_rate, seed)
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
            best = finalists_of(samples, 1)  # the fastest sample so far (as sampled: a log, not the pick)
            rec = AutotuneBatch(
                bid,
                str(wpath),
                rep.ok,
                rep.failed,
                rep.best_ms,
                rep.beam_ms,
                best[0][0] if best else None,
                time.perf_counter() - t0,
                0.0,
                rep.schedule_s,
                rep.compile_s,
                rep.benchmark_s,
            )
            (bdir / "done.json").write_text(json.dumps(asdict(rec)) + "\n")
            done[bid] = rec
    finally:
        if close:
            db.close()
    result.batches = [done[b] for b in sorted(done) if b <= batches]
    rows = choose_best(
        spec,
        samples,
        threads=threads,
        finalists=finalists,
        repeats=final_repeats,
        max_batch=batches,
        beam_size=beam_size,
        min_time_s=final_min_time_s,
        per_iter_min=per_iter_min,
    )
    if not rows:
        raise AutosearchError(f"{samples} holds no successful sample")
    if rows[0]["median_ms"] is None:
        raise AutosearchError(f"none of the {len(rows)} finalists of {spec.label} ran again ({rows[0]['error']})")
    result.finalists = rows
    result.best_ms = rows[0]["median_ms"]
    result.best = _write_best(spec, out, rows[0], threads, name)
    (out / "autotune.json").write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    plot_convergence(result.batches, out / "convergence.png", f"autotune {spec.label}")
    return result
