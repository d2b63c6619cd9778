"""The two ADAM steps of the trainer: `Adam` (autograd's) and `_FusedAdam` (hand-written).

Why two: `step` keeps autograd with a light ADAM (torch's optimizer costs seconds to construct);
`fit` uses the fused, hand-written gradient and update, which must equal the first up to float
rounding (tests/test_halide_train.py). `_Ready` is a batch with its weight-free tensors built once.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np
import torch

from autosearch.adams2019_sizes import BUFFER_SHAPES, HEAD1_CHANNELS
from autosearch.models.adams2019.batches import MAX_BATCH, PipelineBatch
from autosearch.models.adams2019.loss import reference_index
from autosearch.models.adams2019.net import Adams2019Net, PreparedSchedules, prepare_schedules

__all__ = [
    "Adam",
    "_FusedAdam",
    "_Ready",
]


class Adam:
    """ADAM as `torch.optim.Adam` computes it (no amsgrad, no weight decay), in a dozen lines.

    Why not torch's: its constructor imports `torch._dynamo` (once per process, and longer than a
    whole retrain of an autotune batch) and its step spends more in Python than in arithmetic."""

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
    step's time went mostly to `backward`). Here the parameters are views of ONE flat
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
