"""Workload tokens: the blocks of a workload's TVMScript text read without TVM.

Why: a trace alone does not name its operator, so the tokens of a candidate start with a few
tokens of the program itself (loop extents, axis kinds, op counts, dtypes), and the trace
compiler needs each block's loop extents and axis kinds to describe the loops a trace works on.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from autosearch.features.trace_tokens.columns import _COL, _KIND_COL, _WIDTH, FEATURE_WIDTH, MAX_WORKLOAD_TOKENS, _log2

__all__ = [
    "_Block",
    "parse_ir_blocks",
    "workload_tokens",
]

# -- workload tokens (IR text) ---------------------------------------------------------------------
_FOR_GRID = re.compile(r"^(\s*)for\s+(.+?)\s+in\s+T\.grid\((.*)\):\s*$")
_FOR_RANGE = re.compile(
    r"^(\s*)for\s+(\w+)\s+in\s+(?:T\.serial|T\.parallel|T\.vectorized|T\.unroll|range)\((.*)\):\s*$"
)
_BLOCK = re.compile(r"^(\s*)with\s+T\.sblock\(\"([^\"]+)\"\):\s*$")
_REMAP = re.compile(r"T\.axis\.remap\(\"([SR]+)\"")
_AXIS = re.compile(r"T\.axis\.(spatial|reduce)\(")
_DTYPE = re.compile(r"\"(float16|bfloat16|float32|float64|u?int(?:8|16|32|64)|bool)\"")
_MATH = re.compile(r"T\.(exp|exp2|log|log2|sqrt|rsqrt|tanh|sigmoid|pow|erf|fabs|floor|ceil|round)\(")


@dataclass
class _Block:
    name: str
    extents: list[int]
    spatial: int = 0
    reduce: int = 0
    mul: int = 0
    add: int = 0
    div: int = 0
    minmax: int = 0
    math: int = 0
    select: int = 0
    cast: int = 0
    reads: int = 0
    init: bool = False
    axes: str = ""  # S/R of each block axis, in order

    @property
    def iters(self) -> int:
        return math.prod(self.extents) if self.extents else 1


_TYPED_INT = re.compile(r"T\.u?int(?:8|16|32|64)\((-?\d+)\)")


def _int_args(text: str) -> list[int]:
    # Relax-legalised programs (every `tune-model` task) spell extents `T.int64(56)`: read the number.
    out = []
    for part in _TYPED_INT.sub(r"\1", text).split(","):
        part = part.strip()
        if not part:
            continue
        if ":" in part or "=" in part:  # T.grid(0:n) ranges / keyword args: take the last number
            part = part.replace("=", ":").split(":")[-1]
        try:
            out.append(int(part))
        except ValueError:
            out.append(0)  # a symbolic extent: unknown
    return out


def parse_ir_blocks(ir: str) -> list[_Block]:
    """The blocks of a TVMScript program: enclosing loop extents, axis kinds, op counts."""
    loops: list[tuple[int, list[int]]] = []  # (indent, extents) of the open `for` lines
    blocks: list[_Block] = []
    cur: _Block | None = None
    cur_indent = -1
    for line in ir.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if cur is not None and indent <= cur_indent:
            cur = None
        while loops and loops[-1][0] >= indent:
            loops.pop()
        if stripped.startswith("for "):
            m = _FOR_GRID.match(line)
            if m:
                loops.append((indent, _int_args(m.group(3))))
                continue
            m = _FOR_RANGE.match(line)
            if m:
                args = _int_args(m.group(3))
                loops.append((indent, [args[-1] - (args[0] if len(args) > 1 else 0)] if args else [0]))
                continue
        m = _BLOCK.match(line)
        if m:
            cur = _Block(m.group(2), [e for _, ext in loops for e in ext])
            cur_indent = indent
            blocks.append(cur)
            continue
        if cur is None:
            continue
        if "T.axis.remap(" in stripped:
            r = _REMAP.search(stripped)
            if r:
                cur.spatial += r.group(1).count("S")
                cur.reduce += r.group(1).count("R")
                cur.axes += r.group(1)
        elif "T.axis." in stripped:
            for a in _AXIS.findall(stripped):
                cur.spatial += a == "spatial"
                cur.reduce += a == "reduce"
                cur.axes += "S" if a == "spatial" else "R"
        elif stripped.startswith("T.reads("):
            cur.reads += len(re.findall(r"\w+\[", stripped)) or (0 if stripped == "T.reads()" else 1)
        elif stripped.startswith("with T.init()"):
            cur.init = True
        elif stripped.startswith(("T.writes(", "T.sblock_attr(", "T.where(")):
            continue
        else:  # a body statement: count its operations (the right-hand side)
            rhs = stripped.split(" = ", 1)[-1]
            cur.mul += rhs.count(" * ")
            cur.add += rhs.count(" + ") + rhs.count(" - ")
            cur.div += rhs.count(" / ") + rhs.count(" // ") + rhs.count(" % ")
            cur.minmax += rhs.count("T.max(") + rhs.count("T.min(")
            cur.math += len(_MATH.findall(rhs))
            cur.select += rhs.count("T.if_then_else(") + rhs.count("T.Select(")
            cur.cast += rhs.count("T.Cast(")
    return [b for b in blocks if b.name != "root"]


def workload_tokens(ir: str, flops: float | None = None, postproc: bool = True) -> np.ndarray:
    """Workload tokens of a program given as TVMScript text: (rows, FEATURE_WIDTH), or
    (rows, PREFIX_FEATURE_WIDTH) with `postproc=False` (for prefix tokens)."""
    return _workload_tokens(ir, flops)[:, : FEATURE_WIDTH if postproc else _WIDTH]


def _workload_tokens(ir: str, flops: float | None = None) -> np.ndarray:
    blocks = parse_ir_blocks(ir)
    keep = blocks
    if len(blocks) > MAX_WORKLOAD_TOKENS:
        biggest = sorted(range(len(blocks)), key=lambda i: (-blocks[i].iters, i))[:MAX_WORKLOAD_TOKENS]
        keep = [blocks[i] for i in sorted(biggest)]
    dtypes = set(_DTYPE.findall(ir))
    out = np.zeros((len(keep), _WIDTH), dtype=np.float32)
    c = _COL
    for r, b in enumerate(keep):
        row = out[r]
        row[_KIND_COL["workload"]] = 1.0
        for i, e in enumerate(b.extents[:6]):
            row[c[f"wl_extent{i}"]] = _log2(1 + e)
        if len(b.extents) > 6:
            row[c["wl_extent_rest"]] = _log2(1 + math.prod(b.extents[6:]))
        row[c["wl_n_spatial"]], row[c["wl_n_reduce"]] = b.spatial, b.reduce
        row[c["wl_iters"]] = _log2(1 + b.iters)
        row[c["wl_op_mul"]], row[c["wl_op_add"]], row[c["wl_op_div"]] = b.mul, b.add, b.div
        row[c["wl_op_minmax"]], row[c["wl_op_math"]], row[c["wl_op_select"]] = b.minmax, b.math, min(b.select, 4)
        row[c["wl_op_cast"]], row[c["wl_n_reads"]], row[c["wl_init"]] = b.cast, b.reads, float(b.init)
        row[c["wl_index"]] = blocks.index(b) / max(len(blocks), 1)
        row[c["wl_n_blocks"]] = _log2(1 + len(blocks))
        row[c["wl_flops"]] = _log2(1 + flops) / 10.0 if flops else 0.0
        row[c["wl_f32"]] = float("float32" in dtypes)
        row[c["wl_f16"]] = float(bool(dtypes & {"float16", "bfloat16"}))
        row[c["wl_int"]] = float(any(d.startswith(("int", "uint")) for d in dtypes))
        row[c["wl_f64"]] = float("float64" in dtypes)
    return out
