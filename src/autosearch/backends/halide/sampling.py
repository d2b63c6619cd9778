"""One batch of Halide's autotune loop (adams2019_autotune_loop.sh): autoschedule, benchmark and
write `.sample` files.

Why here (the backend) and not with the training: a batch needs only Halide and the file formats;
the loop that retrains after each batch and records into the store sits above the models
(`autosearch.halide.autosampler`). Sample 0 is a beam search (beam 32, no dropout), the others
greedy (beam 1) with `random_dropout=1` and a distinct `random_dropout_seed`, all with the current
weights. Unlike Halide's loop, every pipeline gets its own `pipeline_id` (Halide's leaves it 0,
mixing pipelines into one training group).

Layout (as Halide's loop): `samples_dir/batch_<B>_0/<i>/<name>_batch_<BBBB>_sample_<SSSS>.sample`
plus `.schedule.h`, and `batch_<B>_0/used.weights`; schedule_id = B * 10000 + i.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autosearch.backends.halide.autoschedule import (
    CandidateResult,
    autoschedule_and_benchmark,
    describe_in_child,
    host_target,
)
from autosearch.backends.halide.pipelines import PipelineSpec, build_pipeline
from autosearch.backends.halide.sample_io import write_sample
from autosearch.backends.halide.toolchain import default_threads
from autosearch.backends.halide.weights import validate_weights_file
from autosearch.errors import InputError

__all__ = [
    "EXTRACTOR",
    "BatchReport",
    "batch_params",
    "check_name",
    "describe_pipeline",
    "next_batch_id",
    "sample_batch",
]

EXTRACTOR = ("halide-adams2019", "1")
_BATCH_RE = re.compile(r"^batch_(\d+)(?:_\d+)?$")


_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")


def check_name(name: str | None) -> None:
    """A sample name is used in file names: a plain name, never a path (`../x` would write
    outside the samples folder)."""
    if name is None:
        return
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or name in (".", "..") or name.startswith("."):
        raise InputError(
            f"name {name!r} must be a plain file name (letters, digits, '_', '.', '-'; no path, not starting with '.')"
        )


def next_batch_id(samples_dir: str | os.PathLike[str]) -> int:
    """One more than the largest existing `batch_<N>` in `samples_dir` (1 when empty)."""
    d = Path(samples_dir)
    ids = (
        [int(m.group(1)) for p in d.glob("batch_*") if p.is_dir() and (m := _BATCH_RE.match(p.name))]
        if d.is_dir()
        else []
    )
    return max(ids, default=0) + 1


def batch_params(
    batch_size: int, batch_id: int, threads: int, weights_path: str | None = None, beam_size: int = 32
) -> list[dict[str, Any]]:
    """The autotune loop's parameter sets: one beam search, the rest greedy random probes."""
    out: list[dict[str, Any]] = []
    for i in range(batch_size):
        p: dict[str, Any] = {"parallelism": threads}
        if i == 0:
            p.update(beam_size=beam_size, random_dropout=100, random_dropout_seed=batch_id * 10000)
        else:
            p.update(beam_size=1, random_dropout=1, random_dropout_seed=batch_id * 10000 + i)
        if weights_path:
            p["weights_path"] = str(weights_path)
        out.append(p)
    return out


_DESCRIBED: dict[str, str] = {}  # spec.key() (a file's bytes included) -> description


def describe_pipeline(spec: PipelineSpec) -> str:
    """The stored IR of a pipeline: its spec and a readable account of its stages.

    A user's pipeline file is built in a worker process with a timeout (`describe_in_child`):
    one that segfaults or never returns is one error line, never the death or hang of the
    caller. Builtin and random pipelines are our code and are built here."""
    head = json.dumps({"kind": spec.kind, "name": spec.name, "params": spec.params}) + "\n"
    if spec.kind == "file":
        key = spec.key()
        if key not in _DESCRIBED:
            _DESCRIBED[key] = describe_in_child(spec)
        return head + _DESCRIBED[key]
    try:
        desc = build_pipeline(spec).description
    except InputError:
        raise
    except Exception as exc:
        raise InputError(
            f"pipeline {spec.label}: building it raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        ) from None
    return head + desc


@dataclass
class BatchReport:
    """What one sampled batch produced."""

    batch_id: int
    pipeline: str
    pipeline_id: int
    directory: str
    ok: int
    failed: int
    best_ms: float | None
    beam_ms: float | None  # the beam-search schedule (sample 0)
    sample_files: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    schedule_s: float = 0.0  # autoscheduling, summed over the batch's candidates (parallel workers overlap)
    compile_s: float = 0.0  # JIT compilation, summed likewise
    benchmark_s: float = 0.0  # running the candidates (warm-up and every round), one at a time


def sample_batch(
    spec: PipelineSpec,
    samples_dir: str | os.PathLike[str] = "./default_samples",
    *,
    batch_size: int = 32,
    batch_id: int | None = None,
    weights_path: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    name: str | None = None,
    record: Callable[[list[CandidateResult], dict[int, str], str], None] | None = None,
    repeats: int = 5,
    beam_size: int = 32,
    target: str | None = None,
    progress: bool = False,
    min_time_s: float = 0.002,
    per_iter_min: bool = False,
    build_workers: int | None = None,
) -> BatchReport:
    """Autoschedule, benchmark and write one batch of `batch_size` schedules of `spec`.

    `min_time_s` and `per_iter_min` are passed to `autoschedule_and_benchmark` (how long one
    measurement lasts; fastest iteration instead of the mean). `record(results, files, target)`
    is called with every candidate (failed ones too) and the sample file of each success, e.g.
    to write them into the store (`autosearch.halide.autosampler.sample_batch` does).
    `build_workers` processes autoschedule and compile the batch at once (default: one per
    physical core, as Halide's loop compiles a batch in parallel); measuring is one at a time."""
    if int(batch_size) < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size!r}")
    check_name(name)
    threads = int(threads or default_threads())
    wpath = str(validate_weights_file(weights_path)) if weights_path else None
    describe_pipeline(spec)  # fails early, with one line, on a broken pipeline
    samples_dir = Path(samples_dir)
    bid = next_batch_id(samples_dir) if batch_id is None else int(batch_id)
    bdir = samples_dir / f"batch_{bid}_0"
    bdir.mkdir(parents=True, exist_ok=True)
    if wpath:
        shutil.copyfile(wpath, bdir / "used.weights")
    name = name or spec.label
    target = target or host_target()
    params = batch_params(int(batch_size), bid, threads, wpath, beam_size)

    bar = None
    if progress:
        from rich.progress import Progress

        bar = Progress(transient=True)
        bar.start()
        task = bar.add_task(f"batch {bid}: {name}", total=len(params) + repeats)

    def on_event(kind: str, _i: int) -> None:
        if bar is not None:
            bar.advance(task)

    try:
        results = autoschedule_and_benchmark(
            spec,
            params,
            threads=threads,
            target=target,
            repeats=repeats,
            min_time_s=min_time_s,
            per_iter_min=per_iter_min,
            on_event=on_event,
            build_workers=int(build_workers or default_threads()),
        )
    finally:
        if bar is not None:
            bar.stop()
    pid = spec.pipeline_id()
    files: dict[int, str] = {}
    errors = []
    for r in results:
        sid = bid * 10000 + r.index
        stem = f"{name}_batch_{bid:04d}_sample_{r.index:04d}"
        d = bdir / str(r.index)
        if r.status != "ok":
            errors.append(f"sample {r.index}: {r.status}: {r.error}")
            continue
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{stem}.schedule.h").write_text(r.schedule_source)
        write_sample(d / f"{stem}.sample", r.featurization, r.runtime_s * 1000.0, pid, sid)
        files[r.index] = str(d / f"{stem}.sample")
    if record is not None:
        record(results, files, target)
    ok = [r for r in results if r.status == "ok"]
    schedule_s, compile_s = sum(r.schedule_s for r in results), sum(r.compile_s for r in results)
    return BatchReport(
        batch_id=bid,
        pipeline=name,
        pipeline_id=pid,
        directory=str(bdir),
        ok=len(ok),
        failed=len(results) - len(ok),
        best_ms=min(r.runtime_s for r in ok) * 1000.0 if ok else None,
        beam_ms=results[0].runtime_s * 1000.0 if results and results[0].status == "ok" else None,
        sample_files=[files[i] for i in sorted(files)],
        errors=errors,
        schedule_s=schedule_s,
        compile_s=compile_s,
        benchmark_s=sum(r.run_s for r in results),
    )
