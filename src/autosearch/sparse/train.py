"""Datasets, held-out splits, training and evaluation of the sparse cost models.

Why groups: a label is only meaningful against the other configurations measured on the same
(operator, matrix), so batches are whole groups (padded), losses rank within a group, and the
split holds out whole matrices: one generator family entirely, plus a share of the other
families' matrices by seed. The matrix features are computed once per matrix and cached.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from autosearch.errors import InputError
from autosearch.sparse.features import config_tokens, config_vector, matrix_info, pattern_image
from autosearch.sparse.matrices import load_matrix
from autosearch.sparse.models import SparseCostModel, build_model
from autosearch.sparse.records import Group
from autosearch.training.losses import lambdarank_loss
from autosearch.training.metrics import group_metrics, labels_from_latency, mean_metrics

__all__ = [
    "GroupTensors",
    "TrainResult",
    "evaluate",
    "fit",
    "margin_ranking_loss",
    "matrix_features",
    "one_thread",
    "predict_configs",
    "split_groups",
    "tensors_for",
]

_FEAT_CACHE: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def matrix_features(g: Group, cache_dir: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(pattern image, matrix info) of a group's matrix, rebuilt from its spec once per process
    (and kept in `cache_dir` as .npz when given)."""
    if g.matrix_hash in _FEAT_CACHE:
        return _FEAT_CACHE[g.matrix_hash]
    path = cache_dir / f"{g.matrix_hash}.npz" if cache_dir else None
    if path is not None and path.is_file():
        with np.load(path, allow_pickle=False) as z:
            feat = (z["img"], z["info"])
    else:
        a = load_matrix(g.spec, g.matrix_hash)
        feat = (pattern_image(a), matrix_info(a))
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(path, img=feat[0], info=feat[1])
    _FEAT_CACHE[g.matrix_hash] = feat
    return feat


@dataclass
class GroupTensors:
    """One group ready for a model: matrix features, per-config tokens / vectors, labels."""

    group: Group
    img: torch.Tensor
    info: torch.Tensor
    tokens: torch.Tensor  # (C, T, TOKEN_DIM)
    cvec: torch.Tensor  # (C, CFG_DIM)
    labels: torch.Tensor  # (C,)
    latencies: np.ndarray


def tensors_for(g: Group, embedding_token: bool, cache_dir: Path | None = None) -> GroupTensors:
    img, info = matrix_features(g, cache_dir)
    toks = np.stack([config_tokens(c, info, embedding_token) for c in g.configs])
    cv = np.stack([config_vector(c) for c in g.configs])
    lat = np.asarray(g.latencies, dtype=np.float64)
    return GroupTensors(
        g,
        torch.from_numpy(img),
        torch.from_numpy(info),
        torch.from_numpy(toks),
        torch.from_numpy(cv),
        torch.from_numpy(labels_from_latency(lat)).float(),
        lat,
    )


def split_groups(
    groups: list[Group],
    holdout_family: str | Sequence[str] | None = "community",
    test_share: float = 0.2,
    seed: int = 0,
) -> tuple[list[Group], list[Group]]:
    """(train, test): the held-out family (or families) entirely, plus `test_share` of the other
    matrices (by matrix)."""
    held = {holdout_family} if isinstance(holdout_family, str) else set(holdout_family or ())
    rng = np.random.default_rng(seed)
    mats = sorted({g.matrix_hash for g in groups if g.family not in held})
    n_test = round(test_share * len(mats))
    test_mats = set(rng.permutation(mats)[:n_test].tolist()) if mats else set()
    test = [g for g in groups if g.family in held or g.matrix_hash in test_mats]
    train = [g for g in groups if not (g.family in held or g.matrix_hash in test_mats)]
    return train, test


def margin_ranking_loss(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, margin: float = 0.1
) -> torch.Tensor:
    """WACO's nn.MarginRankingLoss over every pair of a group with different labels."""
    valid = mask[:, :, None] & mask[:, None, :] & (labels[:, :, None] > labels[:, None, :])
    if not valid.any():
        return scores.sum() * 0.0
    diff = scores[:, :, None] - scores[:, None, :]
    return torch.relu(margin - diff[valid]).mean()


def _batch(items: list[GroupTensors]) -> tuple[torch.Tensor, ...]:
    G, C = len(items), max(int(it.labels.numel()) for it in items)
    T, D = items[0].tokens.shape[1:]
    tok = torch.zeros(G, C, T, D)
    cv = torch.zeros(G, C, items[0].cvec.shape[1])
    lab = torch.zeros(G, C)
    mask = torch.zeros(G, C, dtype=torch.bool)
    for i, it in enumerate(items):
        n = it.labels.numel()
        tok[i, :n], cv[i, :n], lab[i, :n], mask[i, :n] = it.tokens, it.cvec, it.labels, True
    img = torch.stack([it.img for it in items])
    info = torch.stack([it.info for it in items])
    return img, info, tok, cv, lab, mask


@dataclass
class TrainResult:
    model: SparseCostModel
    losses: list[float] = field(default_factory=list)  # mean training loss per epoch
    valid_top1: list[float] = field(default_factory=list)
    seconds: float = 0.0
    peak_rss_mb: float = 0.0


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread: these models are small, and on a busy machine two spinning
    threads made every training step several times slower (docs/sparse.md)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _subsample(it: GroupTensors, n: int, rng: np.random.Generator) -> GroupTensors:
    """At most n configurations of a group (a fresh random subset each step: cheaper steps, and
    the model sees every pair over the epochs)."""
    if it.labels.numel() <= n:
        return it
    idx = torch.from_numpy(np.sort(rng.choice(it.labels.numel(), n, replace=False)))
    lat = it.latencies[idx.numpy()]
    lab = torch.from_numpy(labels_from_latency(lat)).float()
    return GroupTensors(it.group, it.img, it.info, it.tokens[idx], it.cvec[idx], lab, lat)


def _fit(
    kind: str,
    train: list[Group],
    valid: list[Group] | None = None,
    epochs: int = 20,
    batch_groups: int = 8,
    lr: float = 3e-3,
    seed: int = 0,
    cache_dir: Path | None = None,
    max_configs: int = 24,
    hyper: dict[str, Any] | None = None,
) -> TrainResult:
    """Train one model; keeps the epoch with the best validation top-1 (last epoch without `valid`)."""
    if not train:
        raise InputError("no training groups (collect more matrices or change the split)")
    torch.manual_seed(seed)
    model = build_model(kind, **(hyper or {}))
    data = [tensors_for(g, model.uses_embedding_token, cache_dir) for g in train]
    vdata = [tensors_for(g, model.uses_embedding_token, cache_dir) for g in valid or []]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    loss_fn = margin_ranking_loss if kind == "WACONet" else lambdarank_loss
    rng = np.random.default_rng(seed)
    res = TrainResult(model)
    best, best_state = -math.inf, None
    t0 = time.perf_counter()
    for _ in range(epochs):
        model.train()
        order = rng.permutation(len(data))
        tot, nb = 0.0, 0
        for s in range(0, len(order), batch_groups):
            items = [_subsample(data[j], max_configs, rng) for j in order[s : s + batch_groups]]
            img, info, tok, cv, lab, mask = _batch(items)
            loss = loss_fn(model(img, info, tok, cv), lab, mask)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            tot, nb = tot + float(loss.detach()), nb + 1
        res.losses.append(tot / max(nb, 1))
        if vdata:
            top1 = mean_metrics(_metrics(model, vdata))["top1"]
            res.valid_top1.append(top1)
            if top1 > best:
                best, best_state = top1, copy.deepcopy(model.state_dict())
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    res.seconds = time.perf_counter() - t0
    res.peak_rss_mb = _peak_rss_mb()
    return res


def fit(kind: str, train: list[Group], valid: list[Group] | None = None, **kw: Any) -> TrainResult:
    """Train one model (see `_fit` for the options), on one torch thread."""
    with one_thread():
        return _fit(kind, train, valid, **kw)


@torch.no_grad()
def _scores(model: SparseCostModel, items: list[GroupTensors]) -> list[np.ndarray]:
    model.eval()
    out = []
    for s in range(0, len(items), 16):
        chunk = items[s : s + 16]
        img, info, tok, cv, _lab, mask = _batch(chunk)
        sc = model(img, info, tok, cv)
        out += [sc[i, : int(mask[i].sum())].numpy().astype(np.float64) for i in range(len(chunk))]
    return out


def _metrics(model: SparseCostModel, items: list[GroupTensors]) -> list[dict[str, float]]:
    return [dict(group_metrics(s, it.latencies)) for s, it in zip(_scores(model, items), items)]


def evaluate(model: SparseCostModel, groups: list[Group], cache_dir: Path | None = None) -> dict[str, float]:
    """Mean top-1 / top-5 / pairwise / kendall over held-out groups (seed's top-k definition)."""
    if not groups:
        raise InputError("no groups to evaluate")
    items = [tensors_for(g, model.uses_embedding_token, cache_dir) for g in groups]
    with one_thread():
        return mean_metrics(_metrics(model, items))


@torch.no_grad()
def predict_configs(model: SparseCostModel, img: np.ndarray, info: np.ndarray, configs: list[Any]) -> np.ndarray:
    """Scores of candidate configurations on one matrix (higher = predicted faster)."""
    model.eval()
    toks = torch.from_numpy(np.stack([config_tokens(c, info, model.uses_embedding_token) for c in configs]))
    cv = torch.from_numpy(np.stack([config_vector(c) for c in configs]))
    with one_thread():
        emb = model.matrix_embedding(torch.from_numpy(img)[None], torch.from_numpy(info)[None])
        return model.score(emb, toks[None], cv[None])[0].numpy().astype(np.float64)
