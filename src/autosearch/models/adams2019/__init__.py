"""The Adams2019 cost model (Halide's `cost_model_generator.cpp`) in PyTorch, its trainer
(`retrain_cost_model.cpp`), and the model behind autosearch's `CostModel` contract.

Why exact: weights trained here are loaded by the real autoscheduler, so the function they are
trained for must be the one Halide evaluates. `tests/test_halide_parity.py` checks predictions,
loss, gradients and one ADAM step against the compiled model inside the Halide wheel.

This package knows nothing of Halide: parameters are six float32 arrays by name in Halide's index
order (`head1_filter[c, x, y]`); anything with `.items()` of those works (a dict, or the
`.weights` file reader `autosearch.backends.halide.weights.Weights`, which `fit` hands back in
kind). Samples are anything with `pipeline_id`, `runtime_ms`, `num_stages`,
`schedule_features` (S, 39) and `pipeline_features` (S, 40, 7).

Shapes (one pipeline, N schedules of it, S stages in reverse realization order):
    pipeline_features  (S, 40, 7)  float32
    schedule_features  (N, S, 39)  float32, raw (the log is taken inside, as Halide does)

Training follows Halide's loop: samples grouped by pipeline_id (pipeline features from the
group's first sample), identical schedules merged keeping the fastest runtime, each group one
batch (at most 1024 schedules, a random window beyond that), the reference is the fastest
schedule of the batch, one ADAM (beta 0.9 / 0.999, eps 1e-5) step per batch, one epoch visits
every group once. Every batch holds ONE pipeline: the loss compares each schedule with the fastest
of its batch, which only means something within one program.

Fine-tuning options beyond Halide's tool (off by default, so the plain trainer stays step for
step `adams2019_retrain_cost_model`): `calibrate=True` scales conv1 by the one loss-minimising
factor first (every cost term is linear in the relu'd conv1 outputs, so the ordering is
untouched); `fit(..., valid=...)` with `select="best_valid"` keeps the epoch with the best
validation pairwise ordering, epoch 0 (the starting weights) included and winning ties.

This package `__init__` is the documented face (docs/halide.md: `autosearch.models.adams2019`);
each concern is a module of its own: `net` (the network and its cost terms), `loss`, `batches`
(one batch per pipeline), `metrics` (ranking, selection score, calibration), `optim` (the
autograd and the fused ADAM steps), `trainer` (Halide's loop) and `model` (the `CostModel`).
"""

from autosearch.adams2019_sizes import BUFFER_SHAPES
from autosearch.models.adams2019.batches import PipelineBatch, group_samples
from autosearch.models.adams2019.loss import adams2019_loss, reference_index
from autosearch.models.adams2019.metrics import (
    calibration_factor,
    evaluate,
    halide_ordering_rate,
    ordering_score,
    predict_group,
)
from autosearch.models.adams2019.model import EXTRACTOR, Adams2019Model, batches_from_dataset
from autosearch.models.adams2019.net import Adams2019Net, PreparedSchedules, cost_terms, fast_log, prepare_schedules
from autosearch.models.adams2019.optim import Adam
from autosearch.models.adams2019.trainer import Adams2019Trainer, TrainResult

__all__ = [
    "BUFFER_SHAPES",
    "EXTRACTOR",
    "Adam",
    "Adams2019Model",
    "Adams2019Net",
    "Adams2019Trainer",
    "PipelineBatch",
    "PreparedSchedules",
    "TrainResult",
    "adams2019_loss",
    "batches_from_dataset",
    "calibration_factor",
    "cost_terms",
    "evaluate",
    "fast_log",
    "group_samples",
    "halide_ordering_rate",
    "ordering_score",
    "predict_group",
    "prepare_schedules",
    "reference_index",
]
