"""A network's dense layers and convolutions in bf16: each matmul by a constant weight and each
blocked convolution computes on bf16 operands with fp32 sums, its weight packed once for the CPU's
`vdpbf16ps`.

Why these layers: in a transformer they are nearly all the arithmetic (BERT-base: 22 of its 22.5
GFLOP), and they are what OpenVINO runs in bf16 by default on a CPU with AVX512_BF16. Everything
else (softmax, layer norms, GELU, residual adds) stays fp32, as OpenVINO's bf16 mode also keeps
its normalisations in fp32; the attention's matmuls of two activations stay fp32 too (no constant
to pack, and 2% of BERT's arithmetic).

How: after the weights are bound and folded, `relax.matmul(x, W)` with `W` a constant (K, N)
becomes a reshape of `x` to rows, a cast to bf16 (fused into the operator before it), the packed
dense kernel (`workloads.lowp.packed_dense`, the registry's `...@bf16` workloads' computation,
with the network's int64 extents), and a reshape back. A weight whose sizes the packing does not divide (N
not a multiple of 16, K odd) stays fp32. The reshapes keep the bias add out of the dense task
(FuseOps fuses elementwise operators, not a reshape, after it): one of the next steps.

Convolutions: after `layouts` has blocked them, a `conv2d` of NCHW{b}c data into NCHW16c by a
constant weight (one group) becomes a cast of its input to bf16 and the packed convolution
(`workloads.lowp.packed_conv2d_nchwc`: the weight rounded to bf16 in the layout where each window
position's 16 outputs x 2 input channels are one `vdpbf16ps` operand); its bias, activation and
residual add fuse after it as after the fp32 one. The RGB stem (NCHW input), depthwise and
grouped convolutions, and an output block other than 16 stay fp32: the stem and depthwise ones
have no channel sum for the instruction to pair.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosearch.networks.layouts import blocked_float_conv, padded_window
from autosearch.networks.rewrite import rewrite_calls, static_shape
from autosearch.workloads.lowp import pack_conv_weight, pack_weight, packed_conv2d_nchwc, packed_dense

__all__ = ["bf16_convolutions", "bf16_dense_layers"]

#: Products each output lane of `vdpbf16ps` sums (the packing's inner width), and its lanes.
_PAIRS = 2
_LANES = 16


def _packed_bf16(weight_kn: np.ndarray) -> np.ndarray:
    """A (K, N) float32 weight rounded to bf16 (to nearest even) in the packing (N/16, K/2, 16, 2)."""
    import ml_dtypes

    return pack_weight(np.ascontiguousarray(weight_kn.T).astype(ml_dtypes.bfloat16), _PAIRS)


def _te_packed_dense(data: Any, weight: Any) -> Any:
    return packed_dense(data, weight, "float32")


def bf16_dense_layers(mod: Any) -> tuple[Any, int]:
    """`mod` with every float32 matmul by a constant weight computed in bf16; and how many."""
    import tvm
    from tvm import relax

    count = [0]

    def bf16_dense(call: Any, builder: Any) -> Any:
        x, w = call.args
        if not isinstance(w, tvm.ir.expr.Constant):
            return None
        xdims, wdims = static_shape(x), static_shape(w)
        if xdims is None or wdims is None or len(wdims) != 2 or len(xdims) < 2:
            return None
        if str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32":
            return None
        k, n = wdims
        if xdims[-1] != k or n % _LANES or k % _PAIRS:
            return None
        rows = int(np.prod(xdims[:-1]))
        packed = relax.const(tvm.runtime.tensor(_packed_bf16(w.value.numpy())))
        x2 = builder.emit(relax.op.reshape(x, [rows, k]))
        xb = builder.emit(relax.op.astype(x2, "bfloat16"))
        y = builder.emit_te(_te_packed_dense, xb, packed, primfunc_name_hint="dense_packed_bf16")
        count[0] += 1
        return relax.op.reshape(y, [*xdims[:-1], n])

    out = rewrite_calls(mod, "relax.matmul", bf16_dense)
    return out, count[0]


def _te_packed_conv(data: Any, weight: Any, strides: list[int], padding: list[int], dilation: list[int]) -> Any:
    kh, kw = int(weight.shape[2]), int(weight.shape[3])
    padded, oh, ow = padded_window(data, padding, (kh, kw), strides, dilation)
    return packed_conv2d_nchwc(padded, weight, (oh, ow), strides, dilation, "float32")


def bf16_convolutions(mod: Any) -> tuple[Any, int]:
    """`mod` with every blocked float32 `conv2d` (one group, NCHW{b}c in, NCHW16c out, a constant
    OIHW16o weight) computed in bf16 by the packed convolution; and how many."""
    import ml_dtypes
    import tvm
    from tvm import relax

    count = [0]

    def bf16_conv(call: Any, builder: Any) -> Any:
        x, w = call.args
        a = call.attrs
        blocks = blocked_float_conv(call)
        if blocks is None or blocks[0] % _PAIRS or blocks[1] != _LANES:
            return None
        in_block = blocks[0]
        weight = w.value.numpy()
        if weight.shape[1] % in_block:
            return None
        packed = pack_conv_weight(weight.astype(ml_dtypes.bfloat16), in_block, _PAIRS)
        xb = builder.emit(relax.op.astype(x, "bfloat16"))
        geometry = [[int(v) for v in values] for values in (a.strides, a.padding, a.dilation)]
        count[0] += 1
        return builder.emit_te(
            _te_packed_conv,
            xb,
            relax.const(tvm.runtime.tensor(packed)),
            *geometry,
            primfunc_name_hint="conv2d_NCHWc_bf16",
        )

    out = rewrite_calls(mod, "relax.nn.conv2d", bf16_conv)
    return out, count[0]
