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
        h = hashlib.sha256(f"halide21|{self.kind}|{self.name if self.kind != 'file' else ''}|{self.params_json}".encode())
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
            raise WorkloadError(f"pipeline {gen_path!r} has no parameters {sorted(unknown)}; known: {sorted(BUILTIN_PIPELINES[gen_path])}")
        return PipelineSpec.make("builtin", gen_path, {**BUILTIN_PIPELINES[gen_path], **params})
    p = Path(gen_path)
    if p.suffix == ".py" or os.sep in gen_path:
        if not p.is_file():
            raise InputError(f"pipeline file {p} does not exist")
        if p.suffix != ".py":
            raise InputError(f"pipeline file {p} must be a Python file (.py) defining pipeline(**params)")
        return PipelineSpec.make("file", str(p.resolve()), params)
    raise WorkloadError(f"unknown pipeline {gen_path!r}: use 'random', one of {sorted(BUILTIN_PIPELINES)}, or a .py file")


# -- builders -----------------------------------------------------------------------------------
def _blur(width: int, height: int) -> PipelineDef:
    import halide as hl

    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(16), 2, "input")
    bx, by = hl.Func("blur_x"), hl.Func("blur_y")
    bx[x, y] = (inp[x, y] + inp[x + 1, y] + inp[x + 2, y]) / 3
    by[x, y] = (bx[x, y] + bx[x, y + 1] + bx[x, y + 2]) / 3
    return PipelineDef([by], [(width, height)], [(inp, (width + 2, height + 2))], "blur_x: 3-tap x; blur_y: 3-tap y")


def _matmul(n: int) -> PipelineDef:
    import halide as hl

    i, j = hl.Var("i"), hl.Var("j")
    a = hl.ImageParam(hl.Float(32), 2, "A")
    b = hl.ImageParam(hl.Float(32), 2, "B")
    k = hl.RDom([(0, n)], "k")
    prod = hl.Func("matmul")
    prod[i, j] = hl.f32(0)
    prod[i, j] += a[k.x, j] * b[i, k.x]
    out = hl.Func("output")
    out[i, j] = prod[i, j]
    return PipelineDef([out], [(n, n)], [(a, (n, n)), (b, (n, n))], f"C[i,j] = sum_k A[k,j] * B[i,k], n={n}")


def _conv_layer(width: int, height: int, in_channels: int, out_channels: int, batch: int) -> PipelineDef:
    import halide as hl

    c, x, y, n = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n")
    inp = hl.ImageParam(hl.Float(32), 4, "input")  # (ci, x, y, n)
    filt = hl.ImageParam(hl.Float(32), 4, "filter")  # (co, ci, kx, ky)
    bias = hl.ImageParam(hl.Float(32), 1, "bias")
    r = hl.RDom([(0, in_channels), (0, 3), (0, 3)], "r")
    conv = hl.Func("conv")
    conv[c, x, y, n] = bias[c]
    conv[c, x, y, n] += filt[c, r.x, r.y, r.z] * inp[r.x, x + r.y, y + r.z, n]
    relu = hl.Func("relu")
    relu[c, x, y, n] = hl.max(hl.f32(0), conv[c, x, y, n])
    return PipelineDef(
        [relu], [(out_channels, width, height, batch)],
        [(inp, (in_channels, width + 2, height + 2, batch)), (filt, (out_channels, in_channels, 3, 3)), (bias, (out_channels,))],
        "conv 3x3 + bias + relu",
    )


def _unsharp(width: int, height: int) -> PipelineDef:
    import halide as hl

    x, y, c = hl.Var("x"), hl.Var("y"), hl.Var("c")
    inp = hl.ImageParam(hl.Float(32), 3, "input")
    clamped = hl.BoundaryConditions.repeat_edge(inp, [(0, width), (0, height), (0, 3)])
    gray = hl.Func("gray")
    gray[x, y] = hl.f32(0.299) * clamped[x, y, 0] + hl.f32(0.587) * clamped[x, y, 1] + hl.f32(0.114) * clamped[x, y, 2]
    kernel = [0.0625, 0.25, 0.375, 0.25, 0.0625]
    by = hl.Func("blur_y")
    by[x, y] = sum(hl.f32(kernel[i]) * gray[x, y + i - 2] for i in range(5))
    bx = hl.Func("blur_x")
    bx[x, y] = sum(hl.f32(kernel[i]) * by[x + i - 2, y] for i in range(5))
    sharpen = hl.Func("sharpen")
    sharpen[x, y] = 2 * gray[x, y] - bx[x, y]
    ratio = hl.Func("ratio")
    ratio[x, y] = sharpen[x, y] / (gray[x, y] + hl.f32(1e-3))
    out = hl.Func("output")
    out[x, y, c] = ratio[x, y] * clamped[x, y, c]
    return PipelineDef([out], [(width, height, 3)], [(inp, (width, height, 3))], "unsharp mask: gray, blur_y, blur_x, sharpen, ratio, output")


_BUILDERS = {"blur": _blur, "matmul": _matmul, "conv_layer": _conv_layer, "unsharp": _unsharp}


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
    except Exception as exc:  # noqa: BLE001 - user code: report, never crash
        raise InputError(f"pipeline file {p} raised {type(exc).__name__} on import: {_one_line(exc)}") from None
    fn = getattr(module, "pipeline", None)
    if not callable(fn):
        raise InputError(f"pipeline file {p} must define a function pipeline(**params)")
    try:
        res = fn(**params)
    except Exception as exc:  # noqa: BLE001
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
        if spec.name not in _BUILDERS:
            raise WorkloadError(f"unknown builtin pipeline {spec.name!r}")
        try:
            return _BUILDERS[spec.name](**params)
        except TypeError as exc:
            raise WorkloadError(f"pipeline {spec.name!r}: {exc}") from None
    if spec.kind == "random":
        from autosearch.backends.halide.random_pipeline import random_pipeline

        return random_pipeline(**params)
    if spec.kind == "file":
        return _load_user_file(spec.name, params)
    raise WorkloadError(f"unknown pipeline kind {spec.kind!r}")
