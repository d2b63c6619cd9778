"""The Adams2019 cost model (Halide's `cost_model_generator.cpp`) in PyTorch, its trainer
(`retrain_cost_model.cpp`), and the model behind autosearch's `CostModel` contract.

Why exact: weights trained here are loaded by the real autoscheduler, so the function they are
trained for must be the one Halide evaluates. `tests/test_halide_parity.py` checks predictions,
loss, gradients and one ADAM step against the compiled model inside the Halide wheel.

This module knows nothing of Halide: parameters are six float32 arrays by name in Halide's index
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
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import torch
from torch import nn

from autosearch.adams2019_sizes import BUFFER_SHAPES, HEAD1_CHANNELS, NUM_FEATURES, NUM_SCHEDULE_FEATURES
from autosearch.errors import InputError
from autosearch.models.base import CostModel, FeatureBatch, TrainReport
from autosearch.training.metrics import group_metrics, mean_metrics

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

#: The feature extractor the Halide backend stores (stages x 326 floats, the `.sample` layout).
EXTRACTOR: tuple[str, str] = ("halide-adams2019", "1")


class ParamSet(Protocol):
    """Six named float32 arrays (a dict, or a `Weights`)."""

    def items(self) -> Iterable[tuple[str, np.ndarray]]: ...


class SampleLike(Protocol):
    """One measured schedule of one pipeline (e.g. a `.sample` file's contents)."""

    pipeline_id: int
    runtime_ms: float

    @property
    def num_stages(self) -> int: ...

    @property
    def schedule_features(self) -> np.ndarray: ...

    @property
    def pipeline_features(self) -> np.ndarray: ...


P = TypeVar("P", bound=ParamSet)


def _like(weights: P, net: Adams2019Net) -> P:
    """The network's parameters in the container type the caller gave (`type(w)(arrays)`)."""
    return type(weights)(net.params())  # type: ignore[call-arg]  # dict and Weights both take a name->array map


_LOG2 = float(torch.log(torch.tensor(2.0, dtype=torch.float32)))
_FAST_LOG_COEFF = (
    0.07640318789187280912,
    -0.16252961013874300811,
    0.20625219040645212387,
    -0.25110261010892864775,
    0.33320464908377461777,
    -0.49997513376789826101,
    1.0,
    0.0,
)


def fast_log(x: torch.Tensor) -> torch.Tensor:
    """Halide's `fast_log` (IROperator.cpp): range reduction to (0.75, 1.5) plus a degree-7
    polynomial. Differs from `torch.log` by ~1e-7 relative; used so predictions match Halide."""
    x = x.to(torch.float32)
    iv = x.view(torch.int32)
    no_exponent = iv & torch.tensor(0x807FFFFF - (1 << 32), dtype=torch.int32)
    new_exponent = no_exponent >> 22
    new_biased = 127 - new_exponent
    exponent = (iv >> 23) - new_biased
    reduced = (no_exponent | (new_biased << 23)).view(torch.float32)
    x1 = reduced - 1.0
    c = [torch.tensor(v, dtype=torch.float32) for v in _FAST_LOG_COEFF]
    x2 = x1 * x1
    even, odd = c[0], c[1]
    for i in range(2, 8):
        if i % 2 == 0:
            even = even * x2 if c[i] == 0 else even * x2 + c[i]
        else:
            odd = odd * x2 if c[i] == 0 else odd * x2 + c[i]
    result = even * x1 + odd
    return result + exponent.to(torch.float32) * torch.tensor(_LOG2, dtype=torch.float32)


class Adams2019Net(nn.Module):
    """head1 (8 x 40 x 7, sigmoid-squashed) on pipeline features, head2 (24 x 39, relu) on
    log(1 + schedule features), conv1 (32 x 32, relu) -> 32 coefficients per stage, which weigh
    the hand-designed compute / load / store / parallelism / working-set terms.

    Parameters carry Halide's buffer names and Halide's index order (`head1_filter[c, x, y]`).
    """

    head1_filter: nn.Parameter
    head1_bias: nn.Parameter
    head2_filter: nn.Parameter
    head2_bias: nn.Parameter
    conv1_filter: nn.Parameter
    conv1_bias: nn.Parameter

    def __init__(self, num_cores: int = 32, weights: ParamSet | None = None) -> None:
        super().__init__()
        self.num_cores = int(num_cores)
        for name, shape in BUFFER_SHAPES.items():
            self.register_parameter(name, nn.Parameter(torch.zeros(shape, dtype=torch.float32)))
        if weights is not None:
            self.load_params(weights)

    def load_params(self, weights: ParamSet) -> None:
        """Copy the six buffers (name -> Halide-order array) into the network."""
        arrays = dict(weights.items())
        missing = set(BUFFER_SHAPES) - set(arrays)
        if missing:
            raise InputError(f"Adams2019 parameters lack {sorted(missing)}")
        with torch.no_grad():
            for name, shape in BUFFER_SHAPES.items():
                arr = np.asarray(arrays[name], dtype=np.float32)
                if arr.shape != shape:
                    raise InputError(f"Adams2019 parameter {name} has shape {arr.shape}, expected {shape}")
                getattr(self, name).copy_(torch.from_numpy(arr.copy()))

    def params(self) -> dict[str, np.ndarray]:
        """The six buffers as float32 arrays (copies)."""
        return {n: getattr(self, n).detach().cpu().numpy().astype(np.float32) for n in BUFFER_SHAPES}

    def forward(
        self, pipeline_features: torch.Tensor, schedule_features: torch.Tensor, num_cores: int | None = None
    ) -> torch.Tensor:
        """Predicted runtime (Halide's units, ~seconds) of each of the N schedules: (N,)."""
        return self.forward_with_coefficients(pipeline_features, schedule_features, num_cores)[0]

    def forward_with_coefficients(
        self, pipeline_features: torch.Tensor, schedule_features: torch.Tensor, num_cores: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(predicted runtimes (N,), conv1_stage2 pre-activation (N, S, 32))."""
        cores = self.num_cores if num_cores is None else num_cores
        return self.forward_prepared(pipeline_features, prepare_schedules(schedule_features, cores))

    def forward_prepared(
        self, pipeline_features: torch.Tensor, prepared: PreparedSchedules
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward pass on schedule features already turned into their weight-free parts
        (`prepare_schedules`): the trainer builds those once, not once per step."""
        pf = pipeline_features.to(torch.float32)
        squashed = torch.sigmoid(self.head1_filter)  # (8, 40, 7)
        head1_conv = self.head1_bias + (squashed.reshape(HEAD1_CHANNELS, -1) @ pf.reshape(pf.shape[0], -1).T).T
        head2_relu = torch.relu(self.head2_bias + prepared.normalized @ self.head2_filter.T)  # (N, S, 24)
        stage1 = self.conv1_bias + head1_conv @ self.conv1_filter[:, :HEAD1_CHANNELS].T  # (S, 32)
        stage2 = stage1.unsqueeze(0) + head2_relu @ self.conv1_filter[:, HEAD1_CHANNELS:].T  # (N, S, 32)
        # every cost term is one relu'd coefficient times a feature-only factor (cost_terms);
        # 0 x an inf/NaN coefficient still propagates, as Halide's `+ 0 * coefficient` does
        runtime_per_stage = (torch.relu(stage2) * prepared.terms).sum(-1)
        return runtime_per_stage.sum(-1), stage2


@dataclass
class PreparedSchedules:
    """What the forward pass needs of N schedules' features, with no weight in it: computed once
    per batch of training (Halide's generator recomputes it every step; it never changes)."""

    normalized: torch.Tensor  # (N, S, 39) fast_log(features + 1), head2's input
    terms: torch.Tensor  # (N, S, 32) x 1e-9: runtime = sum over stages and k of relu(coefficient k) * terms[k]


def prepare_schedules(schedule_features: torch.Tensor, num_cores: int) -> PreparedSchedules:
    """`fast_log(features + 1)` and `cost_terms`, for `Adams2019Net.forward_prepared`."""
    sf = schedule_features.to(torch.float32)
    return PreparedSchedules(fast_log(sf + 1), cost_terms(sf, num_cores) * torch.tensor(1e-9, dtype=torch.float32))


def cost_terms(schedule_features: torch.Tensor, num_cores: int) -> torch.Tensor:
    """The hand-designed cost model of `cost_model_generator.cpp`, written as 32 feature-only
    factors, one per coefficient: stage cost = sum_k relu(coefficient k) * factor k. Halide's model
    is linear in the relu'd coefficients (its `select`s pick a coefficient by a feature-only
    condition), so this is the same function; only the float summation order differs (~1e-7)."""
    sf = schedule_features.to(torch.float32)
    (
        num_realizations,
        num_productions,
        _pcpr,
        _pcpp,
        _pct,
        _pcm,
        _ile,
        _iple,
        _ule,
        inner_parallelism,
        outer_parallelism,
        bytes_at_realization,
        bytes_at_production,
        _bar,
        _ibreal,
        _ibprod,
        _ibroot,
        inlined_calls,
        unique_bytes_read_per_realization,
        unique_lines_read_per_realization,
        _abrpr,
        working_set,
        vector_size,
        _nvs,
        num_vectors,
        num_scalars,
        scalar_loads_per_vector,
        vector_loads_per_vector,
        scalar_loads_per_scalar,
        bytes_at_task,
        innermost_bytes_at_task,
        unique_bytes_read_per_vector,
        unique_lines_read_per_vector,
        unique_bytes_read_per_task,
        unique_lines_read_per_task,
        _wsat,
        _wsap,
        _wsar,
        _wsaroot,
    ) = (sf[..., i] for i in range(sf.shape[-1]))
    one = torch.tensor(1.0, dtype=torch.float32)
    zero = torch.zeros_like(num_realizations)
    cores = float(num_cores)

    # compute: coefficient 0/1 for stages without inlined calls, 2/3 with, times the idle-core waste
    num_tasks = torch.maximum(one, inner_parallelism * outer_parallelism)
    tasks_per_core = num_tasks / cores
    idle_core_wastage = torch.ceil(tasks_per_core) / torch.maximum(one, tasks_per_core)
    not_inlined = (inlined_calls == 0).to(torch.float32)
    vector_work = vector_size * num_vectors * idle_core_wastage
    scalar_work = num_scalars * idle_core_wastage
    # stores (Halide's FIXME: the trained weights count every store cost twice)
    parallel = (inner_parallelism > 1).to(torch.float32)
    is_output = (torch.arange(sf.shape[1]) == 0).to(torch.float32).unsqueeze(0)  # stage w == 0
    serial_output, serial_inner = (1 - parallel) * is_output, (1 - parallel) * (1 - is_output)
    lines_written_per_realization = inner_parallelism * (bytes_at_task / torch.maximum(one, innermost_bytes_at_task))
    lines_term = 2 * num_realizations * lines_written_per_realization
    bytes_term = 2 * num_realizations * bytes_at_realization
    max_threads_hitting_same_page_fault = torch.minimum(
        inner_parallelism, 4096 / torch.maximum(one, innermost_bytes_at_task)
    )
    terms = [
        vector_work * not_inlined,  # 0
        scalar_work * not_inlined,  # 1
        vector_work * (1 - not_inlined),  # 2
        scalar_work * (1 - not_inlined),  # 3
        zero,  # 4: unused
        num_realizations * unique_lines_read_per_realization,  # 5: loads
        num_realizations * unique_bytes_read_per_realization,  # 6
        num_vectors * scalar_loads_per_vector,  # 7
        num_scalars * scalar_loads_per_scalar,  # 8
        num_vectors * vector_loads_per_vector,  # 9
        num_scalars * unique_bytes_read_per_vector,  # 10
        num_vectors * unique_bytes_read_per_vector,  # 11
        num_scalars * unique_lines_read_per_vector,  # 12
        num_vectors * unique_lines_read_per_vector,  # 13
        num_tasks * unique_bytes_read_per_task,  # 14
        num_tasks * unique_lines_read_per_task,  # 15
        lines_term * parallel,  # 16: alpha, parallel stage
        lines_term * serial_output,  # 17: alpha, serial output
        lines_term * serial_inner,  # 18: alpha, serial other stage
        bytes_term * parallel,  # 19: beta
        bytes_term * serial_output,  # 20
        bytes_term * serial_inner,  # 21
        2 * parallel * (num_vectors + num_scalars) / torch.maximum(one, innermost_bytes_at_task),  # 22: false sharing
        2  # 23: page faults
        * bytes_at_production
        * max_threads_hitting_same_page_fault
        * inner_parallelism
        * outer_parallelism,
        num_realizations,  # 24: malloc
        num_productions * parallel,  # 25: parallel launches
        num_productions * (inner_parallelism - 1),  # 26: parallel tasks
        working_set,  # 27
    ]
    terms += [zero] * (32 - len(terms))  # 28-31: unused
    return torch.stack(terms, dim=-1)


def reference_index(true_runtimes: torch.Tensor) -> int:
    """Index of the fastest schedule (the first one on ties), Halide's `fastest_idx`."""
    return int(torch.argmin(true_runtimes).item())


def adams2019_loss(
    prediction: torch.Tensor, stage2: torch.Tensor, true_runtimes: torch.Tensor, reference: int | None = None
) -> torch.Tensor:
    """L2 on throughput relative to the fastest schedule of the batch, plus 1e-5 x the sum of
    negative pre-activation coefficients (keeps relus alive), summed over the batch."""
    t = true_runtimes.to(torch.float32)
    ref = reference_index(t) if reference is None else max(0, min(int(reference), t.shape[0] - 1))
    scale = 1.0 / t[ref]
    p1 = prediction * scale
    r1 = t * scale
    delta = (1.0 / torch.clamp(p1, min=1e-10) - 1.0 / r1) ** 2
    regularize = (-torch.clamp(stage2, max=0)).sum(dim=(1, 2))
    return (delta + 1e-5 * regularize).sum()


MAX_BATCH = 1024


@dataclass
class PipelineBatch:
    """All unique schedules of one pipeline, ready for the network."""

    pipeline_id: int
    pipeline_features: torch.Tensor  # (S, 40, 7)
    schedule_features: torch.Tensor  # (N, S, 39)
    runtimes_ms: torch.Tensor  # (N,)
    paths: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return int(self.runtimes_ms.shape[0])


def _unique_schedules(samples: Iterable[SampleLike]) -> list[SampleLike]:
    """Merge samples with identical schedule features, keeping the fastest runtime (as Halide does)."""
    best: dict[tuple[int, bytes], SampleLike] = {}
    for s in samples:
        k = (s.pipeline_id, np.ascontiguousarray(s.schedule_features).tobytes())
        if k not in best or s.runtime_ms < best[k].runtime_ms:
            best[k] = s
    return list(best.values())


def group_samples(samples: Sequence[SampleLike], min_schedules: int = 2) -> list[PipelineBatch]:
    """Group by pipeline_id, merge duplicate schedules, drop groups with too few schedules
    (Halide's tool needs 8; the default 2 lets tiny test batches train)."""
    by_pid: dict[int, list[SampleLike]] = {}
    for s in samples:
        by_pid.setdefault(s.pipeline_id, []).append(s)
    out = []
    for pid in sorted(by_pid):
        group = by_pid[pid]
        stages = group[0].num_stages
        bad = [str(getattr(s, "path", "")) for s in group if s.num_stages != stages]
        if bad:
            raise InputError(
                f"pipeline_id {pid}: samples disagree on the number of stages ({bad[0]}); pipeline ids must be unique per pipeline"
            )
        uniq = _unique_schedules(group)
        if len(uniq) < max(1, min_schedules):
            continue
        out.append(
            PipelineBatch(
                pid,
                torch.from_numpy(np.ascontiguousarray(group[0].pipeline_features)),
                torch.from_numpy(np.stack([u.schedule_features for u in uniq])),
                torch.tensor([u.runtime_ms for u in uniq], dtype=torch.float32),
                [str(getattr(u, "path", "")) for u in uniq],
            )
        )
    return out


def halide_ordering_rate(pred: np.ndarray, runtimes: np.ndarray) -> tuple[int, int]:
    """Halide's "Rate": among schedules > 1.3x slower than the fastest, how many are predicted
    slower than it. Returns (good, total)."""
    ref = int(np.argmin(runtimes))
    good = bad = 0
    for i in range(len(runtimes)):
        if runtimes[i] / runtimes[ref] <= 1.3:
            continue
        if pred[i] >= pred[ref]:
            good += 1
        else:
            bad += 1
    return good, good + bad


@torch.no_grad()
def predict_group(net: Adams2019Net, batch: PipelineBatch) -> np.ndarray:
    """Predicted runtimes of every schedule of one pipeline."""
    return net(batch.pipeline_features, batch.schedule_features).numpy()


def evaluate(weights: ParamSet, batches: Sequence[PipelineBatch], num_cores: int = 32) -> dict[str, float]:
    """Ranking metrics (shared definitions) of a weight set on grouped samples; score = -prediction."""
    net = Adams2019Net(num_cores, weights)
    per_group = []
    good = total = 0
    for b in batches:
        pred = predict_group(net, b)
        rt = b.runtimes_ms.numpy().astype(np.float64) / 1000.0
        per_group.append(group_metrics(-pred, rt))
        g, t = halide_ordering_rate(pred, rt)
        good, total = good + g, total + t
    out = mean_metrics(per_group)
    out["halide_rate"] = good / total if total else float("nan")
    return out


def ordering_score(net: Adams2019Net, batches: Sequence[PipelineBatch], num_cores: int) -> float:
    """Mean over pipelines of the pairwise ordering accuracy (the selection score)."""
    vals = []
    for b in batches:
        with torch.no_grad():
            pred = net(b.pipeline_features, b.schedule_features, num_cores).numpy()
        m = group_metrics(-pred, b.runtimes_ms.numpy().astype(np.float64))
        if not math.isnan(m["pairwise"]):
            vals.append(m["pairwise"])
    return float(np.mean(vals)) if vals else float("nan")


@torch.no_grad()
def calibration_factor(net: Adams2019Net, batches: Sequence[PipelineBatch], num_cores: int) -> float:
    """The factor a > 0 minimising sum (1/(a p) - 1/r)^2 over every batch (p, r relative to the
    batch's fastest true runtime), in closed form: 1/a = sum(u v) / sum(u u), u = 1/p, v = 1/r."""
    num = den = 0.0
    for b in batches:
        pred = net(b.pipeline_features, b.schedule_features, num_cores).double()
        t = b.runtimes_ms.double()
        ref = t.min()
        u = 1.0 / torch.clamp(pred / ref, min=1e-10)
        v = 1.0 / (t / ref)
        num += float((u * v).sum())
        den += float((u * u).sum())
    if not (num > 0 and den > 0 and math.isfinite(num) and math.isfinite(den)):
        return 1.0
    return den / num


@dataclass
class TrainResult:
    weights: Any  # the type `fit` was given (Weights, or a dict of arrays)
    losses: list[float]  # mean loss per epoch
    epochs: int
    groups: int
    schedules: int
    calibration: float = 1.0  # factor applied to conv1 before training (1 = none)
    valid_scores: list[float] = field(default_factory=list)  # [start, after epoch 1, ...]
    best_epoch: int | None = None  # the epoch kept (0 = the starting weights); None = the last
    last_weights: Any = None  # the last epoch's weights (= weights unless selection kept another)


class Adam:
    """ADAM as `torch.optim.Adam` computes it (no amsgrad, no weight decay), in a dozen lines.

    Why not torch's: its constructor imports `torch._dynamo` (~3 s, once per process: longer than
    a whole retrain of an autotune batch) and its step has ~0.2 ms of Python per call."""

    def __init__(
        self, params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
    ) -> None:
        self.params, self.lr, self.betas, self.eps = params, float(lr), betas, float(eps)
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        bc1, bc2_sqrt = 1 - b1**self.t, math.sqrt(1 - b2**self.t)
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            g = p.grad
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.addcdiv_(m, (v.sqrt() / bc2_sqrt).add_(self.eps), value=-self.lr / bc1)


@dataclass
class _Ready:
    """One training batch with its weight-free tensors built once (not once per epoch), also as
    contiguous float32 numpy arrays for `_FusedAdam` (the fit loop's hand-written step)."""

    batch: PipelineBatch
    prepared: PreparedSchedules
    runtimes: torch.Tensor
    reference: int
    pf: np.ndarray = field(repr=False)  # (S, 280) pipeline features, head1's input
    normalized: np.ndarray = field(repr=False)  # (N, S, 39)
    terms: np.ndarray = field(repr=False)  # (N, S, 32)
    rt: np.ndarray = field(repr=False)  # (N,)

    @classmethod
    def of(cls, batch: PipelineBatch, num_cores: int) -> _Ready:
        rt = batch.runtimes_ms.to(torch.float32)
        prepared = prepare_schedules(batch.schedule_features, num_cores)
        pf = batch.pipeline_features.to(torch.float32)

        def c(t: torch.Tensor) -> np.ndarray:
            return np.ascontiguousarray(t.detach().numpy(), dtype=np.float32)

        return cls(
            batch,
            prepared,
            rt,
            reference_index(rt),
            c(pf.reshape(pf.shape[0], -1)),
            c(prepared.normalized),
            c(prepared.terms),
            c(rt),
        )

    @property
    def size(self) -> int:
        return int(self.runtimes.shape[0])


class _FusedAdam:
    """`fit`'s training step without autograd: the forward pass, the gradient of
    `adams2019_loss` written out by hand, and one ADAM update over all six parameters at once.

    Why: one step is a few dozen operations on tensors of a few thousand floats, where autograd's
    graph building and torch's per-operation dispatch cost more than the arithmetic (the autograd
    step measured ~0.6 ms, most of it in `backward`). Here the parameters are views of ONE flat
    float32 array that the network's parameters share (so `net` always holds the current weights,
    for validation and the result), the gradient is written into a flat array beside it, and the
    update is Adam's arithmetic done once on the flat arrays. The result equals `Adam` after
    autograd's `backward` up to float rounding (tests/test_halide_train.py checks both against
    each other and against Halide's gradients). ReLU's gradient at exactly 0 is 0 and
    `clamp(max=0)`'s is 1, as torch's."""

    def __init__(
        self, net: Adams2019Net, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-5
    ) -> None:
        self.lr, self.betas, self.eps = float(lr), betas, float(eps)
        sizes = {n: math.prod(s) for n, s in BUFFER_SHAPES.items()}
        total = sum(sizes.values())
        self.theta = np.empty(total, np.float32)
        self.grad = np.zeros(total, np.float32)
        self.m = np.zeros(total, np.float32)
        self.v = np.zeros(total, np.float32)
        self.t = 0
        w: dict[str, np.ndarray] = {}
        g: dict[str, np.ndarray] = {}
        off = 0
        for name, shape in BUFFER_SHAPES.items():
            w[name] = self.theta[off : off + sizes[name]].reshape(shape)
            g[name] = self.grad[off : off + sizes[name]].reshape(shape)
            param = getattr(net, name)
            w[name][...] = param.detach().numpy()
            param.data = torch.from_numpy(w[name])  # the network reads the same memory
            off += sizes[name]
        h1 = HEAD1_CHANNELS
        self.h1f, self.h1b = w["head1_filter"].reshape(h1, -1), w["head1_bias"]
        self.h2f, self.h2b = w["head2_filter"], w["head2_bias"]
        self.c1f, self.c1b = w["conv1_filter"], w["conv1_bias"]
        self.g_h1f, self.g_h1b = g["head1_filter"].reshape(h1, -1), g["head1_bias"]
        self.g_h2f, self.g_h2b = g["head2_filter"], g["head2_bias"]
        self.g_c1f, self.g_c1b = g["conv1_filter"], g["conv1_bias"]
        self.grad_views = g  # name -> the gradient in Halide's shape (a view of `grad`)

    def loss_and_grad(self, r: _Ready, rng: random.Random | None = None) -> float:
        """The loss of one batch at the current weights; its gradient into `self.grad`."""
        norm, terms, rt, ref = r.normalized, r.terms, r.rt, r.reference
        n = r.size
        if n > MAX_BATCH:  # Halide's random window of at most 1024 schedules
            first = (rng or random.Random(0)).randrange(n - MAX_BATCH)
            window = slice(first, first + MAX_BATCH)
            norm, terms, rt = norm[window], terms[window], rt[window]
            ref, n = int(np.argmin(rt)), MAX_BATCH
        s = r.pf.shape[0]
        h1 = HEAD1_CHANNELS
        c1f_head1, c1f_head2 = self.c1f[:, :h1], self.c1f[:, h1:]
        # forward
        th = np.tanh(self.h1f * np.float32(0.5))
        squashed = th * np.float32(0.5) + np.float32(0.5)  # sigmoid, without exp's overflow
        head1_conv = r.pf @ squashed.T
        head1_conv += self.h1b  # (S, 8)
        norm2 = norm.reshape(n * s, -1)
        pre2 = norm2 @ self.h2f.T
        pre2 += self.h2b
        head2_relu = np.maximum(pre2, np.float32(0))  # (N*S, 24)
        stage1 = head1_conv @ c1f_head1.T
        stage1 += self.c1b  # (S, 32)
        stage2 = (head2_relu @ c1f_head2.T).reshape(n, s, -1)
        stage2 += stage1  # (N, S, 32)
        active = stage2 > 0
        weighted = np.where(active, stage2, np.float32(0))
        weighted *= terms
        pred = np.add.reduce(weighted.reshape(n, -1), axis=1)  # (N,)
        scale = np.float32(1) / rt[ref]
        p1 = pred * scale
        inv = np.float32(1) / np.maximum(p1, np.float32(1e-10))
        diff = inv - np.float32(1) / (rt * scale)
        negative = np.minimum(stage2, np.float32(0))
        loss = float(np.dot(diff, diff)) - 1e-5 * float(negative.sum(dtype=np.float64))
        if not math.isfinite(loss):
            return loss
        # backward: d loss / d pred, then through the relu'd coefficients and the three layers
        g_pred = np.float32(-2) * diff * inv * inv * scale
        g_pred *= p1 >= np.float32(1e-10)
        g_stage2 = np.where(active, terms * g_pred[:, None, None], np.float32(-1e-5))  # (N, S, 32)
        g_flat = g_stage2.reshape(n * s, -1)
        g_stage1 = np.add.reduce(g_stage2, axis=0)  # (S, 32)
        np.add.reduce(g_stage1, axis=0, out=self.g_c1b)
        self.g_c1f[:, :h1] = g_stage1.T @ head1_conv
        self.g_c1f[:, h1:] = g_flat.T @ head2_relu
        g_head1 = g_stage1 @ c1f_head1  # (S, 8)
        np.add.reduce(g_head1, axis=0, out=self.g_h1b)
        np.matmul(g_head1.T, r.pf, out=self.g_h1f)
        self.g_h1f *= (np.float32(1) - th * th) * np.float32(0.25)  # sigmoid' = (1 - tanh^2) / 4
        g_pre2 = g_flat @ c1f_head2
        g_pre2 *= pre2 > 0
        np.add.reduce(g_pre2, axis=0, out=self.g_h2b)
        np.matmul(g_pre2.T, norm2, out=self.g_h2f)
        return loss

    def update(self) -> None:
        """One ADAM step (as `Adam.step`) on all parameters with the gradient in `self.grad`."""
        self.t += 1
        b1, b2 = self.betas
        bc1, bc2_sqrt = 1 - b1**self.t, math.sqrt(1 - b2**self.t)
        g, m, v = self.grad, self.m, self.v
        m += np.float32(1 - b1) * (g - m)
        v *= np.float32(b2)
        v += np.float32(1 - b2) * g * g
        denom = np.sqrt(v)
        denom /= np.float32(bc2_sqrt)
        denom += np.float32(self.eps)
        step = m / denom
        step *= np.float32(self.lr / bc1)
        self.theta -= step


class Adams2019Trainer:
    """ADAM on the Adams2019 loss, one step per pipeline group per epoch (retrain_cost_model).

    Speed: each group's weight-free tensors (log features, cost-term factors) are built once per
    `fit`, so an epoch is one small forward/backward per group and no per-sample Python; `fit`'s
    steps are `_FusedAdam`'s (hand-written gradient in numpy, one ADAM update on one flat array:
    ~4x the autograd step at the autotune loop's batch sizes), `step` keeps autograd and `Adam`.
    `threads` sets torch's intra-op threads for the fit (restored after; None keeps torch's
    setting); the fused step's small products run in numpy's BLAS, single-threaded at these sizes.
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        epochs: int = 200,
        num_cores: int = 32,
        min_schedules: int = 2,
        seed: int = 0,
        progress: bool = False,
        *,
        calibrate: bool = False,
        select: str = "last",
        min_improvement: float = 0.0,
        threads: int | None = None,
    ) -> None:
        self.learning_rate = learning_rate
        self.threads = threads
        self.epochs = epochs
        self.num_cores = num_cores
        self.min_schedules = min_schedules
        self.seed = seed
        self.progress = progress
        self.calibrate = calibrate
        self.select = select
        self.min_improvement = min_improvement

    def _check(self) -> None:
        if not (
            isinstance(self.learning_rate, (int, float))
            and math.isfinite(self.learning_rate)
            and self.learning_rate > 0
        ):
            raise InputError(f"learning_rate must be a positive number, got {self.learning_rate!r}")
        if int(self.epochs) < 1:
            raise InputError(f"train_iters/epochs must be >= 1, got {self.epochs!r}")
        if int(self.num_cores) < 1:
            raise InputError(f"num_cores must be >= 1, got {self.num_cores!r}")
        if self.select not in ("last", "best_valid"):
            raise InputError(f"select must be 'last' or 'best_valid', got {self.select!r}")
        if self.threads is not None and int(self.threads) < 1:
            raise InputError(f"threads must be >= 1, got {self.threads!r}")

    def make_optimizer(self, net: Adams2019Net) -> Adam:
        return Adam(list(net.parameters()), lr=self.learning_rate, betas=(0.9, 0.999), eps=1e-5)

    def step(self, net: Adams2019Net, opt: Adam, batch: PipelineBatch, rng: random.Random | None = None) -> float:
        """One ADAM step on one pipeline's batch; returns the loss before the step."""
        return self._step(net, opt, _Ready.of(batch, self.num_cores), rng)

    def _step(self, net: Adams2019Net, opt: Adam | _FusedAdam, r: _Ready, rng: random.Random | None) -> float:
        if isinstance(opt, _FusedAdam):  # fit's loop: the hand-written gradient
            value = opt.loss_and_grad(r, rng)
            self._check_loss(r, value)
            opt.update()
            return value
        prepared, rt = r.prepared, r.runtimes
        ref: int | None = r.reference
        if r.size > MAX_BATCH:  # Halide's random window of at most 1024 schedules
            first = (rng or random.Random(0)).randrange(r.size - MAX_BATCH)
            window = slice(first, first + MAX_BATCH)
            prepared = PreparedSchedules(prepared.normalized[window], prepared.terms[window])
            rt, ref = rt[window], None
        opt.zero_grad()
        pred, stage2 = net.forward_prepared(r.batch.pipeline_features, prepared)
        loss = adams2019_loss(pred, stage2, rt, ref)
        value = float(loss.item())
        self._check_loss(r, value)
        loss.backward()
        opt.step()
        return value

    @staticmethod
    def _check_loss(r: _Ready, value: float) -> None:
        if not math.isfinite(value):
            raise InputError(f"pipeline_id {r.batch.pipeline_id}: the loss is {value} (non-finite features or weights)")

    def fit(
        self, weights: P, batches: Sequence[PipelineBatch], valid: Sequence[PipelineBatch] | None = None
    ) -> TrainResult:
        """Train from `weights` on the groups; returns new weights (the input is not modified).

        With `valid` (whole pipelines not in `batches`), the pairwise ordering accuracy on them
        is recorded before training and after every epoch; `select="best_valid"` returns the best
        of those weights (the starting weights win ties)."""
        self._check()
        if not batches:
            raise InputError("no pipeline has enough distinct schedules to train on")
        if self.select == "best_valid" and not valid:
            raise InputError("select='best_valid' needs validation batches (fit(..., valid=...))")
        for b in batches:  # one pipeline per batch, or the loss's reference is meaningless
            if b.schedule_features.shape[1] != b.pipeline_features.shape[0]:
                raise InputError(
                    f"pipeline_id {b.pipeline_id}: schedule and pipeline features disagree on the stage count"
                )
        if valid:
            overlap = {b.pipeline_id for b in batches} & {b.pipeline_id for b in valid}
            if overlap:
                raise InputError(f"validation pipelines also in training: {sorted(overlap)[:5]}")
        net = Adams2019Net(self.num_cores, weights)
        start = _like(weights, net)  # a copy of the input: what "epoch 0 wins" returns
        calibration = 1.0
        if self.calibrate:
            calibration = calibration_factor(net, batches, self.num_cores)
            with torch.no_grad():
                net.conv1_filter.mul_(calibration)
                net.conv1_bias.mul_(calibration)
        # the parameters become views of the fused step's flat array: `net` stays current
        opt = _FusedAdam(net, self.learning_rate, betas=(0.9, 0.999), eps=1e-5)
        rng = random.Random(self.seed)
        losses: list[float] = []
        scores: list[float] = []
        best_epoch, best_score, best_weights = 0, -math.inf, start
        if valid:
            scores.append(ordering_score(net, valid, self.num_cores))
            # a trained epoch must beat the start by min_improvement (noise margin), later ones
            # must beat the best so far
            best_score = (scores[0] + float(self.min_improvement)) if not math.isnan(scores[0]) else -math.inf
        progress = None
        if self.progress:
            from rich.progress import Progress

            progress = Progress(transient=True)
            progress.start()
            task = progress.add_task("training Adams2019", total=int(self.epochs))
        saved_threads = torch.get_num_threads()
        if self.threads is not None:
            torch.set_num_threads(int(self.threads))
        try:
            ready = [_Ready.of(b, self.num_cores) for b in batches]
            for epoch in range(1, int(self.epochs) + 1):
                ls = [self._step(net, opt, r, rng) for r in ready]
                losses.append(float(np.mean(ls)))
                if valid:
                    scores.append(ordering_score(net, valid, self.num_cores))
                    if self.select == "best_valid" and scores[-1] > best_score:
                        best_epoch, best_score, best_weights = epoch, scores[-1], _like(weights, net)
                if progress is not None:
                    progress.advance(task)
        finally:
            torch.set_num_threads(saved_threads)
            if progress is not None:
                progress.stop()
        last = _like(weights, net)
        if self.select == "best_valid":
            out, kept = best_weights, best_epoch
        else:
            out, kept = last, None
        return TrainResult(
            out,
            losses,
            int(self.epochs),
            len(batches),
            sum(b.size for b in batches),
            calibration=calibration,
            valid_scores=scores,
            best_epoch=kept,
            last_weights=last,
        )


# -- the CostModel contract ---------------------------------------------------------------------
def _stage_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, 326) featurization rows -> pipeline features (S, 40, 7), schedule features (S, 39)."""
    return rows[:, NUM_SCHEDULE_FEATURES + 7 :].reshape(-1, 40, 7), rows[:, :NUM_SCHEDULE_FEATURES]


def batches_from_dataset(data: Any, min_schedules: int = 2) -> list[PipelineBatch]:
    """One `PipelineBatch` per (workload, target) group of a `Dataset` of featurization rows
    (extractor `halide-adams2019`): successful candidates only, duplicates merged as Halide does."""
    if data.n_features not in (0, NUM_FEATURES):
        raise InputError(f"Adams2019 reads {NUM_FEATURES} features per stage (halide-adams2019), got {data.n_features}")
    out = []
    for gi, g in enumerate(data.groups):
        best: dict[bytes, tuple[float, np.ndarray]] = {}
        pf = None
        for i in range(g.start, g.stop):
            lat = float(data.latencies[i])
            if not math.isfinite(lat) or lat <= 0:
                continue
            rows = data.rows[data.offsets[i] : data.offsets[i + 1]]
            p, s = _stage_rows(rows)
            if pf is None:
                pf = p
            elif p.shape != pf.shape:
                raise InputError(f"group {g.name or g.workload_key}: candidates disagree on the number of stages")
            key = np.ascontiguousarray(s).tobytes()
            if key not in best or lat < best[key][0]:
                best[key] = (lat, s)
        if pf is None or len(best) < max(1, min_schedules):
            continue
        lats, scheds = zip(*best.values())
        out.append(
            PipelineBatch(
                gi,
                torch.from_numpy(np.ascontiguousarray(pf, dtype=np.float32)),
                torch.from_numpy(np.stack(scheds).astype(np.float32)),
                torch.tensor([x * 1000.0 for x in lats], dtype=torch.float32),
                [],
            )
        )
    return out


class Adams2019Model(CostModel):
    """Adams2019 behind the `CostModel` contract: features are the store's `halide-adams2019`
    rows (one 326-float row per stage), the score is minus the predicted runtime.

    `init` gives the starting parameters (e.g. `Weights.baseline()`; a dict of arrays works);
    without it, `fit` starts from seeded uniform(-0.5, 0.5) values as Halide's randomize does.
    `fit` trains `epochs` passes of Halide's loop from those parameters; `update` continues from
    the current ones for `update_epochs` passes on the new groups only.
    """

    kind: ClassVar[str] = "adams2019"
    weights_file: ClassVar[str] = "adams2019.safetensors"
    length_param: ClassVar[str | None] = "epochs"
    #: Not derived from `__init__`: its `init` (starting weights) is data, not a hyper-parameter.
    hyper: ClassVar[tuple[str, ...]] = ("learning_rate", "epochs", "update_epochs", "num_cores", "seed")
    extractor: tuple[str, str] = EXTRACTOR

    def __init__(
        self,
        learning_rate: float = 0.001,
        epochs: int = 200,
        update_epochs: int = 20,
        num_cores: int = 32,
        seed: int = 0,
        init: ParamSet | None = None,
    ) -> None:
        self.learning_rate = learning_rate
        self.epochs = epochs
        self.update_epochs = update_epochs
        self.num_cores = num_cores
        self.seed = seed
        self.init = init
        self.params_: dict[str, np.ndarray] | None = None

    def _start(self) -> dict[str, np.ndarray]:
        if self.params_ is not None:
            return self.params_
        if self.init is not None:
            return {k: np.asarray(v, np.float32) for k, v in self.init.items()}
        rng = np.random.default_rng(int(self.seed))
        return {k: rng.uniform(-0.5, 0.5, s).astype(np.float32) for k, s in BUFFER_SHAPES.items()}

    def _train(self, data: Any, epochs: int, start: dict[str, np.ndarray]) -> TrainReport:
        batches = batches_from_dataset(data)
        if not batches:
            raise InputError("no group has two or more successful, distinct schedules to train Adams2019 on")
        t0 = time.perf_counter()
        res = Adams2019Trainer(self.learning_rate, int(epochs), int(self.num_cores), seed=int(self.seed)).fit(
            start, batches
        )
        self.params_ = dict(res.weights)
        self.n_features = NUM_FEATURES
        history = [{"epoch": float(i + 1), "train_loss": v} for i, v in enumerate(res.losses)]
        return TrainReport(self.kind, history, None, time.perf_counter() - t0, res.schedules, 0)

    def fit(self, train: Any, valid: Any = None) -> TrainReport:
        self._check_fit_input(train, valid)
        self.params_ = None
        return self._train(train, int(self.epochs), self._start())

    def update(self, new: Any) -> None:
        if not self._should_update(new):
            return
        if batches_from_dataset(new):
            self._train(new, int(self.update_epochs), self._start())

    @torch.no_grad()
    def _predict(self, batch: FeatureBatch) -> np.ndarray:
        net = Adams2019Net(int(self.num_cores), self._start())
        out = np.full(batch.n_candidates, -np.inf)
        for i in range(batch.n_candidates):
            rows = batch.rows[batch.offsets[i] : batch.offsets[i + 1]]
            if rows.shape[0] == 0:
                continue
            pf, sf = _stage_rows(rows)
            out[i] = -float(
                net(torch.from_numpy(np.ascontiguousarray(pf)), torch.from_numpy(np.ascontiguousarray(sf))[None])[0]
            )
        return out

    def parameters(self) -> Iterator[tuple[str, np.ndarray]]:
        """The trained buffers (name, array): e.g. `Weights(dict(model.parameters()))`."""
        if self.params_ is None:
            raise InputError("adams2019 model is not trained: call fit() or load() first")
        return iter(self.params_.items())

    def save(self, path: str | os.PathLike[str]) -> None:
        from safetensors.numpy import save_file

        from autosearch.models.io import prepare_dir

        save_file(dict(self.parameters()), str(prepare_dir(path) / "adams2019.safetensors"))
        self._write_config(path, self.weights_file)

    @classmethod
    def _from_dir(cls, path: str, config: dict[str, Any]) -> Adams2019Model:
        from safetensors.numpy import load_file

        model = cls._from_params(config)
        try:
            arrays = load_file(os.path.join(path, config["weights"]))
        except Exception as exc:
            raise InputError(f"{path}: cannot read Adams2019 weights ({type(exc).__name__}: {exc})") from None
        Adams2019Net(int(model.num_cores), arrays)  # checks names and shapes
        model.params_ = {k: np.asarray(v, np.float32) for k, v in arrays.items()}
        return model
