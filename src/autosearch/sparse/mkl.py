"""oneMKL's sparse inspector-executor API (SpMV / SpMM) through a small ctypes binding to libmkl_rt.

Why this and not `torch.sparse`: torch builds an MKL handle on every call and never runs
`mkl_sparse_optimize`, which is not the oneMKL a sparse user calls. The inspector-executor path
is: create a CSR handle once, give it the hint of how it will be called (`mkl_sparse_set_mv_hint`
/ `mkl_sparse_set_mm_hint`, with many expected calls), `mkl_sparse_optimize` (the inspector may
rebuild the matrix in an internal format), then call the executor with preallocated outputs.

Why ctypes and not a wrapper package: the `mkl` wheel from PyPI (a dependency on x86-64) ships
`libmkl_rt.so.*` under the environment's `lib/`; finding it there needs no environment variable.
`MKL_RT` (a path to the library) overrides the search. The LP64 interface is selected explicitly
(32-bit MKL_INT), and the threading layer is MKL's default (Intel OpenMP); `set_threads` sets the
thread count to the same number as TVM's pool and torch's.

The SDDMM has no inspector-executor routine in oneMKL's C API, so there is no MKL SDDMM here.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from autosearch.errors import AutosearchError

__all__ = ["MklCsr", "MklUnavailable", "available", "library_path", "loaded", "set_threads", "version"]

# sparse_operation_t, sparse_matrix_type_t, sparse_fill_mode_t, sparse_diag_type_t, layouts (mkl_spblas.h)
_NON_TRANSPOSE = 10
_TYPE_GENERAL = 20
_FILL_LOWER = 40
_DIAG_NON_UNIT = 50
_LAYOUT_ROW_MAJOR = 101
_INDEX_BASE_ZERO = 0
_INTERFACE_LP64 = 0
_STATUS = {
    0: "success",
    1: "not initialized",
    2: "allocation failed",
    3: "invalid value",
    4: "execution failed",
    5: "internal error",
    6: "not supported",
}
#: The `expected_calls` hint: the matrix is used for many calls (so the inspector may spend time).
EXPECTED_CALLS = 1000


class MklUnavailable(AutosearchError):
    """libmkl_rt could not be found or loaded (install the `mkl` wheel, or set MKL_RT)."""


class _Descr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("mode", ctypes.c_int), ("diag", ctypes.c_int)]


_LIB: list[ctypes.CDLL] = []


def _candidates() -> list[str]:
    env = os.environ.get("MKL_RT")
    if env:
        return [env]
    out: list[str] = []
    for base in dict.fromkeys([sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(sys.executable))]):
        out += sorted(glob.glob(os.path.join(base, "lib", "libmkl_rt.so*")), reverse=True)
        out += sorted(glob.glob(os.path.join(base, "Library", "bin", "mkl_rt*.dll")), reverse=True)
    return out + ["libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"]


def library_path() -> str:
    """The libmkl_rt that is (or would be) loaded."""
    return getattr(_lib(), "_name", "")


def _lib() -> ctypes.CDLL:
    if _LIB:
        return _LIB[0]
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            errors.append(f"{path}: {str(exc).splitlines()[0] if str(exc) else exc!r}")
            continue
        _declare(lib)
        lib.MKL_Set_Interface_Layer(_INTERFACE_LP64)
        _LIB.append(lib)
        return lib
    raise MklUnavailable(
        "oneMKL's libmkl_rt was not found (pip install mkl, or set MKL_RT to its path): "
        + (errors[0] if errors else "")
    )


def _declare(lib: ctypes.CDLL) -> None:
    vp, ci, cf, fp, ip = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p
    lib.MKL_Set_Interface_Layer.argtypes = [ci]
    lib.MKL_Set_Num_Threads.argtypes = [ci]
    lib.MKL_Get_Max_Threads.restype = ci
    lib.MKL_Get_Version_String.argtypes = [ctypes.c_char_p, ci]
    lib.mkl_sparse_s_create_csr.argtypes = [ctypes.POINTER(vp), ci, ci, ci, ip, ip, ip, fp]
    lib.mkl_sparse_s_create_csr.restype = ci
    lib.mkl_sparse_set_mv_hint.argtypes = [vp, ci, _Descr, ci]
    lib.mkl_sparse_set_mv_hint.restype = ci
    lib.mkl_sparse_set_mm_hint.argtypes = [vp, ci, _Descr, ci, ci, ci]
    lib.mkl_sparse_set_mm_hint.restype = ci
    lib.mkl_sparse_optimize.argtypes = [vp]
    lib.mkl_sparse_optimize.restype = ci
    lib.mkl_sparse_destroy.argtypes = [vp]
    lib.mkl_sparse_destroy.restype = ci
    lib.mkl_sparse_s_mv.argtypes = [ci, cf, vp, _Descr, fp, cf, fp]
    lib.mkl_sparse_s_mv.restype = ci
    lib.mkl_sparse_s_mm.argtypes = [ci, cf, vp, _Descr, ci, fp, ci, ci, cf, fp, ci]
    lib.mkl_sparse_s_mm.restype = ci


def loaded() -> bool:
    """Whether libmkl_rt is loaded in this process already."""
    return bool(_LIB)


def available() -> bool:
    try:
        _lib()
    except MklUnavailable:
        return False
    return True


def version() -> str:
    buf = ctypes.create_string_buffer(256)
    _lib().MKL_Get_Version_String(buf, 256)
    return buf.value.decode(errors="replace").strip()


def set_threads(n: int) -> None:
    _lib().MKL_Set_Num_Threads(max(1, int(n)))


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what}: oneMKL status {status} ({_STATUS.get(status, 'unknown')})")


def _ptr(a: np.ndarray) -> int:
    return int(a.ctypes.data)


class MklCsr:
    """One float32 CSR matrix as an optimised oneMKL handle for SpMV (`dense == 0`) or SpMM with
    `dense` columns (row-major B and C). `inspect_s` is the time create + hint + optimize took
    (the library's counterpart of our format conversion). Call `close()` (or use `with`)."""

    def __init__(self, a: sp.csr_matrix, dense: int = 0, expected_calls: int = EXPECTED_CALLS) -> None:
        lib = _lib()
        a = sp.csr_matrix(a, dtype=np.float32)
        if max(a.shape) >= 2**31 or a.nnz >= 2**31:
            raise MklUnavailable("oneMKL LP64 takes 32-bit indices: the matrix is too large")
        m, k = a.shape
        # kept alive for the handle's lifetime: MKL reads the caller's arrays
        self._indptr = np.ascontiguousarray(a.indptr, dtype=np.int32)
        self._indices = np.ascontiguousarray(a.indices, dtype=np.int32)
        self._data = np.ascontiguousarray(a.data, dtype=np.float32)
        self.shape, self.dense = (m, k), int(dense)
        self._descr = _Descr(_TYPE_GENERAL, _FILL_LOWER, _DIAG_NON_UNIT)
        self._h = ctypes.c_void_p()
        t0 = time.perf_counter()
        start = _ptr(self._indptr)
        _check(
            lib.mkl_sparse_s_create_csr(
                ctypes.byref(self._h), _INDEX_BASE_ZERO, m, k, start, start + 4, _ptr(self._indices), _ptr(self._data)
            ),
            "mkl_sparse_s_create_csr",
        )
        if self.dense == 0:
            _check(lib.mkl_sparse_set_mv_hint(self._h, _NON_TRANSPOSE, self._descr, expected_calls), "mv hint")
        else:
            _check(
                lib.mkl_sparse_set_mm_hint(
                    self._h, _NON_TRANSPOSE, self._descr, _LAYOUT_ROW_MAJOR, self.dense, expected_calls
                ),
                "mm hint",
            )
        _check(lib.mkl_sparse_optimize(self._h), "mkl_sparse_optimize")
        self.inspect_s = time.perf_counter() - t0
        self._fn = lib.mkl_sparse_s_mv if self.dense == 0 else lib.mkl_sparse_s_mm

    def mv(self, x: np.ndarray, y: np.ndarray) -> None:
        """y = A x into the preallocated float32 y."""
        assert x.dtype == np.float32 and y.dtype == np.float32 and x.flags.c_contiguous and y.flags.c_contiguous
        assert x.shape == (self.shape[1],) and y.shape == (self.shape[0],)
        _check(self._fn(_NON_TRANSPOSE, 1.0, self._h, self._descr, _ptr(x), 0.0, _ptr(y)), "mkl_sparse_s_mv")

    def mm(self, b: np.ndarray, c: np.ndarray) -> None:
        """C = A B into the preallocated row-major float32 C (B row-major, `dense` columns)."""
        n = self.dense
        assert b.dtype == np.float32 and c.dtype == np.float32 and b.flags.c_contiguous and c.flags.c_contiguous
        assert b.shape == (self.shape[1], n) and c.shape == (self.shape[0], n)
        _check(
            self._fn(_NON_TRANSPOSE, 1.0, self._h, self._descr, _LAYOUT_ROW_MAJOR, _ptr(b), n, n, 0.0, _ptr(c), n),
            "mkl_sparse_s_mm",
        )

    def bind(self, inp: np.ndarray, out: np.ndarray) -> Callable[[], None]:
        """A zero-argument call of `mv(inp, out)` / `mm(inp, out)` with the checks and pointer
        look-ups done once (what a timing loop calls: only the executor is left per call)."""
        (self.mv if self.dense == 0 else self.mm)(inp, out)  # checks shapes and layouts once
        fn, h, d, ip, op_ = self._fn, self._h, self._descr, _ptr(inp), _ptr(out)
        if self.dense == 0:
            return lambda: _check(fn(_NON_TRANSPOSE, 1.0, h, d, ip, 0.0, op_), "mkl_sparse_s_mv")
        n = self.dense
        return lambda: _check(
            fn(_NON_TRANSPOSE, 1.0, h, d, _LAYOUT_ROW_MAJOR, ip, n, n, 0.0, op_, n), "mkl_sparse_s_mm"
        )

    def close(self) -> None:
        if self._h.value:
            _lib().mkl_sparse_destroy(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self) -> MklCsr:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the library may be gone
            self.close()
