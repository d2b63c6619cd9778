"""Which model kinds exist, and how a saved directory finds its class."""

from __future__ import annotations

import importlib
import os
from typing import Any

from autosearch.errors import InputError
from autosearch.models.base import CostModel
from autosearch.models.io import read_config

__all__ = ["KINDS", "load_model", "make_model", "model_class"]

#: kind -> (module, class)
KINDS: dict[str, tuple[str, str]] = {
    "adams2019": ("autosearch.models.adams2019.model", "Adams2019Model"),
    "xgb": ("autosearch.models.xgb", "XGBPackSum"),
    "lgbm-rank": ("autosearch.models.lgbm_rank", "LGBMRank"),
    "mlp": ("autosearch.models.mlp", "SegmentSumMLP"),
    "tlp": ("autosearch.models.tlp", "TLPModel"),
    "tvm-xgb": ("autosearch.models.tvm_anchors", "TVMXGBAnchor"),
    "tvm-mlp": ("autosearch.models.tvm_anchors", "TVMMLPAnchor"),
}


def model_class(kind: str) -> type[CostModel]:
    """The class implementing `kind`."""
    if kind not in KINDS:
        raise InputError(f"unknown model kind {kind!r}; choose one of {', '.join(KINDS)}")
    mod, name = KINDS[kind]
    return getattr(importlib.import_module(mod), name)


def make_model(kind: str, **kw: Any) -> CostModel:
    """A fresh, untrained model of `kind` with the given hyper-parameters."""
    cls = model_class(kind)
    try:
        return cls(**kw)
    except TypeError as exc:
        raise InputError(f"bad hyper-parameter for {kind}: {exc}") from None


def load_model(path: str | os.PathLike[str]) -> CostModel:
    """Load a model directory written by `CostModel.save`, whatever its kind."""
    return model_class(read_config(path)["kind"]).load(path)
