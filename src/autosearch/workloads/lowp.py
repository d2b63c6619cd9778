"""The low-precision counterpart of a dense workload: operands in bf16 or int8, weights packed for
the CPU's dot-product instructions, sums in fp32 or int32.

Why packed: `vdpbf16ps` multiplies pairs of bf16 values and `vpdpbusd` quadruples of int8 ones,
16 outputs at a time, so the weight is stored as (N/16, K/pairs, 16, pairs): the 16 x pairs block
one instruction reads is contiguous. This is the layout the network build packs constant weights
in once; the design space (backends/tvm/lowp.py) tiles the loops around the instruction.

A low-precision workload's name is its fp32 workload's name with `@bf16` or `@int8` appended, so
that the registry resolves it again from a record.
"""

from __future__ import annotations

import functools
from typing import Any

from autosearch.errors import WorkloadError
from autosearch.workloads.base import Workload

__all__ = [
    "LOW_PRECISIONS",
    "pack_conv_weight",
    "pack_weight",
    "packed_conv2d_nchwc",
    "packed_dense",
    "split_precision",
    "with_precision",
]

#: Precision -> (operand dtypes (data, weight), accumulator dtype, products per output lane).
LOW_PRECISIONS: dict[str, tuple[tuple[str, str], str, int]] = {
    "bf16": (("bfloat16", "bfloat16"), "float32", 2),
    "int8": (("uint8", "int8"), "int32", 4),
}


def split_precision(name: str) -> tuple[str, str | None]:
    """`bert/dense/128x768/768@bf16` -> (`bert/dense/128x768/768`, `bf16`); no suffix -> None."""
    base, sep, prec = name.rpartition("@")
    if sep and prec in LOW_PRECISIONS:
        return base, prec
    return name, None


def pack_weight(weight_nk: Any, pairs: int) -> Any:
    """A weight N x K (a NumPy array in its precision) in the packing (N/16, K/pairs, 16, pairs)."""
    import numpy as np

    n, k = weight_nk.shape
    return np.ascontiguousarray(weight_nk.reshape(n // 16, 16, k // pairs, pairs).transpose(0, 2, 1, 3))


def packed_dense(data: Any, weight: Any, accumulate: str) -> Any:
    """The packed dense layer on TE tensors: data (M, K) times weight (N/16, K/pairs, 16, pairs)
    -> (M, N), summed in `accumulate` (the registry's workloads and a network's layers alike).
    Data of more axes (..., K) gives (..., N): a network's int8 layer keeps its input's shape, so
    that the bias and activation after it fuse into its task (a reshape to rows ends the fusion)."""
    from tvm import te

    pairs = int(weight.shape[3])
    k = data.shape[-1]
    r = te.reduce_axis((0, k), name="k")

    def product(row: Any, j: Any) -> Any:
        return data[(*row, r)].astype(accumulate) * weight[j // 16, r // pairs, j % 16, r % pairs].astype(accumulate)

    out = (*data.shape[:-1], weight.shape[0] * 16)
    if len(data.shape) == 2:  # named i, j: the registry's and bf16's tasks keep the IR their records were stored with
        return te.compute(out, lambda i, j: te.sum(product((i,), j), axis=r), name="dense_packed")
    return te.compute(out, lambda *ij: te.sum(product(ij[:-1], ij[-1]), axis=r), name="dense_packed")


def pack_conv_weight(weight_oihwo: Any, in_block: int, pairs: int) -> Any:
    """A blocked convolution weight OIHW16o `(C_out/16, C_in, KH, KW, 16)` (a NumPy array in its
    precision) in the packing `(C_out/16, C_in/in_block, KH, KW, in_block/pairs, 16, pairs)`: for
    one output block, window position and input block, the 16 x pairs values one instruction reads
    are contiguous, as in `pack_weight`."""
    import numpy as np

    out_chunks, channels, kh, kw, lanes = weight_oihwo.shape
    w = weight_oihwo.reshape(out_chunks, channels // in_block, in_block // pairs, pairs, kh, kw, lanes)
    return np.ascontiguousarray(w.transpose(0, 1, 4, 5, 2, 6, 3))


def packed_conv2d_nchwc(
    padded: Any,
    weight: Any,
    out_size: tuple[int, int],
    strides: Any,
    dilation: Any,
    accumulate: str,
    groups: int = 1,
) -> Any:
    """A convolution of zero-padded NCHW{b}c data with a weight in `pack_conv_weight`'s packing
    into NCHW16c of `out_size` (height, width), summed in `accumulate`. The two innermost loops
    (16 output lanes, `pairs` input channels) are the dot-product instruction's. With `groups`,
    each group's channels are whole blocks (the weight holds one group's input blocks): output
    block `k` reads the input blocks of its group, as `layouts.grouped_nchwc` does in float32."""
    from tvm import te

    n = int(padded.shape[0])
    out_chunks, in_chunks, kh, kw, steps, lanes, pairs = (int(v) for v in weight.shape)
    block = steps * pairs
    out_per_group = out_chunks // groups
    (sh, sw), (dh, dw) = ([int(v) for v in strides], [int(v) for v in dilation])
    rc = te.reduce_axis((0, in_chunks), name="rc")
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    rp, rq = te.reduce_axis((0, block // pairs), name="rp"), te.reduce_axis((0, pairs), name="rq")

    def chunk(k: Any) -> Any:
        return rc if groups == 1 else k // out_per_group * in_chunks + rc

    return te.compute(
        (n, out_chunks, *out_size, lanes),
        lambda b, k, y, x, o: te.sum(
            (
                padded[b, chunk(k), y * sh + ry * dh, x * sw + rx * dw, rp, rq]
                if len(padded.shape) == 6  # the channel block split into (steps, pairs): `conv_operand`
                else padded[b, chunk(k), y * sh + ry * dh, x * sw + rx * dw, rp * pairs + rq]
            ).astype(accumulate)
            * weight[k, rc, ry, rx, rp, o, rq].astype(accumulate),
            axis=[rc, ry, rx, rp, rq],
        ),
        name="conv2d_NCHWc_packed",
    )


def _build_packed_dense(M: int, K: int, N: int, precision: str) -> Any:
    from tvm import te

    (a_dtype, w_dtype), acc, pairs = LOW_PRECISIONS[precision]
    data = te.placeholder((M, K), a_dtype, name="data")
    weight = te.placeholder((N // 16, K // pairs, 16, pairs), w_dtype, name="weight_packed")
    return te.create_prim_func([data, weight, packed_dense(data, weight, acc)])


def with_precision(wl: Any, precision: str) -> Any:
    """`wl` computed in `precision` (fp32: `wl` itself); refused in one line where `wl` is not a
    dense layer whose sizes the packed layout divides."""
    if precision == "fp32":
        return wl
    if precision not in LOW_PRECISIONS:
        raise WorkloadError(f"unknown precision {precision!r}: choose one of fp32, {', '.join(LOW_PRECISIONS)}")
    params = getattr(wl, "params", {}) or {}
    if params.get("op") != "dense":
        raise WorkloadError(
            f"--precision {precision} covers dense layers (registry op 'dense', e.g. bert/dense/128x768/768); "
            f"{wl.name} is {params.get('op') or 'not a registry operator'}"
        )
    M, K, N = int(params["M"]), int(params["K"]), int(params["N"])
    pairs = LOW_PRECISIONS[precision][2]
    if N % 16 or K % pairs:
        raise WorkloadError(
            f"--precision {precision} packs weights in blocks of 16 outputs x {pairs} inputs; "
            f"{wl.name} has N={N}, K={K}"
        )
    return Workload(
        name=f"{wl.name}@{precision}",
        family=f"{wl.family}@{precision}",
        params={"op": f"dense_{precision}", "M": M, "K": K, "N": N},
        _builder=functools.partial(_build_packed_dense, M, K, N, precision),
        description=f"dense {M}x{K} times weight {N}x{K} in {precision}, weight packed (N/16, K/{pairs}, 16, {pairs})",
    )
