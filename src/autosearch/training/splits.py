"""Train / held-out splits by whole workloads, never by random rows.

Why: schedules of one program are strongly correlated, so a random-row split leaks the test
program into training and overstates quality. A split is a list of workload keys, saved as JSON so
that every model in a comparison (ours and TVM's) sees exactly the same groups.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from autosearch.errors import InputError
from autosearch.training.dataset import Dataset

__all__ = ["Split", "apply_split", "join_training", "split_workloads"]


@dataclass(frozen=True)
class Split:
    """Workload keys for training and for held-out testing, plus how they were chosen."""

    train: list[str]
    test: list[str]
    method: str  # "holdout" or "fraction"
    seed: int | None = None
    holdout: list[str] = field(default_factory=list)
    fraction: float | None = None
    names: dict[str, str] = field(default_factory=dict)  # key -> human name, for reading the file

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps({"format": "autosearch-split/1", **asdict(self)}, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Split:
        try:
            d = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise InputError(f"no split file at {path}") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"split file {path} is not valid JSON: {exc}") from None
        if not isinstance(d, dict) or d.pop("format", None) != "autosearch-split/1":
            raise InputError(f"{path} is not an autosearch split file (format autosearch-split/1)")
        try:
            return cls(**d)
        except TypeError as exc:
            raise InputError(f"split file {path} has unexpected fields: {exc}") from None


def split_workloads(
    dataset: Dataset,
    holdout: Sequence[str] | None = None,
    fraction: float | None = None,
    seed: int = 0,
) -> Split:
    """Split the dataset's workloads: by `holdout` families/names/keys, or a seeded `fraction`.

    The fraction draw sorts workload keys first, so the same data and seed give the same split
    whatever order the store returned them in.
    """
    info = {g.workload_key: (g.name, g.family) for g in dataset.groups}
    keys = sorted(info)
    if len(keys) < 2:
        raise InputError(f"need at least 2 workloads to hold some out, the dataset has {len(keys)}")
    names = {k: info[k][0] for k in keys}
    if holdout:
        wanted = set(holdout)
        test = [k for k in keys if wanted & {k, info[k][0], info[k][1]}]
        matched = {x for k in test for x in (k, info[k][0], info[k][1])}
        if wanted - matched:
            raise InputError(
                f"--holdout names no workload or family in the dataset: {', '.join(sorted(wanted - matched))}"
            )
        train = [k for k in keys if k not in set(test)]
        if not train:
            raise InputError("--holdout covers every workload: nothing left to train on")
        return Split(train, test, "holdout", None, list(holdout), None, names)
    frac = 0.2 if fraction is None else float(fraction)
    if not 0 < frac < 1:
        raise InputError(f"--fraction must be in (0, 1), got {frac}")
    n_test = min(len(keys) - 1, max(1, round(frac * len(keys))))
    perm = np.random.default_rng(seed).permutation(len(keys))
    test_set = {keys[i] for i in perm[:n_test]}
    return Split([k for k in keys if k not in test_set], sorted(test_set), "fraction", seed, [], frac, names)


def apply_split(dataset: Dataset, split: Split) -> tuple[Dataset, Dataset]:
    """(train, test) datasets holding the split's groups; a missing workload is a clear error."""
    present = {g.workload_key for g in dataset.groups}
    missing = [split.names.get(k, k) for k in split.test if k not in present]
    if missing and len(missing) == len(split.test):
        raise InputError(f"none of the split's held-out workloads are in the dataset (e.g. {missing[0]})")
    train_keys, test_keys = set(split.train), set(split.test)
    tr = [i for i, g in enumerate(dataset.groups) if g.workload_key in train_keys]
    te = [i for i, g in enumerate(dataset.groups) if g.workload_key in test_keys]
    return dataset.subset(tr), dataset.subset(te)


def join_training(split: Split, train: Dataset, extra: Sequence[Dataset]) -> tuple[Split, Dataset]:
    """More training data from other stores: every group of `extra` except the split's held-out
    workloads (by key) and held-out families or names, joined to `train`.

    The returned split lists the added workloads as training keys too, so a check that a workload
    was never trained on (the tuning benchmark's) still holds for a model trained this way.
    """
    held = set(split.test) | set(split.holdout)
    parts = [
        e.subset([i for i, g in enumerate(e.groups) if not held & {g.workload_key, g.name, g.family}]) for e in extra
    ]
    parts = [p for p in parts if p.n_groups]
    if not parts:
        return split, train
    names = dict(split.names)
    for p in parts:
        names.update({g.workload_key: g.name for g in p.groups})
    keys = list(dict.fromkeys([*split.train, *(g.workload_key for p in parts for g in p.groups)]))
    joined = Split(keys, split.test, split.method, split.seed, split.holdout, split.fraction, names)
    return joined, Dataset.concat([train, *parts])
