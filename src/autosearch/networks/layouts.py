"""Convolutions in a blocked channel layout (NCHW[x]c) on CPUs.

Why: MetaSchedule vectorizes a convolution's innermost output axis. In PyTorch's NCHW layout that
is the image width: 7 or 14 floats on ResNet-50's last stages, part of one AVX-512 register. In
NCHW16c the innermost axis is a block of 16 output channels, one whole register (the layout of
oneDNN's and TVM's x86 `conv2d_NCHWc` kernels). ResNet-50 from the prior alone ran much faster
blocked than in NCHW, built side by side (bench/README.md "Whole models against PyTorch"). NHWC
was measured before and lost to NCHW tuned for the same minutes.

How: Relax's `ConvertLayout` with a callback per call (`blocked_layouts`): a `conv2d` whose
input and output channels are whole multiples of the block (the SIMD register's lanes for its
dtype; in a grouped one each group's, a depthwise one too) takes NCHW{b}c data, OIHW{b}o weights
and gives NCHW{b}c, and one whose input channels are not (an RGB stem) reads NCHW and gives
NCHW{b}c; the elementwise operators, pools and means after them keep the layout, so the
activations change layout only where a convolution that stays NCHW or the model's output needs
it; the weights' transform folds into the constants. Relax's own legalization refuses
channel-chunk layouts, so a blocked `conv2d` is legalized with TOPI's `conv2d_NCHWc_OIHWo`, the
stem, depthwise and grouped forms with TE kernels of their own (`nchw_to_nchwc`,
`depthwise_nchwc`, `grouped_nchwc`).

Two operators TVM 0.27's layout inference does not carry would send every block back to NCHW:
`clip` (ReLU6) and `pad` (a model ported from TensorFlow pads explicitly before each
convolution, by zero where a 1x1 needs none). `clips_as_bounds` writes a clip as the
`maximum`/`minimum` it is, and `pads_into_convolutions` gives a zero pad to the convolution it
feeds (as ONNX Runtime's and OpenVINO's pad fusion do) and drops pads of width zero.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = [
    "blocked_convolutions",
    "blocked_float_conv",
    "blocked_float_grouped_conv",
    "blocked_layouts",
    "channel_block",
    "clips_as_bounds",
    "conv_geometry",
    "float_conv_by_constant",
    "layer_norms_legalized",
    "layout_block",
    "legalize_map",
    "narrowed_blocks",
    "padded_window",
    "pads_into_convolutions",
]

CONV2D = "relax.nn.conv2d"
LAYER_NORM = "relax.nn.layer_norm"
LAYOUT_TRANSFORM = "relax.layout_transform"


def _conv_channels(call: Any, register_bits: int) -> tuple[int, int, int, int] | None:
    """(input channels, output channels, groups, the register's lanes for the dtype) of an NCHW
    `conv2d` with static shapes, or None."""
    attrs = call.attrs
    if register_bits <= 0:
        return None
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout or attrs.data_layout) != ("NCHW", "OIHW", "NCHW"):
        return None
    try:
        data, weight = (arg.ty for arg in call.args[:2])  # the tensor types: static shapes, dtype
        in_channels, out_channels = int(data.shape.values[1]), int(weight.shape.values[0])
        bits = _dtype_bits(str(data.dtype))
    except (AttributeError, TypeError, ValueError, IndexError):
        return None  # a symbolic channel count
    return in_channels, out_channels, int(attrs.groups), register_bits // bits if bits else 0


def _group_block(in_channels: int, out_channels: int, groups: int, lanes: int) -> int:
    """The block of a grouped (not depthwise) convolution: one that divides each group's input
    and output channels, so that each output block reads whole input blocks of its group."""
    return channel_block(math.gcd(in_channels // groups, out_channels // groups), lanes)


def narrowed_blocks(mod: Any, register_bits: int) -> dict[tuple[int, int], int]:
    """{(channels, lanes): block} for each channel count that a grouped convolution of `mod` reads
    or writes in a narrower block than `channel_block` gives it (RegNetY-400MF's groups of 8 on
    48 channels: 8, not 16).

    Why: a tensor's block follows from its channel count, so a producer and its readers agree,
    and TVM's layout inference cannot convert one channel block into another (NCHW16c to NCHW8c
    fails, "Invalid layout axis 8b"): one such grouped convolution sent the whole network back to
    NCHW. Every tensor of such a count takes the group's block instead."""
    from tvm import relax

    narrowed: dict[tuple[int, int], int] = {}

    def visit(expr: Any) -> None:
        if not isinstance(expr, relax.Call) or str(getattr(expr.op, "name", "")) != CONV2D:
            return
        shape = _conv_channels(expr, register_bits)
        if shape is None:
            return
        in_channels, out_channels, groups, lanes = shape
        if groups == 1 or groups == in_channels == out_channels:
            return
        block = _group_block(in_channels, out_channels, groups, lanes)
        for channels in (in_channels, out_channels) if block else ():
            if block < channel_block(channels, lanes):
                narrowed[(channels, lanes)] = min(block, narrowed.get((channels, lanes), block))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return narrowed


def blocked_layouts(
    call: Any, register_bits: int, narrowed: dict[tuple[int, int], int] | None = None
) -> list[str] | None:
    """The (data, kernel, output) layouts a `conv2d` call gets, or None where it stays as it is:
    a layout other than NCHW/OIHW, shapes not static, or output channels that no block divides.
    Each tensor's block is the largest of one register's lanes for its dtype and half of them that
    divides its channel count (`channel_block`), so a tensor of 40 or 120 channels is NCHW8c on
    AVX-512 where a 16-lane block would leave it NCHW, converted before and after every such
    convolution; a convolution reads its input's block and writes its output's (TOPI's NCHWc
    kernel takes the two apart). A grouped convolution takes one block that divides each group's
    input and output channels, a depthwise one its channels'. Input channels that no block divides
    (a 3-channel stem) are read as NCHW and the output blocked: it needs no conversion, and each
    output block is one vector of the kernel, as in oneDNN's first convolution. `narrowed`
    (`narrowed_blocks`) gives a channel count that a grouped convolution reads in a narrower
    block that block wherever it is read or written."""
    shape = _conv_channels(call, register_bits)
    if shape is None:
        return None
    in_channels, out_channels, groups, lanes = shape
    narrowed = narrowed or {}

    def block_of(channels: int) -> int:
        return narrowed.get((channels, lanes)) or channel_block(channels, lanes)

    if groups == 1:
        out_block, in_block = block_of(out_channels), block_of(in_channels)
    elif groups == in_channels == out_channels:  # depthwise: each lane reads its own channel
        out_block = in_block = block_of(out_channels)
    else:  # each group's channels whole blocks (and no wider than the tensors', where one is narrowed)
        group = _group_block(in_channels, out_channels, groups, lanes)
        out_block = in_block = group and min(group, block_of(in_channels), block_of(out_channels))
    if not out_block:
        return None
    out = [f"OIHW{out_block}o", f"NCHW{out_block}c"]
    if not in_block:
        return ["NCHW", *out] if groups == 1 else None
    return [f"NCHW{in_block}c", *out]


def layout_block(layout: str, prefix: str, suffix: str) -> int | None:
    """The block of a blocked layout (`NCHW16c` -> 16 for prefix NCHW, suffix c), None for any other."""
    match = re.fullmatch(rf"{prefix}(\d+){suffix}", layout)
    return int(match.group(1)) if match else None


def blocked_float_conv(call: Any) -> tuple[int, int] | None:
    """`blocked_float_grouped_conv` of a one-group `conv2d`, else None: the convolutions `lowp`
    rewrites."""
    return blocked_float_grouped_conv(call) if int(call.attrs.groups) == 1 else None


def blocked_float_grouped_conv(call: Any) -> tuple[int, int] | None:
    """(input block, output block) of a float32 `conv2d` (of any group count) by a constant
    weight with NCHW{b}c input, NCHW{b}c output and OIHW{b}o weights (the output's block), else
    None: the convolutions `winograd` rewrites."""
    a = call.attrs
    if not float_conv_by_constant(call):
        return None
    in_block = layout_block(str(a.data_layout), "NCHW", "c")
    out_block = layout_block(str(a.out_layout or a.data_layout), "NCHW", "c")
    if in_block is None or out_block is None or layout_block(str(a.kernel_layout), "OIHW", "o") != out_block:
        return None
    return in_block, out_block


def float_conv_by_constant(call: Any) -> bool:
    """Whether a `conv2d` computes float32 from float32 data and a constant float32 weight: the
    convolutions whose weight a rewrite (Winograd, bf16, int8) can transform once."""
    import tvm

    x, w = call.args
    if not isinstance(w, tvm.ir.expr.Constant) or str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32":
        return False
    return str(call.attrs.out_dtype) in ("", "void", "None", "float32")


def channel_block(channels: int, lanes: int) -> int:
    """The channel block of a tensor of `channels` channels: the register's `lanes`, or half of
    them, whichever divides it first; 0 where neither does (or a register holds under 4 lanes)."""
    for block in (lanes, lanes // 2):
        if block >= 4 and channels % block == 0:
            return block
    return 0


def _dtype_bits(dtype: str) -> int:
    import tvm

    return int(tvm.DataType(dtype).bits)


def blocked_convolutions(mod: Any, register_bits: int) -> Any:
    """`mod` with every eligible `conv2d` (`blocked_layouts`) in NCHW{b}c; unchanged where
    `register_bits` is 0 (a GPU, a target without known SIMD registers), none is eligible, or
    TVM's layout inference refuses an operator the blocked layout reaches."""
    import tvm
    from tvm import relax

    from autosearch.networks.folding import fold_in_numpy

    if register_bits <= 0:
        return mod
    narrowed = narrowed_blocks(mod, register_bits)

    def layouts(call: Any) -> dict[str, list[str]]:
        if getattr(call.op, "name", "") != CONV2D:
            return {}
        blocked = blocked_layouts(call, register_bits, narrowed)
        if blocked:
            return {CONV2D: blocked}
        a = call.attrs  # stays as imported (with no layout asked, it would follow a blocked input)
        return {CONV2D: [a.data_layout, a.kernel_layout, a.out_layout or a.data_layout]}

    passes = tvm.transform.Sequential(
        [relax.transform.ConvertLayout({}, layout_cb=layouts), relax.transform.Normalize()]
    )
    try:
        converted = passes(mod)
    except Exception:  # TVM's layout inference refused an operator the blocked layout reaches
        try:
            converted = passes(layer_norms_legalized(mod))
        except Exception:
            return mod  # as imported
    converted = bool_layouts_as_int8(converted)
    return relax.transform.FoldConstant()(fold_in_numpy(converted))  # the weights' transforms, in NumPy


def bool_layouts_as_int8(mod: Any) -> Any:
    """`mod` with every `layout_transform` of a bool tensor done on int8 (cast there and back).

    Why: TVM 0.27 legalizes a `layout_transform` padding a bool with the float 0.0 and fails
    (`transform_layout`: "elements of type T.bool, but ... fills padding with ... float32"). A
    comparison that `ConvertLayout` carries into the blocked layout meets one where its user (an
    ELU's or PReLU's `where`) goes back: an internal error on import. The casts are element-wise
    and fuse with their neighbours."""
    from tvm import relax

    from autosearch.networks.rewrite import rewrite_calls

    def as_int8(call: Any, builder: Any) -> Any:
        x = call.args[0]
        if str(getattr(x.ty, "dtype", "")) != "bool":
            return None
        a = call.attrs
        if list(getattr(a, "axis_separators", None) or []) or list(getattr(a, "input_axis_separators", None) or []):
            return None
        moved = builder.emit(relax.op.layout_transform(builder.emit(relax.op.astype(x, "int8")), a.index_map))
        return relax.op.astype(moved, "bool")

    return rewrite_calls(mod, "relax.layout_transform", as_int8)


def layer_norms_legalized(mod: Any) -> Any:
    """`mod` with every `layer_norm` already its TIR kernel (`call_tir`), which `ConvertLayout`
    does not see through: it gives the kernel its input in the imported layout.

    Why: TVM 0.27's layout inference carries a blocked layout through a `permute_dims` into a
    `layer_norm` over the channels and then fails the gamma's shape check (ConvNeXt's
    NCHW -> NHWC -> LayerNorm blocks: 48 blocks against 768 channels), and the whole model stayed
    as imported, its depthwise 7x7 convolutions in NCHW. With the kernels legalized first the
    layout converts at each permute instead. Only where the first conversion failed, so every
    model that converted before keeps its graph."""
    import tvm

    from autosearch.networks.rewrite import rewrite_calls

    legalize = tvm.ir.Op.get(LAYER_NORM).get_attr("FLegalize")
    return rewrite_calls(mod, LAYER_NORM, lambda call, builder: legalize(builder, call))


def conv_geometry(attrs: Any) -> list[list[int]]:
    """A `conv2d`'s strides, padding and dilation as lists of ints: the TE kernels' arguments."""
    return [[int(v) for v in values] for values in (attrs.strides, attrs.padding, attrs.dilation)]


def _legalize_conv2d(bb: Any, call: Any) -> Any:
    """A blocked `conv2d` with TOPI's NCHW[x]c kernel; any other with Relax's own legalization."""
    import tvm
    from tvm import topi

    attrs = call.attrs
    if len(attrs.out_layout or attrs.data_layout) == 4:
        return tvm.ir.Op.get(CONV2D).get_attr("FLegalize")(bb, call)
    out_dtype = str(attrs.out_dtype)
    if out_dtype in ("", "void", "None"):  # unset: the input's
        out_dtype = str(call.args[0].ty.dtype)
    geometry = conv_geometry(attrs)
    if len(attrs.data_layout) == 4:  # NCHW in, blocked out
        return bb.call_te(
            nchw_to_nchwc, call.args[0], call.args[1], *geometry, out_dtype, primfunc_name_hint="conv2d_NCHW_NCHWc"
        )
    groups = int(attrs.groups)
    if groups != 1:
        depthwise = int(call.args[1].ty.shape.values[1]) == 1  # one input channel a group (`blocked_layouts`)
        kernel, name = (
            (depthwise_nchwc, "depthwise_conv2d_NCHWc") if depthwise else (grouped_nchwc, "group_conv2d_NCHWc")
        )
        extra = [] if depthwise else [groups]
        return bb.call_te(kernel, call.args[0], call.args[1], *geometry, out_dtype, *extra, primfunc_name_hint=name)
    return bb.call_te(
        topi.nn.conv2d_NCHWc_OIHWo,
        data=call.args[0],
        kernel=call.args[1],
        stride=attrs.strides,
        padding=attrs.padding,
        dilation=attrs.dilation,
        layout=attrs.data_layout,
        out_layout=attrs.out_layout,
        out_dtype=out_dtype,
        primfunc_name_hint="conv2d_NCHWc",
    )


def padded_window(
    data: Any,
    padding: list[int],
    kernel: tuple[int, int],
    strides: list[int],
    dilation: list[int],
    pad_value: float = 0.0,
) -> tuple[Any, int, int]:
    """NCHW or NCHW{b}c `data` padded with `pad_value` (an int8 input: its zero point) on its image
    axes (2 and 3; padding: top, left, bottom, right, or one pair for both sides), and the output's
    height and width."""
    from tvm import topi

    top, left, bottom, right = padding if len(padding) == 4 else (padding[0], padding[1]) * 2
    height, width = int(data.shape[2]), int(data.shape[3])
    if top or left or bottom or right:
        rest = [0] * (len(data.shape) - 4)
        data = topi.nn.pad(
            data, [0, 0, top, left, *rest], [0, 0, bottom, right, *rest], pad_value=pad_value, name="data_pad"
        )
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    oh = (height + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (width + left + right - dw * (kw - 1) - 1) // sw + 1
    return data, oh, ow


def nchw_to_nchwc(
    data: Any, kernel: Any, strides: list[int], padding: list[int], dilation: list[int], out_dtype: str
) -> Any:
    """A convolution of NCHW data with OIHW{b}o weights (`(C_out/b, C_in, KH, KW, b)`) into NCHW{b}c:
    each input value times one kernel vector. TOPI's `conv2d_NCHWc` needs blocked input channels."""
    from tvm import te

    n, channels = (int(v) for v in data.shape[:2])
    out_chunks, _, kh, kw, block = (int(v) for v in kernel.shape)
    data, oh, ow = padded_window(data, padding, (kh, kw), strides, dilation)
    (sh, sw), (dh, dw) = strides, dilation
    rc = te.reduce_axis((0, channels), name="rc")
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (n, out_chunks, oh, ow, block),
        lambda b, k, y, x, o: te.sum(
            data[b, rc, y * sh + ry * dh, x * sw + rx * dw].astype(out_dtype)
            * kernel[k, rc, ry, rx, o].astype(out_dtype),
            axis=[rc, ry, rx],
        ),
        name="conv2d_NCHW_NCHWc",
    )


def depthwise_nchwc(
    data: Any,
    kernel: Any,
    strides: list[int],
    padding: list[int],
    dilation: list[int],
    out_dtype: str,
    pad_value: float = 0.0,
) -> Any:
    """A depthwise convolution on NCHW{b}c data with OIHW{b}o weights (`(C/b, 1, KH, KW, b)`):
    each lane of the output block reads the same lane of the input block, cast to `out_dtype`
    (uint8 data padded with its zero point: `lowp`'s int8 depthwise). TVM's x86
    `depthwise_conv2d_NCHWc` needs an AutoTVM configuration; this is its computation."""
    from tvm import te

    n, chunks, _, _, block = (int(v) for v in data.shape)
    kh, kw = int(kernel.shape[2]), int(kernel.shape[3])
    data, oh, ow = padded_window(data, padding, (kh, kw), strides, dilation, pad_value=pad_value)
    (sh, sw), (dh, dw) = strides, dilation
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (n, chunks, oh, ow, block),
        lambda b, c, y, x, i: te.sum(
            data[b, c, y * sh + ry * dh, x * sw + rx * dw, i].astype(out_dtype)
            * kernel[c, 0, ry, rx, i].astype(out_dtype),
            axis=[ry, rx],
        ),
        name="depthwise_conv2d_NCHWc",
    )


def grouped_nchwc(
    data: Any,
    kernel: Any,
    strides: list[int],
    padding: list[int],
    dilation: list[int],
    out_dtype: str,
    groups: int,
) -> Any:
    """A grouped convolution whose groups are whole channel blocks, on NCHW{b}c data with
    OIHW{b}o weights (`(C_out/b, C_in/groups, KH, KW, b)`): output block `k` reads the input
    blocks of its group. TVM's x86 `group_conv2d_nchw` has no blocked form."""
    from tvm import te

    n, block = int(data.shape[0]), int(data.shape[4])
    out_chunks, group_in, kh, kw = (int(v) for v in kernel.shape[:4])
    data, oh, ow = padded_window(data, padding, (kh, kw), strides, dilation)
    (sh, sw), (dh, dw) = strides, dilation
    out_per_group, in_per_group = out_chunks // groups, group_in // block  # in blocks
    rc, ri = te.reduce_axis((0, in_per_group), name="rc"), te.reduce_axis((0, block), name="ri")
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")
    return te.compute(
        (n, out_chunks, oh, ow, block),
        lambda b, k, y, x, o: te.sum(
            data[b, k // out_per_group * in_per_group + rc, y * sh + ry * dh, x * sw + rx * dw, ri].astype(out_dtype)
            * kernel[k, rc * block + ri, ry, rx, o].astype(out_dtype),
            axis=[rc, ri, ry, rx],
        ),
        name="group_conv2d_NCHWc",
    )


def clips_as_bounds(mod: Any) -> Any:
    """Every `clip(x, lo, hi)` as `minimum(maximum(x, lo), hi)`: the same numbers, in operators
    TVM's layout inference carries (it has none for `clip`, so each ReLU6 after a blocked
    convolution converted the activations back to NCHW)."""
    from tvm import relax

    from autosearch.networks.rewrite import rewrite_calls

    def bounds(call: Any, builder: Any) -> Any:
        x = call.args[0]
        dtype = str(getattr(getattr(x, "ty", None), "dtype", ""))
        lo, hi = (_scalar(a) for a in call.args[1:3])
        if not dtype.startswith("float") or lo is None or hi is None:
            return None
        out = x
        if math.isfinite(lo):
            out = builder.emit(relax.op.maximum(out, relax.const(lo, dtype)))
        if math.isfinite(hi):
            out = relax.op.minimum(out, relax.const(hi, dtype))
        return out

    return rewrite_calls(mod, "relax.clip", bounds)


def _scalar(arg: Any) -> float | None:
    """A clip bound's value (a `PrimValue` or an immediate), or None where it is not a constant."""
    value = getattr(arg, "value", None)
    value = getattr(value, "value", value)
    return float(value) if isinstance(value, (int, float)) else None


def pads_into_convolutions(mod: Any) -> Any:
    """Every constant zero `pad` of an NCHW tensor's image axes that feeds a `conv2d` given to that
    convolution's own padding, and every pad of width zero dropped; a pad something else reads
    stays for it. Why: TVM's layout inference does not carry `pad`, so each one between blocked
    convolutions cost two layout conversions and a copy, and a task of its own."""
    from tvm import relax
    from tvm.relax import expr_functor

    from autosearch.networks.rewrite import rewrite_functions

    def zero_pad(expr: Any) -> list[int] | None:
        """An NCHW zero pad's widths (before and after, for each axis), or None."""
        if str(getattr(getattr(expr, "op", None), "name", "")) != "relax.nn.pad":
            return None
        a = expr.attrs
        if str(a.pad_mode) != "constant" or float(a.pad_value) != 0.0:
            return None
        width = [int(v) for v in a.pad_width]
        return width if len(width) == 8 and not any(width[:4]) and min(width) >= 0 else None  # no crop

    @expr_functor.mutator
    class Fold(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            name = str(getattr(call.op, "name", ""))
            width = zero_pad(call)
            if width is not None and not any(width):
                return call.args[0]
            if name != CONV2D or str(call.attrs.data_layout) != "NCHW":
                return call
            x = call.args[0]
            bound = self.lookup_binding(x) if isinstance(x, relax.Var) else None
            width = zero_pad(bound)
            if width is None or bound is None:
                return call
            a = call.attrs
            top, left, bottom, right = (int(v) for v in a.padding)
            return relax.op.nn.conv2d(
                bound.args[0],
                call.args[1],
                strides=a.strides,
                padding=[top + width[4], left + width[6], bottom + width[5], right + width[7]],
                dilation=a.dilation,
                groups=int(a.groups),
                data_layout=a.data_layout,
                kernel_layout=a.kernel_layout,
                out_layout=a.out_layout,
                out_dtype=a.out_dtype,
            )

    t = relax.transform
    return t.DeadCodeElimination()(t.CanonicalizeBindings()(rewrite_functions(Fold, mod)))


def _legalize_layout_transform(bb: Any, call: Any) -> Any:
    """A `layout_transform` that pads nothing as a gather (each output element reads the input
    element the index map's inverse names), which `AnnotateTIROpPattern` marks injective; one that
    pads, with Relax's own legalization.

    Why: Relax's own writes each input element to where the map sends it, a scatter its pattern
    annotation marks opaque, so no conversion ever fused with its neighbours: ConvNeXt's
    NCHW16c -> NCHW conversion before each NCHW -> NHWC `permute_dims` was a task and a pass over
    the activations of its own, and the conversion back before each residual add another."""
    import tvm
    from tvm import te

    index_map = call.attrs.index_map
    shape = call.args[0].ty.shape
    _, padding = index_map.non_surjective_inverse(shape)
    if call.attrs.pad_value is not None or not isinstance(padding, tvm.tirx.expr.IntImm) or int(padding):
        return tvm.ir.Op.get(LAYOUT_TRANSFORM).get_attr("FLegalize")(bb, call)
    inverse = index_map.inverse(shape)
    out_shape = index_map.map_shape(list(shape))

    def gather(data: Any) -> Any:
        return te.compute(out_shape, lambda *i: data(*inverse.map_indices(list(i))), name="layout_transform")

    return bb.call_te(gather, call.args[0], primfunc_name_hint="layout_transform")


def legalize_map() -> dict[str, Any]:
    """The custom legalizations `LegalizeOps` needs after `blocked_convolutions`."""
    return {CONV2D: _legalize_conv2d, LAYOUT_TRANSFORM: _legalize_layout_transform}
