"""The prefix tokens of a sketch as a differentiable function of its relaxed knobs.

Why: the shipped prior (`pretrained-prefix`, a `tlp` network over `trace-prefix-tokens`) is the
model that transfers to operators it has not seen, but the decision search can only sample and
mutate it. Felix's gradient search needs the model's input written as a function of the knobs.
`features.decision_space` already says how a sketch's tokens depend on its decisions: a fixed
matrix, plus, per sampled value, a column the tokenizer fills in (`trace_tokens._Plan`): a tile
factor f enters as log2 f + 1 (a Split's factor column), log2(1 + f) (the extent of the loop it
makes) or log2 f (the summary token's sums); a categorical choice as its candidate's value and
index; and the emulated post-processing columns of every tiled nest (`trace_tokens._Post`: the
parallel extent, fused loop count and vector extent) as a function of the nest's loop extents.

Here the same plan is evaluated in PyTorch on relaxed knobs:
- a tile knob is u = log2 of its factors, a real vector (the descent writes u = log2(E) softmax(z),
  so the product of the factors stays the loop's extent E, as in Felix);
- a categorical knob is a probability vector over its candidates (a softmax), each column the
  candidates' values mixed by it;
- the post-processing columns are the tokenizer's own rule on the relaxed extents 2^u: the
  parallel extent is log2 of the product of the fused loops (its gradient reaches every fused
  loop's factor), the vector extent log2(1 + innermost extent) while it is within the limit.
At an integral point (u the log2 of a valid factorisation, one-hot categoricals) every value is
computed by the tokenizer's formula in float64, cast to float32 and summed into the cells in the
tokenizer's order, so the tokens are the tokenizer's bit for bit (tests/test_gradient_prior.py).
The fused-loop count and whether a loop fuses or vectorizes at all are steps of the extents: they
are exact, and carry no gradient.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from autosearch.errors import InputError
from autosearch.features.decision_space import DecisionSpace
from autosearch.features.trace_tokens.columns import _C_POS, _C_POSTPAR, MAX_TRACE_TOKENS, PREFIX_EXTRACTOR
from autosearch.features.trace_tokens.ir import parse_ir_blocks
from autosearch.features.trace_tokens.plan import _compile

__all__ = ["RelaxedTokens", "check_prior", "prior_reason", "prior_scores", "prior_scores_many"]


def check_prior(model: Any) -> None:
    """Refuse a model whose score cannot be differentiated in a sketch's knobs (one line): the
    gradient search on the prior needs a trained `tlp` network over trace-prefix tokens."""
    from autosearch.models.tlp import TLPModel

    if not isinstance(model, TLPModel) or tuple(model.extractor) != PREFIX_EXTRACTOR or not model.nets:
        raise InputError(
            "gradient search on the prior needs a trained tlp model that reads "
            f"{':'.join(PREFIX_EXTRACTOR)} (the shipped pretrained-prefix)"
        )
    if any(net.device_width for net in model.nets):
        raise InputError("gradient search on the prior cannot score with a tlp model trained with device=true")


def prior_reason(scorer: Any, target: Any = None) -> str | None:
    """Why `--search gradient` cannot descend the tuning model itself (None when it can): that
    needs a scorer of decision vectors holding a trained `tlp` prior over trace-prefix tokens
    (`Scorer.model`, `Scorer.extractor`) and a CPU target (the prefix prior has seen no GPU trace;
    the decision search runs on CPUs only). `target` None: this machine's CPU."""
    try:
        check_prior(scorer.model if scorer.scores_decision_vectors else None)
    except InputError as exc:
        return str(exc)
    if tuple(scorer.extractor) != PREFIX_EXTRACTOR:
        return f"the tuning model does not read {':'.join(PREFIX_EXTRACTOR)}"
    kind = "llvm" if target is None else target.kind.name
    return None if kind == "llvm" else f"gradient search on the prior runs on CPU targets, not {kind}"


def prior_scores(nets: list[Any], tokens: torch.Tensor) -> torch.Tensor:
    """(B,) mean score of the networks for (B, L, F) token matrices, differentiable in `tokens`
    (`TLPNet.forward` on unpadded sequences: the network's own code path)."""
    return prior_scores_many(nets, [tokens])[0]


def prior_scores_many(nets: list[Any], tokens: list[torch.Tensor]) -> list[torch.Tensor]:
    """`prior_scores` of several sketches' (B_i, L_i, F) token matrices, one pass of each network
    per sequence length (the sketches of a workload have one to three).

    Why: a descent step on one sketch is ~16 sequences of ~17 tokens, where each network call
    and its backward cost more in dispatch than in arithmetic; and whole sequences of one length
    take the network's unpadded path (`TLPNet.forward_rows`, batched products: faster than the
    masked fused kernel at such short sequences), the path its tables score decision vectors by."""
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(tokens):
        groups.setdefault(int(t.shape[1]), []).append(i)
    out: list[torch.Tensor | None] = [None] * len(tokens)
    for members in groups.values():
        batch = torch.cat([tokens[i] for i in members])
        scores = torch.stack([_unpadded_scores(net, batch) for net in nets]).mean(0)
        for i, part in zip(members, torch.split(scores, [int(tokens[i].shape[0]) for i in members])):
            out[i] = part
    return [t for t in out if t is not None]


def _unpadded_scores(net: Any, tokens: torch.Tensor) -> torch.Tensor:
    """(B,) `TLPNet.forward` of (B, L, F) whole sequences: `row_values` at every position, then
    `forward_rows` (as `TLPModel.predict_space` scores them)."""
    h = net.encoder(tokens * net.scale)
    if net.positions:
        h = h + net.position.weight[: tokens.shape[1]].unsqueeze(0)
    if len(net.attention):
        h = torch.cat([h, net.attention[0].qkv(net.norm(h))], dim=2)
    return net.forward_rows(h)


class RelaxedTokens:
    """The token matrix of one `DecisionSpace` (sketch) as a torch function of relaxed knobs.

    `tokens(u, p)`: u[j] (B, levels) float64 log2 tile factors for each tile knob j, p[j] (B,
    options) float64 probabilities for each categorical knob j (None for the other kind);
    returns (B, n_tokens, PREFIX_FEATURE_WIDTH) float32 with a gradient in both.
    `integral(x)` gives the (u, p) of decision vectors, `round(u, p)` the nearest vectors."""

    def __init__(self, space: DecisionSpace, ir: str) -> None:
        self.space = space
        blocks = {b.name: b for b in parse_ir_blocks(ir)}
        plan, _ = _compile(space.instructions, blocks)
        rep = space.representative
        self.knob_of = {k.inst: j for j, k in enumerate(space.knobs)}
        self.tile_knobs = [j for j, k in enumerate(space.knobs) if k.kind == "tile"]
        self.cat_knobs = [j for j, k in enumerate(space.knobs) if k.kind == "categorical"]
        #: per tile knob: (options, levels) float64 log2 factors (rounding and starting points)
        self.log2_options: dict[int, np.ndarray] = {
            j: np.log2(np.asarray(space.knobs[j].options, dtype=np.float64)) for j in self.tile_knobs
        }
        #: per tile knob: log2 of the loop's extent, and of the innermost factor's limit (inf: none)
        self.log2_extent = {j: float(self.log2_options[j][0].sum()) for j in self.tile_knobs}
        self.log2_limit = {j: _innermost_limit(space.instructions[space.knobs[j].inst]) for j in self.tile_knobs}
        n_rows, width = plan.static.shape
        self.n_rows, self.width = n_rows, width
        self.static = torch.from_numpy(plan.static.copy())
        self.workload = torch.from_numpy(np.ascontiguousarray(space.workload))
        # the tile cells, added in the tokenizer's order: "depth" d = the d-th value a cell gets
        rows, cols, where, code = plan.tiles
        self._tiles: list[tuple[int, int, int, int, float]] = []  # (flat cell, depth, knob or -1, level, const log2 f)
        depth: dict[int, int] = {}
        for r, c, (inst, k) in zip(rows, cols, where):
            cell = int(r) * width + int(c)
            d = depth.get(cell, 0)
            depth[cell] = d + 1
            j = self.knob_of.get(inst, -1)
            const = 0.0
            if j < 0:  # a tile the space keeps fixed: its representative's factor
                f = _factor(rep, inst, k)
                const = math.log2(f) if f > 0 else math.nan
            self._tiles.append((cell, d, j, int(k), const))
        # the same, as index tensors: each entry's column in [every tile knob's u | the fixed log2 f]
        self._knob_cols = {j: i for i, j in enumerate(self.tile_knobs)}
        first = np.cumsum([0] + [len(self.log2_options[j][0]) for j in self.tile_knobs])
        n_var = int(first[-1])
        self._const = torch.tensor([t[4] for t in self._tiles if t[2] < 0], dtype=torch.float64)
        col_of: list[int] = []
        fixed = 0
        for _cell, _d, j, k, _c in self._tiles:
            if j >= 0:
                col_of.append(int(first[self._knob_cols[j]]) + k)
            else:
                col_of.append(n_var + fixed)
                fixed += 1
        self._tile_cols = torch.tensor(col_of, dtype=torch.int64)
        self._tile_code = torch.tensor(np.asarray(code, dtype=np.int64))
        self._by_depth = [
            (
                torch.tensor([i for i, t in enumerate(self._tiles) if t[1] == d], dtype=torch.int64),
                torch.tensor([t[0] for t in self._tiles if t[1] == d], dtype=torch.int64),
            )
            for d in range(max(depth.values(), default=0))
        ]
        # the other decision values (categorical choices, compute locations): assigned in order
        self._others: list[tuple[int, int, np.ndarray | float]] = []  # (flat cell, knob or -1, per-option values)
        for r, c, sym in plan.others:
            cell = r * width + c
            j = self.knob_of.get(sym.inst, -1)
            if j >= 0 and space.knobs[j].kind == "categorical":
                table = np.asarray([sym.resolve({sym.inst: o}) for o in space.knobs[j].options], dtype=np.float64)
                self._others.append((cell, j, table))
            else:
                self._others.append((cell, -1, float(np.float32(sym.resolve(rep)))))
        # the emulated post-processing of each tiled nest: per loop (knob, level) or a fixed extent
        self._posts: list[tuple[int, Any, list[tuple[int, int, float]], int]] = []
        for r, post in plan.posts:
            loops = []
            for ref, extent in zip(post.refs(), post.loop_extents(rep)):
                j = self.knob_of.get(ref[0], -1) if isinstance(ref, tuple) else -1
                loops.append((j, ref[1] if j >= 0 else 0, float(extent)))  # type: ignore[index]
            self._posts.append((r, post, loops, post.cut(rep)))

    @property
    def n_tokens(self) -> int:
        return int(self.workload.shape[0] + self.n_rows)

    # -- points ---------------------------------------------------------------------------------
    def integral(self, x: np.ndarray) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
        """(u, p) of decision vectors x (n, knobs): exact log2 factors and one-hot choices."""
        x = self.space.validate(x)
        u: list[torch.Tensor | None] = [None] * self.space.n_knobs
        p: list[torch.Tensor | None] = [None] * self.space.n_knobs
        for j in self.tile_knobs:
            u[j] = torch.from_numpy(self.log2_options[j][x[:, j]].copy())
        for j in self.cat_knobs:
            p[j] = torch.nn.functional.one_hot(torch.from_numpy(x[:, j]), len(self.space.knobs[j].options)).double()
        return u, p

    def round(self, u: list[torch.Tensor | None], p: list[torch.Tensor | None]) -> np.ndarray:
        """(B, knobs) decision vectors nearest to a relaxed point: each tile knob the valid
        factorisation nearest in log space, each categorical knob its most likely choice."""
        n = next(len(t) for t in (*u, *p) if t is not None)
        x = np.zeros((n, self.space.n_knobs), dtype=np.int64)
        with torch.no_grad():
            for j in self.tile_knobs:
                uj = u[j]
                assert uj is not None
                d = ((uj.numpy()[:, None, :] - self.log2_options[j][None, :, :]) ** 2).sum(-1)
                x[:, j] = d.argmin(1)
            for j in self.cat_knobs:
                pj = p[j]
                assert pj is not None
                x[:, j] = pj.argmax(1).numpy()
        return x

    def violation(self, u: list[torch.Tensor | None]) -> torch.Tensor:
        """(B,) squared excess of every innermost tile factor over its limit (log2), the limit
        the design space puts on it (MetaSchedule's `max_innermost_factor`); rounding never crosses it."""
        terms = [
            torch.relu(uj[:, -1] - self.log2_limit[j]) ** 2
            for j in self.tile_knobs
            if (uj := u[j]) is not None and math.isfinite(self.log2_limit[j])
        ]
        n = next(len(t) for t in u if t is not None) if any(t is not None for t in u) else 0
        return torch.stack(terms, 1).sum(1) if terms else torch.zeros(n, dtype=torch.float64)

    # -- tokens ---------------------------------------------------------------------------------
    def tokens(self, u: list[torch.Tensor | None], p: list[torch.Tensor | None]) -> torch.Tensor:
        """(B, n_tokens, PREFIX_FEATURE_WIDTH) float32 tokens of relaxed knobs (see the class)."""
        n = next((len(t) for t in (*u, *p) if t is not None), None)
        if n is None:
            raise InputError("a relaxed point needs at least one knob")
        factor = {j: _snap(torch.exp2(uj)) for j in self.tile_knobs if (uj := u[j]) is not None}
        out = self.static.reshape(1, -1).repeat(n, 1)
        # the emulated post-processing columns first (the tokenizer assigns them before the tiles)
        for r, post, loops, cut in self._posts:
            ext = [factor[j][:, k] if j >= 0 else torch.full((n,), e, dtype=torch.float64) for j, k, e in loops]
            values = _post_values(post, ext, cut, n).float()
            base = r * self.width + _C_POSTPAR
            out[:, base : base + 3] = values
        # tile values, added cell by cell in the tokenizer's order (float32 sums, as np.add.at)
        if self._tiles:
            parts = []
            for j in self.tile_knobs:
                uj = u[j]
                parts.append(
                    uj
                    if uj is not None
                    else torch.from_numpy(self.log2_options[j][self.space.current[j]]).expand(n, -1)
                )
            lg = torch.cat([*parts, self._const.expand(n, -1)], 1)[:, self._tile_cols]
            f = _snap(torch.exp2(lg))
            code = self._tile_code
            v = torch.where(code == 1, torch.log2(f + 1.0), lg + (code == 0).double())
            vals = torch.nan_to_num(v, nan=0.0).float()  # an unknown fixed factor counts 0
            for idx, cells in self._by_depth:
                out[:, cells] = out[:, cells] + vals[:, idx]
        for cell, j, table in self._others:
            if j >= 0:
                out[:, cell] = (p[j] * torch.from_numpy(table)).sum(1).float()  # type: ignore[operator]
            else:
                out[:, cell] = float(table)
        out = out.view(n, self.n_rows, self.width)
        pos = torch.arange(self.n_rows, dtype=torch.float32) / MAX_TRACE_TOKENS
        out = torch.cat([out[:, :, :_C_POS], pos.view(1, -1, 1).expand(n, -1, 1), out[:, :, _C_POS + 1 :]], 2)
        return torch.cat([self.workload.unsqueeze(0).expand(n, -1, -1), out], 1)


def _snap(f: torch.Tensor) -> torch.Tensor:
    """`f`, with values within 1e-9 (relative) of an integer moved onto it without changing the
    gradient: exp2(log2 f) of an integer factor is then that integer, as the tokenizer reads it."""
    r = torch.round(f)
    near = (f - r).abs() <= 1e-9 * r.clamp(min=1.0)
    return f + torch.where(near, r - f, torch.zeros_like(f)).detach()


def _post_values(post: Any, ext: list[torch.Tensor], cut: int, n: int) -> torch.Tensor:
    """(n, 3) float64: `trace_tokens._Post.values` on torch extents (differentiable where the
    values are continuous in them: the parallel extent in every fused loop's extent, the vector
    extent in the innermost loop's)."""
    zero = torch.zeros(n, dtype=torch.float64)
    par_ext, par_loops, vec = zero, zero, zero
    lim = post.limits
    if lim.par > 0:
        prod = torch.ones(n, dtype=torch.float64)
        count = torch.zeros(n, dtype=torch.float64)
        live = torch.ones(n, dtype=torch.bool)
        for i, (e, axis, loop) in enumerate(zip(ext, post.axes, post.loops)):
            if axis != "S":
                break
            live = live & (e > 0)
            count = count + live.double()
            prod = torch.where(live, prod * e, prod)
            live = live & (prod <= lim.par) & (cut != i)
            if loop in lim.multi:
                break
        par = prod > 1
        par_ext = torch.where(par, torch.log2(torch.where(par, prod, torch.ones_like(prod))), zero)
        par_loops = torch.where(par, count, zero)
    if lim.vec > 0 and post.axes and post.axes[-1] == "S":
        e = ext[-1]
        ok = (e > 1) & (e <= lim.vec)
        vec = torch.log2(1.0 + torch.where(ok, e, zero))
    return torch.stack([par_ext, par_loops, vec], 1)


def _factor(dec: dict[int, Any], inst: int, k: int) -> float:
    try:
        f = dec[inst][k]
    except (KeyError, IndexError, TypeError):
        return 0.0
    return float(f) if isinstance(f, int) and f > 0 else 0.0


def _innermost_limit(ins: list[Any]) -> float:
    """log2 of a SamplePerfectTile's max_innermost_factor (inf where it sets none)."""
    try:
        limit = int(ins[2][1])
    except (IndexError, TypeError, ValueError):
        return math.inf
    return math.log2(limit) if limit > 0 else math.inf
