"""Features of a sketch as differentiable PyTorch functions of its knobs (one row per block).

Input: the flat vector of log tile factors (B, D) and one probability row per categorical knob.
Every quantity below is an explicit expression of those, built from the sketch's structure
(structure.py). With `tau=0` the rule-based quantities (parallel, vectorize) take TVM's exact
discrete decisions, so at integer knobs they equal the concretely post-processed schedule (the
tests check this); with `tau>0` the same rules are smoothed by sigmoids so gradients flow.

Per block (`FEATURE_NAMES` lists them; log = natural log):
- totals: log iterations, log parallel extent (RewriteParallelVectorizeUnroll's fused outer
  spatial loops), log vector length (fused inner contiguous spatial loops), log(1 + unroll step)
  (expected over the categorical), log unrolled extent (min(step, iterations): an estimate),
  root-child / spatial flags, loop count;
- per loop slot (innermost loop first, `MAX_LOOPS`): log extent, reduce flag;
- per buffer access slot (writes first, `MAX_ACCESSES`): is-write, log bytes per element, and at
  every loop slot j: log footprint in bytes of the data touched while loop j runs once through
  (loop j and everything inside it) and log reuse = log(accesses / distinct elements) there;
- per loop slot: log arithmetic intensity = log(iterations / bytes touched by all accesses).

Footprint of access dim d at slot j: sum_k |c_dk| (R_k(j) - 1) + ext_d, where R_k(j) is the range
the block iterator k covers inside loop j (the product of its tile loops there).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from autosearch.search.gradient.structure import SketchStructure

__all__ = ["FEATURE_NAMES", "FEATURE_WIDTH", "MAX_ACCESSES", "MAX_LOOPS", "N_TOTALS", "FeatureFn"]

MAX_LOOPS = 24
MAX_ACCESSES = 4
_TOTALS = [
    "log_iters",
    "log_parallel",
    "log_vector",
    "log1p_unroll_step",
    "log_unrolled",
    "root_child",
    "spatial",
    "n_loops",
]
N_TOTALS = len(_TOTALS)
FEATURE_NAMES = (
    _TOTALS
    + [f"loop{j}_{k}" for j in range(MAX_LOOPS) for k in ("log_extent", "reduce")]
    + [f"acc{a}_{k}" for a in range(MAX_ACCESSES) for k in ("write", "log_bytes")]
    + [f"acc{a}_{k}{j}" for a in range(MAX_ACCESSES) for k in ("log_footprint", "log_reuse") for j in range(MAX_LOOPS)]
    + [f"log_intensity{j}" for j in range(MAX_LOOPS)]
)
FEATURE_WIDTH = len(FEATURE_NAMES)


def _rev_cumsum(x: torch.Tensor) -> torch.Tensor:
    return torch.flip(torch.cumsum(torch.flip(x, [-1]), -1), [-1])


def _le(a: torch.Tensor, limit: float, tau: float) -> torch.Tensor:
    """[a <= limit] exactly (tau=0) or as a sigmoid of width tau."""
    if tau <= 0:
        return (a <= limit + 1e-6).to(a.dtype)
    return torch.sigmoid((limit - a) / tau)


class _Block:
    """Constant tensors of one block."""

    def __init__(self, st: SketchStructure, b: int) -> None:
        spec = st.blocks[b]
        self.spec = spec
        L = len(spec.loops)
        self.A = torch.tensor(np.array([lp.coef for lp in spec.loops]).reshape(L, len(st.free)), dtype=torch.float64)
        self.bias = torch.tensor([lp.bias for lp in spec.loops], dtype=torch.float64)
        self.reduce = torch.tensor([float(lp.reduce) for lp in spec.loops], dtype=torch.float64)
        self.single = torch.tensor([float(lp.single_body) for lp in spec.loops], dtype=torch.float64)
        K = len(spec.iter_loops)
        mask = np.zeros((K, L))
        for k, idx in enumerate(spec.iter_loops):
            mask[k, idx] = 1.0
        self.iter_mask = torch.tensor(mask, dtype=torch.float64)
        accs = sorted(spec.accesses, key=lambda a: not a.write)[:MAX_ACCESSES]
        self.accesses = [
            (
                torch.tensor(np.abs(a.coef), dtype=torch.float64),
                torch.tensor(a.ext, dtype=torch.float64),
                float(np.log(a.nbytes)),
                float(a.write),
            )
            for a in accs
        ]


class FeatureFn:
    """Differentiable features of one sketch: (log factors (B, D), categorical probs) -> (B, blocks, F)."""

    def __init__(self, st: SketchStructure) -> None:
        self.st = st
        self.blocks = [_Block(st, b) for b in range(len(st.blocks))]
        self.free = torch.tensor(st.free, dtype=torch.long)
        self.n_blocks = len(self.blocks)
        # blocks under one outermost loop: the unroll pragma of any reduction block among them
        # sits on that shared loop (RewriteParallelVectorizeUnroll annotates loops[0])
        group = [b.shares_outer if b.shares_outer >= 0 else i for i, b in enumerate(st.blocks)]
        self.unrolled_group = [
            any(not st.blocks[j].spatial for j in range(len(group)) if group[j] == group[i]) for i in range(len(group))
        ]

    def loop_log_extents(self, logf: torch.Tensor) -> list[torch.Tensor]:
        """log extent of every loop of every block, (B, loops) each."""
        x = logf[:, self.free]
        return [torch.clamp(x @ blk.A.T + blk.bias, min=0.0) for blk in self.blocks]

    def _unroll_step(self, cats: Sequence[torch.Tensor], B: int) -> torch.Tensor:
        st = self.st
        if st.unroll_cat is not None:
            cand = torch.tensor(st.sketch.cats[st.unroll_cat].candidates, dtype=torch.float64)
            return cats[st.unroll_cat] @ torch.log1p(cand)
        return torch.full((B,), float(np.log1p(max(st.unroll_const, 0))), dtype=torch.float64)

    def parallel_vector(self, le: torch.Tensor, blk: _Block, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Gates (B, L) of the loops TVM parallelises and vectorises (RewriteParallelVectorizeUnroll)."""
        st, spec = self.st, blk.spec
        B, L = le.shape
        par = torch.zeros_like(le)
        vec = torch.zeros_like(le)
        if not spec.root_child or L == 0:
            return par, vec
        spatial = 1.0 - blk.reduce
        if st.max_vectorize > 0:
            cv = _rev_cumsum(le)
            ok = spatial * blk.single * _le(cv, float(np.log(st.max_vectorize)), tau)
            count = torch.arange(L - 1, -1, -1, dtype=torch.float64)  # loops inside this one
            ok = ok * (count < spec.max_fusible).to(torch.float64)
            vec = torch.flip(torch.cumprod(torch.flip(ok, [1]), 1), [1])
        if st.max_parallel > 0:
            c = torch.cumsum(le, 1)
            cont = _le(c, float(np.log(st.max_parallel)), tau) * blk.single  # may the next loop join?
            prev = torch.cat([torch.ones(B, 1, dtype=le.dtype), torch.cumprod(cont, 1)[:, :-1]], 1)
            sp = torch.cumprod(spatial.expand(B, L), 1)
            par = prev * sp * (1.0 - vec)
        return par, vec

    def __call__(self, logf: torch.Tensor, cats: Sequence[torch.Tensor], tau: float = 0.0) -> torch.Tensor:
        B = logf.shape[0]
        les = self.loop_log_extents(logf)
        step = self._unroll_step(cats, B)
        rows = []
        par_of: list[torch.Tensor] = []
        step_of: list[torch.Tensor] = []
        for blk, le in zip(self.blocks, les):
            rows.append(self._block_row(blk, le, step, tau, par_of, step_of))
        return torch.stack(rows, 1)

    def _block_row(
        self,
        blk: _Block,
        le: torch.Tensor,
        step: torch.Tensor,
        tau: float,
        par_of: list[torch.Tensor],
        step_of: list[torch.Tensor],
    ) -> torch.Tensor:
        B, L = le.shape
        z = torch.zeros(B, dtype=torch.float64)
        spec = blk.spec
        S = _rev_cumsum(le) if L else torch.zeros(B, 1, dtype=torch.float64)
        total = S[:, 0]
        par, vec = self.parallel_vector(le, blk, tau)
        log_par = (par * le).sum(1)
        if spec.shares_outer >= 0:  # the outer loops were fused and parallelised for an earlier block
            log_par = par_of[spec.shares_outer]
        par_of.append(log_par)
        log_vec = (vec * le).sum(1)
        ustep = step if self.unrolled_group[len(step_of)] else z
        step_of.append(ustep)
        unrolled = -torch.logsumexp(torch.stack([-ustep, -total]), 0)
        totals = [
            total,
            log_par,
            log_vec,
            ustep,
            unrolled,
            z + float(spec.root_child),
            z + float(spec.spatial),
            z + L / 10.0,
        ]
        # loop slots, innermost first
        k = min(L, MAX_LOOPS)
        slot_ext = torch.zeros(B, MAX_LOOPS, dtype=torch.float64)
        slot_red = torch.zeros(B, MAX_LOOPS, dtype=torch.float64)
        slot_ext[:, :k] = torch.flip(le, [1])[:, :k]
        slot_red[:, :k] = torch.flip(blk.reduce, [0])[:k]
        loops = torch.stack([slot_ext, slot_red], 2).reshape(B, -1)
        # accesses
        logR = _rev_cumsum(le.unsqueeze(1) * blk.iter_mask.unsqueeze(0))  # (B, K, L)
        head, body = [], []
        fp_all = []
        for a in range(MAX_ACCESSES):
            if a < len(blk.accesses) and L:
                C, ext, lb, w = blk.accesses[a]
                span = torch.einsum("dk,bkl->bdl", C, torch.expm1(logR)) + ext.view(1, -1, 1)
                fp = torch.log(span).sum(1)  # (B, L) elements
                fpb = fp + lb
                reuse = S - fp
                fp_all.append(fpb)
                head.append(torch.stack([z + w, z + lb], 1))
                body.append(torch.cat([self._slots(fpb), self._slots(reuse)], 1))
            else:
                head.append(torch.zeros(B, 2, dtype=torch.float64))
                body.append(torch.zeros(B, 2 * MAX_LOOPS, dtype=torch.float64))
        if fp_all:
            ai = self._slots(S - torch.logsumexp(torch.stack(fp_all), 0))
        else:
            ai = torch.zeros(B, MAX_LOOPS, dtype=torch.float64)
        return torch.cat([torch.stack(totals, 1), loops, *head, *body, ai], 1)

    @staticmethod
    def _slots(x: torch.Tensor) -> torch.Tensor:
        """(B, L) per loop (outermost first) -> (B, MAX_LOOPS) innermost first, zero padded."""
        B, L = x.shape
        out = torch.zeros(B, MAX_LOOPS, dtype=x.dtype)
        k = min(L, MAX_LOOPS)
        out[:, :k] = torch.flip(x, [1])[:, :k]
        return out

    # -- integer decisions -----------------------------------------------------------------------
    def of_decisions(self, decs: Sequence[tuple]) -> torch.Tensor:
        """Exact features (tau=0) of integer decisions: (N, blocks, F), float64."""
        sk = self.st.sketch
        logf = torch.tensor([sk.log_factors(d) for d in decs], dtype=torch.float64).reshape(len(decs), sk.knob_width())
        cats = []
        for ci, c in enumerate(sk.cats):
            oh = torch.zeros(len(decs), len(c.candidates), dtype=torch.float64)
            for i, d in enumerate(decs):
                oh[i, d[1][ci]] = 1.0
            cats.append(oh)
        with torch.no_grad():
            return self(logf, cats, tau=0.0)
