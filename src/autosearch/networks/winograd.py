"""3x3 convolutions by Winograd's minimal filtering, F(m x m, 3 x 3), on blocked layouts.

Why: a direct 3x3 convolution does 9 multiply-adds an output per input channel; F(4x4, 3x3) does
36 per 16 outputs (2.25), F(2x2, 3x3) 16 per 4 (4), in a batched matrix product over the input
channels, plus two cheap transforms. On CPUs whose direct convolutions already run near the FMA
peak (ResNet-50's on the Zen 4 at 201 GFLOP/s, OpenVINO's oneDNN alike), fewer multiplies is the
only way left to be faster; TVM's own x86 and ARM schedules (`conv2d_winograd_nhwc`,
`conv2d_nchw_winograd`) and Lavin & Gray's paper are this method.

How: after `layouts` blocked it, a `conv2d` (NCHW{b}c data, a constant OIHW{b}o weight, stride 1,
dilation 1, 3x3, float32; one group, or groups of whole channel blocks of at least
`_MIN_GROUP_CHANNELS` channels) becomes
  V = the input transform B^T d B of each (m+2)x(m+2) input tile (zero padding inside it): a
      hand-written TIR function, one block a (tile, channel) with B's constants folded in
      (`input_transform_script`), marked so that FuseOps fuses no injective producer into it,
  M = relax `matmul(V, U)`: (m+2)^2 products of (tiles x C_in) by (C_in x C_out), U = G g G^T the
      weight's transform, computed once in NumPy (a constant the weight packing reaches); a
      grouped convolution has (m+2)^2 x groups products, each of one group's channels (RegNet-Y's
      grouped 3x3 convolutions, 42% of its time at the FMA peak direct),
  Y = the output transform A^T M A of each tile into NCHW{b}c: a hand-written TIR function as the
      input transform (`output_transform_script`), marked as a convolution is, so the bias,
      activation and residual add after it fuse into its task as after the direct convolution.
Each transform is a task with no reduction and gets the timed loop nests of `spatial` (the output
transform's tile nests: its element-wise blocks computed on each tile it writes). The
matrices are TVM's (`topi.nn.winograd_util`: Cook-Toom points 0, +-1, 1/2, -2 for F(4,3)). The
tile `m` is 4 where it divides the output's height and width, else 2 (`winograd_tile`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from autosearch.networks.layouts import blocked_float_grouped_conv
from autosearch.networks.rewrite import rewrite_calls, static_shape

__all__ = [
    "grouped_weight_transform",
    "input_transform_script",
    "transform_matrices",
    "weight_transform",
    "winograd_convolutions",
    "winograd_tile",
]

#: Fewest input channels a convolution goes to Winograd with: the product's inner extent is the
#: channel count, and below a register's lanes it would be mostly transform (not measured below
#: the 128 of DenseNet-121's 3x3 layers).
_MIN_CHANNELS = 16


#: Fewest input channels a group of a grouped convolution goes to Winograd with: each group is a
#: product of inner extent its channel count (measured on RegNet-Y's groups of 64; a smaller group
#: makes the product smaller still beside the transforms, which cost the same a channel).
_MIN_GROUP_CHANNELS = 32


#: TVM's `kOutEWiseFusable`, both transforms' pattern: FuseOps fuses the element-wise blocks after
#: it into its task and nothing before it, so the output transform of the convolution before
#: (with its bias and activation) is not recomputed (m+2)^2 times an element inside the input
#: transform.
_OUT_ELEMWISE_FUSABLE = 4


def transform_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """F(m, 3)'s (A, B, G) as float64: y = A^T [(G g) * (B^T d)], TVM's points."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    return _cook_toom_convolution(_interpolation_points(m + 2), m, 3)


def winograd_tile(out_h: int, out_w: int) -> int:
    """The output tile `m` of F(m x m, 3 x 3) for an `out_h` x `out_w` map: 4 where it divides both,
    else 2. F(4x4) on ResNet-50's 14x14 and 7x7 maps has fewer multiplies (16 tiles of 36 against
    49 of 16; 4 of 36 against 16 of 16) but 16 and 4 rows a product and padded waste: the network
    from the prior alone ran 3.8% slower with it in each of three timing processes (bench/README.md
    "3x3 convolutions by Winograd's minimal filtering"); with the output transform one block a tile,
    between 6% slower and 5% faster by process on RegNet-Y and ResNet-50 (bench/HISTORY.md "Winograd
    F(4x4, 3x3) on 14x14 maps, re-measured")."""
    return 4 if out_h % 4 == 0 and out_w % 4 == 0 else 2


def _term_sum(terms: list[tuple[float, str]]) -> str:
    """`c0 * x0 + c1 * x1 + ...` in TVMScript, zero coefficients left out, units unmultiplied."""
    parts = []
    for coefficient, operand in terms:
        if coefficient == 0.0:
            continue
        c = float(coefficient)
        parts.append(operand if c == 1.0 else f"T.float32({c!r}) * {operand}")
    return " + ".join(parts) if parts else "T.float32(0.0)"


def _tile_origin(tiles: int, tiles_w: int, m: int) -> tuple[str, str]:
    """TVMScript of tile `vp`'s top-left row and column in its image (both transforms index by it)."""
    return f"vp % {tiles} // {tiles_w} * {m}", f"vp % {tiles} % {tiles_w} * {m}"


def _parsed(script: str) -> Any:
    """A transform's TVMScript parsed. No symbol of its own, as the other kernels: the build names
    it, and the profile finds its task by a hash of the function under the symbol "main"."""
    import tvm
    from tvm.script import tirx as tirx_script

    return tvm.script.from_source(script, extra_vars={"T": tirx_script}).without_attr("global_symbol")


def input_transform_script(
    shape: tuple[int, ...], padding: tuple[int, int], m: int, tiles_h: int, tiles_w: int, groups: int = 1
) -> str:
    """TVMScript of the input transform V[e, v, p, c] = (B^T d_p B)[e, v] over NCHW{b}c data of
    `shape`, zero-padded by `padding` (top, left); for a grouped convolution V[e, v, g, p, c'] (c =
    g C/groups + c'), each group's tiles a matrix of their own for the batched product. One block a
    (tile, channel) that reads the tile's (m+2)^2 values once and writes its (m+2)^2 outputs, each
    a sum with B's constants folded in and its zeros left out (B^T d first, then (.) B, as two
    nested sums LLVM's value numbering shares).

    Why not a TE expression: a compute over (e, v, p, c) reads B[r, e] through selects on `e`
    and `v` (B's zeros cost as much as its other entries) and sums (m+2)^2 products an output:
    on ResNet-18's 56x56 maps that form took 4.9 ms a call against 0.31 for the product it feeds."""
    n, chunks, height, width, block = shape
    alpha = m + 2
    top, left = padding
    hp, wp = tiles_h * m + 2, tiles_w * m + 2
    tiles = tiles_h * tiles_w
    channels = chunks * block
    _, b, _ = transform_matrices(m)
    y0, x0 = _tile_origin(tiles, tiles_w, m)
    d = [[f"pad[vp // {tiles}, vb, {y0} + {r}, {x0} + {s}, vi]" for s in range(alpha)] for r in range(alpha)]
    rows = [[f"({_term_sum([(b[r, e], d[r][s]) for r in range(alpha)])})" for s in range(alpha)] for e in range(alpha)]
    per_group = chunks // groups  # channel blocks a group (a whole number: `winograd_convolutions`)
    at = f"vp, vb * {block} + vi" if groups == 1 else f"vb // {per_group}, vp, vb % {per_group} * {block} + vi"
    v_shape = f"{n * tiles}, {channels}" if groups == 1 else f"{groups}, {n * tiles}, {channels // groups}"
    stores = "\n".join(
        f"            V[{e}, {v}, {at}] = {_term_sum([(b[s, v], rows[e][s]) for s in range(alpha)])}"
        for e in range(alpha)
        for v in range(alpha)
    )
    inside = f"{top} <= v2 and v2 < {top + height} and {left} <= v3 and v3 < {left + width}"
    return f"""
@T.prim_func(s_tir=True)
def winograd_input(data: T.Buffer(({n}, {chunks}, {height}, {width}, {block}), "float32"),
                   V: T.Buffer(({alpha}, {alpha}, {v_shape}), "float32")):
    T.func_attr({{"tirx.noalias": True, "op_pattern": {_OUT_ELEMWISE_FUSABLE}}})
    pad = T.sblock_alloc_buffer(({n}, {chunks}, {hp}, {wp}, {block}))
    for i0, i1, i2, i3, i4 in T.grid({n}, {chunks}, {hp}, {wp}, {block}):
        with T.sblock("data_pad"):
            v0, v1, v2, v3, v4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
            pad[v0, v1, v2, v3, v4] = T.if_then_else({inside}, data[v0, v1, v2 - {top}, v3 - {left}, v4], T.float32(0.0))
    for p, cb, ci in T.grid({n * tiles}, {chunks}, {block}):
        with T.sblock("winograd_input"):
            vp, vb, vi = T.axis.remap("SSS", [p, cb, ci])
            T.reads(pad[vp // {tiles}, vb, {y0}:{y0} + {alpha}, {x0}:{x0} + {alpha}, vi])
            T.writes(V[0:{alpha}, 0:{alpha}, {at}])
{stores}
"""


@functools.cache
def _input_transform(
    shape: tuple[int, ...], padding: tuple[int, int], m: int, tiles_h: int, tiles_w: int, groups: int
) -> Any:
    """`input_transform_script` parsed (`_parsed`), once per geometry: parsing an F(4x4) transform
    takes ~1.2 s and a network repeats its geometries (DenseNet-121: 18 such convolutions, 2
    geometries)."""
    return _parsed(input_transform_script(shape, padding, m, tiles_h, tiles_w, groups))


def output_transform_script(
    product_shape: tuple[int, ...], shape: tuple[int, ...], m: int, tiles_h: int, tiles_w: int
) -> str:
    """TVMScript of the output transform Y = A^T M_p A of each tile p into NCHW{b}c `shape` from the
    product M[e, v, p, c] (a grouped convolution's M[e, v, g, p, c'], its groups whole blocks of
    the output's). One block a (tile, channel), as the input transform: it reads the tile's
    (m+2)^2 products once and writes its m x m outputs, A's constants folded in (M A first, then
    A^T (.)); a tile past a ragged edge (7x7 maps in 2x2 tiles) writes only its outputs inside.

    Why not a TE expression: each output of a compute over (n, k, y, x, o) sums all (m+2)^2
    products with A's entries picked by selects on y % m and x % m, reading every product m^2
    times: RegNet-Y's four such tasks took 2.8 ms a run of its network from the prior alone
    (Zen 4), a 56x56 one 1.14 ms a call."""
    n, chunks, out_h, out_w, block = shape
    alpha = m + 2
    a, _, _ = transform_matrices(m)
    tiles = tiles_h * tiles_w
    per_group = product_shape[-1] // block if len(product_shape) == 5 else 0
    at = f"vp, vb * {block} + vi" if not per_group else f"vb // {per_group}, vp, vb % {per_group} * {block} + vi"
    y0, x0 = _tile_origin(tiles, tiles_w, m)
    row_sums = [
        [f"({_term_sum([(a[v, x], f'M[{e}, {v}, {at}]') for v in range(alpha)])})" for x in range(m)]
        for e in range(alpha)
    ]
    stores = []
    for y in range(m):
        for x in range(m):
            store = f"Y[vp // {tiles}, vb, {y0} + {y}, {x0} + {x}, vi] = " + _term_sum(
                [(a[e, y], row_sums[e][x]) for e in range(alpha)]
            )
            inside = [f"{y0} + {y} < {out_h}"] if y and tiles_h * m > out_h else []
            inside += [f"{x0} + {x} < {out_w}"] if x and tiles_w * m > out_w else []
            guard = f"            if {' and '.join(inside)}:\n    " if inside else ""
            stores.append(f"{guard}            {store}")
    body = "\n".join(stores)
    return f"""
@T.prim_func(s_tir=True)
def winograd_output(M: T.Buffer(({_int64s(product_shape)}), "float32"),
                    Y: T.Buffer(({_int64s(shape)}), "float32")):
    T.func_attr({{"tirx.noalias": True, "op_pattern": {_OUT_ELEMWISE_FUSABLE}}})
    for p, cb, ci in T.grid({n * tiles}, {chunks}, {block}):
        with T.sblock("winograd_output"):
            vp, vb, vi = T.axis.remap("SSS", [p, cb, ci])
{body}
"""


def _int64s(shape: tuple[int, ...]) -> str:
    """A buffer shape in TVMScript as Relax writes one (int64 extents: FuseTIR maps a buffer of the
    output transform and one of the elementwise task fused after it onto one Relax value, and
    refuses the two unless their shapes are the same type)."""
    return ", ".join(f"T.int64({d})" for d in shape)


@functools.cache
def _output_transform(
    product_shape: tuple[int, ...], shape: tuple[int, ...], m: int, tiles_h: int, tiles_w: int
) -> Any:
    """`output_transform_script` parsed (`_parsed`), once per geometry (as `_input_transform`)."""
    return _parsed(output_transform_script(product_shape, shape, m, tiles_h, tiles_w))


def weight_transform(weight: np.ndarray, m: int) -> np.ndarray:
    """U[e, v, ci, co] = (G g G^T)[e, v] of an OIHW{b}o weight `(C_out/b, C_in, 3, 3, b)`, float32."""
    chunks, in_channels, _, _, block = weight.shape
    g = weight.transpose(0, 4, 1, 2, 3).reshape(chunks * block, in_channels, 3, 3).astype(np.float64)
    _, _, gm = transform_matrices(m)
    return np.ascontiguousarray(np.einsum("ea,oiab,vb->evio", gm, g, gm).astype(np.float32))


def grouped_weight_transform(weight: np.ndarray, m: int, groups: int) -> np.ndarray:
    """U[e, v, g, ci, co] of a grouped OIHW{b}o weight `(C_out/b, C_in/groups, 3, 3, b)`: each
    group's (C_in/groups) x (C_out/groups) transform, the batched product's right-hand side."""
    u = weight_transform(weight, m)  # (e, v, ci, co) over every output channel
    alpha, _, per_in, out_channels = u.shape
    u = u.reshape(alpha, alpha, per_in, groups, out_channels // groups)
    return np.ascontiguousarray(u.transpose(0, 1, 3, 2, 4))


def winograd_convolutions(mod: Any, kept: Callable[[Any], bool] = lambda call: False) -> Any:
    """`mod` with every eligible blocked 3x3 convolution computed by F(m x m, 3 x 3), but those
    `kept` says stay direct (int8's: `lowp.int8_candidate`)."""
    import tvm
    from tvm import relax

    def winograd(call: Any, builder: Any) -> Any:
        x, w = call.args
        a = call.attrs
        blocks = blocked_float_grouped_conv(call)
        if blocks is None or kept(call):
            return None
        if [int(v) for v in a.strides] != [1, 1] or [int(v) for v in a.dilation] != [1, 1]:
            return None
        in_block, out_block = blocks
        weight = w.value.numpy()
        groups = int(a.groups)
        if weight.shape[2:4] != (3, 3) or weight.shape[1] < (_MIN_CHANNELS if groups == 1 else _MIN_GROUP_CHANNELS):
            return None
        shape = static_shape(x)
        if shape is None:  # a symbolic batch or image size
            return None
        n, chunks, height, width, _ = shape
        out_chunks = weight.shape[0]
        if groups > 1 and (chunks % groups or out_chunks % groups):  # a group not whole blocks
            return None
        padding = [int(v) for v in a.padding]
        top, left, bottom, right = padding if len(padding) == 4 else padding * 2
        out_h, out_w = height + top + bottom - 2, width + left + right - 2
        if out_h < 2 or out_w < 2:
            return None
        m = winograd_tile(out_h, out_w)
        tiles_h, tiles_w = -(-out_h // m), -(-out_w // m)
        transform = _input_transform((n, chunks, height, width, in_block), (top, left), m, tiles_h, tiles_w, groups)
        gv = builder.add_func(transform, "winograd_input")
        tiles = n * tiles_h * tiles_w
        rows = [tiles, chunks * in_block] if groups == 1 else [groups, tiles, chunks * in_block // groups]
        v = builder.emit(relax.call_tir(gv, relax.Tuple([x]), relax.TensorType([m + 2, m + 2, *rows], "float32")))
        u = weight_transform(weight, m) if groups == 1 else grouped_weight_transform(weight, m, groups)
        product = builder.emit(relax.op.matmul(v, relax.const(tvm.runtime.tensor(u))))
        shape = (n, out_chunks, out_h, out_w, out_block)
        product_shape = (m + 2, m + 2, *rows[:-1], out_chunks * out_block // groups)
        out = builder.add_func(_output_transform(product_shape, shape, m, tiles_h, tiles_w), "winograd_output")
        return builder.emit(relax.call_tir(out, relax.Tuple([product]), relax.TensorType(list(shape), "float32")))

    return rewrite_calls(mod, "relax.nn.conv2d", winograd)
