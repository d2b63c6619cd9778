"""`networks.winograd`: blocked 3x3 convolutions computed by F(m x m, 3 x 3) match PyTorch, and
each transform stays its own task."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
torch = pytest.importorskip("torch")

from autosearch.backends.tvm.target import host_target  # noqa: E402
from autosearch.networks.check import compare_outputs, flatten_outputs  # noqa: E402
from autosearch.networks.graph import build_network, import_network  # noqa: E402
from autosearch.networks.inputs import InputSpec  # noqa: E402
from autosearch.networks.winograd import transform_matrices, weight_transform, winograd_tile  # noqa: E402
from autosearch.search.registers import simd_bits  # noqa: E402


def _assert_matches_pytorch(graph: object, net: torch.nn.Module, x: np.ndarray) -> None:
    """The network built untuned computes what `net` computes on `x` (relative error < 1e-5)."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    vm = relax.VirtualMachine(build_network(graph, ms.database.MemoryDatabase(), host_target()), tvm.cpu())
    with torch.no_grad():
        want = flatten_outputs(net(torch.from_numpy(x)))
    check = compare_outputs(flatten_outputs(vm["main"](tvm.runtime.tensor(x))), want)
    assert check.ok and check.relative_err < 1e-5, check


def _imported(
    name: str, block: type[torch.nn.Module], channels: int, size: int
) -> tuple[object, torch.nn.Module, np.ndarray, list[str]]:
    """`block` (made after seeding PyTorch) imported on a seeded 1 x `channels` x `size` x `size`
    input: the graph, the module, the input and the task names."""
    torch.manual_seed(0)
    net = block().eval()
    x = np.random.default_rng(0).standard_normal((1, channels, size, size), dtype=np.float32)
    graph = import_network(name, net, [InputSpec("x", "float32", x.shape)], [x], host_target())
    return graph, net, x, [w.name for w in graph.workloads]  # type: ignore[attr-defined]


@pytest.mark.parametrize("m", [2, 4])
def test_one_tile_through_the_transforms_is_the_direct_convolution(m: int) -> None:
    """A^T [(G g G^T) * (B^T d B)] A of one (m+2)^2 tile equals the 3x3 correlation of it, in
    float64, for TVM's matrices and the weight transform's OIHW{b}o indexing."""
    a, b, _ = transform_matrices(m)
    rng = np.random.default_rng(m)
    block, in_channels = 4, 3
    weight = rng.standard_normal((2, in_channels, 3, 3, block))  # OIHW4o: 8 outputs
    d = rng.standard_normal((in_channels, m + 2, m + 2))
    u = weight_transform(weight, m).astype(np.float64)  # (e, v, ci, co)
    v = np.einsum("re,sv,crs->evc", b, b, d)
    y = np.einsum("ei,vj,evc,evco->oij", a, a, v, u)
    g = weight.transpose(0, 4, 1, 2, 3).reshape(2 * block, in_channels, 3, 3)
    direct = np.array(
        [[[np.sum(d[:, i : i + 3, j : j + 3] * g[o]) for j in range(m)] for i in range(m)] for o in range(2 * block)]
    )
    np.testing.assert_allclose(y, direct, rtol=1e-5, atol=1e-5)


def test_the_tile_is_4_where_it_divides_the_map_else_2() -> None:
    assert winograd_tile(56, 56) == 4 and winograd_tile(14, 14) == 2 and winograd_tile(7, 7) == 2


@pytest.mark.parametrize("size", [12, 9])
def test_a_residual_block_of_3x3_convolutions_by_winograd_matches_pytorch(size: int) -> None:
    """Three padded 3x3 convolutions (bias, ReLU, a residual add) on a 12x12 map (4x4 tiles) and a
    9x9 one (2x2 tiles, the last row and column padded): the build has the transforms and their
    batched product as tasks, no direct 3x3 convolution, the input transform fused with nothing
    before it, and its output matches PyTorch."""
    if simd_bits(host_target()) <= 0:
        pytest.skip("no SIMD registers known on this CPU: convolutions stay unblocked")

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.c = (torch.nn.Conv2d(32, 32, 3, padding=1) for _ in range(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.a(x))
            return torch.relu(self.c(torch.relu(self.b(y))) + y)

    graph, net, x, names = _imported("block", Block, 32, size)
    assert any("winograd_output" in n for n in names), names
    assert any(n.split("/")[-1].startswith("winograd_input") for n in names), names  # unfused
    assert any("matmul" in n for n in names) and not any("conv2d" in n for n in names), names
    _assert_matches_pytorch(graph, net, x)


class _ConvRelu(torch.nn.Module):
    """A padded 32-channel 3x3 convolution with its bias and ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(32, 32, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x))


def test_a_3x3_convolution_on_a_map_under_8x8_stays_direct() -> None:
    """A padded 3x3 convolution with its bias and ReLU on a 7x7 map (`MIN_MAP`): no Winograd task,
    a direct blocked convolution, and the output matches PyTorch."""
    if simd_bits(host_target()) <= 0:
        pytest.skip("no SIMD registers known on this CPU: convolutions stay unblocked")

    graph, net, x, names = _imported("small", _ConvRelu, 32, 7)
    assert not any("winograd" in n for n in names) and any("conv2d_NCHWc" in n for n in names), names
    _assert_matches_pytorch(graph, net, x)


def test_a_grouped_weight_transform_is_each_groups_own_product() -> None:
    """Two groups of 4 input channels: V of each group's channels times that group's U, through
    the output transform, is the grouped 3x3 correlation of one tile (float64); a group never
    reads another's channels."""
    from autosearch.networks.winograd import grouped_weight_transform

    m, groups, per_in, block = 2, 2, 4, 4
    a, b, _ = transform_matrices(m)
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((2, per_in, 3, 3, block))  # OIHW4o: 8 outputs, 4 a group
    d = rng.standard_normal((groups * per_in, m + 2, m + 2))
    u = grouped_weight_transform(weight, m, groups).astype(np.float64)  # (e, v, g, ci, co)
    assert u.shape == (m + 2, m + 2, groups, per_in, 4)
    v = np.einsum("re,sv,crs->evc", b, b, d).reshape(m + 2, m + 2, groups, per_in)
    y = np.einsum("ei,vj,evgc,evgco->goij", a, a, v, u).reshape(groups * 4, m, m)
    g = weight.transpose(0, 4, 1, 2, 3).reshape(2 * block, per_in, 3, 3)
    direct = np.array(
        [
            [
                [np.sum(d[o // 4 * per_in : (o // 4 + 1) * per_in, i : i + 3, j : j + 3] * g[o]) for j in range(m)]
                for i in range(m)
            ]
            for o in range(2 * block)
        ]
    )
    np.testing.assert_allclose(y, direct, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", [12, 9])
def test_a_grouped_3x3_convolution_by_winograd_matches_pytorch(size: int) -> None:
    """RegNet-Y's block, small: a 1x1 convolution, a grouped 3x3 one (2 groups of 32 channels) with
    bias and ReLU, and a residual add, on a 12x12 map (4x4 tiles) and a 9x9 one (2x2 tiles): the
    build has Winograd's transforms and no grouped convolution left, and its output matches PyTorch."""
    if simd_bits(host_target()) <= 0:
        pytest.skip("no SIMD registers known on this CPU: convolutions stay unblocked")

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Conv2d(64, 64, 1)
            self.b = torch.nn.Conv2d(64, 64, 3, padding=1, groups=2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.a(x))
            return torch.relu(self.b(y)) + y

    graph, net, x, names = _imported("grouped", Block, 64, size)
    assert any("winograd_output" in n for n in names), names
    assert not any("group_conv2d" in n for n in names), names
    _assert_matches_pytorch(graph, net, x)


@pytest.mark.parametrize("size", [12, 9])
def test_the_output_transform_with_its_bias_and_relu_gets_tile_nests_that_match(size: int) -> None:
    """The output transform's task (bias and ReLU fused after it) inlines into nothing, so it gets
    the tile nests of `spatial`: its element-wise blocks under the transform's loop over tiles and
    channel blocks, serial and parallel; the timed pick computes what TVM's own loops compute
    (`spatial_schedule` checks it), on whole 4x4 tiles and on 9x9's ragged 2x2 ones."""
    from tvm.s_tir import Schedule

    from autosearch.networks.spatial import spatial_forms, spatial_schedule

    bits = simd_bits(host_target())
    if bits <= 0:
        pytest.skip("no SIMD registers known on this CPU: convolutions stay unblocked")

    graph, _, _, _ = _imported("output", _ConvRelu, 32, size)
    task = next(w for w in graph.workloads if "winograd_output" in w.name)  # type: ignore[attr-defined]
    forms = spatial_forms(task.mod(), bits // 32)
    assert len(forms) == 2, task.name
    sch = Schedule(forms[0].mod)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    outer = [sch.get(sch.get_loops(b)[0]) for b in blocks]
    assert len(blocks) == 3 and all(o.same_as(outer[0]) for o in outer)  # one nest over the tiles
    picked = spatial_schedule(task, host_target(), bits)
    assert picked is not None and picked[1] > 0


def _sum_script(terms: list[tuple[float, str]]) -> str:
    """`c0 * x0 + c1 * x1 + ...` in TVMScript, zero coefficients left out, units unmultiplied."""
    parts = [x if float(c) == 1.0 else f"T.float32({float(c)!r}) * {x}" for c, x in terms if c != 0.0]
    return " + ".join(parts) if parts else "T.float32(0.0)"


def _tile_loops_script(name: str, tiles: int, chunks: int, block: int, groups: int) -> str:
    """Both transforms' loops: over tiles, then channel blocks; a grouped convolution's over groups,
    then their tiles, then their channel blocks (V's and M's order in memory)."""
    if groups == 1:
        return f"""    for p, cb, ci in T.grid({tiles}, {chunks}, {block}):
        with T.sblock("{name}"):
            vp, vb, vi = T.axis.remap("SSS", [p, cb, ci])"""
    return f"""    for g, p, cb, ci in T.grid({groups}, {tiles}, {chunks // groups}, {block}):
        with T.sblock("{name}"):
            vg, vp, vc, vi = T.axis.remap("SSSS", [g, p, cb, ci])"""


def _input_script(shape: tuple[int, ...], padding: tuple[int, int], m: int, th: int, tw: int, groups: int) -> str:
    """The input transform as it was written in TVMScript before `winograd` built it (its spec)."""
    n, chunks, height, width, block = shape
    alpha, (top, left), tiles = m + 2, padding, th * tw
    _, b, _ = transform_matrices(m)
    y0, x0 = f"vp % {tiles} // {tw} * {m}", f"vp % {tiles} % {tw} * {m}"
    per = chunks // groups
    vb = "vb" if groups == 1 else f"vg * {per} + vc"
    d = [[f"pad[vp // {tiles}, {vb}, {y0} + {r}, {x0} + {s}, vi]" for s in range(alpha)] for r in range(alpha)]
    rows = [
        [f"({_sum_script([(b[r, e], d[r][s]) for r in range(alpha)])})" for s in range(alpha)] for e in range(alpha)
    ]
    at = f"vp, vb * {block} + vi" if groups == 1 else f"vg, vp, vc * {block} + vi"
    v_shape = f"{n * tiles}, {chunks * block}" if groups == 1 else f"{groups}, {n * tiles}, {chunks * block // groups}"
    stores = "\n".join(
        f"            V[{e}, {v}, {at}] = {_sum_script([(b[s, v], rows[e][s]) for s in range(alpha)])}"
        for e in range(alpha)
        for v in range(alpha)
    )
    inside = f"{top} <= v2 and v2 < {top + height} and {left} <= v3 and v3 < {left + width}"
    return f"""
@T.prim_func(s_tir=True)
def winograd_input(data: T.Buffer(({n}, {chunks}, {height}, {width}, {block}), "float32"),
                   V: T.Buffer(({alpha}, {alpha}, {v_shape}), "float32")):
    T.func_attr({{"tirx.noalias": True, "op_pattern": 4}})
    pad = T.sblock_alloc_buffer(({n}, {chunks}, {th * m + 2}, {tw * m + 2}, {block}))
    for i0, i1, i2, i3, i4 in T.grid({n}, {chunks}, {th * m + 2}, {tw * m + 2}, {block}):
        with T.sblock("data_pad"):
            v0, v1, v2, v3, v4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
            pad[v0, v1, v2, v3, v4] = T.if_then_else({inside}, data[v0, v1, v2 - {top}, v3 - {left}, v4], T.float32(0.0))
{_tile_loops_script("winograd_input", n * tiles, chunks, block, groups)}
            T.reads(pad[vp // {tiles}, {vb}, {y0}:{y0} + {alpha}, {x0}:{x0} + {alpha}, vi])
            T.writes(V[0:{alpha}, 0:{alpha}, {at}])
{stores}
"""


def _output_script(product_shape: tuple[int, ...], shape: tuple[int, ...], m: int, th: int, tw: int) -> str:
    """The output transform as it was written in TVMScript before `winograd` built it (its spec)."""
    n, chunks, out_h, out_w, block = shape
    alpha, tiles = m + 2, th * tw
    a, _, _ = transform_matrices(m)
    per = product_shape[-1] // block if len(product_shape) == 5 else 0
    groups = chunks // per if per else 1
    at = f"vp, vb * {block} + vi" if not per else f"vg, vp, vc * {block} + vi"
    vb = "vb" if not per else f"vg * {per} + vc"
    y0, x0 = f"vp % {tiles} // {tw} * {m}", f"vp % {tiles} % {tw} * {m}"
    sums = [
        [f"({_sum_script([(a[v, x], f'M[{e}, {v}, {at}]') for v in range(alpha)])})" for x in range(m)]
        for e in range(alpha)
    ]
    stores = []
    for y in range(m):
        for x in range(m):
            store = f"Y[vp // {tiles}, {vb}, {y0} + {y}, {x0} + {x}, vi] = " + _sum_script(
                [(a[e, y], sums[e][x]) for e in range(alpha)]
            )
            inside = [f"{y0} + {y} < {out_h}"] if y and th * m > out_h else []
            inside += [f"{x0} + {x} < {out_w}"] if x and tw * m > out_w else []
            guard = f"            if {' and '.join(inside)}:\n    " if inside else ""
            stores.append(f"{guard}            {store}")
    body = "\n".join(stores)
    int64s = lambda dims: ", ".join(f"T.int64({d})" for d in dims)  # noqa: E731
    return f"""
@T.prim_func(s_tir=True)
def winograd_output(M: T.Buffer(({int64s(product_shape)}), "float32"), Y: T.Buffer(({int64s(shape)}), "float32")):
    T.func_attr({{"tirx.noalias": True, "op_pattern": 4}})
{_tile_loops_script("winograd_output", n * tiles, chunks, block, groups)}
{body}
"""


def _parsed(script: str) -> object:
    from tvm.script import tirx as tirx_script

    return tvm.script.from_source(script, extra_vars={"T": tirx_script}).without_attr("global_symbol")


@pytest.mark.parametrize(
    ("shape", "padding", "m", "tiles", "groups"),
    [
        ((1, 2, 8, 8, 16), (1, 1), 4, (2, 2), 1),  # F(4x4), padded
        ((1, 4, 7, 7, 8), (1, 1), 2, (4, 4), 2),  # F(2x2), a ragged 7x7 map, two groups
        ((1, 2, 6, 6, 16), (0, 0), 2, (2, 2), 1),  # no padding
    ],
)
def test_the_transforms_are_the_tvmscript_they_were_written_as(
    shape: tuple[int, ...], padding: tuple[int, int], m: int, tiles: tuple[int, int], groups: int
) -> None:
    """The IR builder's transforms are structurally the TVMScript the earlier code parsed, so a
    store's records of a transform task (keyed by the function's structural hash) still find it."""
    import tvm_ffi

    from autosearch.networks.winograd import input_transform, output_transform

    th, tw = tiles
    assert tvm_ffi.structural_equal(
        input_transform(shape, padding, m, th, tw, groups), _parsed(_input_script(shape, padding, m, th, tw, groups))
    )
    n, chunks, height, width, block = shape
    out = (n, chunks, height + 2 * padding[0] - 2, width + 2 * padding[1] - 2, block)
    rows = [n * th * tw] if groups == 1 else [groups, n * th * tw]
    product = (m + 2, m + 2, *rows, chunks * block // groups)
    assert tvm_ffi.structural_equal(
        output_transform(product, out, m, th, tw), _parsed(_output_script(product, out, m, th, tw))
    )
