"""Call the compiled Adams2019 cost model inside the Halide wheel's plugin, through ctypes.

Why: it is the ground truth our PyTorch model must match. The plugin exports the AOT-compiled
`cost_model` (inference) and `train_cost_model` (one ADAM step, with gradients) generated from
`cost_model_generator.cpp`; the parity tests feed both the same weights and samples.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from autosearch.backends.halide.toolchain import plugin_path
from autosearch.backends.halide.weights import BUFFER_NAMES, Weights
from autosearch.errors import AutosearchError

__all__ = ["ReferenceResult", "reference_predict", "reference_train_step"]


class _Dim(ctypes.Structure):
    _fields_ = [
        ("min", ctypes.c_int32),
        ("extent", ctypes.c_int32),
        ("stride", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    ]


class _Type(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Buffer(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_uint64),
        ("device_interface", ctypes.c_void_p),
        ("host", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("type", _Type),
        ("dimensions", ctypes.c_int32),
        ("dim", ctypes.POINTER(_Dim)),
        ("padding", ctypes.c_void_p),
    ]


class _HalideArray:
    """A float32 numpy array in Halide order (dim 0 fastest) wrapped as a halide_buffer_t.

    Holds the array, the dims and the struct, so none is freed while Halide uses them."""

    def __init__(self, arr: np.ndarray) -> None:
        a = np.asarray(arr, dtype=np.float32)
        self.array = np.array(a) if a.ndim == 0 else np.asfortranarray(a)  # asfortranarray makes 0-d 1-d
        shape = self.array.shape
        self.dims = (_Dim * max(1, len(shape)))()
        stride = 1
        for i, e in enumerate(shape):
            self.dims[i] = _Dim(0, int(e), stride, 0)
            stride *= int(e)
        self.buf = _Buffer()
        self.buf.host = self.array.ctypes.data
        self.buf.type = _Type(2, 32, 1)  # halide_type_float
        self.buf.dimensions = len(shape)
        self.buf.dim = ctypes.cast(self.dims, ctypes.POINTER(_Dim))

    @property
    def ref(self) -> ctypes._Pointer[Any]:
        return ctypes.pointer(self.buf)


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    return ctypes.CDLL(str(plugin_path()))


@dataclass
class ReferenceResult:
    """Halide's outputs: per-schedule predictions, the loss, and (training) new weights/gradients."""

    prediction: np.ndarray
    loss: float
    new_weights: Weights | None = None
    gradients: dict[str, np.ndarray] | None = None


def _inputs(
    pipeline_features: np.ndarray, schedule_features: np.ndarray
) -> tuple[_HalideArray, _HalideArray, int, int]:
    pf = np.asarray(pipeline_features, np.float32)  # (S, 40, 7) -> Halide (40, 7, S)
    sf = np.asarray(schedule_features, np.float32)  # (N, S, 39) -> Halide (N, 39, S)
    n, s = sf.shape[0], sf.shape[1]
    return _HalideArray(pf.transpose(1, 2, 0)), _HalideArray(sf.transpose(0, 2, 1)), n, s


def reference_predict(
    weights: Weights, pipeline_features: np.ndarray, schedule_features: np.ndarray, num_cores: int
) -> np.ndarray:
    """Halide's `cost_model`: predictions (N,) for N schedules of one pipeline."""
    pf, sf, n, s = _inputs(pipeline_features, schedule_features)
    ws = [_HalideArray(weights.buffers[k]) for k in BUFFER_NAMES]
    out = _HalideArray(np.zeros(n, np.float32))
    loss = _HalideArray(np.zeros((), np.float32))
    dummy = _HalideArray(np.ones(n, np.float32))
    rc = _lib().cost_model(
        ctypes.c_int(s),
        ctypes.c_int(n),
        ctypes.c_int(num_cores),
        pf.ref,
        sf.ref,
        *[w.ref for w in ws],
        ctypes.c_float(0.0),
        ctypes.c_int(0),
        ctypes.c_int(0),
        dummy.ref,
        out.ref,
        loss.ref,
    )
    if rc != 0:
        raise AutosearchError(f"Halide cost_model returned error {rc}")
    return np.array(out.array)


def reference_train_step(
    weights: Weights,
    pipeline_features: np.ndarray,
    schedule_features: np.ndarray,
    true_runtimes: np.ndarray,
    num_cores: int,
    learning_rate: float,
    timestep: int = 0,
) -> ReferenceResult:
    """Halide's `train_cost_model`: one ADAM step from zero moments (what `retrain_cost_model`
    does on its first batch). Returns predictions, loss, updated weights and loss gradients."""
    pf, sf, n, s = _inputs(pipeline_features, schedule_features)
    t = np.asarray(true_runtimes, np.float32)
    ref = int(np.argmin(t))
    ws = [_HalideArray(weights.buffers[k]) for k in BUFFER_NAMES]
    upd = [_HalideArray(np.zeros(weights.buffers[k].shape + (4,), np.float32)) for k in BUFFER_NAMES]
    out = _HalideArray(np.zeros(n, np.float32))
    loss = _HalideArray(np.zeros((), np.float32))
    tr = _HalideArray(t)
    rc = _lib().train_cost_model(
        ctypes.c_int(s),
        ctypes.c_int(n),
        ctypes.c_int(num_cores),
        pf.ref,
        sf.ref,
        *[w.ref for w in ws],
        ctypes.c_float(learning_rate),
        ctypes.c_int(timestep),
        ctypes.c_int(ref),
        tr.ref,
        *[u.ref for u in upd],
        out.ref,
        loss.ref,
    )
    if rc != 0:
        raise AutosearchError(f"Halide train_cost_model returned error {rc}")
    new = Weights({k: np.array(u.array[..., 0]) for k, u in zip(BUFFER_NAMES, upd)})
    grads = {k: np.array(u.array[..., 3]) for k, u in zip(BUFFER_NAMES, upd)}
    return ReferenceResult(np.array(out.array), float(loss.array), new, grads)
