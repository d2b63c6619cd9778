"""Halide pipelines to schedule: the classic hand-written ones, seeded random ones, user files.

Why specs: Adams2019 cannot be applied twice to one Pipeline, and autoscheduling runs in child
processes, so a pipeline travels as a small picklable `PipelineSpec` and every schedule gets
freshly built Funcs from `build_pipeline(spec)`.

A user pipeline is a Python file defining `pipeline(**params)` that returns a `PipelineDef`
(or a tuple `(outputs, output_shapes, inputs)`): the output Funcs, their estimated extents
(min 0), and `(ImageParam, extents)` pairs for the inputs. Estimates are set from these shapes,
and benchmark inputs of exactly these extents are allocated, so input extents must cover what
the outputs read.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autosearch.backends.halide.apps import APPS, BUILDERS
from autosearch.backends.halide.pipeline_def import PipelineDef
from autosearch.errors import InputError, WorkloadError

__all__ = [
    "BUILTIN_PIPELINES",
    "PipelineDef",
    "PipelineSpec",
    "build_pipeline",
    "resolve_pipeline",
]

#: Hand-written pipelines: name -> (builder, default params). Sizes default small (2 shared cores).
BUILTIN_PIPELINES: dict[str, dict[str, Any]] = {
    "blur": {"width": 768, "height": 512},
    "matmul": {"n": 192},
    "conv_layer": {"width": 32, "height": 32, "in_channels": 16, "out_channels": 16, "batch": 1},
    "unsharp": {"width": 768, "height": 512},
    # the classic apps (apps.py) at their realistic sizes; the first four keep their small defaults
    **{name: dict(app.params) for name, app in APPS.items() if name not in ("conv_layer", "unsharp")},
}


@dataclass(frozen=True)
class PipelineSpec:
    """How to rebuild a pipeline anywhere: kind 'builtin' | 'random' | 'file', a name, params."""

    kind: str
    name: str
    params_json: str = "{}"

    @classmethod
    def make(cls, kind: str, name: str, params: dict[str, Any] | None = None) -> PipelineSpec:
        return cls(kind, name, json.dumps(params or {}, sort_keys=True))

    @property
    def params(self) -> dict[str, Any]:
        return json.loads(self.params_json)

    @property
    def label(self) -> str:
        """Short human name, e.g. random_s12, blur, myfile."""
        if self.kind == "random":
            return f"random_s{self.params.get('seed', 0)}"
        if self.kind == "file":
            return Path(self.name).stem
        return self.name

    def key(self) -> str:
        """Stable workload key: hash of the spec (and of the file's bytes for a user file)."""
        h = hashlib.sha256(
            f"halide21|{self.kind}|{self.name if self.kind != 'file' else ''}|{self.params_json}".encode()
        )
        if self.kind == "file":
            h.update(Path(self.name).read_bytes())
        return h.hexdigest()[:32]

    def pipeline_id(self) -> int:
        """A positive int32 unique per pipeline (Halide groups training samples by it)."""
        return int(self.key()[:8], 16) & 0x7FFFFFFF or 1


def resolve_pipeline(gen_path: str, params: dict[str, Any] | None = None) -> PipelineSpec:
    """Turn a user's `gen_path` ('random', a builtin name, or a .py file) into a spec."""
    params = dict(params or {})
    if gen_path == "random":
        params.setdefault("seed", 0)
        return PipelineSpec.make("random", "random", params)
    if gen_path in BUILTIN_PIPELINES:
        unknown = set(params) - set(BUILTIN_PIPELINES[gen_path])
        if unknown:
            raise WorkloadError(
                f"pipeline {gen_path!r} has no parameters {sorted(unknown)}; known: {sorted(BUILTIN_PIPELINES[gen_path])}"
            )
        return PipelineSpec.make("builtin", gen_path, {**BUILTIN_PIPELINES[gen_path], **params})
    p = Path(gen_path)
    if p.suffix == ".py" or os.sep in gen_path:
        if not p.is_file():
            raise InputError(f"pipeline file {p} does not exist")
        if p.suffix != ".py":
            raise InputError(f"pipeline file {p} must be a Python file (.py) defining pipeline(**params)")
        return PipelineSpec.make("file", str(p.resolve()), params)
    raise WorkloadError(
        f"unknown pipeline {gen_path!r}: use 'random', one of {sorted(BUILTIN_PIPELINES)}, or a .py file"
    )


def _load_user_file(path: str, params: dict[str, Any]) -> PipelineDef:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"pipeline file {p} does not exist")
    mod_name = f"autosearch_user_pipeline_{hashlib.sha256(str(p).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(mod_name, p)
    if spec is None or spec.loader is None:
        raise InputError(f"pipeline file {p} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    except Exception as exc:
        raise InputError(f"pipeline file {p} raised {type(exc).__name__} on import: {_one_line(exc)}") from None
    fn = getattr(module, "pipeline", None)
    if not callable(fn):
        raise InputError(f"pipeline file {p} must define a function pipeline(**params)")
    try:
        res = fn(**params)
    except Exception as exc:
        raise InputError(f"pipeline file {p}: pipeline() raised {type(exc).__name__}: {_one_line(exc)}") from None
    if isinstance(res, tuple) and len(res) in (2, 3):
        res = PipelineDef(list(res[0]), [tuple(s) for s in res[1]], list(res[2]) if len(res) == 3 else [])
    if not isinstance(res, PipelineDef):
        raise InputError(f"pipeline file {p}: pipeline() must return a PipelineDef or (outputs, output_shapes, inputs)")
    if not res.description:
        res.description = p.read_text(errors="replace")
    return res


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


def build_pipeline(spec: PipelineSpec) -> PipelineDef:
    """Fresh Funcs for `spec` (call once per schedule: Adams2019 cannot re-schedule a Pipeline)."""
    params = spec.params
    if spec.kind == "builtin":
        if spec.name not in BUILDERS:
            raise WorkloadError(f"unknown builtin pipeline {spec.name!r}")
        try:
            return BUILDERS[spec.name](**params)
        except TypeError as exc:
            raise WorkloadError(f"pipeline {spec.name!r}: {exc}") from None
    if spec.kind == "random":
        from autosearch.backends.halide.random_pipeline import random_pipeline

        return random_pipeline(**params)
    if spec.kind == "file":
        return _load_user_file(spec.name, params)
    raise WorkloadError(f"unknown pipeline kind {spec.kind!r}")
