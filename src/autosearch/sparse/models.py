"""The four sparse cost models of the seed notes, side by side (torch; nothing here knows TVM).

- `WACONet`: WACO's extractor (strided convolutions, every layer globally pooled and the pools
  concatenated) + an MLP over the configuration vector, MLP head; trained with MarginRankingLoss.
- `AutoSparseNet`: the pattern through Hybrid Dilated Convolution blocks (dilations 1, 2, 5),
  only the last layer pooled, joined with the SpTFS matrix info; the SuperSchedule tokens through
  1-2 transformer layers; the matrix embedding enters as a token of the first layer
  (`placement="token"`) or is joined to every token after it (`placement="concat"`); per-token
  scores are summed. Trained with LambdaRank on min_latency / latency.
- `AutoSparseNet_WACONet`: AutoSparseNet's transformer head on WACONet's extractor.
- `AutoSparseNet_Full`: AutoSparseNet trained on SpMV, SpMM and SDDMM at once (the op is in the tokens).

Saved as `config.json` (kind, hyper-parameters, version) + `model.safetensors`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from autosearch.errors import InputError
from autosearch.sparse.features import CFG_DIM, INFO_DIM, PRIMITIVES, TOKEN_DIM

__all__ = [
    "FORMAT_VERSION",
    "KINDS",
    "SELECTED",
    "SHIPPED_DIR",
    "SparseCostModel",
    "build_model",
    "load_model",
    "model_dir_name",
    "save_model",
    "shipped_model",
]

FORMAT_VERSION = 1
KINDS = ("WACONet", "AutoSparseNet", "AutoSparseNet_WACONet", "AutoSparseNet_Full")


class WacoExtractor(nn.Module):
    """Strided 3x3 convolutions; each layer's output is average-pooled and the pools concatenated
    (WACO kept 32 channels and concatenated pools because of GPU memory)."""

    def __init__(self, channels: int = 16, layers: int = 5, out: int = 64) -> None:
        super().__init__()
        convs, cin = [], 2
        for _ in range(layers):
            convs.append(nn.Conv2d(cin, channels, 3, stride=2, padding=1))
            cin = channels
        self.convs = nn.ModuleList(convs)
        self.proj = nn.Linear(channels * layers + INFO_DIM, out)

    def forward(self, img: torch.Tensor, info: torch.Tensor) -> torch.Tensor:
        pools, x = [], img
        for conv in self.convs:
            x = torch.relu(conv(x))
            pools.append(x.mean(dim=(2, 3)))
        return torch.relu(self.proj(torch.cat(pools + [info], dim=1)))


class HDCBlock(nn.Module):
    """Three 3x3 convolutions with dilations (1, 2, 5) and a residual: a wide receptive field
    without the gridding gaps of equal dilations (Hybrid Dilated Convolution)."""

    def __init__(self, channels: int, dilations: tuple[int, ...] = (1, 2, 5)) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(channels, channels, 3, padding=d, dilation=d) for d in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for conv in self.convs:
            y = torch.relu(conv(y))
        return x + y


class HDCExtractor(nn.Module):
    """Stem (stride 2) -> HDC blocks separated by stride-2 convolutions -> only the last layer pooled
    (mean and max), joined with the matrix info."""

    def __init__(self, channels: int = 16, blocks: int = 2, out: int = 64) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(2, channels, 3, stride=2, padding=1), nn.ReLU()]
        for b in range(blocks):
            layers.append(HDCBlock(channels))
            if b + 1 < blocks:
                layers += [nn.Conv2d(channels, channels, 3, stride=2, padding=1), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.info = nn.Sequential(nn.Linear(INFO_DIM, out), nn.ReLU())
        self.proj = nn.Linear(2 * channels + out, out)

    def forward(self, img: torch.Tensor, info: torch.Tensor) -> torch.Tensor:
        x = self.body(img)
        pooled = torch.cat([x.mean(dim=(2, 3)), x.amax(dim=(2, 3))], dim=1)
        return torch.relu(self.proj(torch.cat([pooled, self.info(info)], dim=1)))


class SparseCostModel(nn.Module):
    """score(matrix image, matrix info, configuration) -> higher = predicted faster.

    forward(img (G,2,H,W), info (G,INFO), tokens (G,C,T,TOKEN_DIM), cvec (G,C,CFG)) -> (G, C)
    """

    def __init__(
        self,
        kind: str,
        d_model: int = 32,
        layers: int = 1,
        placement: str = "token",
        channels: int = 16,
        heads: int = 4,
    ) -> None:
        #: Saved in config.json and given back to `build_model` by `load_model`: every `__init__`
        #: argument (scikit-learn's get_params rule), read before any other local exists.
        self_hyper = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        super().__init__()
        if kind not in KINDS:
            raise InputError(f"unknown sparse model {kind!r}; choose one of {', '.join(KINDS)}")
        if placement not in ("token", "concat"):
            raise InputError(f"placement must be 'token' or 'concat', got {placement!r}")
        if layers not in (1, 2):
            raise InputError(f"layers must be 1 or 2, got {layers}")
        self.kind, self.placement, self.d = kind, placement, d_model
        self.hyper = self_hyper
        waco_like = kind in ("WACONet", "AutoSparseNet_WACONet")
        self.extractor = WacoExtractor(channels, out=d_model) if waco_like else HDCExtractor(channels, out=d_model)
        if kind == "WACONet":
            self.sched = nn.Sequential(nn.Linear(CFG_DIM, d_model), nn.ReLU(), nn.Linear(d_model, d_model), nn.ReLU())
            self.head = nn.Sequential(nn.Linear(2 * d_model, d_model), nn.ReLU(), nn.Linear(d_model, 1))
            return
        self.embed = nn.Linear(TOKEN_DIM, d_model)
        self.emb_proj = nn.Linear(d_model, d_model)
        mk = lambda: nn.TransformerEncoderLayer(d_model, heads, 2 * d_model, dropout=0.0, batch_first=True)  # noqa: E731
        self.layer1 = mk()
        self.layer2 = mk() if layers == 2 else None
        self.join = nn.Linear(2 * d_model, d_model) if placement == "concat" else None
        self.out = nn.Linear(d_model, 1)

    def matrix_embedding(self, img: torch.Tensor, info: torch.Tensor) -> torch.Tensor:
        return self.extractor(img, info)

    def score(self, emb: torch.Tensor, tokens: torch.Tensor, cvec: torch.Tensor) -> torch.Tensor:
        """Scores of C configurations per matrix given the matrix embeddings (G, d)."""
        G, C = cvec.shape[:2]
        if self.kind == "WACONet":
            s = self.sched(cvec)
            e = emb[:, None, :].expand(G, C, self.d)
            return self.head(torch.cat([e, s], dim=-1)).squeeze(-1)
        T = tokens.shape[2]
        x = self.embed(tokens.reshape(G * C, T, -1))
        e = self.emb_proj(emb)[:, None, :].expand(G, C, self.d).reshape(G * C, self.d)
        if self.placement == "token":  # the last token is the matrix_embedding placeholder
            is_emb = tokens.reshape(G * C, T, -1)[:, :, PRIMITIVES.index("matrix_embedding")] > 0.5
            x = torch.where(is_emb[:, :, None], e[:, None, :].expand_as(x) + x, x)
            x = self.layer1(x)
        else:
            assert self.join is not None  # built for placement "concat"
            x = self.layer1(x)
            x = torch.relu(self.join(torch.cat([x, e[:, None, :].expand_as(x)], dim=-1)))
        if self.layer2 is not None:
            x = self.layer2(x)
        return self.out(x).sum(dim=(1, 2)).reshape(G, C)

    def forward(self, img: torch.Tensor, info: torch.Tensor, tokens: torch.Tensor, cvec: torch.Tensor) -> torch.Tensor:
        return self.score(self.matrix_embedding(img, info), tokens, cvec)

    @property
    def uses_embedding_token(self) -> bool:
        return self.kind != "WACONet" and self.placement == "token"


def build_model(kind: str, **hyper: Any) -> SparseCostModel:
    return SparseCostModel(kind, **hyper)


def save_model(model: SparseCostModel, path: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """A directory with config.json and model.safetensors."""
    from safetensors.torch import save_file

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {"format": "autosearch-sparse-model", "version": FORMAT_VERSION, "hyper": model.hyper, **(extra or {})}
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(out / "model.safetensors"))
    return out


def load_model(path: str | Path) -> tuple[SparseCostModel, dict[str, Any]]:
    """Read a saved model; refuses unknown formats or versions with one line."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    p = Path(path)
    try:
        cfg = json.loads((p / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{p} is not a sparse model directory (config.json: {exc})") from None
    if cfg.get("format") != "autosearch-sparse-model" or cfg.get("version") != FORMAT_VERSION:
        raise InputError(f"{p}: not an autosearch sparse model of version {FORMAT_VERSION}")
    model = build_model(**cfg["hyper"])
    try:
        state = load_file(str(p / "model.safetensors"))
        model.load_state_dict(state)
    except (OSError, SafetensorError, RuntimeError) as exc:
        raise InputError(f"{p}/model.safetensors cannot be read: {str(exc).splitlines()[0]}") from None
    model.eval()
    return model, cfg


#: The trained models that ship with the repository, and the file naming the one chosen per operator.
SHIPPED_DIR = Path(__file__).resolve().parents[3] / "data" / "sparse" / "models"
SELECTED = "selected.json"


def model_dir_name(variant: str, trained_on: str) -> str:
    """The directory bench/sparse.py saves a variant under, e.g. AutoSparseNet[concat] -> AutoSparseNet-concat-spmv."""
    return f"{variant}-{trained_on}".replace("[", "-").replace("]", "")


def shipped_model(op: str, root: Path | None = None) -> Path | None:
    """The shipped model for `op`: the variant with the best *validation* top-1 (written by
    bench/sparse.py into `selected.json`); None when the repository's data is not there (a
    non-editable install) or names no model for the operator."""
    base = root or SHIPPED_DIR
    try:
        sel = json.loads((base / SELECTED).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    entry = sel.get("selected", {}).get(op) if isinstance(sel, dict) else None
    name = entry.get("dir") if isinstance(entry, dict) else None
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        return None
    path = base / name
    return path if (path / "config.json").is_file() else None
