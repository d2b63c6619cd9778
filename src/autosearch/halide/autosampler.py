"""Facade: the autosampler API of the seed document (`retrain_cost_model`, sample loading)."""

from autosearch.backends.halide.autosampler import (
    BatchReport,
    RetrainReport,
    next_batch_id,
    retrain_cost_model,
    sample_batch,
)
from autosearch.backends.halide.pipelines import PipelineDef, resolve_pipeline
from autosearch.backends.halide.sample_io import Sample, load_a_sample, load_from_dir
from autosearch.backends.halide.weights import Weights

__all__ = [
    "BatchReport",
    "PipelineDef",
    "RetrainReport",
    "Sample",
    "Weights",
    "load_a_sample",
    "load_from_dir",
    "next_batch_id",
    "resolve_pipeline",
    "retrain_cost_model",
    "sample_batch",
]
