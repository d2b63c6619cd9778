"""Convolutions in a blocked channel layout (NCHW[x]c) on CPUs.

Why: MetaSchedule vectorizes a convolution's innermost output axis. In PyTorch's NCHW layout that
is the image width: 7 or 14 floats on ResNet-50's last stages, part of one AVX-512 register. In
NCHW16c the innermost axis is a block of 16 output channels, one whole register (the layout of
oneDNN's and TVM's x86 `conv2d_NCHWc` kernels). ResNet-50 from the prior alone ran much faster
blocked than in NCHW, built side by side (bench/README.md "Whole models against PyTorch"). NHWC
was measured before and lost to NCHW tuned for the same minutes.

How: Relax's `ConvertLayout` with a callback per call: a `conv2d` with one group whose input and
output channels are whole multiples of the block (the SIMD register's lanes for its dtype) takes
NCHW{b}c data, OIHW{b}o weights and gives NCHW{b}c; the elementwise operators after it keep the
layout, so the activations change layout only where a convolution that stays NCHW (a 3-channel
stem, a depthwise one) or the model's output needs it; the weights' transform folds into the
constants. Relax's own legalization refuses channel-chunk layouts, so a blocked `conv2d` is
legalized with TOPI's `conv2d_NCHWc_OIHWo`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["blocked_convolutions", "channel_block", "legalize_map"]

CONV2D = "relax.nn.conv2d"


def channel_block(call: Any, register_bits: int) -> int:
    """The channel block a `conv2d` call gets (its dtype's lanes in one register), or 0 where it
    stays as it is: grouped, a layout other than NCHW/OIHW, shapes not static, or channels that
    are not whole blocks. Why not depthwise ones: blocked too (a TE kernel of their own),
    MobileNetV2 from the prior alone ran slower than with them as imported, and had more tasks
    (side by side; bench/HISTORY.md)."""
    attrs = call.attrs
    if register_bits <= 0 or int(attrs.groups) != 1:
        return 0
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout or attrs.data_layout) != ("NCHW", "OIHW", "NCHW"):
        return 0
    try:
        data, weight = (arg.ty for arg in call.args[:2])  # the tensor types: static shapes, dtype
        in_channels, out_channels = int(data.shape.values[1]), int(weight.shape.values[0])
        bits = _dtype_bits(str(data.dtype))
    except (AttributeError, TypeError, ValueError, IndexError):
        return 0  # a symbolic channel count
    block = register_bits // bits if bits else 0
    if block < 2 or in_channels % block or out_channels % block:
        return 0
    return block


def _dtype_bits(dtype: str) -> int:
    import tvm

    return int(tvm.DataType(dtype).bits)


def blocked_convolutions(mod: Any, register_bits: int) -> Any:
    """`mod` with every eligible `conv2d` (`channel_block`) in NCHW{b}c; unchanged where
    `register_bits` is 0 (a GPU, a target without known SIMD registers), none is eligible, or
    TVM's layout inference refuses an operator the blocked layout reaches."""
    import tvm
    from tvm import relax

    if register_bits <= 0:
        return mod

    def layouts(call: Any) -> dict[str, list[str]]:
        if getattr(call.op, "name", "") != CONV2D:
            return {}
        block = channel_block(call, register_bits)
        if block:
            return {CONV2D: [f"NCHW{block}c", f"OIHW{block}o", f"NCHW{block}c"]}
        a = call.attrs  # stays as imported (with no layout asked, it would follow a blocked input)
        return {CONV2D: [a.data_layout, a.kernel_layout, a.out_layout or a.data_layout]}

    passes = [relax.transform.ConvertLayout({}, layout_cb=layouts), relax.transform.Normalize()]
    try:
        converted = tvm.transform.Sequential(passes)(mod)
    except Exception:  # TVM's layout inference refused the model (ConvNext: its `layer_norm`
        return mod  # after a blocked convolution fails TVM 0.27's gamma shape check): as imported
    return relax.transform.FoldConstant()(converted)


def _legalize_conv2d(bb: Any, call: Any) -> Any:
    """A blocked `conv2d` with TOPI's NCHW[x]c kernel; any other with Relax's own legalization."""
    import tvm
    from tvm import topi

    attrs = call.attrs
    if len(attrs.data_layout) == 4:
        return tvm.ir.Op.get(CONV2D).get_attr("FLegalize")(bb, call)
    out_dtype = str(attrs.out_dtype)
    if out_dtype in ("", "void"):
        out_dtype = str(call.args[0].ty.dtype)
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


def legalize_map() -> dict[str, Any]:
    """The custom legalizations `LegalizeOps` needs after `blocked_convolutions`."""
    return {CONV2D: _legalize_conv2d}
