"""A network's dense layers and convolutions in bf16, and in int8 (at the end):
each matmul by a constant weight and each blocked convolution computes on bf16 operands with fp32
sums, its weight packed once for the CPU's `vdpbf16ps`.

Why these layers: in a transformer they are nearly all the arithmetic (BERT-base: 22 of its 22.5
GFLOP), and they are what OpenVINO runs in bf16 by default on a CPU with AVX512_BF16. Everything
else (softmax, layer norms, GELU, residual adds) stays fp32, as OpenVINO's bf16 mode also keeps
its normalisations in fp32. The attention's matmuls of two activations stay fp32 (2% of BERT's
arithmetic) except on AMX tiles (`bf16_attention_matmuls`), where fp32 would be a tenth of the
tiles' rate.

How: after the weights are bound and folded, `relax.matmul(x, W)` with `W` a constant (K, N)
becomes a cast of `x` to bf16 (fused into the operator before it) and the packed dense kernel
(`workloads.lowp.packed_dense`, the registry's `...@bf16` workloads' computation, with the
network's int64 extents): on AMX tiles on `x`'s own shape, so that the bias, the activation and
the next layer's cast fuse after it; with `vdpbf16ps` on `x` reshaped to rows and back (the
reshapes keep the bias add out of the dense task). A weight whose sizes the packing does not
divide (N not a multiple of 16, K odd) stays fp32.

Convolutions: after `layouts` has blocked them, a `conv2d` of NCHW{b}c data into NCHW16c by a
constant weight (one group) becomes a cast of its input to bf16 and the packed convolution
(`workloads.lowp.packed_conv2d_nchwc`: the weight rounded to bf16 in the layout where each window
position's 16 outputs x 2 input channels are one `vdpbf16ps` operand); its bias, activation and
residual add fuse after it as after the fp32 one. The RGB stem (NCHW input), depthwise and
grouped convolutions, and an output block other than 16 stay fp32: the stem and depthwise ones
have no channel sum for the instruction to pair.

int8 (`int8_layers`): the same convolutions, grouped ones whose groups are whole 16-channel blocks
too, and dense layers on uint8 activations (one scale and
zero point a tensor, from `calibration`'s ranges) and int8 weights (one scale an output channel),
int32 sums by `vpdpbusd`, and the RGB stem too, its 3 channels padded to a quadruple; a depthwise
convolution reads its input as uint8 and sums in float32 (no channel sum for `vpdpbusd` to pair:
what it saves is three quarters of the bytes it reads and its producer writes); docs/networks.md "Convolutions and dense layers in int8" says how the
zero point and the readers of a quantized tensor are handled.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosearch.backends.tvm.lowp import TILE_DEPTH, TILE_ROWS
from autosearch.networks.layouts import (
    blocked_float_conv,
    blocked_float_grouped_conv,
    conv_geometry,
    depthwise_nchwc,
    float_conv_by_constant,
    layout_block,
    padded_window,
)
from autosearch.networks.rewrite import rewrite_calls, static_shape
from autosearch.workloads.lowp import pack_conv_weight, pack_weight, packed_conv2d_nchwc, packed_dense

__all__ = [
    "activation_quantization",
    "bf16_attention_matmuls",
    "bf16_convolutions",
    "bf16_dense_layers",
    "int8_candidate",
    "int8_layers",
    "weight_quantization",
]

#: Products each output lane of `vdpbf16ps` sums (the packing's inner width), and its lanes.
_PAIRS = 2
_LANES = 16


def _packed_bf16(weight_kn: np.ndarray) -> np.ndarray:
    """A (K, N) float32 weight rounded to bf16 (to nearest even) in the packing (N/16, K/2, 16, 2)."""
    import ml_dtypes

    return pack_weight(np.ascontiguousarray(weight_kn.T).astype(ml_dtypes.bfloat16), _PAIRS)


def _te_packed_dense(data: Any, weight: Any) -> Any:
    return packed_dense(data, weight, "float32")


def _te_packed_dense_int8(data: Any, weight: Any) -> Any:
    return packed_dense(data, weight, "int32")


def _packable_matmul(call: Any, depth: int) -> tuple[tuple[int, ...], int, int] | None:
    """(the input's shape, K, N) of a float32 `matmul` of an input (..., K) by a constant (K, N)
    weight that the dot-product packing divides (N by 16 lanes, K by `depth`); None for any other."""
    import tvm

    if str(getattr(call.op, "name", "")) != "relax.matmul":
        return None
    x, w = call.args
    if not isinstance(w, tvm.ir.expr.Constant):
        return None
    xdims, wdims = static_shape(x), static_shape(w)
    if xdims is None or wdims is None or len(wdims) != 2 or len(xdims) < 2:
        return None
    if str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32":
        return None
    k, n = wdims
    if xdims[-1] != k or n % _LANES or k % depth:
        return None
    return xdims, k, n


def bf16_dense_layers(mod: Any, on_tiles: bool = False) -> tuple[Any, int]:
    """`mod` with every float32 matmul by a constant weight computed in bf16; and how many. On AMX
    tiles (`on_tiles`) on the input's own shape; else reshaped to rows and back, the form measured
    with `vdpbf16ps` (on a Zen 4 and 5; the other form was not measured there)."""
    import tvm
    from tvm import relax

    count = [0]

    def bf16_dense(call: Any, builder: Any) -> Any:
        shape = _packable_matmul(call, _PAIRS)
        if shape is None:
            return None
        x, w = call.args
        xdims, k, n = shape
        packed = relax.const(tvm.runtime.tensor(_packed_bf16(w.value.numpy())))
        count[0] += 1
        if on_tiles:
            # on the input's own shape, not reshaped to rows: the bias, the activation and the next
            # layer's cast fuse after it into its task (BERT-base's bias + GELU ran as a task of its
            # own, 1.1 ms of 25 on AMX tiles, behind a reshape that ended the fusion)
            xb = builder.emit(relax.op.astype(x, "bfloat16"))
            return builder.emit_te(_te_packed_dense, xb, packed, primfunc_name_hint="dense_packed_bf16")
        x2 = builder.emit(relax.op.reshape(x, [int(np.prod(xdims[:-1])), k]))
        xb = builder.emit(relax.op.astype(x2, "bfloat16"))
        y = builder.emit_te(_te_packed_dense, xb, packed, primfunc_name_hint="dense_packed_bf16")
        return relax.op.reshape(y, [*xdims[:-1], n])

    out = rewrite_calls(mod, "relax.matmul", bf16_dense)
    return out, count[0]


def _te_packed_batch_dense(data: Any, weight: Any) -> Any:
    """`packed_dense` with a weight of its own for each batch: data (..., M, K) by weight
    (..., N/16, K/2, 16, 2) -> (..., M, N) float32, a block named as the dense layers' so that the
    same tile kernel takes it."""
    from tvm import te

    k = data.shape[-1]
    r = te.reduce_axis((0, k), name="k")
    out = (*data.shape[:-1], weight.shape[-4] * 16)

    def product(*idx: Any) -> Any:
        *b, i, j = idx
        w = weight[(*b, j // 16, r // _PAIRS, j % 16, r % _PAIRS)]
        return te.sum(data[(*b, i, r)].astype("float32") * w.astype("float32"), axis=r)

    return te.compute(out, product, name="dense_packed")


def _te_bf16_pairs(y: Any) -> Any:
    """y (..., K, N) float32 -> (..., N/16, K/2, 16) uint32, each word the bf16 of y[..., 2k, n]
    (low half) and of y[..., 2k + 1, n] (high half), rounded to nearest even as TVM's own cast
    rounds (NaNs aside): the packed layout (..., N/16, K/2, 16, 2) as whole 32-bit lanes, viewed as
    bf16 after it.

    Why words: written as bf16 pairs the innermost loop interleaves two rows lane by lane, and
    the vectorized loop gathered every lane; as words each lane reads one element of each row, 16
    contiguous lanes a row. BERT-base's value packing ran 79 us a call in the network before, 20
    after (Intel `rocketlake`, bench/README.md "BERT-base on AMX tiles"); the keys' packing, a
    transpose either way, 45 -> 41."""
    from tvm import te, tirx

    *batch, _, n = y.shape

    def rounded(x: Any) -> Any:
        """x's bits with half a bf16 step added, ties to even: its bf16 in the high half."""
        bits = tirx.reinterpret("uint32", x)
        one = tirx.const(1, "uint32")
        return bits + ((bits >> tirx.const(16, "uint32")) & one) + tirx.const(0x7FFF, "uint32")

    def word(*idx: Any) -> Any:
        *b, col, k2, lane = idx
        j = col * _LANES + lane
        low = rounded(y[(*b, k2 * _PAIRS, j)]) >> tirx.const(16, "uint32")
        return low | (rounded(y[(*b, k2 * _PAIRS + 1, j)]) & tirx.const(0xFFFF0000, "uint32"))

    return te.compute((*batch, n // _LANES, y.shape[-2] // _PAIRS, _LANES), word, name="bf16_pairs")


def bf16_attention_matmuls(mod: Any) -> tuple[Any, int]:
    """`mod` with every float32 matmul of two activations (an attention's scores and its weighted
    sum) on bf16 operands, the right one packed as the dense layers' weights are, each call, where
    the tiles divide it (rows and columns by 16; the sum is padded with zeros to a multiple of 32
    where that adds at most a quarter); and how many. For a target with
    AMX tiles only: with `vdpbf16ps` the packing would cost about what the halved arithmetic saves."""
    import tvm
    from tvm import relax

    count = [0]

    def packed(call: Any, builder: Any) -> Any:
        x, y = call.args
        if isinstance(x, tvm.ir.expr.Constant) or isinstance(y, tvm.ir.expr.Constant):
            return None
        xdims, ydims = static_shape(x), static_shape(y)
        if xdims is None or ydims is None or len(xdims) < 3 or len(xdims) != len(ydims):
            return None
        if str(x.ty.dtype) != "float32" or str(y.ty.dtype) != "float32" or xdims[:-2] != ydims[:-2]:
            return None
        (m, k), (k2, n) = xdims[-2:], ydims[-2:]
        depth = -(-k // TILE_DEPTH) * TILE_DEPTH  # the sum in whole tile steps, zeros after it
        if k != k2 or m % TILE_ROWS or n % _LANES or depth - k > k // 4:
            return None
        batch = list(xdims[:-2])
        if depth != k:  # ViT-base's weighted sum over 197 tokens: 224
            rank = len(xdims)
            x = builder.emit(relax.op.nn.pad(x, [0] * (2 * rank - 1) + [depth - k]))
            y = builder.emit(relax.op.nn.pad(y, [0] * (2 * rank - 3) + [depth - k, 0, 0]))
            k = depth
        pairs = builder.emit_te(_te_bf16_pairs, y, primfunc_name_hint="bf16_pairs")
        w = builder.emit(relax.op.memory.view(pairs, [*batch, n // _LANES, k // _PAIRS, _LANES, _PAIRS], "bfloat16"))
        xb = builder.emit(relax.op.astype(x, "bfloat16"))
        count[0] += 1
        return builder.emit_te(_te_packed_batch_dense, xb, w, primfunc_name_hint="attention_packed_bf16")

    out = rewrite_calls(mod, "relax.matmul", packed)
    return out, count[0]


def _channel_steps(builder: Any, x: Any, in_block: int, depth: int) -> Any:
    """NCHW{b}c `x` viewed as (N, C/b, H, W, b/depth, depth): the operand layout of the
    channel-block kernel the packed convolution is tensorized with (`backends.tvm.lowp.kernel_of`)."""
    from tvm import relax

    return builder.emit(relax.op.reshape(x, [*x.ty.shape.values[:4], in_block // depth, depth]))


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
        xb = _channel_steps(builder, builder.emit(relax.op.astype(x, "bfloat16")), in_block, _PAIRS)
        geometry = conv_geometry(a)
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


#: Products each output lane of `vpdpbusd` sums: four u8 x i8 pairs into one int32.
_QUADS = 4
#: The largest magnitude of a symmetric int8 weight: -127..127, so that negating one never overflows.
_WEIGHT_MAX = 127.0
_U8_MAX = 255.0


def int8_candidate(call: Any) -> bool:
    """Whether `lowp` computes this call in int8: a `conv2d` with NCHW{b}c input with whole
    quadruples of channels in a block, NCHW16c output and a constant weight, of one group or of
    groups whose channels are whole blocks (RegNet's groups of 64), a blocked depthwise one
    (`_blocked_depthwise`: uint8 input, float32 sums), or an RGB stem (`_stem_block`); or a
    `matmul` by a constant weight the packing divides (`_packable_matmul`)."""
    op = str(getattr(call.op, "name", ""))
    if op == "relax.matmul":
        return _packable_matmul(call, _QUADS) is not None
    if op != "relax.nn.conv2d":
        return False
    if _blocked_depthwise(call):
        return True
    blocks = blocked_float_grouped_conv(call)
    if blocks is None:
        return _stem_block(call) is not None
    if blocks[0] % _QUADS or blocks[1] != _LANES:
        return False
    out_chunks, group_in = (int(v) for v in call.args[1].value.shape[:2])
    return group_in % blocks[0] == 0 and out_chunks % int(call.attrs.groups) == 0


def _blocked_depthwise(call: Any) -> bool:
    """Whether a `conv2d` is depthwise on NCHW{b}c data by a constant float32 weight: int8 reads its
    input as uint8 (a quarter of the bytes) and sums in float32 (`int8_layers`)."""
    blocks = blocked_float_grouped_conv(call)
    if blocks is None or blocks[0] != blocks[1]:
        return False
    chunks, per_group = (int(v) for v in call.args[1].value.shape[:2])
    return per_group == 1 and int(call.attrs.groups) == chunks * blocks[0]


def _stem_block(call: Any) -> int | None:
    """The channel block an RGB stem reads in int8: its channels padded to whole quadruples, where
    the call is a one-group float32 `conv2d` of NCHW data with under 16 channels (no register block
    divides them, so `layouts` left its input NCHW) into NCHW16c by a constant weight; else None.
    The stem is the costliest layer fp32 leaves in an int8 ResNet-18 (1.18 of 5.68 ms)."""
    a = call.attrs
    if int(a.groups) != 1 or str(a.data_layout) != "NCHW" or not float_conv_by_constant(call):
        return None
    if (
        layout_block(str(a.out_layout), "NCHW", "c") != _LANES
        or layout_block(str(a.kernel_layout), "OIHW", "o") != _LANES
    ):
        return None
    channels = int(call.args[1].ty.shape.values[1])
    return -(-channels // _QUADS) * _QUADS if channels < _LANES else None


def _te_channel_block(data: Any, block: int) -> Any:
    """NCHW `data` of under `block` channels as NCHW{block}c, the channels past its own zero (the
    padded weight's are zero too, so their products add nothing)."""
    from tvm import te

    n, channels, height, width = (int(v) for v in data.shape)
    return te.compute(
        (n, 1, height, width, block),
        lambda b, c, y, x, i: te.if_then_else(i < channels, data[b, i, y, x], te.const(0, data.dtype)),
        name="nchw_to_nchwc",
    )


def activation_quantization(lo: float, hi: float) -> tuple[float, int]:
    """(scale, zero point) mapping [lo, hi] (widened to hold 0, so that zero padding is exact) onto
    uint8's 0..255: a non-negative input (after a ReLU) uses all 256 steps from 0."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi - lo <= 0.0:
        return 1.0, 0
    scale = (hi - lo) / _U8_MAX
    return scale, int(min(_U8_MAX, max(0.0, round(-lo / scale))))


def weight_quantization(weight_oihwo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A blocked OIHW16o float32 weight as int8 with one scale an output channel (its largest
    magnitude / 127): (the int8 weight, the scales in the shape (C_out/16, 16))."""
    return _per_channel_int8(weight_oihwo, (1, 2, 3))


def _per_channel_int8(weight: np.ndarray, within: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """`weight` as int8 with one scale (largest magnitude / 127) over each slice along the axes
    `within` (an output channel's weights): (the int8 weight, the scales, those axes dropped)."""
    peak = np.abs(weight).max(axis=within)
    scale = np.where(peak > 0, peak / _WEIGHT_MAX, 1.0).astype(np.float64)
    q = np.clip(np.round(weight / np.expand_dims(scale, within)), -_WEIGHT_MAX, _WEIGHT_MAX)
    return q.astype(np.int8), scale


def _te_packed_conv_int8(
    data: Any,
    weight: Any,
    strides: list[int],
    padding: list[int],
    dilation: list[int],
    zero_point: int,
    groups: int,
) -> Any:
    kh, kw = int(weight.shape[2]), int(weight.shape[3])
    padded, oh, ow = padded_window(data, padding, (kh, kw), strides, dilation, pad_value=zero_point)
    return packed_conv2d_nchwc(padded, weight, (oh, ow), strides, dilation, "int32", groups)


def int8_layers(mod: Any, ranges: list[tuple[float, float]]) -> tuple[Any, int]:
    """`mod` with every `int8_candidate` convolution and dense layer computed in int8 (`ranges`:
    its input's calibrated (smallest, largest) value, in the order `calibration.input_ranges`
    gave); and how many.

    Each becomes: its input quantized to uint8 (scale and zero point from its range; a cast fused
    into the operator before it), the packed convolution or dense layer of u8 x i8 products summed
    in int32 (`vpdpbusd`; a convolution's padding holds the zero point), the zero point's share
    subtracted (the zero point times the weight's sum over each output channel, a constant) and
    the sum scaled back to float32 per output channel; bias, activation and residual add fuse
    after it as before (a dense layer keeps its input's shape: no reshape to rows ends the fusion
    as in bf16). Any other operator reading a quantized input after its quantization reads it
    dequantized (`read_dequantized`)."""
    import tvm
    from tvm import relax

    count = [0]
    quantized: dict[Any, Any] = {}  # an input two layers read (a ResNet block's, attention's) is quantized once
    scales: dict[Any, tuple[tuple[int, ...], float, int]] = {}
    dequantized: dict[Any, Any] = {}

    def read_dequantized(call: Any, builder: Any) -> Any:
        """`call` reading, for each quantized input among its arguments, the value its uint8 copy
        holds (a ResNet block's residual add): the tensor's producer then writes only the uint8
        copy, and the reader reads a quarter of the bytes, as a QDQ model's quantized add does."""
        if call.ty_args or not any(a in quantized for a in call.args):
            return None
        args = []
        for a in call.args:
            if a in quantized and a not in dequantized:
                lanes, scale, zero_point = scales[a]
                wide = relax.op.astype(quantized[a], "float32")
                centred = relax.op.subtract(wide, relax.const(np.full(lanes, zero_point, dtype=np.float32)))
                dequantized[a] = builder.emit(
                    relax.op.multiply(centred, relax.const(np.full(lanes, scale, np.float32)))
                )
            args.append(dequantized.get(a, a))
        return relax.Call(call.op, args, call.attrs)

    def quantize(x: Any, builder: Any) -> int:
        """`x`'s uint8 copy, made once (`quantized[x]`) with the range of its first reader's
        observer (every int8 layer has one, a shared input's readers alike); its zero point."""
        count[0] += 1
        if x not in quantized:
            x_scale, zero_point = activation_quantization(*ranges[count[0] - 1])
            # the scale and zero point as tensors, not scalars: a scalar is compiled into the task
            # as an immediate, so every convolution became a task of its own (ResNet-50: 60 tasks,
            # not 44) and each was tuned on its own share of the budget
            dims = x.ty.shape.values
            lanes = (1,) * (len(dims) - 1) + (int(dims[-1]),)
            inverse = relax.const(np.full(lanes, 1.0 / x_scale, dtype=np.float32))
            shifted = relax.op.add(
                relax.op.round(relax.op.multiply(x, inverse)), relax.const(np.full(lanes, zero_point, dtype=np.float32))
            )
            quantized[x] = builder.emit(relax.op.astype(relax.op.clip(shifted, 0, int(_U8_MAX)), "uint8"))
            scales[x] = (lanes, x_scale, zero_point)
        return scales[x][2]

    def rescaled(sums: Any, weight_sums: np.ndarray, w_scale: np.ndarray, x: Any) -> Any:
        """int32 `sums` less the zero point's share (its zero point x `weight_sums`, the int8
        weight summed over each output channel), scaled to float32 per output channel
        (`w_scale`, shaped as `weight_sums`: both broadcast over the sums)."""
        _, x_scale, zero_point = scales[x]
        offset = (zero_point * weight_sums).astype(np.int32)
        centred = relax.op.subtract(sums, relax.const(offset))
        return relax.op.multiply(
            relax.op.astype(centred, "float32"), relax.const((x_scale * w_scale).astype(np.float32))
        )

    def int8_dense(call: Any, builder: Any) -> Any:
        x, w = call.args
        quantize(x, builder)
        wq, w_scale = _per_channel_int8(np.ascontiguousarray(w.value.numpy().T), (1,))  # (N, K): a scale a row
        packed = relax.const(tvm.runtime.tensor(pack_weight(wq, _QUADS)))
        # on the input's own shape, not reshaped to rows as bf16's: the bias and activation fuse after it
        sums = builder.emit_te(_te_packed_dense_int8, quantized[x], packed, primfunc_name_hint="dense_packed_int8")
        return rescaled(sums, wq.astype(np.int64).sum(axis=1), w_scale, x)

    def int8_conv(call: Any, builder: Any) -> Any:
        x, w = call.args
        a = call.attrs
        zero_point = quantize(x, builder)
        wq, w_scale = weight_quantization(w.value.numpy())
        blocks = blocked_float_grouped_conv(call)
        if blocks is None:  # an RGB stem: its channels one block, padded with zeros to whole quadruples
            in_block = _stem_block(call)
            assert in_block is not None  # int8_candidate took it
            wq = np.pad(wq, [(0, 0), (0, in_block - wq.shape[1]), (0, 0), (0, 0), (0, 0)])
            blocked = builder.emit_te(
                _te_channel_block, quantized[x], in_block, primfunc_name_hint="nchw_to_nchwc_uint8"
            )
        else:
            in_block, blocked = blocks[0], quantized[x]
        xq = _channel_steps(builder, blocked, in_block, _QUADS)
        geometry = conv_geometry(a)
        sums = builder.emit_te(
            _te_packed_conv_int8,
            xq,
            relax.const(tvm.runtime.tensor(pack_conv_weight(wq, in_block, _QUADS))),
            *geometry,
            zero_point,
            int(a.groups),
            primfunc_name_hint="conv2d_NCHWc_int8",
        )
        channel = (1, wq.shape[0], 1, 1, _LANES)
        weight_sums = wq.astype(np.int64).sum(axis=(1, 2, 3)).reshape(channel)
        return rescaled(sums, weight_sums, w_scale.reshape(channel), x)

    def int8_depthwise(call: Any, builder: Any) -> Any:
        """A depthwise convolution reading the uint8 copy: (q - zero point) x scale x w summed in
        float32 as sum(q x w') - zero point x sum(w') with w' = scale x w, the padding the zero
        point (so that it adds nothing). No channel sum pairs products for `vpdpbusd`; what int8
        saves here is the bytes: the 1x1 convolution before writes its output as uint8."""
        x, w = call.args
        a = call.attrs
        zero_point = quantize(x, builder)
        weight = (w.value.numpy().astype(np.float64) * scales[x][1]).astype(np.float32)
        geometry = conv_geometry(a)
        sums = builder.emit_te(
            depthwise_nchwc,
            quantized[x],
            relax.const(weight),
            *geometry,
            "float32",
            float(zero_point),
            primfunc_name_hint="depthwise_conv2d_NCHWc_uint8",
        )
        chunks, _, _, _, block = weight.shape
        offset = zero_point * weight.astype(np.float64).sum(axis=(1, 2, 3)).reshape(1, chunks, 1, 1, block)
        return relax.op.subtract(sums, relax.const(offset.astype(np.float32)))

    def int8_layer(call: Any, builder: Any) -> Any:
        if not int8_candidate(call):
            return read_dequantized(call, builder)
        if str(call.op.name) == "relax.matmul":
            return int8_dense(call, builder)
        if _blocked_depthwise(call):
            return int8_depthwise(call, builder)
        return int8_conv(call, builder)

    out = rewrite_calls(mod, None, int8_layer)
    if count[0] != len(ranges):
        raise RuntimeError(f"int8: {count[0]} layers rewritten but {len(ranges)} calibrated")
    return out, count[0]
