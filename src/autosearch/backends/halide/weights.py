"""Adams2019 `.weights` files: read, validate, write byte-exactly, JSON, random init.

Why validate here: Halide 21 silently replaces a weights file it cannot read with *random*
weights (a warning on stdout only), so every file is checked by this module before a path is
handed to the autoscheduler.

Format (Halide `Weights.cpp`, all little-endian)::

    uint32 signature 0x68776631 ('hwf1')
    uint32 pipeline features version (3)
    uint32 schedule features version (3)
    uint32 buffer count (6)
    6 x { uint32 ndim; uint32 extent[ndim]; float32 data[prod(extent)] }

Buffers are Halide buffers (dimension 0 innermost). Here each is a numpy float32 array indexed
in Halide's dimension order, e.g. `head1_filter[c, x, y]` with shape (8, 40, 7).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from autosearch.adams2019_sizes import BUFFER_SHAPES
from autosearch.errors import InputError

__all__ = [
    "BUFFER_NAMES",
    "BUFFER_SHAPES",
    "PIPELINE_FEATURES_VERSION",
    "SCHEDULE_FEATURES_VERSION",
    "SIGNATURE",
    "Weights",
    "baseline_weights_path",
    "validate_weights_file",
]

SIGNATURE = 0x68776631
PIPELINE_FEATURES_VERSION = 3
SCHEDULE_FEATURES_VERSION = 3
BUFFER_NAMES: tuple[str, ...] = tuple(BUFFER_SHAPES)


def baseline_weights_path() -> Path:
    """The stock Adams2019 weights (Halide's `baseline.weights`, MIT; see data/NOTICE.md)."""
    return Path(__file__).with_name("data") / "baseline.weights"


def _to_halide_bytes(a: np.ndarray) -> bytes:
    # Halide dimension 0 is innermost: Fortran order of the Halide-indexed array.
    return np.asarray(a, dtype="<f4").ravel(order="F").tobytes()


def _from_halide_bytes(raw: bytes, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(raw, dtype="<f4").reshape(shape, order="F").astype(np.float32)


class Weights:
    """The six Adams2019 weight buffers plus the feature versions they were trained for.

    `Weights()` holds zeros; use `Weights.load(path)`, `Weights.baseline()`, `Weights.random(seed)`
    or `Weights.from_model(net)` to get real values.
    """

    def __init__(
        self,
        buffers: dict[str, np.ndarray] | None = None,
        pipeline_features_version: int = PIPELINE_FEATURES_VERSION,
        schedule_features_version: int = SCHEDULE_FEATURES_VERSION,
    ) -> None:
        self.pipeline_features_version = int(pipeline_features_version)
        self.schedule_features_version = int(schedule_features_version)
        self.buffers: dict[str, np.ndarray] = {}
        for name, shape in BUFFER_SHAPES.items():
            arr = np.zeros(shape, np.float32) if buffers is None or name not in buffers else buffers[name]
            arr = np.array(arr, dtype=np.float32)
            if arr.shape != shape:
                raise InputError(f"weights buffer {name} has shape {arr.shape}, expected {shape}")
            self.buffers[name] = arr
        if buffers is not None:
            unknown = set(buffers) - set(BUFFER_SHAPES)
            if unknown:
                raise InputError(f"unknown weights buffers {sorted(unknown)}; expected {list(BUFFER_NAMES)}")

    # -- constructors ------------------------------------------------------------------------
    @classmethod
    def baseline(cls) -> Weights:
        """The stock weights Adams2019 uses when no `weights_path` is given."""
        return cls.load(baseline_weights_path())

    @classmethod
    def random(cls, seed: int = 0) -> Weights:
        """Uniform(-0.5, 0.5) weights exactly as Halide's `Weights::randomize(seed)` makes them.

        Both use a 32-bit Mersenne twister seeded with `seed` and fill the buffers in file order,
        dimension 0 fastest, with `float(r) / float(2**32 - 1) - 0.5`.
        """
        rs = np.random.RandomState(seed & 0xFFFFFFFF)
        n = sum(int(np.prod(s)) for s in BUFFER_SHAPES.values())
        raw = rs.randint(0, 2**32, size=n, dtype=np.uint32)  # raw 32-bit twister outputs
        vals = raw.astype(np.float32) / np.float32(4294967295.0) - np.float32(0.5)
        out: dict[str, np.ndarray] = {}
        pos = 0
        for name, shape in BUFFER_SHAPES.items():
            k = int(np.prod(shape))
            out[name] = vals[pos : pos + k].reshape(shape, order="F").astype(np.float32)
            pos += k
        return cls(out)

    # -- binary format -----------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, raw: bytes, source: str = "<bytes>") -> Weights:
        """Parse a `.weights` image; any deviation from the format is an `InputError`."""
        if len(raw) < 16:
            raise InputError(f"{source}: not an Adams2019 weights file (only {len(raw)} bytes)")
        sig, pver, sver, count = struct.unpack_from("<4I", raw, 0)
        if sig != SIGNATURE:
            raise InputError(
                f"{source}: not an Adams2019 weights file (signature {sig:#010x}, expected {SIGNATURE:#010x})"
            )
        if count != len(BUFFER_SHAPES):
            raise InputError(f"{source}: has {count} buffers, expected {len(BUFFER_SHAPES)}")
        pos = 16
        bufs: dict[str, np.ndarray] = {}
        for name, shape in BUFFER_SHAPES.items():
            if pos + 4 > len(raw):
                raise InputError(f"{source}: truncated before buffer {name}")
            (ndim,) = struct.unpack_from("<I", raw, pos)
            pos += 4
            if ndim != len(shape):
                raise InputError(f"{source}: buffer {name} has {ndim} dimensions, expected {len(shape)}")
            if pos + 4 * ndim > len(raw):
                raise InputError(f"{source}: truncated in the shape of buffer {name}")
            extents = struct.unpack_from(f"<{ndim}I", raw, pos)
            pos += 4 * ndim
            if tuple(extents) != shape:
                raise InputError(f"{source}: buffer {name} has shape {tuple(extents)}, expected {shape}")
            nbytes = 4 * int(np.prod(shape))
            if pos + nbytes > len(raw):
                raise InputError(f"{source}: truncated in the data of buffer {name}")
            arr = _from_halide_bytes(raw[pos : pos + nbytes], shape)
            if not np.isfinite(arr).all():
                raise InputError(f"{source}: buffer {name} holds NaN or infinite values")
            bufs[name] = arr
            pos += nbytes
        if pos != len(raw):
            raise InputError(f"{source}: {len(raw) - pos} unexpected trailing bytes after the 6 buffers")
        return cls(bufs, pver, sver)

    def to_bytes(self) -> bytes:
        """The `.weights` image, byte-identical to what Halide's `Weights::save` writes."""
        parts = [struct.pack("<4I", SIGNATURE, self.pipeline_features_version, self.schedule_features_version, 6)]
        for name, shape in BUFFER_SHAPES.items():
            parts.append(struct.pack(f"<{1 + len(shape)}I", len(shape), *shape))
            parts.append(_to_halide_bytes(self.buffers[name]))
        return b"".join(parts)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Weights:
        """Read and validate a `.weights` file."""
        p = Path(path)
        if not p.exists():
            raise InputError(f"weights file {p} does not exist")
        if p.is_dir():
            raise InputError(f"{p} is a directory; Adams2019 weights must be a single .weights file")
        return cls.from_bytes(p.read_bytes(), str(p))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (temp file + rename): a killed run never leaves a half-written file."""
        p = Path(path)
        if p.suffix != ".weights":
            raise InputError(f"{p}: Adams2019 only reads weights files whose name ends in '.weights'")
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_bytes(self.to_bytes())
        os.replace(tmp, p)
        return p

    # -- JSON --------------------------------------------------------------------------------
    def to_json_dict(self) -> dict[str, Any]:
        return {
            "format": "halide-adams2019-weights",
            "pipeline_features_version": self.pipeline_features_version,
            "schedule_features_version": self.schedule_features_version,
            "buffers": {
                n: {"shape": list(BUFFER_SHAPES[n]), "data": [float(v) for v in self.buffers[n].ravel(order="F")]}
                for n in BUFFER_NAMES
            },
        }

    def save_json(self, path: str | os.PathLike[str]) -> Path:
        """JSON export; data are flat lists in Halide memory order (dimension 0 fastest)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_json_dict()))
        return p

    @classmethod
    def from_json_dict(cls, d: dict[str, Any], source: str = "<json>") -> Weights:
        if not isinstance(d, dict) or d.get("format") != "halide-adams2019-weights":
            raise InputError(f"{source}: not an autosearch Adams2019 weights JSON (missing format tag)")
        bufs = {}
        try:
            for name, shape in BUFFER_SHAPES.items():
                b = d["buffers"][name]
                if tuple(b["shape"]) != shape or len(b["data"]) != int(np.prod(shape)):
                    raise InputError(f"{source}: buffer {name} has the wrong shape or size")
                arr = np.asarray(b["data"], dtype=np.float32).reshape(shape, order="F")
                if not np.isfinite(arr).all():
                    raise InputError(f"{source}: buffer {name} holds NaN or infinite values")
                bufs[name] = arr
            return cls(bufs, int(d["pipeline_features_version"]), int(d["schedule_features_version"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{source}: malformed weights JSON ({type(exc).__name__}: {exc})") from None

    @classmethod
    def load_json(cls, path: str | os.PathLike[str]) -> Weights:
        p = Path(path)
        if not p.exists():
            raise InputError(f"weights JSON {p} does not exist")
        try:
            d = json.loads(p.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{p}: not valid JSON ({exc})") from None
        return cls.from_json_dict(d, str(p))

    # -- PyTorch model -----------------------------------------------------------------------
    @classmethod
    def from_model(cls, model: Any) -> Weights:
        """Read the current parameters of an `Adams2019Net` (or anything with `.params()`)."""
        return cls(model.params())

    # -- misc --------------------------------------------------------------------------------
    def items(self) -> Iterator[tuple[str, np.ndarray]]:
        return iter(self.buffers.items())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Weights) and self.to_bytes() == other.to_bytes()

    def __repr__(self) -> str:
        return (
            f"Weights(pipeline_features_version={self.pipeline_features_version}, "
            f"schedule_features_version={self.schedule_features_version})"
        )


def validate_weights_file(path: str | os.PathLike[str]) -> Path:
    """Check a file before Halide sees it (Halide would silently randomize a bad one).

    Also refuses feature versions other than the ones Halide 21 computes: Halide would only
    print a warning and use them anyway.
    """
    p = Path(path)
    if p.suffix != ".weights":
        raise InputError(f"{p}: Adams2019 treats a weights_path not ending in '.weights' as a directory")
    w = Weights.load(p)
    if (w.pipeline_features_version, w.schedule_features_version) != (
        PIPELINE_FEATURES_VERSION,
        SCHEDULE_FEATURES_VERSION,
    ):
        raise InputError(
            f"{p}: trained for feature versions ({w.pipeline_features_version}, {w.schedule_features_version}),"
            f" Halide 21 computes ({PIPELINE_FEATURES_VERSION}, {SCHEDULE_FEATURES_VERSION})"
        )
    return p.resolve()
