"""An MLP cost model on the differentiable sketch features (features.py), trained with a rank loss.

Why its own model rather than models/mlp.py: gradient search needs d(score)/d(features) inside
PyTorch's autograd, and the per-block rows of one schedule are summed (as Felix and TenSet's MLP
do), so a schedule with more blocks simply has more terms. Higher score = faster.

Training data: groups (one per workload) of feature tensors (N, blocks, F) and latencies; a
group's label is min_latency / latency (DESIGN.md); failed schedules (latency None) take label 0.
Loss: pairwise logistic rank loss within each group (only the order matters to the search).
Saved as `config.json` (version, sizes, feature normalisation) + `model.safetensors`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from autosearch.errors import InputError
from autosearch.search.gradient.features import FEATURE_NAMES, FEATURE_WIDTH

__all__ = ["FORMAT", "GradientCostModel", "Group", "rank_loss"]

FORMAT = ("autosearch-gradient-mlp", 1)


@dataclass
class Group:
    """Measured schedules of one sketch of one workload: features (N, blocks, F), latencies (None = failed)."""

    key: str
    features: torch.Tensor
    latencies: list[float | None]

    def labels(self) -> torch.Tensor:
        ok = [x for x in self.latencies if x is not None and x > 0]
        best = min(ok) if ok else 1.0
        return torch.tensor([best / x if x is not None and x > 0 else 0.0 for x in self.latencies], dtype=torch.float32)


def rank_loss(score: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Mean pairwise logistic loss over pairs with different labels (weighted by label gap)."""
    diff_l = label.unsqueeze(1) - label.unsqueeze(0)
    mask = diff_l > 1e-6
    if not bool(mask.any()):
        return score.sum() * 0.0
    diff_s = score.unsqueeze(1) - score.unsqueeze(0)
    w = diff_l[mask]
    return (nn.functional.softplus(-diff_s[mask]) * w).sum() / w.sum()


class _Net(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(width, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, blocks, F) -> (B,)
        return self.body(x).squeeze(-1).sum(-1)


class GradientCostModel:
    """Per-block MLP, summed over blocks; `score` is differentiable in its input features."""

    def __init__(
        self, hidden: int = 128, lr: float = 1e-3, epochs: int = 40, update_epochs: int = 15, seed: int = 0
    ) -> None:
        self.hidden, self.lr, self.epochs, self.update_epochs, self.seed = hidden, lr, epochs, update_epochs, seed
        torch.manual_seed(seed)
        self.net = _Net(FEATURE_WIDTH, hidden)
        self.mean = torch.zeros(FEATURE_WIDTH)
        self.std = torch.ones(FEATURE_WIDTH)
        self.n_trained = 0
        self._opt: torch.optim.Optimizer | None = None

    # -- inference -------------------------------------------------------------------------------
    def score(self, feats: torch.Tensor) -> torch.Tensor:
        """(B, blocks, F) float features -> (B,) scores, differentiable (higher = faster)."""
        x = (feats.to(torch.float32) - self.mean) / self.std
        return self.net(x)

    def predict(self, feats: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            return self.score(feats).numpy().astype(np.float64)

    # -- training --------------------------------------------------------------------------------
    def _normalise_from(self, groups: Sequence[Group]) -> None:
        rows = torch.cat([g.features.reshape(-1, FEATURE_WIDTH).to(torch.float32) for g in groups])
        self.mean = rows.mean(0)
        std = rows.std(0)
        self.std = torch.where(std > 1e-3, std, torch.ones_like(std))

    def fit(self, groups: Sequence[Group], epochs: int | None = None) -> list[float]:
        """Train from scratch (normalisation from these groups); returns the loss per epoch."""
        groups = [g for g in groups if len(g.latencies) >= 2]
        if not groups:
            raise InputError("no group with two or more measured schedules to train on")
        torch.manual_seed(self.seed)
        self.net = _Net(FEATURE_WIDTH, self.hidden)
        self._normalise_from(groups)
        self._opt = None
        return self._train(groups, epochs or self.epochs)

    def update(self, groups: Sequence[Group], epochs: int | None = None) -> list[float]:
        """Fine-tune on new (or all recent) groups, keeping what was learned."""
        groups = [g for g in groups if len(g.latencies) >= 2]
        if not groups:
            return []
        if self.n_trained == 0 and bool((self.std == 1).all()):
            self._normalise_from(groups)
        return self._train(groups, epochs or self.update_epochs)

    def _train(self, groups: Sequence[Group], epochs: int, batch: int = 128) -> list[float]:
        torch.set_num_threads(1)  # small matrices: more threads only contend on a shared machine
        if self._opt is None:
            self._opt = torch.optim.Adam(self.net.parameters(), lr=self.lr, weight_decay=1e-5)
        rng = random.Random(self.seed + self.n_trained)
        chunks = []
        for g in groups:
            lab = g.labels()
            idx = list(range(len(g.latencies)))
            rng.shuffle(idx)
            for s in range(0, len(idx), batch):
                part = idx[s : s + batch]
                if len(part) >= 2:
                    chunks.append((g.features[part], lab[part]))
        losses = []
        self.net.train()
        for _ in range(epochs):
            rng.shuffle(chunks)
            total = 0.0
            for x, y in chunks:
                loss = rank_loss(self.score(x), y)
                self._opt.zero_grad()
                loss.backward()
                self._opt.step()
                total += float(loss.detach())
            losses.append(total / max(1, len(chunks)))
        self.net.eval()
        self.n_trained += sum(len(g.latencies) for g in groups)
        return losses

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        from safetensors.torch import save_file

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        cfg = {
            "format": FORMAT[0],
            "format_version": FORMAT[1],
            "hidden": self.hidden,
            "lr": self.lr,
            "epochs": self.epochs,
            "update_epochs": self.update_epochs,
            "seed": self.seed,
            "n_trained": self.n_trained,
            "feature_width": FEATURE_WIDTH,
            "feature_names_hash": _names_hash(),
        }
        (out / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
        tensors = {f"net.{k}": v.detach().contiguous() for k, v in self.net.state_dict().items()}
        tensors["mean"] = self.mean.contiguous()
        tensors["std"] = self.std.contiguous()
        save_file(tensors, str(out / "model.safetensors"))
        return out

    @classmethod
    def load(cls, path: str | Path) -> GradientCostModel:
        from safetensors.torch import load_file

        p = Path(path)
        try:
            cfg = json.loads((p / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"{p} is not a gradient cost model directory: {exc}") from None
        if cfg.get("format") != FORMAT[0] or cfg.get("format_version") != FORMAT[1]:
            raise InputError(f"{p}: not a {FORMAT[0]} v{FORMAT[1]} model (format {cfg.get('format')!r})")
        if cfg.get("feature_width") != FEATURE_WIDTH or cfg.get("feature_names_hash") != _names_hash():
            raise InputError(f"{p}: trained on another feature definition; retrain it")
        m = cls(
            hidden=int(cfg["hidden"]),
            lr=float(cfg["lr"]),
            epochs=int(cfg["epochs"]),
            update_epochs=int(cfg["update_epochs"]),
            seed=int(cfg["seed"]),
        )
        t = load_file(str(p / "model.safetensors"))
        m.net.load_state_dict({k[4:]: v for k, v in t.items() if k.startswith("net.")})
        m.mean, m.std = t["mean"], t["std"]
        m.n_trained = int(cfg.get("n_trained", 0))
        m.net.eval()
        return m


def _names_hash() -> str:
    import hashlib

    return hashlib.sha256(",".join(FEATURE_NAMES).encode()).hexdigest()[:16]
