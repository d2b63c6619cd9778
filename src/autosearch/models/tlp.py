"""TLP: a cost model that reads the schedule as a token sequence (TLP, ASPLOS'23).

The network: every token (a trace instruction, or a workload block; `trace-tokens`) goes through
a small MLP, then 1-2 self-attention layers with residuals let tokens see each other (a tile
factor means little without the loop it splits and the workload it belongs to), the sequence is
summed, and a head scores it. Training: LambdaRank on `min_latency / latency` labels for a fixed
120 epochs with the learning rate annealed to zero (`stop_on="last"`): early stopping on a few
carved-out workloads stopped it at noisy early epochs (held-out families' top-1 0.34 with 12
epochs and patience 4, ~0.5 with the full schedule; bench/README.md), and 120 epochs ranked the
held-out families of the two-thread store better and steadier than 60 (top-1 0.755 +- 0.016 vs
0.675 +- 0.083 over three seeds, side by side; docs/models.md). `stop_on="top1"` etc. as
the other models still early-stop. `mixed=True, gain_scale=1` is TLP's
own scheme (the candidates of several workloads in one ranking list, gains 2**label - 1); on the
reference dataset it ranked held-out families worse than ranking within each workload with our
other models' gains (2**(10 label) - 1), so that is the default (bench/README.md has both).

`device=True`: the last DEVICE_WIDTH columns of every row are the device descriptor
(`autosearch.features.device.with_device`); the head also gets it directly, and the model
remembers which device vectors it was trained on (`known_devices`, `knows_device`).

`members=K` trains K networks from seeds seed..seed+K-1 and scores with their mean, as the MLP
does; K = 3 by default. Why: on unseen operator families one network's top-1 moves by +-0.1 with
its seed (six seeds of one network on the two-thread store's held-out families: 0.574-0.780,
mean 0.729 / top-5 0.856), and the mean of three is steadier and better (six ensembles: 0.717-0.789,
mean 0.755 / top-5 0.869; docs/models.md). It costs three times the training and the network's
share of scoring; `-p members=1` for speed.

Speed: sequences are bucketed by length before padding, and the attention uses a key-padding
mask, so scoring cost follows the real token counts (~30 per candidate). Candidates are scored
in chunks of ~16k token rows: the intermediates then stay in cache (with four times the rows a
network took markedly longer per candidate, bench/README.md). Decision vectors of a sketch
(`features.decision_space`) need no tokens at all: `predict_space` tabulates what the network
computes of each token row before rows mix, per knob option, and runs only the rest per candidate
(about twice the candidates/s of tokens + network, the same scores; bench/README.md).
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from autosearch import interrupts
from autosearch.errors import InputError
from autosearch.models.base import CostModel, FeatureBatch, TrainReport
from autosearch.models.torch_training import clipped_step, early_stopped_run

__all__ = ["TLPModel", "TLPNet"]

#: Width of the device descriptor appended by `features.device.with_device` (kept here so the model
#: needs no import of the feature layer at scoring time; checked against it in the tests).
DEVICE_WIDTH = 14
#: Longest token sequence the position embedding covers (trace-tokens: 8 workload + 80 trace tokens).
MAX_TOKENS = 96
#: Token rows a chunk of `TLPModel.predict_space` (tuned in bench/scoring_breakdown.py).
_SPACE_ROWS = 16384
#: Bytes of decision-space tables a model keeps (least recently used dropped first). Three networks
#: hold 0.7 MB for the median reference workload's sketch (1.5 MB at most, 346 options); a sketch
#: whose knobs have thousands of options can hold ~100 MB.
_TABLE_BYTES = 512 << 20


class _SelfAttention(nn.Module):
    """Multi-head self-attention over padded sequences (torch's fused kernel; no weights returned)."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, h: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        return self.attend(self.qkv(h), keep)

    def attend(self, qkv: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        """Attention from projected (N, L, 3 * hidden) rows; keep (N, L) or None: no padding."""
        n, length, width = qkv.shape[0], qkv.shape[1], qkv.shape[2] // 3
        d = width // self.heads
        q, k, v = qkv.reshape(n, length, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        if keep is None:  # two batched products: faster than the fused kernel at such short sequences
            q, k, v = (t.reshape(n * self.heads, length, d) for t in (q, k, v))
            a = torch.bmm(torch.bmm(q * d**-0.5, k.transpose(1, 2)).softmax(-1), v).view(n, self.heads, length, d)
        else:
            a = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        return self.out(a.transpose(1, 2).reshape(n, length, width))


class TLPNet(nn.Module):
    """Token rows (R, F) of N candidates -> one score per candidate.

    The per-token MLP runs on the packed rows (no padding); only the attention sees padded
    (N, L, hidden) sequences, gathered by `_layout`.
    """

    scale: torch.Tensor  # registered buffer: 1 / max |column| on the training set

    def __init__(
        self,
        n_features: int,
        hidden: int = 64,
        heads: int = 4,
        n_attention: int = 1,
        device_width: int = 0,
        positions: bool = False,
    ):
        super().__init__()
        self.device_width, self.positions = device_width, positions
        self.register_buffer("scale", torch.ones(n_features))
        self.encoder = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.position = nn.Embedding(MAX_TOKENS, hidden)  # token order: a sketch's tokens line up by position
        nn.init.normal_(self.position.weight, std=0.02)
        self.norm = nn.LayerNorm(hidden)
        self.attention = nn.ModuleList(_SelfAttention(hidden, heads) for _ in range(n_attention))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU()) for _ in range(n_attention))
        self.head = nn.Sequential(nn.Linear(hidden + device_width, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, rows: torch.Tensor, index: torch.Tensor, keep: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        """rows (R, F); index (N, L) row of each token, R for padding; keep (N, L); first (N,) first row."""
        x = rows * self.scale
        h = self.encoder(x)
        h = torch.cat([h, h.new_zeros(1, h.shape[1])]).index_select(0, index.reshape(-1)).view(*index.shape, -1)
        if self.positions:
            h = h + self.position.weight[: h.shape[1]].unsqueeze(0)
        for attn, ffn in zip(self.attention, self.ffn):
            h = h + attn(self.norm(h), keep)
            h = h + ffn(h)
        pooled = (h * keep.unsqueeze(-1)).sum(dim=1)
        if self.device_width:
            pooled = torch.cat([pooled, x[first, -self.device_width :]], dim=1)
        return self.head(pooled).squeeze(-1)

    def row_values(self, tokens: torch.Tensor, position: int | torch.Tensor) -> torch.Tensor:
        """(n, hidden [+ 3 * hidden]) of n token rows at one sequence position (or at one each:
        an (n,) index): what `forward` computes of a row before tokens mix (its encoding, and its
        first attention layer's projections). Equal for equal rows, so a decision space tabulates
        it (`TLPModel.predict_space`)."""
        h = self.encoder(tokens * self.scale)
        if self.positions:
            h = h + self.position.weight[position]
        if not len(self.attention):
            return h
        first = self.attention[0]
        assert isinstance(first, _SelfAttention)
        return torch.cat([h, first.qkv(self.norm(h))], dim=1)

    def forward_rows(self, values: torch.Tensor) -> torch.Tensor:
        """Scores from (N, L, width) `row_values` of N whole (unpadded) sequences: `forward` after
        the rows' first layers."""
        hidden = self.norm.normalized_shape[0]
        h = values[..., :hidden]
        for i, (attn, ffn) in enumerate(zip(self.attention, self.ffn)):
            assert isinstance(attn, _SelfAttention)
            h = h + (attn.attend(values[..., hidden:], None) if i == 0 else attn(self.norm(h), None))
            h = h + ffn(h)
        return self.head(h.sum(dim=1)).squeeze(-1)


def _layout(offsets: np.ndarray, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(row selection, (n, L) token index into it with len(selection) = padding, keep mask, first rows)."""
    starts, lens = offsets[idx], offsets[idx + 1] - offsets[idx]
    n, total = len(idx), int(lens.sum())
    longest = max(int(lens.max()) if n else 1, 1)
    begin = np.cumsum(lens) - lens
    sel = np.repeat(starts - begin, lens) + np.arange(total)  # rows of the candidates, packed
    keep = np.arange(longest)[None, :] < lens[:, None]
    index = np.full((n, longest), total, dtype=np.int64)
    index[keep] = np.arange(total)
    if n and lens.min() == 0:  # an empty candidate attends to one zero token instead of nothing (NaN)
        keep[lens == 0, 0] = True
    first = np.minimum(begin, max(total - 1, 0))
    return torch.from_numpy(sel), torch.from_numpy(index), torch.from_numpy(keep), torch.from_numpy(first)


class TLPModel(CostModel):
    """Token MLP + self-attention + sum, trained with LambdaRank over mixed workloads."""

    kind = "tlp"
    incremental: ClassVar[bool] = True  # `update` fine-tunes on a run's results
    scores_decision_vectors: ClassVar[bool] = True  # predict_space_members, from tables
    weights_file: ClassVar[str] = "model.safetensors"
    length_param: ClassVar[str | None] = "epochs"

    def __init__(
        self,
        hidden: int = 64,
        heads: int = 4,
        n_attention: int = 1,
        loss: str = "lambdarank",
        mixed: bool = False,
        lr: float = 1e-3,
        weight_decay: float = 1e-6,
        epochs: int = 120,
        groups_per_batch: int = 16,
        cands_per_group: int = 32,
        grad_clip: float = 1.0,
        patience: int = 8,
        stop_on: str = "last",
        update_epochs: int = 3,
        seed: int = 0,
        device: bool = False,
        known_devices: list[list[float]] | None = None,
        positions: bool = False,
        gain_scale: float = 10.0,
        threads: int = 1,
        members: int = 3,
    ) -> None:
        if int(members) < 1:
            raise InputError(f"members must be >= 1, got {members}")
        if int(n_attention) not in (0, 1, 2):
            raise InputError(f"n_attention must be 0, 1 or 2, got {n_attention}")
        if int(hidden) % int(heads):
            raise InputError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
        self.hidden, self.heads, self.n_attention = int(hidden), int(heads), int(n_attention)
        self.loss, self.mixed = loss, _flag(mixed)
        self.lr, self.weight_decay, self.epochs = float(lr), float(weight_decay), int(epochs)
        self.groups_per_batch, self.cands_per_group = int(groups_per_batch), int(cands_per_group)
        self.grad_clip, self.patience, self.stop_on = float(grad_clip), int(patience), stop_on
        self.update_epochs, self.seed, self.device = int(update_epochs), int(seed), _flag(device)
        self.known_devices = [list(map(float, v)) for v in (known_devices or [])]
        self.positions = _flag(positions)
        self.gain_scale = float(gain_scale)
        self.threads = max(1, int(threads))
        self.members = int(members)
        self.nets: list[TLPNet] = []  # the trained members; scores are their mean
        self.net: TLPNet | None = None  # the member being trained or updated
        self._tables: dict[int, _SpaceTables] = {}  # id(space) -> its tables; emptied when weights change

    # -- training ----------------------------------------------------------------------------
    def fit(self, train: Any, valid: Any = None, progress: Any = None) -> TrainReport:
        """Train from scratch; `progress(epoch, record)` is called after every epoch.

        With several members, each early-stops on its own; the report keeps every member's
        history (records carry "member") and its best epoch is the members' median.
        """
        from autosearch.training.trainer import fit_members, selection_key

        selection_key(0.0, 0.0, self.stop_on)  # validate the name before training
        self.n_features = None
        self._check_fit_input(train, valid)
        if self.device and train.n_features <= DEVICE_WIDTH:
            raise InputError(f"device=true needs rows with the {DEVICE_WIDTH} device columns appended (with_device)")
        self.extractor = train.extractor
        if self.device:
            self.known_devices = _distinct_devices(train)

        def one(seed: int, tag: Any) -> tuple[Any, TrainReport]:
            report = self._fit_member(train, valid, seed, tag)
            assert self.net is not None  # _fit_member always builds one
            return self.net, report

        with _threads(self.threads):
            self.nets, report = fit_members(self.members, self.seed, one, progress)
        return report

    def _fit_member(self, train: Any, valid: Any, seed: int, progress: Any) -> TrainReport:
        """One network from scratch (into self.net), early-stopped on `valid` if given."""
        self._tables.clear()
        from autosearch.training.trainer import column_scale, selection_key

        loss_fn = self._loss_fn()
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        self.net = TLPNet(
            train.n_features,
            self.hidden,
            self.heads,
            self.n_attention,
            DEVICE_WIDTH if self.device else 0,
            self.positions,
        )
        self.net.scale.copy_(torch.from_numpy(column_scale(train.rows, train.n_features)))
        self.nets = [self.net]  # validation scores this member alone
        self.n_features = train.n_features
        opt = torch.optim.AdamW(self.net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(self.epochs, 1))

        def epoch() -> float:
            loss = self._run_epoch(train, loss_fn, opt, rng)
            sched.step()
            return loss

        return early_stopped_run(
            self.kind,
            self.net,
            train,
            valid,
            self.epochs,
            self.patience,
            epoch,
            lambda: self._validate(valid),
            lambda r: selection_key(r["valid_top1"], r["valid_top5"], self.stop_on, epoch=r["epoch"]),
            progress,
        )

    def _run_epoch(self, data: Any, loss_fn: Any, opt: torch.optim.Optimizer, rng: np.random.Generator) -> float:
        from autosearch.training.trainer import group_minibatches

        assert self.net is not None
        self.net.train()
        total, steps = 0.0, 0
        labels_all = torch.from_numpy(data.labels.astype(np.float32))
        rows = torch.from_numpy(data.rows)
        for idx in group_minibatches(data, self.groups_per_batch, self.cands_per_group, rng):
            mask = torch.from_numpy(idx >= 0)
            flat = idx[idx >= 0]
            scores = torch.zeros(mask.shape).masked_scatter(mask, self._forward(rows, data.offsets, flat))
            labels = torch.zeros(mask.shape).masked_scatter(mask, labels_all[torch.from_numpy(flat)])
            if self.mixed:  # TLP: one ranking list over every workload in the batch
                scores, labels, mask = scores.reshape(1, -1), labels.reshape(1, -1), mask.reshape(1, -1)
            loss = loss_fn(scores, labels, mask)
            total += clipped_step(self.net, opt, loss, self.grad_clip)
            steps += 1
        return total / max(steps, 1)

    @torch.no_grad()
    def _validate(self, valid: Any) -> dict[str, float]:
        from autosearch.training.trainer import quick_metrics

        return {f"valid_{k}": v for k, v in quick_metrics(self._predict(valid.batch()), valid).items()}

    def update(self, new: Any) -> None:
        """A few epochs on the new candidates only, at a tenth of the learning rate."""

        if not self._should_update(new):
            return
        with _threads(self.threads):
            self._update(new)

    def _update(self, new: Any) -> None:
        self._tables.clear()
        for member, net in enumerate(self.nets):
            self.net = net
            opt = torch.optim.AdamW(net.parameters(), lr=self.lr * 0.1, weight_decay=self.weight_decay)
            rng = np.random.default_rng(self.seed + 1 + member)
            for _ in range(self.update_epochs):
                self._run_epoch(new, self._loss_fn(), opt, rng)

    def _loss_fn(self) -> Any:
        """The loss; LambdaRank with gains 2**(gain_scale * label) - 1 (TLP: gain_scale 1)."""
        import functools

        from autosearch.training.losses import get_loss, lambdarank_loss

        fn = get_loss(self.loss)
        return functools.partial(lambdarank_loss, gain_scale=self.gain_scale) if fn is lambdarank_loss else fn

    # -- devices -----------------------------------------------------------------------------
    def knows_device(self, vector: np.ndarray, tol: float = 0.15) -> bool:
        """Whether a device vector (features.device.descriptor_vector) is close to one trained on.

        Close = every field within `tol` (fields are log2 / unit scaled), so a re-measurement of the
        same machine matches and a different ISA level, core count or bandwidth class does not.
        """
        v = np.asarray(vector, dtype=np.float64).reshape(-1)
        return any(np.max(np.abs(np.asarray(k) - v)) <= tol for k in self.known_devices if len(k) == v.size)

    # -- inference ---------------------------------------------------------------------------
    @torch.no_grad()
    def _predict(self, batch: FeatureBatch) -> np.ndarray:
        with _threads(self.threads):
            return self._predict_sorted(batch)

    def predict_members(self, batch: FeatureBatch) -> np.ndarray:
        """(members, candidates) scores of every member: their spread is the ensemble's uncertainty."""
        if not self.nets:
            raise InputError("tlp model is not trained: call fit() or load() first")
        batch.validate(self.n_features)
        with torch.no_grad(), _threads(self.threads):
            return np.stack([self._predict_sorted(batch, [net]) for net in self.nets])

    def predict_space(self, space: Any, x: np.ndarray) -> np.ndarray:
        """Scores of decision vectors `x` of a `features.decision_space.DecisionSpace`: equal to
        `predict` on `space.tokens(x)`, computed from tables (`_SpaceTables`) instead of tokens."""
        return self.predict_space_members(space, x).mean(axis=0)

    def predict_space_members(self, space: Any, x: np.ndarray, threads: int | None = None) -> np.ndarray:
        """(members, len(x)) scores of every member for decision vectors of a space, on `threads`
        torch threads (default: the model's `threads`)."""
        if not self.nets:
            raise InputError("tlp model is not trained: call fit() or load() first")
        x = space.validate(x)
        out = np.empty((len(self.nets), len(x)), dtype=np.float64)
        with torch.no_grad(), _threads(threads or self.threads):
            tables = self._space_tables(space)
            chunks = -(-len(x) * space.n_tokens // _SPACE_ROWS)  # even chunks of <= ~_SPACE_ROWS token rows
            step = max(1, -(-len(x) // max(chunks, 1)))
            for s in range(0, len(x), step):
                interrupts.check()  # a search scores thousands of vectors a round: Ctrl-C acts between chunks
                out[:, s : s + step] = tables.scores(x[s : s + step]).double().numpy()
        return out

    def _space_tables(self, space: Any) -> _SpaceTables:
        key = id(space)
        hit = self._tables.pop(key, None)
        if hit is None or hit.space() is not space or hit.nets != self.nets:
            hit = _SpaceTables(space, self.nets)
        self._tables[key] = hit  # most recent last
        while len(self._tables) > 1 and sum(t.nbytes for t in self._tables.values()) > _TABLE_BYTES:
            self._tables.pop(next(iter(self._tables)))
        return hit

    def _predict_sorted(self, batch: FeatureBatch, nets: list[TLPNet] | None = None) -> np.ndarray:
        nets = nets if nets is not None else self.nets
        assert nets
        for net in nets:
            net.eval()
        lens = np.diff(batch.offsets)
        order = np.argsort(lens, kind="stable")  # similar lengths together: little padding
        out = np.empty(batch.n_candidates, dtype=np.float64)
        step = max(1, 16384 // max(int(lens.max(initial=1)), 1))  # ~16k rows a chunk (module docstring)
        rows = torch.from_numpy(np.ascontiguousarray(batch.rows, dtype=np.float32))
        for s in range(0, len(order), step):
            idx = order[s : s + step]
            out[idx] = self._forward(rows, batch.offsets, idx, nets).double().numpy()
        return out

    def _forward(
        self, rows: torch.Tensor, offsets: np.ndarray, idx: np.ndarray, nets: list[TLPNet] | None = None
    ) -> torch.Tensor:
        """Scores of the member being trained, or the mean over `nets`."""
        sel, index, keep, first = _layout(offsets, idx)
        x = rows[sel]
        if nets is None:
            assert self.net is not None
            return self.net(x, index, keep, first)
        return torch.stack([net(x, index, keep, first) for net in nets]).mean(0)

    # -- persistence -------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        from autosearch.models.io import prepare_dir, save_members

        if not self.nets:
            raise InputError("cannot save an untrained tlp model")
        save_members(self.nets, prepare_dir(path) / self.weights_file)
        self._write_config(path, self.weights_file)

    @classmethod
    def _from_dir(cls, path: str, config: dict[str, Any]) -> TLPModel:
        from autosearch.models.io import load_members

        # a model saved before `members` existed holds one network (the default is now three)
        model = cls._from_params({**config, "params": {"members": 1, **config.get("params", {})}})
        f = os.path.join(path, cls.weights_file)
        nets = load_members(
            f,
            model.members,
            lambda: TLPNet(
                int(config["n_features"]),
                model.hidden,
                model.heads,
                model.n_attention,
                DEVICE_WIDTH if model.device else 0,
                model.positions,
            ),
        )
        model.nets, model.net = nets, nets[0]
        return model


class _SpaceTables:
    """One decision space's token rows as tabulated `TLPNet.row_values`, per member.

    A row no knob moves is one table entry, a row one knob moves one entry per option of the knob
    (`DecisionSpace.row_plan`); a candidate's (N, L, width) values are then one gather, and only
    the rows several knobs move (the summary token) go through the network's first layers per
    candidate. The rest of the network (attention, feed-forward, sum, head) runs as in `forward`.
    """

    def __init__(self, space: Any, nets: list[TLPNet]) -> None:
        self.space, self.nets = weakref.ref(space), list(nets)  # the tables are these networks'
        plan = space.row_plan
        width = space.row_tokens(space.current, [0]).shape[-1]
        if any(net.scale.numel() != width or net.device_width for net in nets):
            raise InputError(
                f"this tlp model reads {nets[0].scale.numel()} features a token; the decision space "
                f"gives {width} (a model trained with device=true cannot score decision vectors)"
            )
        if any(net.positions for net in nets) and space.n_tokens > MAX_TOKENS:
            raise InputError(f"{space.n_tokens} tokens: more than the {MAX_TOKENS} positions this tlp model knows")
        self.n_tokens, self.mixed = int(space.n_tokens), plan.mixed
        self.template = np.zeros(self.n_tokens, dtype=np.int64)
        pieces: list[tuple[np.ndarray, int]] = []  # (token rows, position) in table order
        size = 0
        const = space.row_tokens(space.current, plan.const)[0]
        for i, r in enumerate(plan.const):
            pieces.append((const[i : i + 1], int(r)))
            self.template[r] = size
            size += 1
        self.single: list[tuple[int, int, int]] = []  # (row, knob, first table entry)
        for j in sorted({j for _, j in plan.single}):
            rows = np.asarray([r for r, k in plan.single if k == j], dtype=np.int64)
            toks = space.option_tokens(j, rows)
            for i, r in enumerate(rows):
                pieces.append((toks[:, i], int(r)))
                self.single.append((int(r), j, size))
                size += toks.shape[0]
        self.size = size
        # every piece through each member's first layers in one call (was a call per piece, each
        # on a few rows, whose dispatch cost more than their arithmetic)
        piece_rows = torch.from_numpy(np.ascontiguousarray(np.concatenate([t for t, _ in pieces]), dtype=np.float32))
        where = torch.from_numpy(np.repeat([r for _, r in pieces], [len(t) for t, _ in pieces]).astype(np.int64))
        self.tables = [net.row_values(piece_rows, where) for net in nets]
        self.nbytes = sum(t.numel() * t.element_size() for t in self.tables)

    def scores(self, x: np.ndarray) -> torch.Tensor:
        """(members, N) float32 scores of N decision vectors."""
        space = self.space()
        assert space is not None
        n = len(x)
        index = np.broadcast_to(self.template, (n, self.n_tokens)).copy()
        for r, j, first in self.single:
            index[:, r] = first + x[:, j]
        # rows several knobs move: computed once per distinct row (a population repeats them: the
        # emulated post-processing takes a few values a sketch, mutants share most tile sums)
        extra: list[tuple[torch.Tensor, int]] = []
        size = self.size
        if self.mixed.size:
            mixed = space.row_tokens(x, self.mixed)
            for i, r in enumerate(self.mixed):
                rows = np.ascontiguousarray(mixed[:, i])
                keys = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel()
                _, distinct, inverse = np.unique(keys, return_index=True, return_inverse=True)
                extra.append((torch.from_numpy(rows[distinct]), int(r)))
                index[:, r] = size + inverse.reshape(-1)
                size += distinct.size
        index_t = torch.from_numpy(index.reshape(-1))
        out = []
        for net, table in zip(self.nets, self.tables):
            interrupts.check()  # a member's pass over a chunk can take a second on a busy machine
            if extra:
                table = torch.cat([table, *(net.row_values(t, r) for t, r in extra)])
            out.append(net.forward_rows(table.index_select(0, index_t).view(n, self.n_tokens, -1)))
        return torch.stack(out)


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    """torch on `n` threads inside the block. Why: on a shared 2-core machine, torch's thread pool
    waits on busy cores (the sparse models measured much slower steps with 2 threads than with 1)."""
    old = torch.get_num_threads()
    if old == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _flag(v: Any) -> bool:
    """A boolean hyper-parameter, also from `-p key=true/false/1/0` strings."""
    if isinstance(v, str):
        if v.lower() in ("1", "true", "yes", "on"):
            return True
        if v.lower() in ("0", "false", "no", "off"):
            return False
        raise InputError(f"expected true or false, got {v!r}")
    return bool(v)


def _distinct_devices(ds: Any) -> list[list[float]]:
    """The distinct device vectors (last DEVICE_WIDTH columns) of a dataset's candidates."""
    first = ds.rows[ds.offsets[:-1][np.diff(ds.offsets) > 0], -DEVICE_WIDTH:]
    uniq = np.unique(np.round(first.astype(np.float64), 4), axis=0)
    return [list(map(float, r)) for r in uniq]
