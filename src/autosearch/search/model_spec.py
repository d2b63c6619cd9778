"""`--model` values: which cost model a tuning run uses, parsed once at the edge.

Named kinds (`pretrained`, `xgb`, `mlp`, `lgbm-rank`, `tvm-xgb`, `random`), a model directory, or
`PRIOR+KIND` (a pretrained prior blended with a model fitted on the run's own measurements).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autosearch.errors import InputError

__all__ = ["MODEL_CHOICES", "TuneModel", "make_cost_model", "pretrained_dir"]

#: Named `--model` values (anything else must be a model directory).
MODEL_CHOICES = ("pretrained", "xgb", "mlp", "lgbm-rank", "tvm-xgb", "random")


def pretrained_dir() -> Path:
    """The model shipped as package data (`autosearch/pretrained/model`)."""
    return Path(__file__).resolve().parent.parent / "pretrained" / "model"


@dataclass
class TuneModel:
    """What a `--model` value resolves to: MetaSchedule's cost model, our adapter (None for TVM's
    own models), and the label written to results and to every record's source."""

    cost_model: Any
    adapter: Any
    label: str


def make_cost_model(
    spec: str,
    *,
    seed: int = 0,
    timer: Callable[[str], Any] | None = None,
    retrain_fraction: float = 0.2,
    explore: str = "none",
) -> TuneModel:
    """Parse a `--model` value (at the CLI edge) into the objects `tune()` takes.

    `explore="trust"` (search/explore.py) lets a trained prior's share of each round follow how
    well it ordered the previous rounds' measurements; it does nothing for TVM's own models."""
    from autosearch.features.per_store import EXTRACTOR, FEATURE_WIDTH
    from autosearch.search.adapter import ONLINE_KINDS, ModelAdapter, check_extractor, ms_cost_model

    if spec == "random":
        from tvm.s_tir.meta_schedule.cost_model import RandomModel

        return TuneModel(RandomModel(seed=seed), None, "random")
    if spec == "tvm-xgb":  # exactly MetaSchedule's default: XGBModel with adaptive training
        from tvm.s_tir.meta_schedule.cost_model import CostModel

        return TuneModel(CostModel.create("xgb", num_tuning_cores=os.cpu_count() or 1), None, "tvm-xgb")
    if spec in ONLINE_KINDS:  # fitted from scratch on this run only
        kw: dict[str, Any] = {"seed": seed}
        adapter = ModelAdapter(kind=spec, model_kw=kw, seed=seed, timer=timer, retrain_fraction=retrain_fraction)
        return TuneModel(ms_cost_model(adapter), adapter, spec)
    from autosearch.models import load_model

    prior, plus, online = ("", "", "") if Path(spec).exists() else spec.rpartition("+")  # a dir may contain '+'
    if plus:  # PRIOR+KIND: the prior blended with a model fitted on this run (ModelAdapter online=)
        if online not in ONLINE_KINDS:
            raise InputError(f"--model {spec!r}: the part after '+' must be one of {', '.join(ONLINE_KINDS)}")
        if prior in MODEL_CHOICES and prior != "pretrained":
            raise InputError(f"--model {spec!r}: the part before '+' must be pretrained or a model directory")
        spec = prior
    if spec == "pretrained":
        path = pretrained_dir()
        if not (path / "config.json").is_file():
            raise InputError(f"no pretrained model is installed at {path}: reinstall autosearch or pass --model DIR")
        label = "pretrained"
    else:
        path = Path(spec)
        if not path.exists():
            raise InputError(f"--model {spec!r} is neither a model directory nor one of {', '.join(MODEL_CHOICES)}")
        label = path.name
    model = load_model(path)
    check_extractor(model, EXTRACTOR, FEATURE_WIDTH)
    adapter = ModelAdapter(
        model,
        seed=seed,
        timer=timer,
        retrain_fraction=retrain_fraction,
        online=online if plus else None,
        explore=explore,
    )
    return TuneModel(ms_cost_model(adapter), adapter, f"{label}+{online}" if plus else label)
