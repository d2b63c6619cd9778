"""The Adams2019 cost model in PyTorch: the network, the hand-written cost terms and the loss of
Halide's `cost_model_generator.cpp`, line for line, in float32.

Why exact: weights trained here are loaded by the real autoscheduler, so the function they are
trained for must be the one Halide evaluates. `tests/test_halide_parity.py` checks predictions,
loss and gradients against the compiled model inside the Halide wheel.

Shapes (one pipeline, N schedules of it, S stages in reverse realization order):
    pipeline_features  (S, 40, 7)  float32, as `Sample.pipeline_features`
    schedule_features  (N, S, 39)  float32, raw (the log is taken inside, as Halide does)
"""

from __future__ import annotations

import torch
from torch import nn

from autosearch.backends.halide.weights import BUFFER_SHAPES, HEAD1_CHANNELS, Weights

__all__ = ["Adams2019Net", "adams2019_loss", "fast_log", "reference_index"]

_LOG2 = float(torch.log(torch.tensor(2.0, dtype=torch.float32)))
_FAST_LOG_COEFF = (
    0.07640318789187280912, -0.16252961013874300811, 0.20625219040645212387,
    -0.25110261010892864775, 0.33320464908377461777, -0.49997513376789826101, 1.0, 0.0,
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

    def __init__(self, num_cores: int = 32, weights: Weights | None = None) -> None:
        super().__init__()
        self.num_cores = int(num_cores)
        for name, shape in BUFFER_SHAPES.items():
            self.register_parameter(name, nn.Parameter(torch.zeros(shape, dtype=torch.float32)))
        if weights is not None:
            weights.load_into(self)

    def coefficients(self, pipeline_features: torch.Tensor, schedule_features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The network part: (conv1_stage2 pre-activation, relu1), both (N, S, 32)."""
        pf = pipeline_features.to(torch.float32)
        sf = schedule_features.to(torch.float32)
        squashed = torch.sigmoid(self.head1_filter)  # (8, 40, 7)
        head1_conv = self.head1_bias + torch.einsum("cxy,sxy->sc", squashed, pf)  # (S, 8)
        normalized = fast_log(sf + 1)  # (N, S, 39)
        head2_conv = self.head2_bias + torch.einsum("cr,nsr->nsc", self.head2_filter, normalized)
        head2_relu = torch.relu(head2_conv)  # (N, S, 24)
        stage1 = self.conv1_bias + head1_conv @ self.conv1_filter[:, :HEAD1_CHANNELS].T  # (S, 32)
        stage2 = stage1.unsqueeze(0) + head2_relu @ self.conv1_filter[:, HEAD1_CHANNELS:].T  # (N, S, 32)
        return stage2, torch.relu(stage2)

    def forward(self, pipeline_features: torch.Tensor, schedule_features: torch.Tensor,
                num_cores: int | None = None) -> torch.Tensor:
        """Predicted runtime (Halide's units, ~seconds) of each of the N schedules: (N,)."""
        return self.forward_with_coefficients(pipeline_features, schedule_features, num_cores)[0]

    def forward_with_coefficients(self, pipeline_features: torch.Tensor, schedule_features: torch.Tensor,
                                  num_cores: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        stage2, relu1 = self.coefficients(pipeline_features, schedule_features)
        sf = schedule_features.to(torch.float32)
        f = [sf[..., i] for i in range(sf.shape[-1])]  # each (N, S)
        (num_realizations, num_productions, _pcpr, _pcpp, _pct, _pcm, _ile, _iple, _ule,
         inner_parallelism, outer_parallelism, bytes_at_realization, bytes_at_production, _bar,
         _ibreal, _ibprod, _ibroot, inlined_calls, unique_bytes_read_per_realization,
         unique_lines_read_per_realization, _abrpr, working_set, vector_size, _nvs, num_vectors,
         num_scalars, scalar_loads_per_vector, vector_loads_per_vector, scalar_loads_per_scalar,
         bytes_at_task, innermost_bytes_at_task, unique_bytes_read_per_vector,
         unique_lines_read_per_vector, unique_bytes_read_per_task, unique_lines_read_per_task,
         _wsat, _wsap, _wsar, _wsaroot) = f
        r = [relu1[..., i] for i in range(relu1.shape[-1])]
        cores = float(self.num_cores if num_cores is None else num_cores)
        one = torch.tensor(1.0, dtype=torch.float32)
        zero = torch.tensor(0.0, dtype=torch.float32)

        compute_cost = torch.where(
            inlined_calls == 0,
            vector_size * num_vectors * r[0] + num_scalars * r[1],
            vector_size * num_vectors * r[2] + num_scalars * r[3],
        )
        num_tasks = torch.maximum(one, inner_parallelism * outer_parallelism)
        tasks_per_core = num_tasks / cores
        idle_core_wastage = torch.ceil(tasks_per_core) / torch.maximum(one, tasks_per_core)
        compute_cost = compute_cost * idle_core_wastage

        load_cost = (num_realizations * unique_lines_read_per_realization * r[5]
                     + num_realizations * unique_bytes_read_per_realization * r[6]
                     + num_vectors * scalar_loads_per_vector * r[7]
                     + num_scalars * scalar_loads_per_scalar * r[8]
                     + num_vectors * vector_loads_per_vector * r[9]
                     + num_scalars * unique_bytes_read_per_vector * r[10]
                     + num_vectors * unique_bytes_read_per_vector * r[11]
                     + num_scalars * unique_lines_read_per_vector * r[12]
                     + num_vectors * unique_lines_read_per_vector * r[13]
                     + num_tasks * unique_bytes_read_per_task * r[14]
                     + num_tasks * unique_lines_read_per_task * r[15])

        lines_written_per_realization = inner_parallelism * (bytes_at_task / torch.maximum(one, innermost_bytes_at_task))
        is_output = (torch.arange(sf.shape[1]) == 0).unsqueeze(0)  # stage w == 0
        alpha = torch.where(inner_parallelism > 1, r[16], torch.where(is_output, r[17], r[18]))
        beta = torch.where(inner_parallelism > 1, r[19], torch.where(is_output, r[20], r[21]))
        store_cost = num_realizations * (lines_written_per_realization * alpha + bytes_at_realization * beta)

        cost_of_false_sharing = torch.where(
            inner_parallelism > 1,
            r[22] * (num_vectors + num_scalars) / torch.maximum(one, innermost_bytes_at_task),
            zero,
        )
        store_cost = store_cost + cost_of_false_sharing
        max_threads_hitting_same_page_fault = torch.minimum(
            inner_parallelism, 4096 / torch.maximum(one, innermost_bytes_at_task))
        cost_of_page_faults = (bytes_at_production * max_threads_hitting_same_page_fault
                               * inner_parallelism * outer_parallelism * r[23])
        store_cost = store_cost + cost_of_page_faults
        cost_of_malloc = r[24] * num_realizations
        cost_of_parallel_launches = num_productions * torch.where(inner_parallelism > 1, r[25], zero)
        cost_of_parallel_tasks = num_productions * (inner_parallelism - 1) * r[26]
        cost_of_parallelism = cost_of_parallel_tasks + cost_of_parallel_launches
        cost_of_working_set = working_set * r[27]
        store_cost = store_cost * 2  # Halide's FIXME: the trained weights count stores twice

        cost = compute_cost + store_cost + load_cost + cost_of_malloc + cost_of_parallelism + cost_of_working_set
        cost = cost + 0.0 * relu1.sum(-1)  # Halide adds 0 * every coefficient (NaN/inf propagate)
        runtime_per_stage = cost * torch.tensor(1e-9, dtype=torch.float32)
        return runtime_per_stage.sum(-1), stage2


def reference_index(true_runtimes: torch.Tensor) -> int:
    """Index of the fastest schedule (the first one on ties), Halide's `fastest_idx`."""
    return int(torch.argmin(true_runtimes).item())


def adams2019_loss(prediction: torch.Tensor, stage2: torch.Tensor, true_runtimes: torch.Tensor,
                   reference: int | None = None) -> torch.Tensor:
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
