"""The autosampler and `retrain_cost_model` of the seed document: Halide's autotune loop
(adams2019_autotune_loop.sh) in Python, writing Halide-compatible `.sample` files and the store,
and retraining the Adams2019 weights after every batch.

Why this layer: the loop meets the Halide backend (sampling), the store (records) and the
Adams2019 model (training); `autosearch.halide` sits above all three. Sampling runs in
`python -m` worker processes, so this works from a plain script without a main guard, from
`python -` and from a notebook.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autosearch.backends.halide.autoschedule import CandidateResult
from autosearch.backends.halide.pipelines import (
    PipelineDef,
    PipelineSpec,
    resolve_pipeline,
)
from autosearch.backends.halide.sample_io import (
    Sample,
    featurization_matrix,
    load_a_sample,
    load_from_dir,
)
from autosearch.backends.halide.sampling import (
    EXTRACTOR,
    BatchReport,
    batch_params,
    describe_pipeline,
    next_batch_id,
)
from autosearch.backends.halide.sampling import sample_batch as _sample_batch
from autosearch.backends.halide.toolchain import default_threads, device_fingerprint, target_json
from autosearch.backends.halide.weights import Weights, validate_weights_file
from autosearch.errors import AutosearchError, InputError

__all__ = [
    "BatchReport",
    "NoSamplesError",
    "PipelineDef",
    "RetrainReport",
    "Sample",
    "Weights",
    "batch_params",
    "load_a_sample",
    "load_from_dir",
    "next_batch_id",
    "resolve_pipeline",
    "retrain_cost_model",
    "sample_batch",
]


#: torch threads for retraining Adams2019: one pipeline's batch is small (<= 1024 schedules x its
#: stages x 39 features), and intra-op threads cost more in barriers than they save (on a shared
#: machine a step with two threads took over a hundred times as long as with one; bench/HISTORY.md,
#: "Figures from the code's docstrings").
TRAIN_THREADS = 1


class NoSamplesError(AutosearchError):
    """A batch produced no successful sample: there is nothing to train on."""


def _write_store(
    store: Any,
    spec: PipelineSpec,
    ir: str,
    name: str,
    target: str,
    threads: int,
    results: list[CandidateResult],
    files: dict[int, str],
    batch_id: int,
    source: str,
) -> None:
    from autosearch.store.db import MeasurementRecord, WorkloadRecord

    key = spec.key()
    store.add_workload(
        WorkloadRecord(
            key=key,
            name=name,
            family=f"halide-{spec.kind}",
            backend="halide",
            params={"kind": spec.kind, "name": spec.name, **spec.params},
            ir=ir,
        )
    )
    tj = target_json(target, threads)
    dev = device_fingerprint()
    recs, feats = [], []
    for r in results:
        sid = batch_id * 10000 + r.index
        schedule = r.schedule_source or f"// failed: {json.dumps(r.params, sort_keys=True)}"
        recs.append(
            MeasurementRecord(
                workload_key=key,
                target=tj,
                device=dev,
                schedule=schedule,
                status=r.status,
                latencies=list(r.latencies),
                error=r.error,
                source=source,
                extra={
                    "pipeline_id": spec.pipeline_id(),
                    "schedule_id": sid,
                    "sample_file": files.get(r.index, ""),
                    "autoscheduler_params": r.params,
                },
            )
        )
        feats.append(featurization_matrix(r.featurization) if r.featurization and r.status == "ok" else None)
    store.add_measurements(recs, features=feats, extractor=EXTRACTOR)


def sample_batch(
    spec: PipelineSpec, samples_dir: str | os.PathLike[str] = "./default_samples", *, store: Any = None, **kw: Any
) -> BatchReport:
    """One batch (see `autosearch.backends.halide.sampling.sample_batch` for the arguments),
    with every candidate, failed ones too, recorded in `store` (a `Store`) when given."""
    if store is None:
        return _sample_batch(spec, samples_dir, **kw)
    ir = describe_pipeline(spec)
    box: dict[str, Any] = {}

    def record(results: list[CandidateResult], files: dict[int, str], target: str) -> None:
        box.update(results=results, files=files, target=target)

    rep = _sample_batch(spec, samples_dir, record=record, **kw)
    threads = int(kw.get("threads") or default_threads())
    _write_store(
        store,
        spec,
        ir,
        rep.pipeline,
        box["target"],
        threads,
        box["results"],
        box["files"],
        rep.batch_id,
        f"halide-autosampler:batch_{rep.batch_id}",
    )
    return rep


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
    batch_size: int = 32,
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
    # here, not at the top: a pipeline file imports `PipelineDef` from this module in every Halide
    # worker that loads it, and the trainer's torch import was most of each such start
    from autosearch.models.adams2019 import Adams2019Trainer, evaluate, group_samples

    n_threads = int(threads or default_threads())
    trainer = Adams2019Trainer(
        learning_rate, train_iters, num_cores=n_threads, seed=seed, progress=progress, threads=TRAIN_THREADS
    )
    trainer._check()
    base_spec = None if gen_path == "random" else resolve_pipeline(gen_path, pipeline_params)
    if base_spec is not None and batch_num > 0:
        describe_pipeline(base_spec)  # a file that raises, crashes or hangs: one error line, nothing written
    random_init = not wp.exists()
    if not random_init:
        validate_weights_file(wp)
    weights = Weights.random(seed) if random_init else Weights.load(wp)
    db, close = _open_store(store)
    reports: list[dict[str, Any]] = []
    losses: list[float] = []
    skipped: list[str] = []
    batches = []
    tmp = Path(tempfile.mkdtemp(prefix="autosearch-halide-init-"))
    try:
        for _ in range(batch_num):
            bid = next_batch_id(samples_dir)
            spec = base_spec or resolve_pipeline("random", {**(pipeline_params or {}), "seed": seed + bid})
            # random weights are only written to `weight_path` once they are trained on something
            current = wp if wp.exists() else weights.save(tmp / "random_init.weights")
            rep = sample_batch(
                spec,
                samples_dir,
                batch_size=batch_size,
                batch_id=bid,
                weights_path=current,
                threads=trainer.num_cores,
                name=demo_name,
                store=db,
                repeats=repeats,
                beam_size=beam_size,
                progress=progress,
            )
            reports.append(asdict(rep))
            if rep.ok == 0:
                raise NoSamplesError(
                    f"batch {bid} of {spec.label}: none of its {batch_size} schedules ran "
                    f"({rep.errors[0] if rep.errors else 'no error reported'}); no weights written"
                )
            skipped = []
            samples = load_from_dir(samples_dir, skipped=skipped)
            batches = group_samples(samples, min_schedules=2)
            if not batches:
                continue  # nothing trainable yet (e.g. a batch of one schedule)
            result = trainer.fit(weights, batches)
            weights = result.weights
            weights.save(wp)
            losses = result.losses
        if batch_num == 0:  # retrain on the samples already there
            batches = group_samples(load_from_dir(samples_dir, skipped=skipped), min_schedules=2)
            result = trainer.fit(weights, batches)
            weights, losses = result.weights, result.losses
            weights.save(wp)
        if not wp.exists():  # every batch ran but none could train (one schedule each): the seed's random init
            weights.save(wp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if close:
            db.close()
    metrics = evaluate(weights, batches, trainer.num_cores) if batches else {}
    return RetrainReport(
        weights_path=str(wp),
        samples_dir=str(samples_dir),
        batches=reports,
        samples=sum(b.size for b in batches),
        groups=len(batches),
        skipped_files=skipped,
        final_loss=losses[-1] if losses else None,
        metrics=metrics,
        random_init=random_init,
    )
