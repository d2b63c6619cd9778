"""Shared training plumbing: group-wise minibatches, a validation carve-out, and evaluation.

Evaluation scores each held-out group on its own (as search does: one workload's candidates at a
time) and reports the metrics of docs/models.md per group and their unweighted mean.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from autosearch.errors import InputError
from autosearch.training.batch import FeatureBatch
from autosearch.training.dataset import Dataset
from autosearch.training.metrics import group_metrics, mean_metrics


class Predictor(Protocol):
    """What evaluation needs of a model: fit and predict (every `models.base.CostModel` is one); a
    Protocol, so that this layer, below the models, does not import them."""

    kind: ClassVar[str]
    length_param: ClassVar[str | None]

    def fit(self, train: Dataset, valid: Dataset | None = None) -> Any: ...

    def predict(self, batch: FeatureBatch) -> np.ndarray: ...


__all__ = [
    "STOP_ON",
    "EvalResult",
    "Predictor",
    "column_scale",
    "early_stopped_epochs",
    "evaluate",
    "fit_members",
    "fit_refit",
    "group_minibatches",
    "prediction_throughput",
    "quick_metrics",
    "selection_key",
    "valid_carve_out",
]


@dataclass
class EvalResult:
    """Per-group metrics (with name/target), their mean, and prediction throughput."""

    per_group: list[dict[str, Any]]
    mean: dict[str, float]
    candidates_per_s: float
    scores: list[np.ndarray] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"per_group": self.per_group, "mean": self.mean, "candidates_per_s": self.candidates_per_s}


def evaluate(model: Predictor, dataset: Dataset, keep_scores: bool = False, min_time_s: float = 0.3) -> EvalResult:
    """Score every group of `dataset` with `model` and compute the ranking metrics.

    Throughput is candidates/s from features to scores, one group per `predict` call (as search
    calls it), repeated until `min_time_s` has passed so that a few ms of timer noise on a shared
    machine do not decide it.
    """
    if dataset.n_groups == 0:
        raise InputError("nothing to evaluate: the dataset has no groups (check --workloads / the split)")
    per_group, all_scores = [], []
    for gi, g in enumerate(dataset.groups):
        scores = model.predict(dataset.group_batch(gi))
        m = group_metrics(scores, dataset.latencies[g.start : g.stop])
        per_group.append({"workload": g.name, "family": g.family, "key": g.workload_key, "target": g.target, **m})
        if keep_scores:
            all_scores.append(scores)
    return EvalResult(per_group, mean_metrics(per_group), prediction_throughput(model, dataset, min_time_s), all_scores)


def prediction_throughput(model: Predictor, dataset: Dataset, min_time_s: float = 0.3) -> float:
    """Candidates per second through `model.predict`, one group per call (after a warm-up call)."""
    batches = [dataset.group_batch(gi) for gi in range(dataset.n_groups)]
    model.predict(batches[0])  # warm-up: lazy library initialisation is not throughput
    n, t0 = 0, time.perf_counter()
    while True:
        for b in batches:
            model.predict(b)
            n += b.n_candidates
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time_s:
            return n / elapsed


def quick_metrics(scores: np.ndarray, dataset: Dataset) -> dict[str, float]:
    """Mean top-1 / top-5 over groups from scores already computed for the whole dataset."""
    from autosearch.training.metrics import top_k_score

    t1, t5 = [], []
    for g in dataset.groups:
        s, lat = scores[g.start : g.stop], dataset.latencies[g.start : g.stop]
        t1.append(top_k_score(s, lat, 1))
        t5.append(top_k_score(s, lat, 5))
    return {"top1": float(np.nanmean(t1)), "top5": float(np.nanmean(t5))}


STOP_ON = ("top1", "top1+top5", "loss", "last")


def selection_key(
    top1: float, top5: float, stop_on: str = "top1", loss: float = float("nan"), epoch: float = 0
) -> tuple[float, float]:
    """What early stopping maximises: held-out top-1 (ties: top-5); the mean of top-1 and top-5;
    minus the validation loss, which is smooth where top-1 on a few validation workloads jumps;
    or `last`: the latest epoch, i.e. no early stopping (the full schedule, learning rate annealed
    to zero; the tlp model's top-1 on unseen families swung 0.29-0.56 with the stopping epoch)."""
    if stop_on == "top1":
        return (round(top1, 6), round(top5, 6))
    if stop_on == "top1+top5":
        return (round((top1 + top5) / 2, 6), round(top1, 6))
    if stop_on == "loss":
        return (-loss if loss == loss else -float("inf"), round(top1, 6))
    if stop_on == "last":
        return (float(epoch), 0.0)
    raise InputError(f"unknown stop_on {stop_on!r}; choose one of {', '.join(STOP_ON)}")


def fit_refit(model: Predictor, train: Dataset, valid_fraction: float = 0.15, seed: int = 0, **fit_kw: Any) -> Any:
    """Early-stop on a carve-out of the training workloads, then refit on ALL training workloads
    for the chosen number of epochs / rounds.

    Why: with tens of workloads, the ~15% set aside for validation is data the final model
    would otherwise never see; the carve-out only has to choose how long to train.
    Returns the final TrainReport (history of the selection run, best epoch, total time).
    """
    if getattr(model, "stop_on", None) == "last":  # nothing to choose: train once, on every workload
        return model.fit(train, None, **fit_kw)
    fit, valid = valid_carve_out(train, valid_fraction, seed)
    t0 = time.perf_counter()
    report = model.fit(fit, valid, **fit_kw)
    budget = model.length_param
    if valid is None or report.best_epoch is None or budget is None:
        return report
    setattr(model, budget, report.best_epoch + 1)
    final = model.fit(train, None)
    report.train_time_s = time.perf_counter() - t0
    report.n_train = final.n_train
    return report


def valid_carve_out(train: Dataset, fraction: float = 0.15, seed: int = 0) -> tuple[Dataset, Dataset | None]:
    """Split off whole training workloads for early stopping (never the test workloads)."""
    keys = sorted(train.workload_keys())
    if len(keys) < 4 or fraction <= 0:
        return train, None
    n = max(1, round(fraction * len(keys)))
    rng = np.random.default_rng(seed)
    valid_keys = {keys[i] for i in rng.permutation(len(keys))[:n]}
    fit = [i for i, g in enumerate(train.groups) if g.workload_key not in valid_keys]
    val = [i for i, g in enumerate(train.groups) if g.workload_key in valid_keys]
    return train.subset(fit), train.subset(val)


def group_minibatches(
    dataset: Dataset, groups_per_batch: int, cands_per_group: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """One epoch of (G, C) candidate-index matrices, -1 = padding; every candidate once.

    Each group's candidates are shuffled and cut into chunks of `cands_per_group`; chunks of all
    groups are shuffled and stacked `groups_per_batch` at a time, so every batch compares
    candidates only within their own group.
    """
    chunks: list[np.ndarray] = []
    for g in dataset.groups:
        idx = g.start + rng.permutation(g.size)
        n_chunks = max(1, int(np.ceil(g.size / cands_per_group)))
        chunks.extend(np.array_split(idx, n_chunks))
    order = rng.permutation(len(chunks))
    for s in range(0, len(order), groups_per_batch):
        sel = [chunks[i] for i in order[s : s + groups_per_batch]]
        width = max(len(c) for c in sel)
        out = np.full((len(sel), width), -1, dtype=np.int64)
        for r, c in enumerate(sel):
            out[r, : len(c)] = c
        yield out


def column_scale(rows: np.ndarray, n_features: int) -> np.ndarray:
    """float32 1 / max |column| over the training rows (1 where a column is all zero): the input
    scaling the neural models store with their weights."""
    col_max = np.abs(rows).max(axis=0) if rows.shape[0] else np.ones(n_features)
    return np.where(col_max > 0, 1.0 / np.maximum(col_max, 1e-30), 1.0).astype(np.float32)


def fit_members(
    members: int, seed: int, fit_one: Callable[[int, Any], tuple[Any, Any]], progress: Any = None
) -> tuple[list[Any], Any]:
    """Train an ensemble: `fit_one(seed, progress) -> (network, TrainReport)` for seeds
    seed..seed+members-1. Returns the networks and one report that keeps every member's history
    (records carry "member"), with the members' median best epoch and the total time.
    Why members: on unseen operator families one network's top-1 moves by +-0.1 with its seed."""
    t0 = time.perf_counter()
    nets, reports = [], []
    for m in range(members):
        tag = (lambda e, r, m=m: progress(e, {**r, "member": m})) if progress and members > 1 else progress
        net, rep = fit_one(seed + m, tag)
        nets.append(net)
        reports.append(rep)
    report = reports[0]
    if members > 1:
        report.history = [{**r, "member": m} for m, rep in enumerate(reports) for r in rep.history]
        best = [r.best_epoch for r in reports if r.best_epoch is not None]
        report.best_epoch = int(np.median(best)) if best else None
    report.train_time_s = time.perf_counter() - t0
    return nets, report


def early_stopped_epochs(
    net: Any,
    epochs: int,
    run_epoch: Callable[[], float],
    validate: Callable[[], dict[str, float]] | None,
    select: Callable[[dict[str, float]], Any],
    patience: int,
    progress: Callable[[int, dict[str, float]], None] | None = None,
) -> tuple[list[dict[str, float]], int | None]:
    """The epoch loop the neural models share: train, validate, keep the state of the best epoch
    by `select(record)`, stop after `patience` epochs without a better one; the best state is
    loaded back into `net` (a torch module). Returns (per-epoch history, best epoch or None)."""
    import copy

    best: Any = None
    best_state, best_epoch, bad = None, None, 0
    history: list[dict[str, float]] = []
    for epoch in range(epochs):
        rec: dict[str, float] = {"epoch": epoch, "train_loss": run_epoch()}
        if validate is not None:
            rec.update(validate())
            key = select(rec)
            if best is None or key > best:
                best, bad, best_epoch = key, 0, epoch
                best_state = copy.deepcopy(net.state_dict())
            else:
                bad += 1
        history.append(rec)
        if progress is not None:
            progress(epoch, rec)
        if validate is not None and bad >= patience:
            break
    if best_state is not None:
        net.load_state_dict(best_state)
    return history, best_epoch
