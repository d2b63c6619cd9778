"""The Adams2019 network (Halide's `cost_model_generator.cpp`) in PyTorch, float32.

Why exact: weights trained here are loaded by the real autoscheduler, so the forward pass is
Halide's to the float (`fast_log`, the hand-designed cost terms as feature-only factors).
Parameters are six float32 arrays by name in Halide's index order (`ParamSet`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import nn

from autosearch.adams2019_sizes import BUFFER_SHAPES, HEAD1_CHANNELS
from autosearch.errors import InputError

__all__ = [
    "Adams2019Net",
    "ParamSet",
    "PreparedSchedules",
    "cost_terms",
    "fast_log",
    "prepare_schedules",
]


class ParamSet(Protocol):
    """Six named float32 arrays (a dict, or a `Weights`)."""

    def items(self) -> Iterable[tuple[str, np.ndarray]]: ...


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
