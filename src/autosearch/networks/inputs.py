"""A network's inputs as the user names them: `--input NAME:DTYPE:SHAPE[:LOW..HIGH]`.

Why a spec and not only shapes: transformers take integer token ids (`input_ids:int64:1,128`), and
an exported library must say what it expects (its `inputs.json`) so that `autosearch run` and the
Python loader can refuse a wrong array in one line instead of crashing inside TVM.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from autosearch.errors import InputError

__all__ = ["DTYPES", "InputSpec", "example_arrays", "load_samples", "onnx_inputs", "parse_inputs"]

#: The dtypes an input may have (what PyTorch's exporter and TVM both take).
DTYPES = ("float32", "float16", "int64", "int32", "bool")
#: The largest input a user may ask for: 2**31 elements (8 GiB of float32) is past any model here
#: and past what this machine could hold twice (the input and PyTorch's reference output).
MAX_ELEMENTS = 2**31
#: Integer inputs are drawn from [0, 100) unless a range is given: token ids of any vocabulary.
DEFAULT_INT_RANGE = (0, 100)
#: ONNX element types (`TensorProto.DataType`) of the dtypes in DTYPES.
_ONNX_DTYPES = {1: "float32", 10: "float16", 7: "int64", 6: "int32", 9: "bool"}


@dataclass(frozen=True)
class InputSpec:
    """One input of a network: its name, dtype and shape; `low`/`high` bound integer draws;
    `index_high`, where the input indexes a table (token ids into an embedding), is that table's
    row count: a built library reads out of bounds past it (TVM's `take` does not check), so a
    value outside [0, index_high) is refused before it reaches the library."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    low: int = DEFAULT_INT_RANGE[0]
    high: int = DEFAULT_INT_RANGE[1]
    index_high: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "shape": list(self.shape)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> InputSpec:
        try:
            spec = cls(
                name=str(d["name"]),
                dtype=str(d["dtype"]),
                shape=tuple(int(x) for x in d["shape"]),
                low=int(d.get("low", DEFAULT_INT_RANGE[0])),
                high=int(d.get("high", DEFAULT_INT_RANGE[1])),
                index_high=None if d.get("index_high") is None else int(d["index_high"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"bad input description {d!r}: {exc}") from None
        spec.check()
        return spec

    def check(self) -> None:
        if self.dtype not in DTYPES:
            raise InputError(f"input {self.name}: dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if not self.shape or any(d < 1 for d in self.shape):
            raise InputError(f"input {self.name}: shape must have positive dimensions, got {self.shape}")
        if int(np.prod(self.shape, dtype=np.float64)) > MAX_ELEMENTS:
            raise InputError(
                f"input {self.name}: shape {'x'.join(map(str, self.shape))} has more than {MAX_ELEMENTS:,} elements"
            )
        if self.high <= self.low:
            raise InputError(f"input {self.name}: integer range {self.low}..{self.high} is empty")
        if self.index_high is not None and self.index_high < 1:
            raise InputError(f"input {self.name}: index bound must be >= 1, got {self.index_high}")

    def indexing(self, rows: int | None) -> InputSpec:
        """This input as one that indexes a table of `rows` rows (None: it indexes none); refuses a
        draw range that reaches past the table (the library would read out of bounds)."""
        if rows is None:
            return self
        if self.low < 0 or self.high > rows:
            raise InputError(
                f"input {self.name}: range {self.low}..{self.high} reaches outside the {rows} rows of the "
                f"table it indexes; give --input {self.name}:{self.dtype}:{','.join(map(str, self.shape))}:0..{rows}"
            )
        return replace(self, index_high=rows)

    def check_array(self, a: np.ndarray) -> None:
        """Refuse an array this input cannot take, in one line naming the input."""
        if tuple(a.shape) != self.shape:
            raise InputError(
                f"input {self.name}: expected shape {'x'.join(map(str, self.shape))}, got {'x'.join(map(str, a.shape))}"
            )
        if str(a.dtype) != self.dtype:
            raise InputError(f"input {self.name}: expected dtype {self.dtype}, got {a.dtype}")
        if self.index_high is not None and a.size:
            lo, hi = int(a.min()), int(a.max())
            if lo < 0 or hi >= self.index_high:
                raise InputError(
                    f"input {self.name}: values must lie in [0, {self.index_high}) (it indexes a table of "
                    f"{self.index_high} rows), got {lo}..{hi}"
                )


_SHAPE = re.compile(r"^\d+([,x]\d+)*$")


def _shape(text: str, what: str) -> tuple[int, ...]:
    text = text.strip().replace(" ", "")
    if not _SHAPE.match(text):
        raise InputError(f"{what}: shape must be integers separated by commas, got {text!r}")
    return tuple(int(p) for p in re.split("[,x]", text))


def onnx_inputs(path: str) -> list[InputSpec]:
    """The inputs an ONNX file declares (its graph inputs that are not initializers), with their
    shapes and dtypes, in order: an ONNX model says what it takes, so `--input` is needed only
    where it does not (a dynamic dimension, a batch size left open) or to change the draw range."""
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx's own decode errors
        raise InputError(f"cannot read {path} as an ONNX model: {' '.join(str(exc).split())[:200]}") from None
    weights = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in weights]
    others = " (and the other inputs' with --input too)" if len(inputs) > 1 else ""
    specs: list[InputSpec] = []
    for inp in inputs:
        tensor = inp.type.tensor_type
        dtype = _ONNX_DTYPES.get(tensor.elem_type)
        if dtype is None:
            kind = onnx.TensorProto.DataType.Name(tensor.elem_type) if tensor.elem_type else "no tensor type"
            raise InputError(
                f"{path}: input {inp.name} is {kind}, not one of {', '.join(DTYPES)}; give the inputs with --input"
            )
        dims = list(tensor.shape.dim) if tensor.HasField("shape") else None
        if dims is None or any(not d.HasField("dim_value") or d.dim_value < 1 for d in dims):
            which = "has no declared shape" if dims is None else "has a dynamic dimension"
            if dims:
                open_dims = [d.dim_param or "?" for d in dims if not d.HasField("dim_value") or d.dim_value < 1]
                which += f" ({', '.join(open_dims)})"
            raise InputError(
                f"{path}: input {inp.name} {which}; give its shape with --input {inp.name}:{dtype}:SHAPE{others}"
            )
        specs.append(InputSpec(inp.name, dtype, tuple(int(d.dim_value) for d in dims)))
    if not specs:
        raise InputError(f"{path} declares no inputs")
    for spec in specs:
        spec.check()
    return specs


def parse_inputs(items: Sequence[str] = (), shapes: Sequence[str] = (), onnx: str | None = None) -> list[InputSpec]:
    """`--input NAME:DTYPE:SHAPE[:LOW..HIGH]` items, or the shorthand `--input-shape 1,3,224,224`
    (float32 inputs named `input0`, `input1`, ...); with neither, the inputs the ONNX file `onnx`
    declares (`onnx_inputs`). Every spec is checked here, before any import."""
    if items and shapes:
        raise InputError("give either --input or --input-shape, not both")
    if onnx is not None and not items and not shapes:
        return onnx_inputs(onnx)
    specs: list[InputSpec] = []
    for i, s in enumerate(shapes):
        specs.append(InputSpec(f"input{i}", "float32", _shape(s, "--input-shape")))
    for item in items:
        parts = item.split(":")
        if len(parts) not in (3, 4) or not parts[0].isidentifier():
            raise InputError(f"--input must be NAME:DTYPE:SHAPE[:LOW..HIGH], e.g. input_ids:int64:1,128; got {item!r}")
        low, high = DEFAULT_INT_RANGE
        if len(parts) == 4:
            m = re.match(r"^(-?\d+)\.\.(-?\d+)$", parts[3])
            if not m:
                raise InputError(f"--input {item!r}: the range must be LOW..HIGH (integers), got {parts[3]!r}")
            low, high = int(m.group(1)), int(m.group(2))
        specs.append(InputSpec(parts[0], parts[1], _shape(parts[2], f"--input {parts[0]}"), low, high))
    if not specs:
        raise InputError("give the model's inputs: --input NAME:DTYPE:SHAPE (or --input-shape for float32 inputs)")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise InputError(f"input names repeat: {', '.join(names)}")
    for spec in specs:
        spec.check()
    return specs


def example_arrays(specs: Sequence[InputSpec], seed: int = 0) -> list[np.ndarray]:
    """One array per input, reproducible: floats uniform in [0, 1), integers in [low, high)."""
    rng = np.random.default_rng(seed)
    out = []
    for s in specs:
        if s.dtype == "bool":
            a = rng.integers(0, 2, size=s.shape).astype(bool)
        elif s.dtype.startswith("int"):
            a = rng.integers(s.low, s.high, size=s.shape).astype(s.dtype)
        else:
            a = rng.random(s.shape, dtype=np.float32).astype(s.dtype)
        out.append(a)
    return out


#: The most samples a set may hold: each calibration sample is one run of the untuned graph (about
#: a second for a ResNet-50 on 2 cores), and min/max ranges stop moving long before this.
MAX_SAMPLES = 1024


def load_samples(
    items: Sequence[str], specs: Sequence[InputSpec], option: str = "--calibration"
) -> list[list[np.ndarray]]:
    """Samples of the model's inputs from `.npy` files given as `option FILE.npy` (a one-input
    model) or `option NAME=FILE.npy` per input (`--calibration`, `--check-input`): each file holds N
    samples of its input stacked on a new first axis (N, *shape), one sample (shape), or, where
    the input's batch is 1, N samples stacked on the batch axis (N, *shape[1:]). Read without
    pickles; a wrong shape, dtype kind, non-finite value or sample count fails in one line naming
    the option and the input. Returns N lists, one array per input each, in the inputs' order and
    dtypes."""
    names = [s.name for s in specs]
    files: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            if len(specs) != 1:
                raise InputError(
                    f"{option} {item!r}: the model has {len(specs)} inputs; give NAME=FILE.npy for each of "
                    f"{', '.join(names)}"
                )
            name, path = names[0], item
        if name not in names:
            raise InputError(f"{option} must be NAME=FILE.npy with NAME one of {', '.join(names)}; got {item!r}")
        if name in files:
            raise InputError(f"{option} names input {name} twice")
        files[name] = path
    missing = [n for n in names if n not in files]
    if missing:
        raise InputError(f"{option} gives no samples for input {', '.join(missing)} (NAME=FILE.npy each)")
    stacks = [_stack(files[s.name], s, option) for s in specs]
    counts = {len(a) for a in stacks}
    if len(counts) > 1:
        detail = ", ".join(f"{s.name} {len(a)}" for s, a in zip(specs, stacks, strict=True))
        raise InputError(f"{option}: the inputs' files hold different sample counts ({detail})")
    return [[a[i] for a in stacks] for i in range(len(stacks[0]))]


def _stack(path: str, spec: InputSpec, option: str) -> np.ndarray:
    """One input's samples file as an (N, *spec.shape) array of the input's dtype."""
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{option} {spec.name}: cannot read {path} as a .npy array: {exc}") from None
    if not isinstance(a, np.ndarray):  # an .npz archive
        a.close()
        raise InputError(f"{option} {spec.name}: {path} is an .npz archive; give one .npy array an input")
    shape = spec.shape
    if a.shape == shape:
        a = a[None]
    elif a.shape[1:] == shape:
        pass
    elif shape[0] == 1 and a.ndim == len(shape) and a.shape[1:] == shape[1:]:
        a = a[:, None]
    else:
        want = "x".join(map(str, shape))
        raise InputError(
            f"{option} {spec.name}: {path} holds shape {'x'.join(map(str, a.shape))}; expected N x {want} "
            f"(N samples) or {want}"
        )
    if not 1 <= len(a) <= MAX_SAMPLES:
        raise InputError(f"{option} {spec.name}: {path} holds {len(a)} samples; give 1 to {MAX_SAMPLES}")
    kind = "b" if spec.dtype == "bool" else ("iu" if spec.dtype.startswith("int") else "f")
    if a.dtype.kind not in kind:
        raise InputError(f"{option} {spec.name}: {path} holds {a.dtype} values; the input is {spec.dtype}")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise InputError(f"{option} {spec.name}: {path} holds a non-finite value (NaN or inf)")
    return np.ascontiguousarray(a, dtype=spec.dtype)
