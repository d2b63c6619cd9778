"""Halide Adams2019: pipelines, the child-process autoscheduler driver, `.sample` and `.weights`
formats, the cost model in PyTorch and its training, and the autosampler.

Modules import Halide lazily, so `import autosearch.backends.halide` is cheap.
"""

from autosearch.backends.halide.pipelines import (
    PipelineDef,
    PipelineSpec,
    build_pipeline,
    resolve_pipeline,
)
from autosearch.backends.halide.sample_io import (
    Sample,
    load_a_sample,
    load_from_dir,
    write_sample,
)
from autosearch.backends.halide.weights import Weights, validate_weights_file

__all__ = [
    "PipelineDef",
    "PipelineSpec",
    "Sample",
    "Weights",
    "build_pipeline",
    "load_a_sample",
    "load_from_dir",
    "resolve_pipeline",
    "validate_weights_file",
    "write_sample",
]
