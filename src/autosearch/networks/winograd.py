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
      (`input_transform`), marked so that FuseOps fuses no injective producer into it,
  M = relax `matmul(V, U)`: (m+2)^2 products of (tiles x C_in) by (C_in x C_out), U = G g G^T the
      weight's transform, computed once in NumPy (a constant the weight packing reaches); a
      grouped convolution has (m+2)^2 x groups products, each of one group's channels (RegNet-Y's
      grouped 3x3 convolutions, 42% of its time at the FMA peak direct),
  Y = the output transform A^T M A of each tile into NCHW{b}c: a hand-written TIR function as the
      input transform (`output_transform`), marked as a convolution is, so the bias,
      activation and residual add after it fuse into its task as after the direct convolution.
Each transform is a task with no reduction and gets the timed loop nests of `spatial` (the output
transform's tile nests: its element-wise blocks computed on each tile it writes). The
matrices are TVM's (`topi.nn.winograd_util`: Cook-Toom points 0, +-1, 1/2, -2 for F(4,3)). The
tile `m` is 4 where it divides the output's height and width, else 2 (`winograd_tile`); an output
map under 8x8 stays direct (`MIN_MAP`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from autosearch.networks.layouts import blocked_float_grouped_conv
from autosearch.networks.rewrite import rewrite_calls, static_shape

__all__ = [
    "MIN_MAP",
    "grouped_weight_transform",
    "input_transform",
    "output_transform",
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


#: Smallest output map (height and width) a convolution goes to Winograd on. A 7x7 map in F(2x2)
#: tiles is 16 tiles covering 8x8 (a third more outputs than it has) in products of 16 rows: 1.7x
#: fewer multiplies than direct, at a fraction of its rate. With 7x7 maps left direct, RegNet-Y,
#: ResNet-50 and DenseNet-121 from the prior alone ran 2-3% faster side by side (Intel
#: `rocketlake`; bench/README.md "7x7 maps left direct"); a single 512-channel 7x7 convolution
#: after 48 trials ran 1.69 ms direct against 2.17 by F(2x2) (Zen 3, bench/HISTORY.md).
MIN_MAP = 8


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


def _term_sum(terms: list[tuple[float, Any]]) -> Any:
    """`c0 * x0 + c1 * x1 + ...` as a float32 TIR expression, zero coefficients left out, units
    unmultiplied, summed left to right."""
    from tvm.tirx.script import builder as T

    total = None
    for coefficient, operand in terms:
        if coefficient == 0.0:
            continue
        c = float(coefficient)
        term = operand if c == 1.0 else T.float32(c) * operand
        total = term if total is None else total + term
    return T.float32(0.0) if total is None else total


def _named(names: str, values: Any) -> Any:
    """`values` (loop or block variables, a buffer) named as TVMScript prints them (`names`,
    comma-separated)."""
    from tvm.script.ir_builder import IRBuilder

    IRBuilder.name_many(names.split(","), list(values))
    return values


def _int(value: int) -> Any:
    """An int32 immediate, as TVMScript reads a literal."""
    import tvm

    return tvm.tirx.IntImm("int32", value)


def _tile_origin(vp: Any, tiles: int, tiles_w: int, m: int) -> tuple[Any, Any]:
    """Tile `vp`'s top-left row and column in its image (both transforms index by it)."""
    return vp % tiles // tiles_w * m, vp % tiles % tiles_w * m


@contextlib.contextmanager
def _tile_block(
    name: str, tiles: int, chunks: int, block: int, groups: int
) -> Iterator[tuple[Any, Any, Any, list[Any]]]:
    """Both transforms' loops and their block `name`, entered: the block's axes (tile `vp`, channel
    block `vb`, lane `vi`) and where its (tile, channel) sits in V or M (`at`).
    One group: tiles, then channel blocks (each (e, v) plane of V[e, v, p, c] a row a tile). Groups:
    groups, then their tiles, then their channel blocks, in the order V[e, v, g, p, c'] lies in
    memory: with the tiles outside the groups each tile wrote (e, v) rows of every group, 256
    streams at once on RegNet-Y's 16 groups, and its input transforms ran 2.3-6.8x slower, its output
    transforms 1.5-1.8x (Intel `rocketlake`, timed cold)."""
    from tvm.tirx.script import builder as T

    if groups == 1:
        with T.grid(tiles, chunks, block) as loops, T.sblock(name):
            vp, vb, vi = _named("vp,vb,vi", T.axis.remap("SSS", _named("p,cb,ci", loops)))
            yield vp, vb, vi, [vp, vb * block + vi]
        return
    per_group = chunks // groups
    with T.grid(groups, tiles, per_group, block) as loops, T.sblock(name):
        vg, vp, vc, vi = _named("vg,vp,vc,vi", T.axis.remap("SSSS", _named("g,p,cb,ci", loops)))
        yield vp, vg * per_group + vc, vi, [vg, vp, vc * block + vi]


@functools.cache
def input_transform(
    shape: tuple[int, ...], padding: tuple[int, int], m: int, tiles_h: int, tiles_w: int, groups: int = 1
) -> Any:
    """The input transform V[e, v, p, c] = (B^T d_p B)[e, v] over NCHW{b}c data of `shape`,
    zero-padded by `padding` (top, left), as a TIR function; for a grouped convolution V[e, v, g,
    p, c'] (c = g C/groups + c'), each group's tiles a matrix of their own for the batched product.
    One block a (tile, channel) that reads the tile's (m+2)^2 values once and writes its (m+2)^2
    outputs, each a sum with B's constants folded in and its zeros left out (B^T d first, then (.)
    B, as two nested sums LLVM's value numbering shares). No symbol of its own, as the other
    kernels: the build names it, and the profile finds its task by a hash of the function.

    Why not a TE expression: a compute over (e, v, p, c) reads B[r, e] through selects on `e`
    and `v` (B's zeros cost as much as its other entries) and sums (m+2)^2 products an output:
    on ResNet-18's 56x56 maps that form took 4.9 ms a call against 0.31 for the product it feeds.
    Why built by TVM's IR builder rather than written as TVMScript and parsed: parsing took ~1.2 s
    an F(4x4) transform (DenseNet-121's eight: 9 s of a 200 s compile), building takes ~10 ms; the
    function is the same one (`tests/test_networks_winograd.py` checks it against the TVMScript),
    so the workload keys of earlier runs' stores still find it. Cached per geometry."""
    import tvm
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script import builder as T

    n, chunks, height, width, block = shape
    alpha = m + 2
    top, left = padding
    tiles = tiles_h * tiles_w
    channels = chunks * block
    v_shape = (n * tiles, channels) if groups == 1 else (groups, n * tiles, channels // groups)
    _, b, _ = transform_matrices(m)
    with IRBuilder() as ib, T.prim_func(s_tir=True):
        T.func_name("winograd_input")
        data = T.arg("data", T.Buffer((n, chunks, height, width, block), "float32"))
        V = T.arg("V", T.Buffer((alpha, alpha, *v_shape), "float32"))
        T.func_attr({"tirx.noalias": True, "op_pattern": _OUT_ELEMWISE_FUSABLE})
        pad = _named("pad", [T.sblock_alloc_buffer((n, chunks, tiles_h * m + 2, tiles_w * m + 2, block))])[0]
        with T.grid(n, chunks, tiles_h * m + 2, tiles_w * m + 2, block) as loops, T.sblock("data_pad"):
            v0, v1, v2, v3, v4 = _named("v0,v1,v2,v3,v4", T.axis.remap("SSSSS", _named("i0,i1,i2,i3,i4", loops)))
            rows_inside = tvm.tirx.And(tvm.tirx.LE(_int(top), v2), v2 < top + height)
            inside = tvm.tirx.And(tvm.tirx.And(rows_inside, tvm.tirx.LE(_int(left), v3)), v3 < left + width)
            value = T.if_then_else(inside, data[v0, v1, v2 - top, v3 - left, v4], T.float32(0.0))
            T.buffer_store(pad, value, [v0, v1, v2, v3, v4])
        with _tile_block("winograd_input", n * tiles, chunks, block, groups) as (vp, vb, vi, at):
            y0, x0 = _tile_origin(vp, tiles, tiles_w, m)
            T.reads(pad[vp // tiles, vb, y0 : y0 + alpha, x0 : x0 + alpha, vi])
            T.writes(V[(slice(0, alpha), slice(0, alpha), *at)])
            d = [[pad[vp // tiles, vb, y0 + r, x0 + s, vi] for s in range(alpha)] for r in range(alpha)]
            rows = [[_term_sum([(b[r, e], d[r][s]) for r in range(alpha)]) for s in range(alpha)] for e in range(alpha)]
            for e in range(alpha):
                for v in range(alpha):
                    T.buffer_store(V, _term_sum([(b[s, v], rows[e][s]) for s in range(alpha)]), [e, v, *at])
    return ib.get().without_attr("global_symbol")


@functools.cache
def output_transform(product_shape: tuple[int, ...], shape: tuple[int, ...], m: int, tiles_h: int, tiles_w: int) -> Any:
    """The output transform Y = A^T M_p A of each tile p into NCHW{b}c `shape` from the product
    M[e, v, p, c] (a grouped convolution's M[e, v, g, p, c'], its groups whole blocks of the
    output's), built as `input_transform` is. One block a (tile, channel): it reads the tile's
    (m+2)^2 products once and writes its m x m outputs, A's constants folded in (M A first, then
    A^T (.)); a tile past a ragged edge (7x7 maps in 2x2 tiles) writes only its outputs inside.
    Its buffers' extents are int64, as Relax writes them (FuseTIR maps a buffer of it and one of
    the element-wise task fused after it onto one Relax value, and refuses the two unless their
    shapes are the same type).

    Why not a TE expression: each output of a compute over (n, k, y, x, o) sums all (m+2)^2
    products with A's entries picked by selects on y % m and x % m, reading every product m^2
    times: RegNet-Y's four such tasks took 2.8 ms a run of its network from the prior alone
    (Zen 4), a 56x56 one 1.14 ms a call."""
    import tvm
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script import builder as T

    n, chunks, out_h, out_w, block = shape
    alpha = m + 2
    a, _, _ = transform_matrices(m)
    tiles = tiles_h * tiles_w
    groups = product_shape[2] if len(product_shape) == 5 else 1  # a grouped product is M[e, v, g, p, c']
    with IRBuilder() as ib, T.prim_func(s_tir=True):
        T.func_name("winograd_output")
        M = T.arg("M", T.Buffer(tuple(T.int64(d) for d in product_shape), "float32"))
        Y = T.arg("Y", T.Buffer(tuple(T.int64(d) for d in shape), "float32"))
        T.func_attr({"tirx.noalias": True, "op_pattern": _OUT_ELEMWISE_FUSABLE})
        with _tile_block("winograd_output", n * tiles, chunks, block, groups) as (vp, vb, vi, at):
            y0, x0 = _tile_origin(vp, tiles, tiles_w, m)
            row_sums = [
                [_term_sum([(a[v, x], M[(e, v, *at)]) for v in range(alpha)]) for x in range(m)] for e in range(alpha)
            ]
            for y in range(m):
                for x in range(m):
                    value = _term_sum([(a[e, y], row_sums[e][x]) for e in range(alpha)])
                    where = [vp // tiles, vb, y0 + y, x0 + x, vi]
                    inside = [y0 + y < out_h] if y and tiles_h * m > out_h else []
                    inside += [x0 + x < out_w] if x and tiles_w * m > out_w else []
                    if not inside:
                        T.buffer_store(Y, value, where)
                        continue
                    with T.If(functools.reduce(tvm.tirx.And, inside)), T.Then():
                        T.buffer_store(Y, value, where)
    return ib.get().without_attr("global_symbol")


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
        if out_h < MIN_MAP or out_w < MIN_MAP:
            return None
        m = winograd_tile(out_h, out_w)
        tiles_h, tiles_w = -(-out_h // m), -(-out_w // m)
        transform = input_transform((n, chunks, height, width, in_block), (top, left), m, tiles_h, tiles_w, groups)
        gv = builder.add_func(transform, "winograd_input")
        tiles = n * tiles_h * tiles_w
        rows = [tiles, chunks * in_block] if groups == 1 else [groups, tiles, chunks * in_block // groups]
        v = builder.emit(relax.call_tir(gv, relax.Tuple([x]), relax.TensorType([m + 2, m + 2, *rows], "float32")))
        u = weight_transform(weight, m) if groups == 1 else grouped_weight_transform(weight, m, groups)
        product = builder.emit(relax.op.matmul(v, relax.const(tvm.runtime.tensor(u))))
        shape = (n, out_chunks, out_h, out_w, out_block)
        product_shape = (m + 2, m + 2, *rows[:-1], out_chunks * out_block // groups)
        out = builder.add_func(output_transform(product_shape, shape, m, tiles_h, tiles_w), "winograd_output")
        return builder.emit(relax.call_tir(out, relax.Tuple([product]), relax.TensorType(list(shape), "float32")))

    return rewrite_calls(mod, "relax.nn.conv2d", winograd)
