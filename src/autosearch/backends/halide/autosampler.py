"""The autosampler and `retrain_cost_model`: Halide's autotune loop (adams2019_autotune_loop.sh)
in Python, writing Halide-compatible `.sample` files and the shared SQLite store.

Why: a cost model is only as good as samples from the machine it schedules for. Each batch
autoschedules one pipeline `batch_size` times with the current weights -- sample 0 by beam
search (beam 32, no dropout), the others greedily (beam 1) with `random_dropout=1` and a distinct
`random_dropout_seed` -- benchmarks them interleaved, writes the samples, then retrains on every
sample seen so far. Unlike Halide's loop, every pipeline gets its own `pipeline_id` (Halide's
leaves it 0, mixing pipelines into one training group).

Layout (as Halide's loop): `samples_dir/batch_<B>_0/<i>/<name>_batch_<BBBB>_sample_<SSSS>.sample`
plus `.schedule.h`, and `batch_<B>_0/used.weights`; schedule_id = B * 10000 + i.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autosearch.backends.halide.autoschedule import CandidateResult, autoschedule_and_benchmark, host_target
from autosearch.backends.halide.pipelines import PipelineSpec, build_pipeline, resolve_pipeline
from autosearch.backends.halide.sample_io import featurization_matrix, load_from_dir, write_sample
from autosearch.backends.halide.toolchain import device_fingerprint, target_json
from autosearch.backends.halide.train import Adams2019Trainer, evaluate, group_samples
from autosearch.backends.halide.weights import Weights, validate_weights_file
from autosearch.errors import InputError

__all__ = [
    "BatchReport",
    "RetrainReport",
    "batch_params",
    "describe_pipeline",
    "next_batch_id",
    "retrain_cost_model",
    "sample_batch",
]

EXTRACTOR = ("halide-adams2019", "1")
_BATCH_RE = re.compile(r"^batch_(\d+)(?:_\d+)?$")


def next_batch_id(samples_dir: str | os.PathLike[str]) -> int:
    """One more than the largest existing `batch_<N>` in `samples_dir` (1 when empty)."""
    d = Path(samples_dir)
    ids = [int(m.group(1)) for p in d.glob("batch_*") if p.is_dir() and (m := _BATCH_RE.match(p.name))] if d.is_dir() else []
    return max(ids, default=0) + 1


def batch_params(batch_size: int, batch_id: int, threads: int, weights_path: str | None = None,
                 beam_size: int = 32) -> list[dict[str, Any]]:
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


def describe_pipeline(spec: PipelineSpec) -> str:
    """The stored IR of a pipeline: its spec and a readable account of its stages."""
    try:
        desc = build_pipeline(spec).description
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user's file may raise anything
        raise InputError(f"pipeline {spec.label}: building it raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
    return json.dumps({"kind": spec.kind, "name": spec.name, "params": spec.params}) + "\n" + desc


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


def _write_store(store: Any, spec: PipelineSpec, ir: str, name: str, target: str, threads: int,
                 results: list[CandidateResult], files: dict[int, str], batch_id: int, source: str) -> None:
    from autosearch.store.db import MeasurementRecord, WorkloadRecord

    key = spec.key()
    store.add_workload(WorkloadRecord(key=key, name=name, family=f"halide-{spec.kind}", backend="halide",
                                      params={"kind": spec.kind, "name": spec.name, **spec.params}, ir=ir))
    tj = target_json(target, threads)
    dev = device_fingerprint()
    recs, feats = [], []
    for r in results:
        sid = batch_id * 10000 + r.index
        schedule = r.schedule_source or f"// failed: {json.dumps(r.params, sort_keys=True)}"
        recs.append(MeasurementRecord(
            workload_key=key, target=tj, device=dev, schedule=schedule, status=r.status,
            latencies=list(r.latencies), error=r.error, source=source,
            extra={"pipeline_id": spec.pipeline_id(), "schedule_id": sid, "sample_file": files.get(r.index, ""),
                   "autoscheduler_params": r.params},
        ))
        feats.append(featurization_matrix(r.featurization) if r.featurization and r.status == "ok" else None)
    store.add_measurements(recs, features=feats, extractor=EXTRACTOR)


def sample_batch(
    spec: PipelineSpec,
    samples_dir: str | os.PathLike[str] = "./default_samples",
    *,
    batch_size: int = 16,
    batch_id: int | None = None,
    weights_path: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    name: str | None = None,
    store: Any = None,
    repeats: int = 5,
    beam_size: int = 32,
    target: str | None = None,
    progress: bool = False,
    min_time_s: float = 0.002,
    per_iter_min: bool = False,
) -> BatchReport:
    """Autoschedule, benchmark and record one batch of `batch_size` schedules of `spec`.

    `min_time_s` and `per_iter_min` are passed to `autoschedule_and_benchmark` (how long one
    measurement lasts; fastest iteration instead of the mean)."""
    if int(batch_size) < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size!r}")
    threads = int(threads or os.cpu_count() or 1)
    wpath = str(validate_weights_file(weights_path)) if weights_path else None
    ir = describe_pipeline(spec)  # fails early, with one line, on a broken pipeline
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
        results = autoschedule_and_benchmark(spec, params, threads=threads, target=target, repeats=repeats,
                                             min_time_s=min_time_s, per_iter_min=per_iter_min, on_event=on_event)
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
    if store is not None:
        _write_store(store, spec, ir, name, target, threads, results, files, bid, f"halide-autosampler:batch_{bid}")
    ok = [r for r in results if r.status == "ok"]
    return BatchReport(
        batch_id=bid, pipeline=name, pipeline_id=pid, directory=str(bdir), ok=len(ok), failed=len(results) - len(ok),
        best_ms=min(r.runtime_s for r in ok) * 1000.0 if ok else None,
        beam_ms=results[0].runtime_s * 1000.0 if results and results[0].status == "ok" else None,
        sample_files=[files[i] for i in sorted(files)], errors=errors,
    )


@dataclass
class RetrainReport:
    """Summary of `retrain_cost_model`, also the `--json` output of `autosearch halide retrain`."""

    weights_path: str
    samples_dir: str
    batches: list[dict[str, Any]]
    samples: int
    groups: int
    skipped_files: list[str]
    final_loss: float | None
    metrics: dict[str, float]
    random_init: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _open_store(store: Any) -> tuple[Any, bool]:
    if store is None or hasattr(store, "add_measurements"):
        return store, False
    from autosearch.store.db import Store

    return Store(store), True


def retrain_cost_model(
    gen_path: str,
    demo_name: str,
    batch_num: int,
    batch_size: int = 16,
    samples_dir: str = "./default_samples",
    weight_path: str = "./random_init.weights",
    learning_rate: float = 0.001,
    train_iters: int = 200,
    *,
    threads: int | None = None,
    store: Any = None,
    pipeline_params: dict[str, Any] | None = None,
    seed: int = 0,
    repeats: int = 5,
    beam_size: int = 32,
    progress: bool = True,
) -> RetrainReport:
    """Sample `batch_num` batches of `gen_path` and retrain the weights at `weight_path` after each.

    `gen_path` is a pipeline file (`.py` defining `pipeline(**params)`), a builtin name, or
    `random` (batch B then uses random pipeline seed `seed + B`, so each batch is a new program).
    New batches continue the numbering in `samples_dir`; `batch_num=0` only retrains on the
    samples already there. A missing `weight_path` starts from
    random weights (Halide's randomize with `seed`). Training uses every sample in `samples_dir`.
    The retrained weights are written back to `weight_path`, loadable by Adams2019's
    `weights_path` parameter. `store` is a `Store` or a database path (optional).
    """
    if not isinstance(batch_num, int) or batch_num < 0:
        raise InputError(f"batch_num must be a non-negative integer, got {batch_num!r}")
    if not demo_name or not re.fullmatch(r"[A-Za-z0-9_.-]+", demo_name):
        raise InputError(f"demo_name {demo_name!r} must be non-empty letters, digits, '_', '.', '-'")
    wp = Path(weight_path)
    if wp.suffix != ".weights":
        raise InputError(f"weight_path {wp} must end in '.weights' (Adams2019 treats anything else as a directory)")
    trainer = Adams2019Trainer(learning_rate, train_iters, num_cores=int(threads or os.cpu_count() or 1),
                               seed=seed, progress=progress)
    trainer._check()
    base_spec = None if gen_path == "random" else resolve_pipeline(gen_path, pipeline_params)
    random_init = not wp.exists()
    weights = Weights.random(seed) if random_init else Weights.load(wp)
    if random_init:
        weights.save(wp)
    else:
        validate_weights_file(wp)
    db, close = _open_store(store)
    reports: list[dict[str, Any]] = []
    losses: list[float] = []
    skipped: list[str] = []
    batches = []
    try:
        for _ in range(batch_num):
            bid = next_batch_id(samples_dir)
            spec = base_spec or resolve_pipeline("random", {**(pipeline_params or {}), "seed": seed + bid})
            rep = sample_batch(spec, samples_dir, batch_size=batch_size, batch_id=bid, weights_path=wp,
                               threads=trainer.num_cores, name=demo_name, store=db, repeats=repeats,
                               beam_size=beam_size, progress=progress)
            reports.append(asdict(rep))
            skipped = []
            samples = load_from_dir(samples_dir, skipped=skipped)
            batches = group_samples(samples, min_schedules=2)
            if not batches:
                continue  # nothing trainable yet (e.g. every candidate failed)
            result = trainer.fit(weights, batches)
            weights = result.weights
            weights.save(wp)
            losses = result.losses
        if batch_num == 0:  # retrain on the samples already there
            batches = group_samples(load_from_dir(samples_dir, skipped=skipped), min_schedules=2)
            result = trainer.fit(weights, batches)
            weights, losses = result.weights, result.losses
            weights.save(wp)
    finally:
        if close:
            db.close()
    metrics = evaluate(weights, batches, trainer.num_cores) if batches else {}
    return RetrainReport(
        weights_path=str(wp), samples_dir=str(samples_dir), batches=reports,
        samples=sum(b.size for b in batches), groups=len(batches), skipped_files=skipped,
        final_loss=losses[-1] if losses else None, metrics=metrics, random_init=random_init,
    )
