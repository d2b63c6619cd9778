"""Channel counts that no register block divides, padded to one that does with zero weights.

Why: a tensor is blocked (NCHW{b}c, `layouts`) only where a register's lanes or half of them
divide its channels. ShuffleNetV2's branches carry 58 and 116 channels (2 x 29): no block
divides them, so their 1x1 and depthwise convolutions stayed NCHW, vectorized over the image
width, and were the costliest tasks of its tuned build. oneDNN pads such channels to its block
inside its blocked layout; here the graph does it: 58 channels become 64, and the padding is
computed like any channel.

How (`padded_channels`, on the imported NCHW graph, before `layouts.blocked_convolutions`):
- a `conv2d` (one group, or depthwise) by a constant float32 weight writes `padded_count` output
  channels, its weight's extra output channels zero, and reads its input with as many channels
  as it has: a padded input's extra channels meet zero weights; an input whose count pads and
  that arrives unpadded (a `split` of a channel shuffle) is padded with zeros first;
- elementwise operators, pools and means over the image carry the padding (a per-channel
  constant is padded too: with 0, or 1 where it divides), so a padded channel holds a finite
  value (a function of 0) that no real channel ever reads;
- anything else (a concatenation, a reshape, a grouped convolution, the function's output) reads
  the real channels, sliced off the padded tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ChannelCount", "padded_channels", "padded_count", "whole_register_count"]

#: The channel count a tensor takes, from its own and the register's float32 lanes: a padding policy.
ChannelCount = Callable[[int, int], int]

#: The most work a padding may add: a padded convolution does (padded / real) times the multiply-adds.
MAX_OVERHEAD = 1.25

CONV2D = "relax.nn.conv2d"
#: Operators that compute each channel from the same channel alone and map a finite padded
#: channel to a finite one.
_UNARY = frozenset(
    {
        "relax.nn.relu",
        "relax.nn.silu",
        "relax.nn.gelu",
        "relax.nn.gelu_tanh",
        "relax.nn.leakyrelu",
        "relax.sigmoid",
        "relax.tanh",
        "relax.clip",
        "relax.astype",
    }
)
#: Binary operators, with the value a constant operand's padded channels take.
_BINARY = {
    "relax.add": 0.0,
    "relax.subtract": 0.0,
    "relax.multiply": 0.0,
    "relax.maximum": 0.0,
    "relax.minimum": 0.0,
    "relax.divide": 1.0,
}
_POOLS = frozenset({"relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d"})


def padded_count(channels: int, lanes: int) -> int:
    """The channel count a tensor of `channels` channels takes: itself where a register of `lanes`
    lanes or half of one divides it (`layouts.channel_block`), else the nearest multiple of a
    register, or of half of one, that adds at most `MAX_OVERHEAD` of the work (58 -> 64 and
    116 -> 128 on 16 lanes); itself where neither does (an RGB image's 3)."""
    from autosearch.networks.layouts import channel_block

    if lanes < 8 or channel_block(channels, lanes):
        return channels
    for block in (lanes, lanes // 2):
        padded = -(-channels // block) * block
        if padded <= channels * MAX_OVERHEAD:
            return padded
    return channels


def whole_register_count(channels: int, lanes: int) -> int:
    """int8's policy: `padded_count`, and a count half a register divides padded to a whole one
    within `MAX_OVERHEAD` too (ShuffleNetV2's 232 -> 240, EfficientNet's 40 -> 48): int8's kernel
    writes whole-register output blocks only (`lowp.int8_candidate`), so a half block leaves its
    convolution in float32."""
    padded = -(-channels // lanes) * lanes
    return padded if lanes >= 8 and padded <= channels * MAX_OVERHEAD else padded_count(channels, lanes)


def _channels(expr: Any) -> int | None:
    """The channel extent of a static 4-D tensor (NCHW), else None."""
    from autosearch.networks.rewrite import static_shape

    shape = static_shape(expr)
    return shape[1] if shape is not None and len(shape) == 4 else None


def _pad_axis(array: np.ndarray, axis: int, size: int, value: float = 0.0) -> np.ndarray:
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, size - array.shape[axis])
    return np.pad(array, widths, constant_values=value)


def padded_channels(mod: Any, register_bits: int, count: ChannelCount = padded_count) -> Any:
    """`mod` with every float32 convolution's channel count padded to `count`'s (`padded_count`:
    where no register block divides it); see the module doc. Unchanged where `register_bits` is 0
    or none pads."""
    import tvm
    from tvm import relax
    from tvm.ir.expr import Constant
    from tvm.relax import expr_functor

    from autosearch.networks.layouts import float_conv_by_constant
    from autosearch.networks.rewrite import rewrite_functions, static_shape

    lanes = register_bits // 32
    if lanes < 8:
        return mod

    def sliced(x: Any, channels: int, builder: Any) -> Any:
        return builder.emit(relax.op.strided_slice(x, axes=[1], begin=[0], end=[channels]))

    @expr_functor.mutator
    class Padding(relax.PyExprMutator):
        def visit_var_binding_(self, binding: Any) -> None:
            """The function's outputs (variables outside the dataflow) keep their real channels."""
            if isinstance(binding.var, relax.DataflowVar):
                return super().visit_var_binding_(binding)
            value = self.visit_expr(binding.value)
            real = _channels(binding.var)
            if real is not None and _channels(value) not in (None, real):
                value = sliced(value, real, self.builder_)
            emit = self.builder_.emit_output if self.builder_.current_block_is_dataflow() else self.builder_.emit
            self.set_var_remap(binding.var, emit(value, str(binding.var.name)))
            return None

        def visit_tuple_(self, tup: Any) -> Any:
            new = super().visit_tuple_(tup)
            return relax.Tuple([self._real(o, n) for o, n in zip(tup.fields, new.fields, strict=True)])

        def _real(self, old: Any, new: Any) -> Any:
            """`new` (the rewrite of `old`) with `old`'s channels: sliced where it was padded."""
            real, now = _channels(old), _channels(new)
            return new if real is None or now in (None, real) else sliced(new, real, self.builder_)

        def visit_call_(self, call: Any) -> Any:
            # the arguments rewritten by hand: the base mutator would infer the call's shape from
            # them before this rewrite can pad its constants or slice them (64 against 58: an error)
            op = call.op if isinstance(call.op, tvm.ir.Op) else self.visit_expr(call.op)
            new = relax.Call(op, [self.visit_expr(arg) for arg in call.args], call.attrs, call.ty_args)
            name = str(getattr(new.op, "name", ""))
            padded: list[tuple[int, int]] = []  # (real, padded) channels of each padded argument
            for o, n in zip(call.args, new.args, strict=True):
                real, now = _channels(o), _channels(n)
                if real is not None and now is not None and now != real:
                    padded.append((real, now))
            if name == CONV2D:
                conv = self._conv(call, new)
                if conv is not None:
                    return conv
            elif padded and len(set(padded)) == 1:
                carried = self._carried(name, new, *padded[0])
                if carried is not None:
                    return carried
            if not padded:
                return new
            args = [self._real(o, n) for o, n in zip(call.args, new.args, strict=True)]
            return relax.Call(new.op, args, new.attrs, new.ty_args)

        def _carried(self, name: str, new: Any, real: int, padded: int) -> Any:
            """`new` computing its padded channels too, or None where its operator cannot."""
            a = new.attrs
            if name in _UNARY or (name in _POOLS and str(a.layout) == "NCHW"):
                return new
            if name == "relax.mean":
                axes = [int(v) % 4 for v in (a.axis or [])]
                return new if axes and 1 not in axes and bool(a.keepdims) else None
            if name not in _BINARY:
                return None
            args = []
            for i, arg in enumerate(new.args):
                dims = static_shape(arg)  # None where an extent is symbolic: the real channels are read
                if dims is None or len(dims) > 4:
                    return None
                channel = dims[len(dims) - 3] if len(dims) >= 3 else 1
                if channel in (1, padded):
                    args.append(arg)
                elif channel == real and isinstance(arg, Constant) and (name, i) != ("relax.divide", 0):
                    value = _pad_axis(arg.value.numpy(), len(dims) - 3, padded, _BINARY[name])
                    args.append(relax.const(value, str(arg.ty.dtype)))
                else:
                    return None
            if name == "relax.divide" and not isinstance(new.args[1], Constant):
                return None  # a padded divisor holds values no one chose (zeros)
            return relax.Call(new.op, args, new.attrs, new.ty_args)

        def _conv(self, call: Any, new: Any) -> Any:
            """A one-group or depthwise NCHW `conv2d` by a constant weight on padded channels, or None."""
            a = call.attrs
            layouts = (a.data_layout, a.kernel_layout, a.out_layout or a.data_layout)
            if layouts != ("NCHW", "OIHW", "NCHW") or not float_conv_by_constant(call):
                return None
            x, weight = new.args[0], new.args[1].value.numpy()
            real_in, now_in, real_out = _channels(call.args[0]), _channels(x), weight.shape[0]
            if real_in is None or now_in is None:
                return None
            groups = int(a.groups)
            depthwise = groups == real_in == real_out and weight.shape[1] == 1
            if groups != 1 and not depthwise:
                return None
            wanted_in = max(now_in, count(real_in, lanes))
            out = wanted_in if depthwise else count(real_out, lanes)
            if wanted_in == real_in and out == real_out:
                return None
            if now_in < wanted_in:  # an unpadded input whose count pads: zeros first
                x = self.builder_.emit(relax.op.nn.pad(x, [0, 0, 0, wanted_in - now_in, 0, 0, 0, 0]))
            weight = _pad_axis(weight, 0, out)
            if not depthwise:
                weight = _pad_axis(weight, 1, wanted_in)
            return relax.op.nn.conv2d(
                x,
                relax.const(weight, "float32"),
                strides=a.strides,
                padding=a.padding,
                dilation=a.dilation,
                groups=out if depthwise else 1,
                data_layout="NCHW",
                kernel_layout="OIHW",
                out_layout="NCHW",
                out_dtype=a.out_dtype,
            )

    return rewrite_functions(Padding, mod)
