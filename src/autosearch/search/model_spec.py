"""`--model` values: which cost model a tuning run uses, parsed once at the edge into a `Scorer`
(`make_scorer`; `search.assemble` pairs it with the search strategy).

Named kinds (`pretrained-prefix`, `pretrained`, `xgb`, `mlp`, `lgbm-rank`, `tvm-xgb`, `random`), a
model directory, or `PRIOR+KIND` (a pretrained prior blended with a model fitted on the run's own
measurements). Two priors ship with the package: `pretrained-prefix` (a `tlp` ensemble on
`trace-prefix-tokens:v2`, what `--search decision` scores) and `pretrained` (an MLP ensemble on
PerStoreFeature, which scores any built schedule, GPU ones included).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autosearch.errors import InputError
from autosearch.search.scorer import NativeScorer, Scorer

__all__ = [
    "MODEL_CHOICES",
    "PRETRAINED",
    "auto_search",
    "default_model",
    "knows_device",
    "make_scorer",
    "pretrained_dir",
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


def auto_search(extractor: Any, target: Any) -> str:
    """What `--search auto` (tune's default) runs for a trained model reading `extractor` on
    `target` (None: this machine's CPU, as `default_model` takes it): the decision search where the
    model reads `trace-prefix-tokens` and the target is a CPU (it scores many times more candidates
    than the evolutionary search, bench/README.md "The decision search as tune's default"),
    MetaSchedule's evolutionary search for every other model and target."""
    from autosearch.features.trace_tokens import PREFIX_EXTRACTOR

    cpu = target is None or target.kind.name == "llvm"
    return "decision" if tuple(extractor or ()) == PREFIX_EXTRACTOR and cpu else "evolutionary"


def make_scorer(
    spec: str,
    *,
    seed: int = 0,
    timer: Callable[[str], Any] | None = None,
    retrain_fraction: float = 0.2,
    target: Any = None,
    online_warmup: int = 16,
    online_gain: float = 1.0,
) -> Scorer:
    """Parse a `--model` value into the `Scorer` the tuning loop talks to: `NativeScorer` for TVM's
    own models (`random`, `tvm-xgb`), else a `ModelAdapter` over a model fitted on the run alone
    (`xgb`, `mlp`, `lgbm-rank`), a loaded one (a shipped prior, a model directory), or a loaded one
    blended with a model fitted on the run (`PRIOR+KIND`). Its `label` is what results and records
    name it. `target`: what the model's features are computed for (`featurize.featurizer_for`).
    `online_warmup`, `online_gain`: with PRIOR+KIND, the results measured before the online model
    is first fitted, and how fast the blend weight follows the two models' accuracy (ModelAdapter).
    Made once per tuned workload: the scorer learns the run's measurements (and fine-tunes its
    model in place)."""
    from autosearch.search.adapter import ModelAdapter
    from autosearch.search.online_blend import ONLINE_KINDS

    if spec == "random":
        from tvm.s_tir.meta_schedule.cost_model import RandomModel

        return NativeScorer(RandomModel(seed=seed), "random")
    if spec == "tvm-xgb":  # exactly MetaSchedule's default: XGBModel with adaptive training
        from tvm.s_tir.meta_schedule.cost_model import CostModel

        return NativeScorer(CostModel.create("xgb", num_tuning_cores=os.cpu_count() or 1), "tvm-xgb")
    if spec in ONLINE_KINDS:  # fitted from scratch on this run only
        from autosearch.features.per_store import extract_features
        from autosearch.search.featurize import FeatureCache

        kw: dict[str, Any] = {"seed": seed}
        adapter = ModelAdapter(kind=spec, model_kw=kw, seed=seed, timer=timer, retrain_fraction=retrain_fraction)
        adapter.featurize, adapter.label = FeatureCache(extract_features), spec
        return adapter
    prior, online, label = _parse_prior(spec)
    model = _load_prior(prior)
    adapter = ModelAdapter(
        model,
        seed=seed,
        timer=timer,
        retrain_fraction=retrain_fraction,
        online=online,
        online_warmup=online_warmup,
        online_gain=online_gain,
    )
    _read_features(adapter, model, target)
    adapter.label = label
    return adapter


def _parse_prior(spec: str) -> tuple[str, str | None, str]:
    """(prior, online kind or None, label) of a `--model` naming a trained model, `PRIOR+KIND`
    included (a model directory may contain '+')."""
    from autosearch.search.online_blend import ONLINE_KINDS

    prior, plus, online = ("", "", "") if Path(spec).exists() else spec.rpartition("+")
    if plus:  # PRIOR+KIND: the prior blended with a model fitted on this run (ModelAdapter online=)
        if online not in ONLINE_KINDS:
            raise InputError(f"--model {spec!r}: the part after '+' must be one of {', '.join(ONLINE_KINDS)}")
        if prior in MODEL_CHOICES and prior not in PRETRAINED:
            raise InputError(
                f"--model {spec!r}: the part before '+' must be {' or '.join(PRETRAINED)} or a model directory"
            )
        spec = prior
    if spec in PRETRAINED:
        label = spec
    else:
        path = Path(spec)
        if not path.exists():
            raise InputError(f"--model {spec!r} is neither a model directory nor one of {', '.join(MODEL_CHOICES)}")
        label = path.name
    return spec, online if plus else None, f"{label}+{online}" if plus else label


def _load_prior(spec: str) -> Any:
    """The trained model a shipped prior's name or a model directory holds."""
    from autosearch.models import load_model

    path = pretrained_dir(spec) if spec in PRETRAINED else Path(spec)
    if spec in PRETRAINED and not (path / "config.json").is_file():
        raise InputError(f"no pretrained model is installed at {path}: reinstall autosearch or pass --model DIR")
    return load_model(path)


def _read_features(adapter: Any, model: Any, target: Any) -> None:
    """What the adapter computes for `model` of a candidate on `target`; a PerStoreFeature model
    of another width than tuning extracts is refused."""
    from autosearch.features.per_store import EXTRACTOR, FEATURE_WIDTH
    from autosearch.search.adapter import check_extractor
    from autosearch.search.featurize import featurizer_for

    extractor, featurize = featurizer_for(model, target)
    if extractor == EXTRACTOR:
        check_extractor(model, EXTRACTOR, FEATURE_WIDTH)
    adapter.extractor, adapter.featurize = extractor, featurize


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

    known = list(model.trained_on or [])
    if not known:
        return None
    here = _device_of(canonical_target(target))
    return any(_device_of(k) == here for k in known)


def _device_class(target: Any) -> tuple[str, int, int]:
    """(kind, ISA level, SIMD register bits) of a target or a canonical target's JSON: CPUs of one
    class share the register width the schedules' vectors and tiles are measured against."""
    from autosearch.backends.tvm.device import isa_info
    from autosearch.backends.tvm.target import parse_target

    if isinstance(target, str):
        try:
            target = parse_target(target)
        except Exception:  # a target this TVM cannot parse: a class of its own
            return (target, 0, 0)
    info = isa_info(target)
    return (target.kind.name, int(info["isa_level"]), int(info["simd_bits"]))


def knows_device_class(model: Any, target: Any) -> bool | None:
    """Whether the model was trained on measurements of a CPU of `target`'s class (`_device_class`:
    ISA level and register width); None for a model saved before `trained_on` existed."""
    known = list(model.trained_on or [])
    if not known:
        return None
    here = _device_class(target)
    return any(_device_class(k) == here for k in known)


def _class_name(device_class: tuple[str, int, int]) -> str:
    kind, level, bits = device_class
    return f"x86-64-v{level}, {bits}-bit registers" if kind == "llvm" and level else kind


def warn_unknown_device(model: Any, target: Any, *, decision: bool = False) -> bool:
    """Warn (one line) when the model was trained on measurements of no CPU of `target`'s class
    (ISA level and register width; `knows_device_class`); True if it warned. Another CPU of a class
    it saw is no warning: holding Zen 5 out of the orderer's data cost its held-out families 0.009
    top-1 (bench/README.md "Held-out device"). `decision`: the run will use the decision search,
    whose `--explore auto` spends no controls, so the line names what it does instead."""
    import warnings

    from autosearch.backends.tvm.target import canonical_target

    if knows_device_class(model, target) is not False:
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
        f"the model was trained on {names}; this target is {here[1] or here[0]}/{here[2]} cores "
        f"({_class_name(_device_class(target))}), a CPU class it never saw: its ranking may not transfer ({remedy})",
        stacklevel=2,
    )
    return True
