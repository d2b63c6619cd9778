"""TIR kernels generated from a SuperSchedule: TVMScript text with data-dependent loops, built by LLVM.

Why generated text: the loop nest of a sparse kernel is fixed by its format (rows of a CSR, block
rows of a BCSR, slices of an ELL, panels of a split-k CSR), and the schedule's knobs (parallel
chunk, dense split and vector loop, loop order, unroll of the nonzero loop) are textual changes
to that nest. The text is the kernel's IR as stored and shown; the matrix sizes are run-time
arguments, so one build serves every matrix (the cache is keyed by the configuration alone).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autosearch.sparse.space import SuperSchedule

__all__ = ["Kernel", "build_kernel", "host_target", "kernel_args", "kernel_source"]

_CACHE: dict[tuple[str, str], Kernel] = {}
_LOCK = threading.Lock()


class _Emitter:
    """Lines of TVMScript with indentation and fresh variable names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 1
        self.n = 0

    def __call__(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def fresh(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def block(self, header: str) -> _Indent:
        self(header)
        return _Indent(self)


class _Indent:
    def __init__(self, e: _Emitter) -> None:
        self.e = e

    def __enter__(self) -> None:
        self.e.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.e.depth -= 1


#: Per format: the index arrays (name, dtype) in call order.
_FORMAT_ARRAYS = {
    "csr": [("indptr", "int32"), ("indices", "int32"), ("data", "float32")],
    "dcsr": [("rowids", "int32"), ("indptr", "int32"), ("indices", "int32"), ("data", "float32")],
    "csc": [("colptr", "int32"), ("rowidx", "int32"), ("data", "float32")],
    "bcsr": [("bindptr", "int32"), ("bindices", "int32"), ("bdata", "float32")],
    "ell": [("soff", "int32"), ("col", "int32"), ("val", "float32")],
    "cpcsr": [("pptr", "int32"), ("indices", "int32"), ("data", "float32")],
}
_INTS = ("units", "rows_pad", "cols_pad", "slots", "npanels")


def _dense_operands(c: SuperSchedule) -> list[tuple[str, str]]:
    """(name, shape expression) of the dense inputs and the output, in call order."""
    d = c.dense
    if c.op == "spmv":
        return [("x", "(cols_pad,)"), ("y", "(rows_pad,)")]
    if c.op == "spmm":
        return [("B", f"(cols_pad, {d})"), ("C", f"(rows_pad, {d})")]
    return [("X", f"(rows_pad, {d})"), ("Y", f"(cols_pad, {d})"), ("out", "(slots,)")]


def kernel_args(c: SuperSchedule) -> list[str]:
    """Argument names in call order: format arrays, dense operands and output, then the sizes."""
    arrs = [n for n, _ in _FORMAT_ARRAYS[c.fmt]] + [n for n, _ in _dense_operands(c)]
    return arrs + [f"n_{n}" for n, _ in _FORMAT_ARRAYS[c.fmt]] + list(_INTS)


def _vec(c: SuperSchedule) -> str:
    return "T.vectorized" if c.vectorize else "T.serial"


def _header(e: _Emitter, c: SuperSchedule) -> None:
    arrs = _FORMAT_ARRAYS[c.fmt]
    dense = _dense_operands(c)
    handles = ", ".join(f"h_{n}: T.handle" for n, _ in arrs + [(n, "") for n, _ in dense])
    sizes = ", ".join(f"n_{n}: T.int32" for n, _ in arrs) + ", " + ", ".join(f"{n}: T.int32" for n in _INTS)
    e.lines.append("@T.prim_func")
    e.lines.append(f"def kernel({handles}, {sizes}):")
    e('T.func_attr({"global_symbol": "kernel", "tirx.noalias": True})')
    for n, dt in arrs:
        e(f'{n} = T.match_buffer(h_{n}, (n_{n},), "{dt}")')
    for n, shape in dense:
        e(f'{n} = T.match_buffer(h_{n}, {shape}, "float32")')


def _outer(e: _Emitter, c: SuperSchedule, extent: str, body: Any) -> None:
    """The unit loop: parallel over chunks of `chunk` units, or serial."""
    if c.parallel:
        t, r = e.fresh("t"), e.fresh("r")
        with (
            e.block(f"for {t} in T.parallel(T.ceildiv({extent}, {c.chunk})):"),
            e.block(f"for {r} in T.serial({c.chunk}):"),
            e.block(f"if {t} * {c.chunk} + {r} < {extent}:"),
        ):
            u = e.fresh("u")
            e(f"{u} = {t} * {c.chunk} + {r}")
            body(u)
    else:
        u = e.fresh("u")
        with e.block(f"for {u} in T.serial({extent}):"):
            body(u)


def _nnz_loop(e: _Emitter, start: str, length: str, unroll: int, lanes: int, vec: str, body: Any) -> None:
    """Positions start .. start+length, in groups of unroll x lanes (lanes innermost, `vec`),
    then a scalar remainder. `body(pos, lane)` emits one entry's work."""
    g = unroll * lanes
    if g == 1:
        k = e.fresh("k")
        with e.block(f"for {k} in T.serial({length}):"):
            body(f"({start} + {k})", "0")
        return
    ko, ku, kv, kr = e.fresh("ko"), e.fresh("ku"), e.fresh("kv"), e.fresh("kr")
    with e.block(f"for {ko} in T.serial(({length}) // {g}):"):
        loop_u = f"T.unroll({unroll})" if unroll > 1 else "T.serial(1)"
        with e.block(f"for {ku} in {loop_u}:"), e.block(f"for {kv} in {vec}({lanes}):"):
            body(f"({start} + ({ko} * {unroll} + {ku}) * {lanes} + {kv})", kv)
    with e.block(f"for {kr} in T.serial(({length}) % {g}):"):
        body(f"({start} + ({length}) // {g} * {g} + {kr})", "0")


def _zero(e: _Emitter, buf: str, size: int) -> None:
    z = e.fresh("z")
    with e.block(f"for {z} in T.serial({size}):"):
        e(f"{buf}[{z}] = T.float32(0)")


def _dense_loop(e: _Emitter, c: SuperSchedule, body: Any) -> None:
    jo, jv = e.fresh("jo"), e.fresh("jv")
    with e.block(f"for {jo} in T.serial({c.dense // c.vec}):"), e.block(f"for {jv} in {_vec(c)}({c.vec}):"):
        body(f"{jo} * {c.vec} + {jv}")


def _dot(e: _Emitter, c: SuperSchedule, row: str, col: str, acc: str, tot: str) -> str:
    """Emit dacc = X[row,:] . Y[col,:] into tot[0]; returns the expression of the dot product."""
    _zero(e, acc, c.vec)
    do, dv = e.fresh("do"), e.fresh("dv")
    with e.block(f"for {do} in T.serial({c.dense // c.vec}):"), e.block(f"for {dv} in {_vec(c)}({c.vec}):"):
        e(f"{acc}[{dv}] = {acc}[{dv}] + X[{row}, {do} * {c.vec} + {dv}] * Y[{col}, {do} * {c.vec} + {dv}]")
    e(f"{tot}[0] = T.float32(0)")
    z = e.fresh("z")
    with e.block(f"for {z} in T.serial({c.vec}):"):
        e(f"{tot}[0] = {tot}[0] + {acc}[{z}]")
    return f"{tot}[0]"


def _alloc(e: _Emitter, name: str, size: int) -> str:
    buf = e.fresh(name)
    e(f'{buf} = T.alloc_buffer(({size},), "float32", scope="local")')
    return buf


def _row_body(
    e: _Emitter, c: SuperSchedule, row: str, start: str, length: str, idx: str, val: str, accumulate: bool
) -> None:
    """One row of a row-wise format (csr, dcsr, cpcsr panel row) or one column of csc (SDDMM)."""
    vec = _vec(c)
    if c.op == "spmv":
        acc, tot = _alloc(e, "acc", c.vec), _alloc(e, "tot", 1)
        _zero(e, acc, c.vec)
        _nnz_loop(
            e,
            start,
            length,
            c.unroll,
            c.vec,
            vec,
            lambda p, lane: e(f"{acc}[{lane}] = {acc}[{lane}] + {val}[{p}] * x[{idx}[{p}]]"),
        )
        e(f"{tot}[0] = T.float32(0)")
        z = e.fresh("z")
        with e.block(f"for {z} in T.serial({c.vec}):"):
            e(f"{tot}[0] = {tot}[0] + {acc}[{z}]")
        e(f"y[{row}] = y[{row}] + {tot}[0]" if accumulate else f"y[{row}] = {tot}[0]")
    elif c.op == "spmm":
        _spmm_row(e, c, row, start, length, idx, val, accumulate)
    else:
        acc, tot = _alloc(e, "dacc", c.vec), _alloc(e, "tot", 1)
        other = idx

        def entry(p: str, _lane: str) -> None:
            if c.fmt == "csc":  # unit is a column: `row` is the column, idx[p] the row
                s = _dot(e, c, f"{other}[{p}]", row, acc, tot)
            else:
                s = _dot(e, c, row, f"{other}[{p}]", acc, tot)
            e(f"out[{p}] = {val}[{p}] * {s}")

        _nnz_loop(e, start, length, c.unroll, 1, "T.serial", entry)


def _spmm_row(
    e: _Emitter, c: SuperSchedule, row: str, start: str, length: str, idx: str, val: str, accumulate: bool
) -> None:
    store = "C[{r}, {j}] + {a}" if accumulate else "{a}"
    if c.order == "kj":
        acc = _alloc(e, "acc", c.dense)
        _zero(e, acc, c.dense)

        def entry(p: str, _lane: str) -> None:
            _dense_loop(e, c, lambda j: e(f"{acc}[{j}] = {acc}[{j}] + {val}[{p}] * B[{idx}[{p}], {j}]"))

        _nnz_loop(e, start, length, c.unroll, 1, "T.serial", entry)
        _dense_loop(e, c, lambda j: e(f"C[{row}, {j}] = " + store.format(r=row, j=j, a=f"{acc}[{j}]")))
        return
    acc = _alloc(e, "acc", c.vec)
    jo = e.fresh("jo")
    with e.block(f"for {jo} in T.serial({c.dense // c.vec}):"):
        _zero(e, acc, c.vec)

        def entry_jk(p: str, _lane: str) -> None:
            jv = e.fresh("jv")
            with e.block(f"for {jv} in {_vec(c)}({c.vec}):"):
                e(f"{acc}[{jv}] = {acc}[{jv}] + {val}[{p}] * B[{idx}[{p}], {jo} * {c.vec} + {jv}]")

        _nnz_loop(e, start, length, c.unroll, 1, "T.serial", entry_jk)
        jv = e.fresh("jv")
        with e.block(f"for {jv} in {_vec(c)}({c.vec}):"):
            j = f"{jo} * {c.vec} + {jv}"
            e(f"C[{row}, {j}] = " + store.format(r=row, j=j, a=f"{acc}[{jv}]"))


def _zero_output(e: _Emitter, c: SuperSchedule) -> None:
    """Formats that skip rows (dcsr) or accumulate over panels (cpcsr) start from a zero output."""
    loop = "T.parallel" if c.parallel else "T.serial"
    i = e.fresh("i")
    with e.block(f"for {i} in {loop}(rows_pad):"):
        if c.op == "spmv":
            e(f"y[{i}] = T.float32(0)")
        else:
            _dense_loop(e, c, lambda j: e(f"C[{i}, {j}] = T.float32(0)"))


def _rowwise(e: _Emitter, c: SuperSchedule) -> None:
    if c.fmt == "csr":

        def unit(u: str) -> None:
            s = e.fresh("s")
            e(f"{s} = indptr[{u}]")
            _row_body(e, c, u, s, f"indptr[{u} + 1] - {s}", "indices", "data", False)

        _outer(e, c, "units", unit)
    elif c.fmt == "dcsr":
        if c.op != "sddmm":
            _zero_output(e, c)

        def unit_d(u: str) -> None:
            s, i = e.fresh("s"), e.fresh("i")
            e(f"{s} = indptr[{u}]")
            e(f"{i} = rowids[{u}]")
            _row_body(e, c, i, s, f"indptr[{u} + 1] - {s}", "indices", "data", False)

        _outer(e, c, "units", unit_d)
    elif c.fmt == "csc":

        def unit_c(u: str) -> None:
            s = e.fresh("s")
            e(f"{s} = colptr[{u}]")
            _row_body(e, c, u, s, f"colptr[{u} + 1] - {s}", "rowidx", "data", False)

        _outer(e, c, "units", unit_c)
    else:  # cpcsr: panels outside (serial), rows inside
        if c.op != "sddmm":
            _zero_output(e, c)
        pn = e.fresh("pn")
        with e.block(f"for {pn} in T.serial(npanels):"):

            def unit_p(u: str) -> None:
                s = e.fresh("s")
                e(f"{s} = pptr[{pn} * units + {u}]")
                _row_body(e, c, u, s, f"pptr[{pn} * units + {u} + 1] - {s}", "indices", "data", c.op != "sddmm")

            _outer(e, c, "units", unit_p)


def _bcsr(e: _Emitter, c: SuperSchedule) -> None:
    R, Cb = c.br, c.bc

    def unit(u: str) -> None:
        acc = _alloc(e, "acc", R * (c.dense if c.op == "spmm" else 1)) if c.op != "sddmm" else ""
        dacc, tot = (_alloc(e, "dacc", c.vec), _alloc(e, "tot", 1)) if c.op == "sddmm" else ("", "")
        if acc:
            _zero(e, acc, R * (c.dense if c.op == "spmm" else 1))
        s = e.fresh("s")
        e(f"{s} = bindptr[{u}]")

        def block(p: str, _lane: str) -> None:
            cb, ii, jj = e.fresh("cb"), e.fresh("ii"), e.fresh("jj")
            e(f"{cb} = bindices[{p}]")
            with e.block(f"for {ii} in T.serial({R}):"), e.block(f"for {jj} in T.serial({Cb}):"):
                slot = f"({p} * {R} + {ii}) * {Cb} + {jj}"
                if c.op == "spmv":
                    e(f"{acc}[{ii}] = {acc}[{ii}] + bdata[{slot}] * x[{cb} * {Cb} + {jj}]")
                elif c.op == "spmm":
                    _dense_loop(
                        e,
                        c,
                        lambda j: e(
                            f"{acc}[{ii} * {c.dense} + {j}] = {acc}[{ii} * {c.dense} + {j}]"
                            f" + bdata[{slot}] * B[{cb} * {Cb} + {jj}, {j}]"
                        ),
                    )
                else:
                    d = _dot(e, c, f"{u} * {R} + {ii}", f"{cb} * {Cb} + {jj}", dacc, tot)
                    e(f"out[{slot}] = bdata[{slot}] * {d}")

        _nnz_loop(e, s, f"bindptr[{u} + 1] - {s}", c.unroll, 1, "T.serial", block)
        if c.op == "spmv":
            ii = e.fresh("ii")
            with e.block(f"for {ii} in T.serial({R}):"):
                e(f"y[{u} * {R} + {ii}] = {acc}[{ii}]")
        elif c.op == "spmm":
            ii = e.fresh("ii")
            with e.block(f"for {ii} in T.serial({R}):"):
                _dense_loop(e, c, lambda j: e(f"C[{u} * {R} + {ii}, {j}] = {acc}[{ii} * {c.dense} + {j}]"))

    _outer(e, c, "units", unit)


def _ell(e: _Emitter, c: SuperSchedule) -> None:
    S = c.slice

    def unit(u: str) -> None:
        acc = _alloc(e, "acc", S * (c.dense if c.op == "spmm" else 1)) if c.op != "sddmm" else ""
        dacc, tot = (_alloc(e, "dacc", c.vec), _alloc(e, "tot", 1)) if c.op == "sddmm" else ("", "")
        if acc:
            _zero(e, acc, S * (c.dense if c.op == "spmm" else 1))
        s = e.fresh("s")
        e(f"{s} = soff[{u}]")

        def column(kk: str, _lane: str) -> None:
            ii, p = e.fresh("ii"), e.fresh("p")
            with e.block(f"for {ii} in T.serial({S}):"):
                e(f"{p} = {s} + ({kk}) * {S} + {ii}")
                if c.op == "spmv":
                    e(f"{acc}[{ii}] = {acc}[{ii}] + val[{p}] * x[col[{p}]]")
                elif c.op == "spmm":
                    _dense_loop(
                        e,
                        c,
                        lambda j: e(
                            f"{acc}[{ii} * {c.dense} + {j}] = {acc}[{ii} * {c.dense} + {j}] + val[{p}] * B[col[{p}], {j}]"
                        ),
                    )
                else:
                    d = _dot(e, c, f"{u} * {S} + {ii}", f"col[{p}]", dacc, tot)
                    e(f"out[{p}] = val[{p}] * {d}")

        _nnz_loop(e, "0", f"(soff[{u} + 1] - {s}) // {S}", c.unroll, 1, "T.serial", column)
        if c.op != "sddmm":
            ii = e.fresh("ii")
            with e.block(f"for {ii} in T.serial({S}):"):
                if c.op == "spmv":
                    e(f"y[{u} * {S} + {ii}] = {acc}[{ii}]")
                else:
                    _dense_loop(e, c, lambda j: e(f"C[{u} * {S} + {ii}, {j}] = {acc}[{ii} * {c.dense} + {j}]"))

    _outer(e, c, "units", unit)


def kernel_source(c: SuperSchedule) -> str:
    """The TVMScript text of a configuration's kernel (the workload IR shown and stored)."""
    e = _Emitter()
    _header(e, c)
    if c.fmt == "bcsr":
        _bcsr(e, c)
    elif c.fmt == "ell":
        _ell(e, c)
    else:
        _rowwise(e, c)
    return "\n".join(e.lines) + "\n"


def host_target() -> Any:
    """LLVM for this CPU (detected mcpu), as the dense backend uses."""
    from autosearch.backends.tvm.target import host_target as _ht

    return _ht()


@dataclass
class Kernel:
    """A built kernel: `mod["kernel"](*args)` with the arrays and sizes named by `kernel_args`."""

    config: SuperSchedule
    source: str
    mod: Any  # tvm runtime Module (has time_evaluator)
    build_seconds: float


def _cache_dir() -> Path | None:
    """Where built kernels are kept between processes ($AUTOSEARCH_SPARSE_CACHE; '' disables)."""
    env = os.environ.get("AUTOSEARCH_SPARSE_CACHE")
    if env == "":
        return None
    return Path(env) if env else Path.home() / ".cache" / "autosearch" / "sparse-kernels"


def build_kernel(c: SuperSchedule, target: Any = None) -> Kernel:
    """Parse, compile (LLVM, host mcpu) and cache the kernel of `c` (in memory and on disk)."""
    import tvm

    target = target or host_target()
    key = (c.kernel_key, str(target))
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    src = kernel_source(c)
    digest = hashlib.sha256((src + str(target) + tvm.__version__).encode()).hexdigest()[:32]
    cdir = _cache_dir()
    path = cdir / f"{digest}.so" if cdir else None
    t0 = time.perf_counter()
    if path is not None and path.is_file():
        mod = tvm.runtime.load_module(str(path))
    else:
        from tvm.script import tirx as T

        func = tvm.script.from_source(src, extra_vars={"T": T})
        lib = tvm.compile(tvm.IRModule({"kernel": func}), target=target)
        mod = lib.mod
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp.so")
                lib.export_library(str(tmp))
                os.replace(tmp, path)
            except Exception:  # a cache that cannot be written only costs a rebuild next time
                pass
    k = Kernel(c, src, mod, time.perf_counter() - t0)
    with _LOCK:
        _CACHE[key] = k
    return k
