"""Where the Halide wheel keeps its pieces (plugin, tools), and the host target.

Why a module: the Adams2019 plugin must be loaded by full path, and Halide's own tools
(`adams2019_retrain_cost_model`, `featurization_to_sample`) live under `halide/bin/`; every
caller finds them here instead of guessing.
"""

from __future__ import annotations

import json
import os
import platform
from functools import lru_cache
from pathlib import Path

from autosearch.errors import InputError

__all__ = [
    "ADAMS2019_PLUGIN",
    "AUTOSCHEDULER_PLUGINS",
    "default_threads",
    "device_fingerprint",
    "halide_root",
    "load_adams2019",
    "load_autoscheduler",
    "plugin_path",
    "target_json",
    "tool_path",
]

ADAMS2019_PLUGIN = "libautoschedule_adams2019.so"
#: The autoschedulers the wheel ships: Halide name -> plugin file.
AUTOSCHEDULER_PLUGINS: dict[str, str] = {
    "Adams2019": ADAMS2019_PLUGIN,
    "Mullapudi2016": "libautoschedule_mullapudi2016.so",
    "Li2018": "libautoschedule_li2018.so",
    "Anderson2021": "libautoschedule_anderson2021.so",
}


def default_threads() -> int:
    """Halide's thread pool as users run it: one thread per physical core this process may use
    (hyper-threads share a core's vector units, so Halide apps gain little from them)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    try:
        import psutil

        physical = psutil.cpu_count(logical=False) or usable
    except ImportError:
        physical = usable
    logical = os.cpu_count() or usable
    per_core = max(1, logical // max(1, physical))  # hardware threads per core
    return max(1, min(physical, usable // per_core if usable >= per_core else usable))


@lru_cache(maxsize=1)
def halide_root() -> Path:
    """The installed `halide` package directory (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("halide")
    if spec is None or not spec.origin:
        raise InputError("the 'halide' package is not installed (pip install halide==21.0.0)")
    return Path(spec.origin).parent


def plugin_path(autoscheduler: str = "Adams2019") -> Path:
    """Full path of an autoscheduler plugin shipped in the wheel (Adams2019 by default)."""
    if autoscheduler not in AUTOSCHEDULER_PLUGINS:
        raise InputError(f"unknown autoscheduler {autoscheduler!r}; known: {', '.join(AUTOSCHEDULER_PLUGINS)}")
    name = AUTOSCHEDULER_PLUGINS[autoscheduler]
    for sub in ("lib64", "lib"):
        p = halide_root() / sub / name
        if p.exists():
            return p
    raise InputError(f"{name} not found under {halide_root()} (is halide==21.0.0 installed?)")


def tool_path(name: str) -> Path:
    """Full path of one of Halide's tools under `halide/bin/` (e.g. adams2019_retrain_cost_model)."""
    p = halide_root() / "bin" / name
    if not p.exists():
        raise InputError(f"Halide tool {name!r} not found under {halide_root() / 'bin'}")
    return p


_loaded: set[str] = set()


def load_autoscheduler(autoscheduler: str = "Adams2019") -> None:
    """Load an autoscheduler plugin into this process once."""
    if autoscheduler in _loaded:
        return
    import halide as hl

    hl.load_plugin(str(plugin_path(autoscheduler)))
    _loaded.add(autoscheduler)


def load_adams2019() -> None:
    """Load the Adams2019 plugin into this process once."""
    load_autoscheduler("Adams2019")


def target_json(target: str, threads: int) -> str:
    """Canonical target JSON of the store: Halide target string, thread count, host machine."""
    return json.dumps(
        {"backend": "halide", "target": target, "threads": int(threads), "machine": platform.machine()},
        sort_keys=True,
    )


def device_fingerprint() -> str:
    """A short description of the machine that ran a benchmark."""
    from autosearch.hostinfo import cpu_model_name, cpu_signature

    return f"{platform.node()}|{cpu_model_name()}|{cpu_signature()}|{os.cpu_count()} cpus"
