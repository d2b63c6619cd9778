"""Model directories: `config.json` (what the model is and how it was trained) + one weights file.

Why a directory and no pickle: the config is readable by humans and other tools, weights are in
open formats (safetensors, XGBoost JSON, LightGBM text), and loading never executes code. The
config carries a format version so an incompatible directory is refused with one clear line.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autosearch.errors import InputError, one_line

__all__ = [
    "FORMAT_VERSION",
    "LABEL_SCHEME",
    "load_members",
    "prepare_dir",
    "read_config",
    "save_members",
    "write_config",
]

#: Bump when a saved directory can no longer be read by this code.
FORMAT_VERSION = 1
CONFIG = "config.json"
#: How labels are made from latencies (DESIGN.md); saved with every model.
LABEL_SCHEME = "min_latency/latency per (workload, target); failed = 0"


def prepare_dir(path: str | os.PathLike[str]) -> Path:
    """Create the model directory (weights are written first, config.json last)."""
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise InputError(f"{d} exists and is not a directory")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _sha256(f: Path) -> str:
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_config(path: str | os.PathLike[str], kind: str, weights: str, **fields: Any) -> Path:
    """Write config.json next to an already written weights file, with its checksum.

    Why a checksum: a truncated LightGBM text file aborts the whole process inside LightGBM, and
    XGBoost may silently read a partial model; checking first turns both into one clear line.
    """
    from autosearch import __version__

    d = prepare_dir(path)
    cfg = {
        "format": "autosearch-model",
        "format_version": FORMAT_VERSION,
        "autosearch_version": __version__,
        "kind": kind,
        "weights": weights,
        "weights_sha256": _sha256(d / weights),
        "label_scheme": LABEL_SCHEME,
        **fields,
    }
    tmp = d / (CONFIG + ".tmp")
    tmp.write_text(json.dumps(cfg, indent=1, sort_keys=True, default=_jsonable) + "\n")
    tmp.replace(d / CONFIG)
    return d


def _jsonable(x: Any) -> Any:
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a model directory's config.json (format, version, weights file present)."""
    d = Path(path)
    if not d.exists():
        raise InputError(f"no model directory at {d}")
    if not d.is_dir():
        raise InputError(f"{d} is not a model directory (expected a folder with {CONFIG})")
    f = d / CONFIG
    if not f.exists():
        raise InputError(f"{d} is not a model directory: {CONFIG} is missing")
    try:
        cfg = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{f} is not valid JSON: {exc}") from None
    if not isinstance(cfg, dict) or cfg.get("format") != "autosearch-model":
        raise InputError(f"{f} is not an autosearch model config")
    ver = cfg.get("format_version")
    if ver != FORMAT_VERSION:
        raise InputError(
            f"{d} was saved in model format {ver} (autosearch {cfg.get('autosearch_version', '?')}); "
            f"this autosearch reads format {FORMAT_VERSION}: retrain or use the matching version"
        )
    _check_fields(f, cfg)
    w = d / cfg["weights"]
    if not w.is_file():
        raise InputError(f"{d} is incomplete: weights file {cfg['weights']} is missing")
    if _sha256(w) != cfg["weights_sha256"]:
        raise InputError(f"{w} is truncated or corrupt: its checksum does not match config.json")
    return cfg


def _check_fields(f: Path, cfg: dict[str, Any]) -> None:
    """Every field a loader reads has the type it expects, and the weights file is inside the
    directory: config.json is input like any other file."""
    for key in ("kind", "weights", "weights_sha256", "n_features", "extractor"):
        if key not in cfg:
            raise InputError(f"{f} lacks the field {key!r}")
    if not isinstance(cfg["kind"], str):
        raise InputError(f"{f}: 'kind' must be a string, got {json.dumps(cfg['kind'])[:60]}")
    w = cfg["weights"]
    if not isinstance(w, str) or not w or w != Path(w).name or w.startswith("."):
        raise InputError(
            f"{f}: 'weights' must be a plain file name inside the model directory, got {json.dumps(w)[:60]}"
        )
    sha = cfg["weights_sha256"]
    if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise InputError(f"{f}: 'weights_sha256' must be 64 hex digits")
    n = cfg["n_features"]
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InputError(f"{f}: 'n_features' must be a positive integer, got {json.dumps(n)[:60]}")
    ext = cfg["extractor"]
    if not (isinstance(ext, list) and len(ext) == 2 and all(isinstance(x, str) for x in ext)):
        raise InputError(f"{f}: 'extractor' must be [name, version], got {json.dumps(ext)[:60]}")
    if not isinstance(cfg.get("params", {}), dict):
        raise InputError(f"{f}: 'params' must be an object")


def save_members(nets: Sequence[Any], f: str | os.PathLike[str]) -> None:
    """An ensemble's torch networks as one safetensors file, member i's tensors prefixed `m{i}.`."""
    from safetensors.torch import save_file

    state = {f"m{i}.{k}": v.contiguous() for i, net in enumerate(nets) for k, v in net.state_dict().items()}
    save_file(state, str(f))


def load_members(f: str | os.PathLike[str], members: int, make_net: Callable[[], Any]) -> list[Any]:
    """The `members` networks `save_members` wrote (each built by `make_net`, then filled); a file
    written before ensembles (unprefixed names) is member 0. A truncated file, or one whose tensors
    do not fit the networks, is one InputError naming it."""
    from safetensors.torch import load_file

    try:
        state = load_file(str(f))
    except Exception as exc:  # safetensors raises its own error types for truncated headers/data
        raise InputError(f"{f} is truncated or corrupt: {one_line(exc)}") from None
    import torch

    broken = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if broken:  # a diverged training saved as is: every prediction would be NaN
        raise InputError(f"{f}: {len(broken)} of {len(state)} tensors hold NaN or infinite weights ({broken[0]}, ...)")
    if not any(k.startswith("m0.") for k in state):  # written before ensembles: one network
        state = {f"m0.{k}": v for k, v in state.items()}
    nets = []
    for i in range(members):
        net = make_net()
        part = {k[len(f"m{i}.") :]: v for k, v in state.items() if k.startswith(f"m{i}.")}
        try:
            net.load_state_dict(part)
        except RuntimeError as exc:
            raise InputError(f"{f} does not match its config.json: {one_line(exc)}") from None
        nets.append(net)
    return nets
