"""`--model` values: which cost model a tuning run uses, parsed once at the edge.

Named kinds (`pretrained-prefix`, `pretrained`, `xgb`, `mlp`, `lgbm-rank`, `tvm-xgb`, `random`), a
model directory, or `PRIOR+KIND` (a pretrained prior blended with a model fitted on the run's own
measurements). Two priors ship with the package: `pretrained-prefix` (a `tlp` ensemble on
`trace-prefix-tokens:v2`, what `--search decision` scores) and `pretrained` (an MLP ensemble on
PerStoreFeature, which scores any built schedule, GPU ones included).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autosearch.errors import InputError

__all__ = [
    "MODEL_CHOICES",
    "PRETRAINED",
    "TuneModel",
    "auto_search",
    "default_model",
    "knows_device",
    "make_cost_model",
    "pretrained_dir",
    "resolve_search",
    "warn_unknown_device",
]

#: The priors shipped as package data: `--model` name -> folder under `autosearch/pretrained`.
PRETRAINED = {"pretrained": "model", "pretrained-prefix": "prefix"}
#: Named `--model` values (anything else must be a model directory).
MODEL_CHOICES = (*PRETRAINED, "xgb", "mlp", "lgbm-rank", "tvm-xgb", "random")


def pretrained_dir(name: str = "pretrained") -> Path:
    """A prior shipped as package data (`autosearch/pretrained/model` or `.../prefix`)."""
    return Path(__file__).resolve().parent.parent / "pretrained" / PRETRAINED[name]


def default_model(target: Any = None) -> str:
    """`tune`'s `--model` when none is given: the prefix prior on CPUs (with `--search auto` it runs
    the decision search, bench/README.md "The decision search as tune's default"); the
    PerStoreFeature prior elsewhere, since the prefix prior never saw a GPU trace."""
    kind = str(getattr(getattr(target, "kind", None), "name", "llvm"))
    return "pretrained-prefix" if kind == "llvm" else "pretrained"


@dataclass
class TuneModel:
    """What a `--model` value resolves to: MetaSchedule's cost model, our adapter (None for TVM's
    own models), the label written to results and to every record's source, `search`, what
    `--search auto` runs with this model on the target it was made for (`auto_search`, decided
    once here), and `explore`, the exploration the search strategy runs (`--explore` with `auto`
    resolved: "none" or "control"). `scorer` is what the tuning loop talks to (search/scorer.py):
    the adapter, or TVM's own cost model behind the same interface."""

    cost_model: Any
    adapter: Any
    label: str
    search: str = "evolutionary"
    explore: str = "none"
    scorer: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from autosearch.search.explore import EXPLORE_MODES
        from autosearch.search.scorer import NativeScorer

        if self.explore not in EXPLORE_MODES:
            raise InputError(f"--explore must be one of auto, {', '.join(EXPLORE_MODES)}, got {self.explore!r}")
        self.scorer = self.adapter if self.adapter is not None else NativeScorer(self.cost_model)


def auto_search(extractor: Any, target: Any) -> str:
    """What `--search auto` (tune's default) runs for a trained model reading `extractor` on
    `target` (None: this machine's CPU, as `default_model` takes it): the decision search where the
    model reads `trace-prefix-tokens` and the target is a CPU (it scores many times more candidates
    than the evolutionary search, bench/README.md "The decision search as tune's default"),
    MetaSchedule's evolutionary search for every other model and target."""
    from autosearch.features.trace_tokens import PREFIX_EXTRACTOR

    cpu = target is None or target.kind.name == "llvm"
    return "decision" if tuple(extractor or ()) == PREFIX_EXTRACTOR and cpu else "evolutionary"


def resolve_search(search: str, model: TuneModel) -> str:
    """The search `search` names for `model`: `auto` is what the model was made for
    (`TuneModel.search`); other values are kept."""
    return model.search if search == "auto" else search


def make_cost_model(
    spec: str,
    *,
    seed: int = 0,
    timer: Callable[[str], Any] | None = None,
    retrain_fraction: float = 0.2,
    explore: str = "none",
    target: Any = None,
    warn: bool = True,
    online_warmup: int = 16,
    online_gain: float = 1.0,
    search: str = "evolutionary",
) -> TuneModel:
    """Parse a `--model` value (at the CLI edge) into the objects `tune()` takes. With `target`, a
    trained model that never saw that device says so (one warning line, unless `warn` is False).

    `explore="control"` (search/explore.py) lets a trained prior lead the search only as far as it
    proves right on random controls; it does nothing for TVM's own models.
    `"auto"` is `"control"` where the prior never saw `target`'s device and `"none"` elsewhere: on
    a CPU the prior never saw, its picks led the search astray (AMD Zen 3, six workloads: controls
    found 1.24x faster schedules at 64 trials, three seeds), while where it is right the controls cost trials.
    Under the decision search (`search`, as `tune` will resolve it) `"auto"` is `"none"`: its own
    random vectors and structure spread explore, and controls made it 1.08x slower there (bench/README.md,
    "The decision search as tune's default").
    `online_warmup`, `online_gain`: with PRIOR+KIND, the results measured before the online model
    is first fitted, and how fast the blend weight follows the two models' accuracy (ModelAdapter)."""
    from autosearch.features.per_store import EXTRACTOR, FEATURE_WIDTH, extract_features
    from autosearch.search.adapter import ONLINE_KINDS, ModelAdapter, check_extractor, ms_cost_model
    from autosearch.search.explore import EXPLORE_MODES
    from autosearch.search.featurize import FeatureCache, featurizer_for

    if explore != "auto" and explore not in EXPLORE_MODES:  # before a model loads or warns
        raise InputError(f"--explore must be one of auto, {', '.join(EXPLORE_MODES)}, got {explore!r}")
    if spec == "random":
        from tvm.s_tir.meta_schedule.cost_model import RandomModel

        return TuneModel(RandomModel(seed=seed), None, "random", explore=_explore(explore))
    if spec == "tvm-xgb":  # exactly MetaSchedule's default: XGBModel with adaptive training
        from tvm.s_tir.meta_schedule.cost_model import CostModel

        cm = CostModel.create("xgb", num_tuning_cores=os.cpu_count() or 1)
        return TuneModel(cm, None, "tvm-xgb", explore=_explore(explore))
    if spec in ONLINE_KINDS:  # fitted from scratch on this run only
        kw: dict[str, Any] = {"seed": seed}
        adapter = ModelAdapter(kind=spec, model_kw=kw, seed=seed, timer=timer, retrain_fraction=retrain_fraction)
        adapter.featurize = FeatureCache(extract_features)
        return TuneModel(ms_cost_model(adapter), adapter, spec, explore=_explore(explore))
    from autosearch.models import load_model

    prior, plus, online = ("", "", "") if Path(spec).exists() else spec.rpartition("+")  # a dir may contain '+'
    if plus:  # PRIOR+KIND: the prior blended with a model fitted on this run (ModelAdapter online=)
        if online not in ONLINE_KINDS:
            raise InputError(f"--model {spec!r}: the part after '+' must be one of {', '.join(ONLINE_KINDS)}")
        if prior in MODEL_CHOICES and prior not in PRETRAINED:
            raise InputError(
                f"--model {spec!r}: the part before '+' must be {' or '.join(PRETRAINED)} or a model directory"
            )
        spec = prior
    if spec in PRETRAINED:
        path = pretrained_dir(spec)
        if not (path / "config.json").is_file():
            raise InputError(f"no pretrained model is installed at {path}: reinstall autosearch or pass --model DIR")
        label = spec
    else:
        path = Path(spec)
        if not path.exists():
            raise InputError(f"--model {spec!r} is neither a model directory nor one of {', '.join(MODEL_CHOICES)}")
        label = path.name
    model = load_model(path)
    extractor, featurize = featurizer_for(model, target)
    if extractor == EXTRACTOR:
        check_extractor(model, EXTRACTOR, FEATURE_WIDTH)
    auto = auto_search(extractor, target)
    runs = auto if search == "auto" else search
    # the gradient search on a prefix prior (a CPU) works over the decision search's sketches: explores alike
    decision = runs == "decision" or (runs == "gradient" and auto == "decision")
    if target is not None and warn:
        warn_unknown_device(model, target, decision=decision)
    if explore == "auto":
        new_device = target is not None and knows_device(model, target) is False
        explore = "control" if new_device and not decision else "none"
    adapter = ModelAdapter(
        model,
        seed=seed,
        timer=timer,
        retrain_fraction=retrain_fraction,
        online=online if plus else None,
        online_warmup=online_warmup,
        online_gain=online_gain,
    )
    adapter.extractor, adapter.featurize = extractor, featurize
    label = f"{label}+{online}" if plus else label
    return TuneModel(ms_cost_model(adapter), adapter, label, auto, explore)


def _explore(explore: str) -> str:
    """`--explore` for a model without a prior to judge: `auto` is `none`."""
    return "none" if explore == "auto" else explore


def _device_of(target_json: str) -> tuple[str, str, int]:
    """(kind, mcpu, cores) of a canonical target: what makes two measurement sets comparable."""
    import json

    try:
        t = json.loads(target_json)
    except (TypeError, ValueError):
        return (str(target_json), "", 0)
    return (str(t.get("kind", "")), str(t.get("mcpu", "")), int(t.get("num-cores", 0) or 0))


def knows_device(model: Any, target: Any) -> bool | None:
    """Whether the model was trained on measurements of `target`'s device (kind, mcpu, cores);
    None for a model saved before `trained_on` existed, which says nothing either way."""
    from autosearch.backends.tvm.target import canonical_target

    known = list(getattr(model, "trained_on", []) or [])
    if not known:
        return None
    here = _device_of(canonical_target(target))
    return any(_device_of(k) == here for k in known)


def warn_unknown_device(model: Any, target: Any, *, decision: bool = False) -> bool:
    """Warn (one line) when the model was trained on measurements of other devices than `target`'s;
    True if it warned. `decision`: the run will use the decision search, whose `--explore auto`
    spends no controls, so the line names what it does instead."""
    import warnings

    from autosearch.backends.tvm.target import canonical_target

    if knows_device(model, target) is not False:
        return False
    known = list(model.trained_on)
    here = _device_of(canonical_target(target))
    names = ", ".join(sorted({f"{d[1] or d[0]}/{d[2]} cores" for d in map(_device_of, known)}))
    remedy = (
        "the decision search fine-tunes it on this run's measurements; --explore control adds random controls"
        if decision
        else "--explore control, tune's default for such a device, lets the search rely on it only as far as it "
        "proves right"
    )
    warnings.warn(
        f"the model was trained on {names}; this target is {here[1] or here[0]}/{here[2]} cores, which it never "
        f"saw: its ranking may not transfer ({remedy})",
        stacklevel=2,
    )
    return True
