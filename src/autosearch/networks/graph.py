"""A user's network as TVM Relax: import, the graph passes a CPU compiler needs, tasks, and the build.

Pipeline (TVM 0.27):
1. Import: `torch.export` -> `from_exported_program` for `FILE.py:FUNC`, or Relax's ONNX frontend
   for a `.onnx` file; the parameters are bound as constants.
2. Graph passes: TVM's library dispatch of sort, scan and sampling operators (`DispatchSortScan`,
   `DispatchSampling`: `relax.build` runs them before legalization, and they are the only lowering
   `cumsum`, `sort` or `topk` have), `FoldBatchnormToConv2D` (inference BatchNorm folded into the convolution's
   weights: one task fewer per convolution and one pass less over every activation), on a CPU
   convolutions in a blocked channel layout, NCHW16c with AVX-512 (`layouts`), `x ** 2`
   and `x ** 3` as products (`power_as_products`), `--fast-math` (`fast_math_module`), matmul
   rows padded to a multiple of 8 where they have no factor of 4 and an activation's columns to
   whole registers (`padded_matmuls`: ViT's 197 tokens), one pad of an input the Q, K and V
   projections share (`EliminateCommonSubexpr`), then TVM's own zero pipeline (LegalizeOps, AnnotateTIROpPattern,
   FoldConstant, FuseOps, FuseTIR) and `AttachAttrLayoutFreeBuffers` after fusion, so that
   MetaSchedule's `RewriteLayout` post-processor may choose a packed weight layout per task.
   An operator still left without a kernel is refused there, in one line (`support.check_lowered`).
3. Tasks: MetaSchedule's `extract_tasks` on that module, one per distinct fused function.
4. Build: `MetaScheduleApplyDatabase`, then `SplitLayoutRewritePreproc` + `FoldConstant`: each
   task's weight re-layout runs once at build time on the constant weights (pre-packed), not at
   every call; then Relax's own lowering and finalisation passes for the target.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autosearch.errors import InputError, WorkloadError, one_line
from autosearch.native_log import dropped
from autosearch.networks.bounds import checked_ids, guard_token_ids
from autosearch.networks.codegen import build_parallel
from autosearch.networks.folding import prepacks_in_numpy
from autosearch.networks.inputs import InputSpec
from autosearch.networks.rewrite import rewrite_calls, rewrite_functions, static_shape

__all__ = [
    "NetworkGraph",
    "activations_before_reshapes",
    "build_network",
    "concatenations_flattened",
    "fast_math_module",
    "group_norms_as_layer_norms",
    "import_network",
    "index_bounds",
    "load_source",
    "padded_columns",
    "padded_matmuls",
    "padded_rows",
    "power_as_products",
    "quiet_import",
    "tasks_of",
    "transposed_convolutions_as_convolutions",
    "whole_image_pools_as_means",
]


@dataclass
class NetworkGraph:
    """The prepared module (parameters bound, passes run), its tasks and one workload per task."""

    mod: Any
    tasks: list[Any]
    workloads: list[Any]
    #: rows of the table each integer input indexes (`index_bounds`), by input name
    index_bounds: dict[str, int] = field(default_factory=dict)
    #: whether `--fast-math` replaced any function of the model by its approximation
    approximated: bool = False


@contextlib.contextmanager
def quiet_import() -> Iterator[None]:
    """Third-party deprecation noise (torch.export, transformers) kept off the user's screen while
    a model is loaded and imported."""
    with warnings.catch_warnings():
        for cat in (FutureWarning, DeprecationWarning, UserWarning):
            warnings.simplefilter("ignore", cat)
        yield


def load_source(spec: str, deadline: float | None = None) -> Any:
    """The model a spec names: an `nn.Module` (eval mode) from `FILE.py:FUNC`, or an `onnx.ModelProto`.
    `deadline` (a `time.perf_counter()` value) bounds the user's import and call of `FUNC`
    (`load_module_object`): the budget in minutes covers them."""
    if spec.endswith(".onnx"):
        path = Path(spec)
        if not path.is_file():
            raise InputError(f"ONNX file {spec} does not exist")
        try:
            import onnx

            model = onnx.load(str(path))
            onnx.checker.check_model(model)
        except Exception as exc:
            raise InputError(f"cannot read {spec} as an ONNX model: {one_line(exc)}") from None
        return model
    import torch

    from autosearch.workloads.module import load_module_object

    obj, _ = load_module_object(spec, deadline)
    if not isinstance(obj, torch.nn.Module):
        raise InputError(f"{spec} returned {type(obj).__name__}, not a torch.nn.Module (or give an .onnx file)")
    return obj.eval()


def _from_torch(net: Any, arrays: Sequence[np.ndarray], spec: str) -> tuple[Any, dict[str, Any]]:
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    try:
        ep = torch.export.export(net, tuple(torch.from_numpy(a) for a in arrays))
        _drop_empty_concat_inputs(ep)
        _scan_dtypes_as_torch(ep)
        mod = from_exported_program(ep, keep_params_as_input=True)
    except Exception as exc:
        raise InputError(f"cannot import {spec} into TVM Relax: {type(exc).__name__}: {one_line(exc)}") from None
    mod, params = relax.frontend.detach_params(mod)
    values = list(params.get("main", [])) if params else []
    fparams = list(mod["main"].params)
    n_in = len(fparams) - len(values)
    bound = {str(getattr(p, "name_hint", None) or p.name): v for p, v in zip(fparams[n_in:], values)}
    return mod, bound


def _drop_empty_concat_inputs(ep: Any) -> int:
    """Remove the 1-D empty tensors from every `aten.cat` of an exported program (in place); the
    number of concatenations changed.

    Why: `torch.cat` skips a tensor of shape (0,) whatever the others' rank (a legacy rule), and
    transformers' key/value cache starts as one, so every decoder (GPT-2, Llama) concatenates it
    with its 4-D keys; Relax's `concat` rejects the mixed ranks. Dropping it computes the same."""
    import torch

    def empty_1d(node: Any) -> bool:
        shape = getattr(getattr(node, "meta", {}).get("val"), "shape", None)
        return shape is not None and tuple(shape) == (0,)

    changed = 0
    graph = ep.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != torch.ops.aten.cat.default:
            continue
        inputs = list(node.args[0])
        keep = [a for a in inputs if not empty_1d(a)]
        if len(keep) == len(inputs) or not keep:
            continue
        changed += 1
        if len(keep) == 1:
            node.replace_all_uses_with(keep[0])
            graph.erase_node(node)
        else:
            node.args = (keep, *node.args[1:])
    if changed:
        graph.eliminate_dead_code()
        ep.graph_module.recompile()
    return changed


def _scan_dtypes_as_torch(ep: Any) -> int:
    """Give every `aten.cumsum` / `aten.cumprod` of an exported program whose output dtype differs
    from its input's (a bool or small integer input: PyTorch sums it in int64) that dtype
    explicitly (in place); the number of scans changed.

    Why: Relax's PyTorch frontend emits such a scan in its input's dtype, so a bool mask's running
    count stays bool (1 + 1 = 1) and FoldConstant cannot evaluate it: transformers' decoders
    compute `(position_diff != 1).cumsum(-1)` to find packed sequences, and that scan, over
    constants, was built at run time instead of folded away."""
    import torch

    scans = {torch.ops.aten.cumsum.default, torch.ops.aten.cumprod.default}
    changed = 0
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target not in scans or "dtype" in node.kwargs:
            continue
        out = getattr(node.meta.get("val"), "dtype", None)
        x = node.args[0]
        inp = getattr(getattr(x, "meta", {}).get("val"), "dtype", None)
        if out is not None and inp is not None and out != inp:
            node.kwargs = {**node.kwargs, "dtype": out}
            changed += 1
    if changed:
        ep.graph_module.recompile()
    return changed


def _from_onnx(model: Any, specs: Sequence[InputSpec], spec: str) -> tuple[Any, dict[str, Any]]:
    from tvm.relax.frontend.onnx import from_onnx

    graph_inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    if sorted(graph_inputs) != sorted(s.name for s in specs):
        raise InputError(
            f"{spec} takes inputs {', '.join(graph_inputs)}; --input named {', '.join(s.name for s in specs)}"
        )
    try:
        mod = from_onnx(
            model,
            shape_dict={s.name: list(s.shape) for s in specs},
            dtype_dict={s.name: s.dtype for s in specs},
            keep_params_in_input=False,
        )
    except Exception as exc:
        raise InputError(f"cannot import {spec} into TVM Relax: {type(exc).__name__}: {one_line(exc)}") from None
    return mod, {}


def index_bounds(mod: Any, specs: Sequence[InputSpec]) -> dict[str, int]:
    """The rows of the table each integer input of `main` indexes: for every `take(table, ids,
    axis)` whose `ids` is an input (through casts and reshapes only), `table.shape[axis]`, the
    smallest where an input indexes several. Inputs match `main`'s parameters by name, else by
    position (PyTorch's exporter names them after `forward`'s arguments, not `--input`).

    Why: TVM lowers `take` in its "fast" mode, with no bounds check (it warns so on every build),
    so a token id past the vocabulary reads memory outside the embedding table in a built library
    where PyTorch raises IndexError; knowing the bound, the loader refuses such an input. The
    walk is `bounds.checked_ids`, the one the library's own check is built from, so the manifest's
    bound and the kernel's are found by the same rule."""
    return {name: rows for name, (_param, rows) in checked_ids(mod["main"], specs).items()}


def fast_math_module(mod: Any) -> Any:
    """`--fast-math`: GELU, sigmoid, SiLU, `erf`, `exp`, `tanh` and softmax as TVM's polynomial
    approximations (`topi.fast_erf`, `fast_exp`, `fast_tanh`, `fast_softmax`), the rewrite of TVM's
    own `FastMathTransform`, which misses GELU, sigmoid and SiLU: the PyTorch frontend emits
    `relax.nn.gelu`, whose legalization calls the exact `erf` (`relax.nn.gelu_tanh`: `tanh`), and
    `relax.sigmoid` / `relax.nn.silu`, whose `tir.sigmoid` LLVM lowers to a scalar `expf` call per
    lane; they are rewritten here first (float32 only).

    Why: the exact `erf` is many times slower than the polynomial here (a BERT FFN's GELU in its
    one scheduled form against `fast_erf`, whose outputs differ from it only in the last digits;
    bench/README.md "`tune-model --fast-math`"); a SiLU over a 1x96x112x112 tensor ran 1.87 ms
    with `tir.sigmoid` (16 `expf` calls a vector) and 0.21 ms with `fast_exp` on a Zen 5, the
    largest tasks of EfficientNet-B0 (convolutions fused with it) ran at 28-57 GFLOP/s."""
    from tvm import relax, tirx, topi
    from tvm.relax import expr_functor

    def gelu(x: Any) -> Any:
        erf = topi.fast_erf(x * tirx.const(0.5**0.5, x.dtype))
        return x * (tirx.const(0.5, x.dtype) + erf * tirx.const(0.5, x.dtype))

    def gelu_tanh(x: Any) -> Any:
        c = tirx.const(math.sqrt(2.0 / math.pi), x.dtype)
        inner = topi.fast_tanh(c * x * (tirx.const(1.0, x.dtype) + tirx.const(0.044715, x.dtype) * x * x))
        return tirx.const(0.5, x.dtype) * x * (tirx.const(1.0, x.dtype) + inner)

    def sigmoid(x: Any) -> Any:
        return tirx.const(1.0, x.dtype) / (tirx.const(1.0, x.dtype) + topi.fast_exp(-x))

    def silu(x: Any) -> Any:
        return x / (tirx.const(1.0, x.dtype) + topi.fast_exp(-x))

    rewrites = {  # operator: (its fast form, the kernel's name)
        "relax.nn.gelu": (gelu, "fast_gelu"),
        "relax.nn.gelu_tanh": (gelu_tanh, "fast_gelu"),
        "relax.sigmoid": (sigmoid, "fast_sigmoid"),
        "relax.nn.silu": (silu, "fast_silu"),
    }

    @expr_functor.mutator
    class FastActivations(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            found = rewrites.get(str(getattr(call.op, "name", "")))
            if found is not None and getattr(getattr(call.args[0], "ty", None), "dtype", None) == "float32":
                fn, name = found
                return self.builder_.call_te(fn, call.args[0], primfunc_name_hint=name)
            return super().visit_call_(call)

    return relax.transform.FastMathTransform()(rewrite_functions(FastActivations, mod))


#: Row counts padded to a multiple of this where the padding adds at most `_PAD_WASTE` of the work.
_PAD_MULTIPLE, _PAD_WASTE = 8, 1 / 16


def padded_rows(m: int, tile: int = 0) -> int:
    """The row count a matmul's left operand is padded to: `m` where it already has a factor of 4
    (or is small), else the next multiple of 8 if that adds at most 1/16 of the work. With `tile`
    (AMX's 16 rows a tile, a bf16 build's), the next multiple of it under the same bound.

    Why 8: ViT-base's fc layers (197 rows, Zen 5, the register blocks with packed weights, cold, one
    process) ran 447-464 GFLOP/s of the 197 rows' work padded to 200 against 412-447 padded to 208
    (multiple of 16): 200 = 8 x 25 still tiles by 2, 4, 5, 8, 10, 20 and computes 1.5% more, not 5.6%."""
    if m < 32 or m % (tile or 4) == 0:
        return m
    up = -(-m // (tile or _PAD_MULTIPLE)) * (tile or _PAD_MULTIPLE)
    return up if up - m <= _PAD_WASTE * m else m


def padded_columns(n: int, lanes: int) -> int:
    """The column count a matmul's right operand is padded to: `n` where a register of `lanes`
    float32 lanes divides it (or it is small), else the next multiple of `lanes` if that adds at
    most 1/16 of the work (ViT-base's attention scores: 197 -> 208 on 16 lanes)."""
    if lanes < 8 or n < 2 * lanes or n % lanes == 0:
        return n
    up = -(-n // lanes) * lanes
    return up if up - n <= _PAD_WASTE * n else n


def padded_matmuls(mod: Any, lanes: int = 0, tile_rows: int = 0) -> Any:
    """Every `relax.matmul` whose rows (the left operand's second-last axis) `padded_rows` pads (to
    whole tiles of `tile_rows` where given),
    or whose columns (a right operand that is no constant: its last axis) `padded_columns` pads to
    whole registers of `lanes`, computes on zero-padded operands and is sliced back.

    Why: MetaSchedule tiles a loop only by the divisors of its extent, so a prime row count leaves
    no register block but 1 row: ViT-base's 197 tokens (prime) made every linear layer a vector-
    matrix product in each schedule the search could write; padded to 200 the tiles are 2, 4, 5, 8,
    10, 20, 25, for 1.5% more arithmetic. Columns: the vectorized axis of a product whose right
    operand is an activation (attention's keys, transposed) ends in a partial register on every
    row: ViT-base's 197-column scores ran 124 GFLOP/s after 10 minutes of tuning where the
    64-column product after them ran 270 (Intel `rocketlake`). The padded rows and columns never
    reach an output; a constant weight is left as it is (padding it would copy it every call)."""
    import tvm
    from tvm import relax

    def padded(call: Any, builder: Any) -> Any:
        x, w = call.args[0], call.args[1]
        dims, wdims = static_shape(x), static_shape(w)
        if dims is None or len(dims) < 2:
            return None
        rank, m = len(dims), dims[-2]
        up = padded_rows(m, tile_rows)
        wrank = len(wdims) if wdims is not None else 0
        n = wdims[-1] if wdims is not None and wrank >= 2 else 0  # 0: no static column count
        right = padded_columns(n, lanes) if n and not isinstance(w, tvm.ir.expr.Constant) else n
        if up == m and right == n:
            return None
        if up != m:
            width = [0] * (2 * rank)
            width[2 * (rank - 2) + 1] = up - m
            x = builder.emit(relax.op.nn.pad(x, width))
        if right != n:
            width = [0] * (2 * wrank)
            width[2 * (wrank - 1) + 1] = right - n
            w = builder.emit(relax.op.nn.pad(w, width))
        y = builder.emit(relax.op.matmul(x, w, out_dtype=call.attrs.out_dtype))
        out = max(rank, wrank, 2)
        cut = [(out - 2, m)] if up != m else []
        cut += [(out - 1, n)] if right != n else []
        return relax.op.strided_slice(y, axes=[a for a, _ in cut], begin=[0] * len(cut), end=[e for _, e in cut])

    return rewrite_calls(mod, "relax.matmul", padded)


def power_as_products(mod: Any) -> Any:
    """Every `relax.power(x, c)` with a constant exponent 2 or 3 as `x * x` (`* x`), as PyTorch's
    CPU kernel computes it.

    Why: TVM lowers `power` to a `pow` call per element (and warns "Detected pow(x, y) where
    y >= 3" on every build); GPT-2's GELU (`0.044715 * x ** 3`) is the common case: built from
    the prior it ran many times faster with products than with `pow` (bench/README.md "GPT-2")."""
    from tvm import relax

    def products(call: Any, builder: Any) -> Any:
        value: Any = getattr(call.args[1], "value", None)  # a constant's tensor
        values = value.numpy() if hasattr(value, "numpy") else None
        if values is None or values.size != 1:
            return None
        exponent = float(values.reshape(()))
        x = call.args[0]
        dtype = getattr(getattr(x, "ty", None), "dtype", "")
        if exponent not in (2.0, 3.0) or not str(dtype).startswith("float"):
            return None
        square = builder.emit(relax.op.multiply(x, x))
        return square if exponent == 2.0 else relax.op.multiply(square, x)

    return rewrite_calls(mod, "relax.power", products)


def whole_image_pools_as_means(mod: Any) -> Any:
    """Every `avg_pool2d` whose one window covers the whole unpadded image as a `mean` over the
    image's axes: the same numbers (the divisor is the image's size either way).

    Why: transformers' EfficientNet pools with `AvgPool2d(1280, ceil_mode=True)` on a 7x7 image,
    and TVM loops over the whole 1280x1280 window for every output, bounds-checking each step:
    the pool alone took seconds from the prior's schedule, and B0 built hundreds of times slower
    than PyTorch eager end to end, where it now runs close to it (bench/README.md "EfficientNet-B0")."""
    from tvm import relax

    def mean(call: Any, builder: Any) -> Any:
        a = call.attrs
        layout, x = str(a.layout), call.args[0]
        shape = getattr(getattr(getattr(x, "ty", None), "shape", None), "values", None)
        if layout not in ("NCHW", "NHWC") or str(a.out_layout) != layout or shape is None:
            return None
        h, w = layout.index("H"), layout.index("W")
        if not all(isinstance(getattr(d, "value", None), int) for d in shape):
            return None
        size = (int(shape[h].value), int(shape[w].value))
        window = [int(v) for v in a.pool_size]
        if any(int(p) for p in a.padding) or any(int(d) != 1 for d in a.dilation):
            return None
        out = [
            1 + -(-(n - k) // int(st)) if a.ceil_mode else 1 + (n - k) // int(st)
            for n, k, st in zip(size, window, a.strides)
        ]
        if out != [1, 1] or any(k < n for k, n in zip(window, size)):
            return None
        return relax.op.mean(x, axis=[h, w], keepdims=True)

    return rewrite_calls(mod, "relax.nn.avg_pool2d", mean)


def group_norms_as_layer_norms(mod: Any) -> Any:
    """Every `group_norm` over a channel-first tensor as a `layer_norm` over the rows of the tensor
    reshaped (batch, groups, channels a group x the spatial size), then the per-channel scale and
    shift: the same numbers.

    Why: a group norm's reductions run over a group's channels and the whole image at once, which
    no loop-nest form here schedules, and the prior's design-space pick of it ran 20x slower than
    TVM's unscheduled loops (a 128-channel 32x32 group norm + SiLU: 18.4 ms a call against 0.82;
    a small U-Net 4x slower than PyTorch eager). As a row reduction it gets the row forms
    (`row_reductions`), and the scale and shift fuse with what follows, as a layer norm's do."""
    import numpy as np
    from tvm import relax

    def as_layer_norm(call: Any, builder: Any) -> Any:
        x, gamma, beta = call.args
        a = call.attrs
        shape = static_shape(x)
        if shape is None or len(shape) < 3 or int(a.channel_axis) % len(shape) != 1:
            return None
        if sorted(int(v) % len(shape) for v in a.axes) != list(range(2, len(shape))):
            return None
        n, c, groups = shape[0], shape[1], int(a.num_groups)
        if c % groups:
            return None
        dtype = str(x.ty.dtype)
        row = (c // groups) * math.prod(shape[2:])
        rows = builder.emit(relax.op.reshape(x, (n, groups, row)))
        ones, zeros = relax.const(np.ones(row, dtype)), relax.const(np.zeros(row, dtype))
        normed = builder.emit(relax.op.nn.layer_norm(rows, ones, zeros, [-1], float(a.epsilon), False, False))
        out = builder.emit(relax.op.reshape(normed, shape))
        per_channel = (c,) + (1,) * (len(shape) - 2)
        if bool(a.scale):
            out = builder.emit(relax.op.multiply(out, relax.op.reshape(gamma, per_channel)))
        if bool(a.center):
            out = builder.emit(relax.op.add(out, relax.op.reshape(beta, per_channel)))
        return out

    return rewrite_calls(mod, "relax.nn.group_norm", as_layer_norm)


def _phase_taps(kernel: int, stride: int, pad: int) -> tuple[int, int]:
    """The input offsets (first, last) a transposed convolution's outputs read, over all `stride`
    output phases: phase a's output s*y + a reads input y + d through kernel tap a + pad - s*d."""
    first = min(-((kernel - 1 - a - pad) // stride) for a in range(stride))
    return first, max((a + pad) // stride for a in range(stride))


def _subpixel_weight(w: np.ndarray, strides: Sequence[int], pads: Sequence[int]) -> np.ndarray:
    """A transposed convolution's weight (in, out, kh, kw) as a convolution's (out x sh x sw, in,
    taps, taps): output channel (o, a, b) computes output phase (a, b) of channel o; taps no phase
    reads are zero."""
    cin, cout, kh, kw = w.shape
    (sh, sw), (ph, pw) = strides, pads
    (h0, h1), (w0, w1) = _phase_taps(kh, sh, ph), _phase_taps(kw, sw, pw)
    out = np.zeros((cout, sh, sw, cin, h1 - h0 + 1, w1 - w0 + 1), w.dtype)
    for a in range(sh):
        for dy in range(h0, h1 + 1):
            i = a + ph - sh * dy
            if not 0 <= i < kh:
                continue
            for b in range(sw):
                for dx in range(w0, w1 + 1):
                    j = b + pw - sw * dx
                    if 0 <= j < kw:
                        out[:, a, b, :, dy - h0, dx - w0] = w[:, :, i, j].T
    return out.reshape(cout * sh * sw, cin, h1 - h0 + 1, w1 - w0 + 1)


def transposed_convolutions_as_convolutions(mod: Any) -> Any:
    """Every one-group NCHW `conv2d_transpose` of two kinds as a `conv2d`, the same numbers:
    - one that upsamples by its stride exactly (kernel + output padding = stride + both paddings:
      a U-Net's 2x2 stride 2, a GAN's 4x4 stride 2 padding 1, a decoder's 3x3 stride 2 padding 1
      output padding 1), with a constant weight: one convolution over the
      input computes every output phase, (out channels x stride^2) channels over the taps the
      phases read (`_subpixel_weight`), then each pixel's stride x stride outputs move to their
      places (reshape, transpose, reshape);
    - stride 1: a convolution with the kernel flipped and its in and out channels swapped, padded
      kernel - 1 - padding.

    Why: TVM computes a transposed convolution as a convolution over the input dilated with zeros
    (three of four multiplies by zero at stride 2), in a layout none of the convolution schedules
    here reaches: a 128 -> 64 channel 2x2 one on a 32x32 image ran 5.7 ms a call from the prior's
    pick (12 GFLOP/s). As a convolution it is blocked and scheduled as every other one."""
    import tvm
    from tvm import relax

    def as_convolution(call: Any, builder: Any) -> Any:
        x, w = call.args
        a = call.attrs
        xs, ws = static_shape(x), static_shape(w)
        if xs is None or ws is None or int(a.groups) != 1 or str(a.data_layout) != "NCHW":
            return None
        if str(a.kernel_layout) != "IOHW" or str(a.out_layout or "NCHW") != "NCHW":
            return None
        if any(int(d) != 1 for d in a.dilation):
            return None
        strides, padding, kernel = [int(v) for v in a.strides], [int(v) for v in a.padding], list(ws[2:])
        extra = [int(v) for v in a.output_padding]  # rows and columns added at the end
        n, _, h, width = xs
        out_channels = ws[1]
        dtype = a.out_dtype if str(a.out_dtype) else None
        exact = all(kernel[i] - padding[i] - padding[i + 2] + extra[i] == strides[i] for i in range(2))
        if exact and strides != [1, 1] and isinstance(w, tvm.ir.expr.Constant):
            (h0, h1), (w0, w1) = (_phase_taps(k, st, pad) for k, st, pad in zip(kernel, strides, padding[:2]))
            if min(-h0, -w0, h1, w1) < 0:
                return None
            weight = _subpixel_weight(w.value.numpy(), strides, padding[:2])
            y = builder.emit(relax.op.nn.conv2d(x, relax.const(weight), padding=[-h0, -w0, h1, w1], out_dtype=dtype))
            sh, sw = strides
            y = builder.emit(relax.op.reshape(y, (n, out_channels, sh, sw, h, width)))
            y = builder.emit(relax.op.permute_dims(y, [0, 1, 4, 2, 5, 3]))
            return relax.op.reshape(y, (n, out_channels, h * sh, width * sw))
        pads = [kernel[0] - 1 - padding[0], kernel[1] - 1 - padding[1]]
        pads += [kernel[0] - 1 - padding[2], kernel[1] - 1 - padding[3]]
        if strides == [1, 1] and min(pads) >= 0 and not any(extra):
            flipped = relax.op.flip(builder.emit(relax.op.flip(w, 2)), 3)
            w2 = builder.emit(relax.op.permute_dims(builder.emit(flipped), [1, 0, 2, 3]))
            return relax.op.nn.conv2d(x, w2, padding=pads, out_dtype=dtype)
        return None

    return rewrite_calls(mod, "relax.nn.conv2d_transpose", as_convolution)


def concatenations_flattened(mod: Any) -> Any:
    """Every `concat` whose input is itself a `concat` on the same axis given that concat's inputs
    instead: `concat(concat(a, b), c)` becomes `concat(a, b, c)`.

    Why: a dense block written as `cat([x, layer(x)])` layer after layer chains its concatenations,
    and each one then has two readers (the next concatenation and the layer's BatchNorm + ReLU), so
    TVM's fusion leaves it a task of its own that copies every earlier feature map again: each layer
    wrote its whole input twice (the copy, then the normalised copy). Flat, as torchvision's
    `cat(features)` writes it, each concatenation has one reader and fuses into it: the layer reads
    the feature maps where their convolutions wrote them (bench/README.md "DenseNet-121's
    concatenations flattened")."""
    from tvm import relax

    def spliced(field: Any, axis: int, builder: Any) -> list[Any]:
        bound = builder.lookup_binding(field) if isinstance(field, relax.Var) else None
        if bound is None or str(getattr(getattr(bound, "op", None), "name", "")) != "relax.concat":
            return [field]
        if int(bound.attrs.axis) != axis:
            return [field]
        fields = bound.args[0]
        return list(fields.fields) if isinstance(fields, relax.Tuple) else [field]

    def flat(call: Any, builder: Any) -> Any:
        fields, axis = call.args[0], call.attrs.axis
        if not isinstance(fields, relax.Tuple) or axis is None:
            return None
        inputs = [f for field in fields.fields for f in spliced(field, int(axis), builder)]
        if len(inputs) == len(fields.fields):
            return None
        return relax.op.concat(inputs, axis=int(axis))

    return relax.transform.DeadCodeElimination()(rewrite_calls(mod, "relax.concat", flat))


#: Elementwise activations `activations_before_reshapes` moves: each one value in, one out.
_ACTIVATIONS = ("relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.relu", "relax.nn.silu", "relax.sigmoid", "relax.tanh")


def activations_before_reshapes(mod: Any) -> Any:
    """Every activation of a `reshape` (`gelu(reshape(t, S))`) computed on the reshape's input
    instead (`reshape(gelu(t), S)`), then reshapes of reshapes merged and reshapes to the same
    shape dropped (TVM's `RemoveRedundantReshape`).

    Why: `torch.export` writes a `Linear` on a 4-D input (ConvNeXt's MLP on NHWC maps) as
    reshape -> `addmm` -> reshape, so its GELU sat between two reshapes, and TVM's fusion, which
    fuses only elementwise operators after a matmul, left the GELU a task of its own: one more
    pass over the MLP's widest activations (1.4 ms of ConvNeXt-tiny's 52 from the prior alone).
    Moved, the reshapes cancel and the GELU fuses into the matmul with its bias."""
    from tvm import relax

    def before(call: Any, builder: Any) -> Any:
        x = call.args[0]
        bound = builder.lookup_binding(x) if isinstance(x, relax.Var) else None
        if bound is None or str(getattr(getattr(bound, "op", None), "name", "")) != "relax.reshape":
            return None
        inner = builder.emit(relax.Call(call.op, [bound.args[0]], call.attrs))
        return relax.op.reshape(inner, bound.args[1])

    for op in _ACTIVATIONS:
        mod = rewrite_calls(mod, op, before)
    return relax.transform.DeadCodeElimination()(relax.transform.RemoveRedundantReshape()(mod))


def _graph_passes(
    mod: Any,
    params: dict[str, Any],
    *,
    fast_math: bool,
    register_bits: int = 0,
    precision: str = "fp32",
    calibration: Sequence[Sequence[np.ndarray]] = (),
) -> tuple[Any, bool]:
    """Parameters bound, BatchNorm folded, convolutions blocked to `register_bits` SIMD registers
    (`layouts`; 0: as imported), (fast math), dense layers and convolutions in `precision`
    (`lowp`; int8's activation ranges observed on the `calibration` samples, one array an input
    each), TVM's zero pipeline with layout-free weights; and whether fast math approximated
    anything (a model with none of its functions is built exactly either way)."""
    import tvm
    from tvm import relax

    from autosearch.backends.tvm.lowp import TILE_ROWS, uses_tiles
    from autosearch.networks.channel_padding import padded_channels, padded_count, whole_register_count
    from autosearch.networks.folding import batch_norms_as_scale_shift, exporter_zeros_dropped, fold_in_numpy
    from autosearch.networks.layouts import (
        blocked_convolutions,
        clips_as_bounds,
        pads_into_convolutions,
    )

    t = relax.transform
    mod = exporter_zeros_dropped(fold_in_numpy(mod))  # before binding: no weight is taken for such a zero
    if params:
        mod = t.BindParams("main", params)(mod)
    mod = power_as_products(mod)  # before FoldConstant, which lowers every `power` it meets (and warns)
    mod = activations_before_reshapes(concatenations_flattened(whole_image_pools_as_means(mod)))
    mod = transposed_convolutions_as_convolutions(group_norms_as_layer_norms(mod))
    # TVM lowers sort, scan and sampling operators (`cumsum`, `cumprod`, `sort`, `argsort`, `topk`,
    # `bucketize`, `multinomial_from_uniform`) in its library-dispatch passes, not in LegalizeOps
    # (they have no legalization): `relax.build` runs them first, and so must this pipeline, or a
    # decoder's mask (transformers' `cumsum` over the position ids) reaches the VM code generator
    # as a bare `R.cumsum` and fails after the whole prior pass. Before FoldConstant, so a scan of
    # constants (that mask) is computed here once.
    dispatch = [relax.backend.DispatchSampling(), relax.backend.DispatchSortScan()]
    mod = tvm.transform.Sequential([*dispatch, t.FoldBatchnormToConv2D(), t.DecomposeOpsForInference()])(mod)
    mod = batch_norms_as_scale_shift(t.FoldConstant()(fold_in_numpy(mod)))  # NumPy first: TVM compiles per call
    if register_bits > 0:
        # int8's kernel writes whole-register output blocks only: a half block would stay float32
        count = whole_register_count if precision == "int8" else padded_count
        mod = padded_channels(pads_into_convolutions(clips_as_bounds(mod)), register_bits, count)
        mod = blocked_convolutions(mod, register_bits)
    approximated = False
    if fast_math:
        import tvm_ffi

        exact, mod = mod, fast_math_module(mod)
        approximated = not tvm_ffi.structural_equal(exact, mod)
    # a bf16 build on AMX tiles: its products' rows in whole tiles (ViT-base's 197 tokens: 208)
    on_tiles = precision == "bf16" and uses_tiles(tvm.target.Target.current())
    mod = t.EliminateCommonSubexpr()(
        padded_matmuls(mod, register_bits // 32, TILE_ROWS if on_tiles else 0)
    )  # one pad of a shared input
    if register_bits > 0:
        from autosearch.networks.lowp import int8_candidate
        from autosearch.networks.winograd import winograd_convolutions

        # before bf16: a float32 F(4x4, 3x3) does a quarter of the multiplies a bf16 direct 3x3
        # convolution does at twice the rate (ResNet-50 in bf16 from the prior alone, bench/README
        # "3x3 convolutions by Winograd's minimal filtering"); int8's `vpdpbusd` does four times
        # fp32's multiplies a cycle on a quarter of the bytes, so the 3x3 ones int8 takes stay
        # direct, and those it leaves float32 (an output block narrower than 16 lanes: PP-OCRv4's
        # 96 -> 24 head convolutions, 5.5-6.8 ms direct against Winograd's ~4) keep Winograd
        mod = winograd_convolutions(mod, kept=int8_candidate if precision == "int8" else lambda call: False)
    if precision == "bf16":
        from autosearch.networks.lowp import bf16_attention_matmuls, bf16_convolutions, bf16_dense_layers

        mod, _ = bf16_dense_layers(mod, on_tiles)
        # convolutions by `vdpbf16ps` only without AMX: on AMX's Intel CPUs it does no more
        # products a cycle than fp32's FMAs (ResNet-50 with them in bf16 40.7 ms, float32 29.7;
        # bench/README "Convnets in bf16 after 10 minutes"); an attention's matmuls only with it
        if on_tiles:
            mod, _ = bf16_attention_matmuls(mod)
        else:
            mod, _ = bf16_convolutions(mod)
    if precision == "int8":
        from autosearch.networks.calibration import input_ranges
        from autosearch.networks.lowp import int8_candidate, int8_layers

        ranges = input_ranges(mod, int8_candidate, calibration, untuned_build(tvm.target.Target.current()))
        mod, _ = int8_layers(mod, ranges)
    if precision != "fp32":
        # one cast of an input its layers share: BERT's query, key and value each cast the same
        # normalized rows to bf16 (three tasks where one does)
        mod = t.EliminateCommonSubexpr()(mod)
    return lowered(mod), approximated


def untuned_build(target: Any) -> Any:
    """A function from a prepared graph (before `lowered`) to its Relax executable as TVM builds it
    untuned: `calibration`'s probe."""
    from tvm.s_tir import meta_schedule as ms

    return lambda mod: build_module(lowered(mod), ms.database.MemoryDatabase(), target)


def lowered(mod: Any) -> Any:
    """A prepared graph through TVM's zero pipeline: operators legalized to TIR, fused into tasks,
    weights marked layout-free."""
    import tvm
    from tvm import relax

    from autosearch.networks.layouts import legalize_map

    t = relax.transform
    return tvm.transform.Sequential(
        [
            t.DecomposeOpsForInference(),
            t.CanonicalizeBindings(),
            t.LegalizeOps(legalize_map()),
            # a legalized `index_tensor` reads its indices through `(c0, c1)[i]` bindings, which
            # FoldConstant does not see through: resolved here, a gather of constants (a decoder's
            # mask over its constant position ids) is folded, not left a task
            t.CanonicalizeBindings(),
            t.AnnotateTIROpPattern(),
            t.FoldConstant(),
            t.FuseOps(),
            t.FuseTIR(),
            # after fusion, as TVM's own tuning pipeline: `FuseTIR` drops the attribute, and before
            # it no fused task (a matmul with its bias, a convolution with its activation) had a
            # weight `RewriteLayout` could pack
            t.AttachAttrLayoutFreeBuffers(),
        ]
    )(mod)


def tasks_of(mod: Any, target: Any, source: str) -> tuple[list[Any], list[Any]]:
    """MetaSchedule's tasks of a prepared module and one `ModuleWorkload` per task."""
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks

    from autosearch.workloads.module import ModuleWorkload

    tasks = list(extract_tasks(mod, target))
    if not tasks:
        raise WorkloadError(f"{source}: TVM found no tunable operator in the model")
    workloads = [
        ModuleWorkload(
            name=f"net/{t.task_name}",
            ir_module=t.dispatched[0],
            source=source,
            family="network",
            params={"task": t.task_name, "weight": int(t.weight)},
        )
        for t in tasks
    ]
    return tasks, workloads


def import_network(
    spec: str,
    source: Any,
    specs: Sequence[InputSpec],
    arrays: Sequence[np.ndarray],
    target: Any,
    *,
    fast_math: bool = False,
    blocked: bool = True,
    precision: str = "fp32",
    calibration: Sequence[Sequence[np.ndarray]] | None = None,
) -> NetworkGraph:
    """The prepared module and tasks of a loaded model (`load_source`); see the module doc.
    `blocked=False` keeps every convolution in its imported layout; `precision` "bf16"/"int8"
    computes the dense layers and convolutions in it (`lowp`), int8's ranges calibrated on the
    `calibration` samples (None: on `arrays`)."""
    from autosearch.networks.support import check_lowered
    from autosearch.search.registers import simd_bits

    if hasattr(source, "graph"):  # an onnx.ModelProto
        mod, params = _from_onnx(source, specs, spec)
    else:
        mod, params = _from_torch(source, arrays, spec)
    bounds = index_bounds(mod, specs)
    mod = guard_token_ids(mod, specs, target)  # the library keeps token ids inside their tables itself
    with target, dropped():  # `take`'s unchecked-mode warning: the artifact checks the ids itself
        prepared, approximated = _graph_passes(
            mod,
            params,
            fast_math=fast_math,
            register_bits=simd_bits(target) if blocked else 0,
            precision=precision,
            calibration=[list(arrays)] if calibration is None else calibration,
        )
    check_lowered(prepared, spec, target)  # an operator with no kernel: one line now, not at the build
    tasks, workloads = tasks_of(prepared, target, spec)
    return NetworkGraph(prepared, tasks, workloads, bounds, approximated)


def _has_block(stmt: Any) -> bool:
    """Whether a TIR statement holds a block anywhere below it."""
    from tvm import s_tir

    if isinstance(stmt, s_tir.SBlockRealize):
        return True
    children = list(getattr(stmt, "seq", None) or [])
    children += [getattr(stmt, k, None) for k in ("body", "then_case", "else_case")]
    return any(c is not None and _has_block(c) for c in children)


def _rooted_opaque_functions(mod: Any) -> Any:
    """`mod` with every PrimFunc whose body is one block with no block inside (TOPI's `te.extern`
    kernels: the CPU sort, argsort and top-k calls, the scans of `cumsum` and `cumprod`) put under
    a `root` block, the form every other kernel has; the same computation.

    Why: `SplitLayoutRewritePreproc` takes each PrimFunc's outermost block for the root and
    requires a compute block below it, so such a kernel failed the build ("There should be a
    compute block if there is only one subtree under the root")."""
    from tvm import s_tir, tirx

    opaque = [
        (gv, func)
        for gv, func in mod.functions_items()
        if isinstance(func, tirx.PrimFunc)
        and isinstance(func.body, s_tir.SBlockRealize)
        and not _has_block(func.body.block.body)
    ]
    if not opaque:
        return mod
    mod = mod.clone()
    for gv, func in opaque:
        root = s_tir.SBlock([], [], [], "root", func.body)
        mod.update_func(gv, func.with_body(s_tir.SBlockRealize([], True, root)))
    return mod


def build_network(graph: NetworkGraph, database: Any, target: Any) -> Any:
    """The Relax executable of a prepared module with every task's schedule from `database` (a task
    missing there is built as TVM builds it untuned), weights pre-packed (module doc, step 4)."""
    return build_module(graph.mod, database, target)


def build_module(mod: Any, database: Any, target: Any) -> Any:
    """`build_network` of a module `lowered` gave."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline as rp
    from tvm.relax.transform import MetaScheduleApplyDatabase

    try:
        lower, finalize = rp.dataflow_lower_passes(target), rp.finalize_passes(target)
    except (ValueError, AttributeError):  # the CPU backend has none registered: compile_relax's own lists
        t = relax.transform
        lower = [t.RewriteDataflowReshape(), t.ToNonDataflow(), t.RemovePurityChecking(), t.CallTIRRewrite()]
        finalize = [
            t.StaticPlanBlockMemory(),
            t.LowerAllocTensor(),
            t.KillAfterLastUse(),
            t.LowerRuntimeBuiltin(),
            t.ComputePrimValue(),
            t.VMShapeLower(),
            t.AttachGlobalSymbol(),
        ]
    gpu = rp.BackendDispatcher.is_gpu_target(target)

    @tvm.transform.module_pass(opt_level=3)
    def _pipeline(mod: Any, _ctx: Any) -> Any:
        mod = MetaScheduleApplyDatabase(enable_warning=False)(mod)
        if gpu:
            from tvm.s_tir import dlight as dl

            mod = dl.ApplyDefaultSchedule(
                dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
            )(mod)
        mod = relax.transform.SplitLayoutRewritePreproc()(_rooted_opaque_functions(mod))
        mod = relax.transform.FoldConstant()(prepacks_in_numpy(mod))  # the weights' packing in NumPy first
        return tvm.transform.Sequential(list(lower) + list(finalize))(mod)

    with target, database, tvm.transform.PassContext(opt_level=3):
        if gpu:
            return relax.build(mod, target=target, relax_pipeline=_pipeline)
        return build_parallel(mod, target, _pipeline)  # its kernels compiled on every core
