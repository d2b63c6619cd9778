"""Check and time SuperSchedules on one matrix, and time the library baselines beside them.

Why one `MatrixBench` per (operator, matrix): the dense operands, the scipy reference and each
converted format are made once and shared by every configuration measured on that matrix, so a
collection pays conversion per format, not per schedule. Every configuration's result is checked
against scipy before it is timed; a wrong result is a `run_error`, never a latency.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from autosearch.sparse.formats import Converted, applicable, convert
from autosearch.sparse.kernels import build_kernel, kernel_args
from autosearch.sparse.space import SuperSchedule

__all__ = [
    "MatrixBench",
    "Outcome",
    "Timing",
    "check_size",
    "config_reason",
    "operand_bytes",
    "set_threads",
    "threads",
    "time_callable",
]

_THREADS: list[int] = []


def set_threads(n: int) -> None:
    """Threads for TVM's pool and torch (call before the first parallel kernel runs)."""
    from autosearch.backends.tvm.target import set_runtime_threads

    n = max(1, int(n))
    _THREADS[:] = [n]
    # sets TVM_NUM_THREADS first, then the running pool; older runtimes read the variable at pool start
    with contextlib.suppress(Exception):
        set_runtime_threads(n)
    import torch

    torch.set_num_threads(n)
    from autosearch.sparse import mkl

    if mkl.loaded():  # else MKL gets the count when first loaded (baselines.prepare_mkl)
        mkl.set_threads(n)


def threads() -> int:
    if not _THREADS:
        from autosearch.backends.tvm.target import physical_cores

        set_threads(int(os.environ.get("TVM_NUM_THREADS") or physical_cores()))
    return _THREADS[0]


#: Index arrays of the generated kernels and of oneMKL's LP64 interface are 32-bit.
MAX_DIM = 2**31 - 1


def operand_bytes(op: str, shape: tuple[int, int], nnz: int, dense: int) -> int:
    """A generous estimate of the memory one `MatrixBench` needs: the dense operands (inputs,
    outputs, the reference result, the padded copies the kernels read, float64 random draws)
    and a few copies of the nonzeros (converted formats, baselines' own copies)."""
    m, k = shape
    d = 1 if op == "spmv" else dense
    if op == "sddmm":
        dense_floats = (m + k) * d * 4 + nnz * 4
    else:
        dense_floats = k * d * 4 + m * d * 4
    return int(dense_floats * 4 + nnz * 8 * 6 + (m + k) * 8 * 2)


def check_size(op: str, shape: tuple[int, int], nnz: int, dense: int, available: int | None = None) -> None:
    """Refuse, with one line, a problem that cannot be indexed in 32 bits or would not fit in the
    memory available now (instead of a MemoryError part-way through building the operands)."""
    from autosearch.errors import InputError

    m, k = shape
    if max(m, k) > MAX_DIM or nnz > MAX_DIM:
        raise InputError(f"a {m}x{k} matrix with {nnz} nonzeros exceeds the 32-bit indices of the kernels ({MAX_DIM})")
    need = operand_bytes(op, shape, nnz, dense)
    if available is None:
        import psutil

        available = int(psutil.virtual_memory().available)
    if need > available:
        what = f"{op} with N={dense}" if op != "spmv" else op
        raise InputError(
            f"{what} on a {m}x{k} matrix needs about {need / 2**30:.1f} GiB for its operands; "
            f"{available / 2**30:.1f} GiB is available"
        )


@dataclass(frozen=True)
class Timing:
    """How a kernel is timed by `time_callable` (the one harness for ours and every baseline).

    `settle_ms` of idleness first (another library's thread pool may still be spinning after its
    last call: Intel OpenMP spins 200 ms by default), `warmup` calls, then `repeat` repeats, each
    of `number` back-to-back calls lasting at least `min_repeat_ms` (`number` calibrated from the
    slowest warm-up call, at most `max_number`); a repeat's value is its mean per call.
    """

    repeat: int = 5
    min_repeat_ms: float = 5.0
    max_number: int = 1000
    warmup: int = 2
    settle_ms: float = 0.0


@dataclass
class Outcome:
    """One configuration on one matrix. status: ok / build_error / run_error (error says why)."""

    status: str
    latencies: list[float] = field(default_factory=list)
    error: str = ""
    convert_s: float = 0.0
    build_s: float = 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.latencies) if self.status == "ok" and self.latencies else math.inf


def _rows_per_unit(c: SuperSchedule) -> int:
    return c.br if c.fmt == "bcsr" else c.slice if c.fmt == "ell" else 1


def config_reason(c: SuperSchedule, a: sp.csr_matrix, fmt_cache: dict[Any, str] | None = None) -> str:
    """Why configuration `c` cannot run on matrix `a` ('' when it can).

    `fmt_cache` keeps the format part (the padding of BCSR / ELL costs a pass over the nonzeros)
    per format key, for callers that check many configurations of one matrix.
    """
    acc = _rows_per_unit(c) * c.dense if (c.op == "spmm" and c.order == "kj") else 0
    if fmt_cache is None:
        return applicable(a, c.fmt, c.br, c.bc, c.slice, c.panel, acc)
    if c.format_key not in fmt_cache:
        fmt_cache[c.format_key] = applicable(a, c.fmt, c.br, c.bc, c.slice, c.panel)
    return fmt_cache[c.format_key] or applicable(a, "csr", 1, 1, 1, 0, acc)


def time_callable(fn: Callable[[], Any], timing: Timing) -> list[float]:
    """Seconds per call of `fn`, one value per repeat (see `Timing` for the method).

    Every contender -- a generated TVM kernel (its packed function called with preallocated
    arguments), oneMKL, torch.sparse, scipy -- is timed by this same loop on the same thread count,
    with its output preallocated by the caller, so no kernel's number includes an allocation that
    another's does not. The calls go through Python (about a microsecond each, the same order for
    every contender), not through TVM's C++ `time_evaluator`.
    """
    if timing.settle_ms > 0:
        time.sleep(timing.settle_ms / 1e3)
    one = 1e-7
    for _ in range(max(1, timing.warmup)):
        t0 = time.perf_counter()
        fn()
        one = max(one, time.perf_counter() - t0)
    number = int(min(timing.max_number, max(1, math.ceil(timing.min_repeat_ms / 1e3 / one))))
    out = []
    for _ in range(timing.repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        out.append((time.perf_counter() - t0) / number)
    return out


class MatrixBench:
    """Everything needed to run configurations of one operator on one matrix."""

    def __init__(self, op: str, a: sp.csr_matrix, dense: int = 0, seed: int = 0) -> None:
        check_size(op, a.shape, a.nnz, dense if op != "spmv" else 0)
        self.op, self.a, self.dense = op, sp.csr_matrix(a, dtype=np.float32), dense if op != "spmv" else 0
        self.a.sort_indices()
        rng = np.random.default_rng(seed)
        m, k = self.a.shape
        if op == "spmv":
            self.x = rng.uniform(-1, 1, k).astype(np.float32)
            self.ref = self.a @ self.x
        elif op == "spmm":
            self.B = rng.uniform(-1, 1, (k, self.dense)).astype(np.float32)
            self.ref = self.a @ self.B
        else:
            self.X = rng.uniform(-1, 1, (m, self.dense)).astype(np.float32)
            self.Y = rng.uniform(-1, 1, (k, self.dense)).astype(np.float32)
            rows = np.repeat(np.arange(m), np.diff(self.a.indptr))
            self.ref = self.a.data * np.einsum("ij,ij->i", self.X[rows], self.Y[self.a.indices], dtype=np.float32)
        self._conv: dict[tuple[Any, ...], Converted] = {}
        self._tensors: dict[tuple[Any, ...], dict[str, Any]] = {}

    def converted(self, c: SuperSchedule) -> Converted:
        key = c.format_key
        if key not in self._conv:
            self._conv[key] = convert(self.a, c.fmt, c.br, c.bc, c.slice, c.panel)
        return self._conv[key]

    def _dense_inputs(self, cv: Converted) -> dict[str, np.ndarray]:
        _m, _k = self.a.shape

        def pad(arr: np.ndarray, n: int) -> np.ndarray:
            if arr.shape[0] == n:
                return arr
            out = np.zeros((n,) + arr.shape[1:], dtype=np.float32)
            out[: arr.shape[0]] = arr
            return out

        if self.op == "spmv":
            return {"x": pad(self.x, cv.cols_pad), "y": np.zeros(cv.rows_pad, np.float32)}
        if self.op == "spmm":
            return {"B": pad(self.B, cv.cols_pad), "C": np.zeros((cv.rows_pad, self.dense), np.float32)}
        return {"X": pad(self.X, cv.rows_pad), "Y": pad(self.Y, cv.cols_pad), "out": np.zeros(cv.slots, np.float32)}

    def _args(self, c: SuperSchedule, cv: Converted) -> list[Any]:
        import tvm

        key = c.format_key
        if key not in self._tensors:
            dev = tvm.cpu()
            host = {**cv.arrays, **self._dense_inputs(cv)}
            tens = {n: tvm.runtime.tensor(v if v.size else np.zeros(1, v.dtype), dev) for n, v in host.items()}
            ints = {f"n_{n}": max(int(v.size), 1) for n, v in cv.arrays.items()}
            ints.update(
                units=cv.units,
                rows_pad=cv.rows_pad,
                cols_pad=cv.cols_pad,
                slots=max(cv.slots, 1),
                npanels=int(cv.ints.get("npanels", 1)),
            )
            self._tensors[key] = {**tens, **ints}
        t = self._tensors[key]
        return [t[n] for n in kernel_args(c)]

    def _result(self, c: SuperSchedule, cv: Converted, args: list[Any]) -> np.ndarray:
        out = args[kernel_args(c).index({"spmv": "y", "spmm": "C", "sddmm": "out"}[self.op])].numpy()
        if self.op != "sddmm":
            return out[: self.a.shape[0]]
        res = np.zeros(self.a.nnz, np.float32)
        real = cv.perm >= 0
        res[cv.perm[real]] = out[: cv.slots][real]
        return res

    def check(self, c: SuperSchedule) -> str:
        """Run once and compare with scipy; '' when the result matches."""
        k = build_kernel(c)
        cv = self.converted(c)
        args = self._args(c, cv)
        k.mod["kernel"](*args)
        got, want = self._result(c, cv, args), np.asarray(self.ref, dtype=np.float32)
        scale = max(float(np.abs(want).max()) if want.size else 0.0, 1.0)
        err = float(np.abs(got - want).max()) if want.size else 0.0
        if not np.isfinite(err) or err > 1e-3 * scale:
            return f"result differs from scipy by {err:.3g} (scale {scale:.3g})"
        return ""

    def run(self, c: SuperSchedule, timing: Timing = Timing(), verify: bool = True) -> Outcome:
        """Reject, build, check and time one configuration (never raises for a bad candidate)."""
        if c.op != self.op or (c.op != "spmv" and c.dense != self.dense):
            return Outcome("run_error", error=f"configuration is for {c.op}/{c.dense}, not {self.op}/{self.dense}")
        reason = config_reason(c, self.a)
        if reason:
            return Outcome("run_error", error=f"not applicable: {reason}")
        try:
            k = build_kernel(c)
        except Exception as exc:  # TVM raises many types; keep the first line
            return Outcome(
                "build_error", error=str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else repr(exc)
            )
        cv = self.converted(c)
        try:
            if verify:
                bad = self.check(c)
                if bad:
                    return Outcome("run_error", error=bad, convert_s=cv.seconds, build_s=k.build_seconds)
            args = self._args(c, cv)
            threads()
            f = k.mod["kernel"]
            lat = time_callable(lambda: f(*args), timing)
        except Exception as exc:
            return Outcome(
                "run_error", error=str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else repr(exc)
            )
        return Outcome("ok", lat, convert_s=cv.seconds, build_s=k.build_seconds)
