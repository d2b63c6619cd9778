"""The registered operator tables: MetaSchedule's benchmark operators and three networks' layers.

Benchmark operators come from `tvm.s_tir.meta_schedule.testing.te_workload.CONFIGS` (13 families
of 4 shapes, plus one Winograd conv2d): family = the CONFIGS key, params = every argument of the
te_workload function (defaults included) plus ``op``, the function's name.

Networks, batch 1, NHWC, float32, each family deduplicated by name (every ResNet-50 and MobileNet-V2
conv2d also in NCHW, ``conv2d_nchw``: the layout a PyTorch network imported through Relax has):

- ``resnet50`` (ResNet-50 v1.5, 224x224, stride in the 3x3 of each bottleneck): its 23 distinct
  conv2d layers (stem, 1x1 reduce/expand, 3x3, 1x1 stride-2 downsample) and the 2048->1000 dense.
- ``mobilenetv2`` (MobileNet-V2 1.0, 224x224): the 3x3 stride-2 stem conv, its distinct 1x1
  convs (expand, project, final 320->1280), depthwise 3x3 convs, and the 1280->1000 dense.
- ``bert`` (BERT-base, batch 1, sequence 128): dense 768->768, 768->3072, 3072->768, the
  attention batch matmuls (12x128x64 . 12x64x128 and 12x128x128 . 12x128x64), softmax over
  12x128x128 and layer norm over 128x768.

Network names are ``<family>/<operator name>``, e.g. ``resnet50/conv2d_nhwc/1x56x56x64/k1s1p0/64``,
so they never clash with the benchmark names; structurally equal programs share their key.
Every builder is a `functools.partial` of a function of this module, so workloads pickle.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from autosearch.workloads.base import Workload

__all__ = ["benchmark_workloads", "network_workloads"]


# -- builders (module-level, so that partials of them pickle) ----------------------------------


def _te_workload_func(op: str) -> Callable[..., Any]:
    from tvm.s_tir.meta_schedule.testing import te_workload

    return getattr(te_workload, op)


def _build_te_workload(op: str, args: tuple[Any, ...]) -> Any:
    from tvm import te

    if op == "conv2d_winograd_nhwc":
        return te.create_prim_func(list(_winograd_nhwc_precomputed(*args)))
    return te.create_prim_func(list(_te_workload_func(op)(*args)))


# Long by nature: one TE compute definition (transform, batched GEMM, inverse transform) in one piece.
def _winograd_nhwc_precomputed(
    N: int,
    H: int,
    W: int,
    CI: int,
    CO: int,
    kernel_size: int,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    tile_size: int = 4,
) -> tuple[Any, Any, Any]:
    """`te_workload.conv2d_winograd_nhwc` as MetaSchedule benchmarks it: pre-transformed weights.

    In TVM 0.27 `topi.nn.conv2d._conv2d_winograd_nhwc_impl(pre_computed=True)` raises "LEGACY-FLOW
    triggered", so `te_workload.create_te_workload("C2D_WIN_NHWC", 0)` fails. This is that
    function's non-legacy body with `pre_computed=True`: the weight is the already transformed
    (alpha, alpha, CO, CI) kernel, `kernel_size` = alpha = tile_size + r - 1 (r = the 3x3 kernel).
    """
    from tvm import te
    from tvm.topi.nn.pad import pad
    from tvm.topi.nn.utils import get_pad_tuple
    from tvm.topi.nn.winograd_util import winograd_transform_matrices

    if stride != 1 or dilation != 1:
        raise ValueError("winograd conv2d supports stride 1, dilation 1 only")
    alpha, m = kernel_size, tile_size
    r = alpha - m + 1
    data = te.placeholder((N, H, W, CI), "float32", name="data")
    weight = te.placeholder((alpha, alpha, CO, CI), "float32", name="weight")
    A, B, _ = winograd_transform_matrices(m, r, "float32")
    pad_t, pad_l, pad_b, pad_r = get_pad_tuple(padding, (r, r))
    OH = H + pad_t + pad_b - r + 1
    OW = W + pad_l + pad_r - r + 1
    nH, nW = (OH + m - 1) // m, (OW + m - 1) // m
    P = N * nH * nW
    pad_extra = (nW - 1) * m + alpha - (H + pad_t + pad_b)
    data_pad = pad(
        data,
        (0, pad_t, pad_l, 0),
        (0, pad_b + pad_extra, pad_r + pad_extra, 0),
        name="data_pad",
        attrs={"schedule_rule": "None"},
    )
    input_tile = te.compute(
        (alpha, alpha, P, CI),
        lambda eps, nu, p, ci: data_pad[p // (nH * nW), ((p // nW) % nH) * m + eps, (p % nW) * m + nu, ci],
        name="input_tile",
        attrs={"schedule_rule": "None"},
    )
    r_a = te.reduce_axis((0, alpha), "r_a")
    r_b = te.reduce_axis((0, alpha), "r_b")
    data_pack = te.compute(
        (alpha, alpha, P, CI),
        lambda eps, nu, p, ci: te.sum(input_tile[r_a, r_b, p, ci] * B[r_a, eps] * B[r_b, nu], axis=[r_a, r_b]),
        name="data_pack",
        attrs={
            "auto_scheduler_simplify_const_tensor_indices": ["eps", "nu", "r_a", "r_b"],
            "schedule_rule": "conv2d_nhwc_winograd_data_pack",
        },
    )
    ci = te.reduce_axis((0, CI), name="ci")
    bgemm = te.compute(
        (alpha, alpha, P, CO),
        lambda eps, nu, p, co: te.sum(data_pack[eps, nu, p, ci] * weight[eps, nu, co, ci], axis=[ci]),
        name="bgemm",
        # write_cache_level 2 is what te_workload picks for a non-CUDA target.
        attrs={"layout_free_placeholders": [weight], "meta_schedule.write_cache_level": [2]},
    )
    r_a = te.reduce_axis((0, alpha), "r_a")
    r_b = te.reduce_axis((0, alpha), "r_b")
    inverse = te.compute(
        (m, m, P, CO),
        lambda vh, vw, p, co: te.sum(bgemm[r_a, r_b, p, co] * A[r_a, vh] * A[r_b, vw], axis=[r_a, r_b]),
        name="inverse",
        attrs={
            "auto_scheduler_simplify_const_tensor_indices": ["vh", "vw", "r_a", "r_b"],
            "schedule_rule": "conv2d_nhwc_winograd_inverse",
        },
    )
    output = te.compute(
        (N, OH, OW, CO),
        lambda n, h, w, co: inverse[h % m, w % m, n * nH * nW + (h // m) * nW + (w // m), co],
        name="conv2d_winograd",
    )
    return data, weight, output


def _build_dense(M: int, K: int, N: int) -> Any:
    """`topi.nn.dense`: data (M, K) times weight (N, K) transposed -> (M, N)."""
    from tvm import te, topi

    data = te.placeholder((M, K), name="data")
    weight = te.placeholder((N, K), name="weight")
    return te.create_prim_func([data, weight, topi.nn.dense(data, weight)])


def _build_conv2d_nchw(N: int, CI: int, H: int, W: int, CO: int, kernel_size: int, stride: int, padding: int) -> Any:
    """`topi.nn.conv2d_nchw` (OIHW weight): what Relax legalises a PyTorch `nn.Conv2d` into."""
    from tvm import te, topi

    data = te.placeholder((N, CI, H, W), name="data")
    weight = te.placeholder((CO, CI, kernel_size, kernel_size), name="weight")
    out = topi.nn.conv2d_nchw(data, weight, stride, padding, 1, out_dtype="float32")
    return te.create_prim_func([data, weight, out])


def _build_softmax(shape: tuple[int, ...]) -> Any:
    """`topi.nn.softmax` over the last axis."""
    from tvm import te, topi

    x = te.placeholder(shape, name="x")
    return te.create_prim_func([x, topi.nn.softmax(x, axis=-1)])


def _build_layer_norm(shape: tuple[int, ...]) -> Any:
    """`topi.nn.layer_norm` over the last axis with gamma and beta."""
    from tvm import te, topi

    x = te.placeholder(shape, name="x")
    gamma = te.placeholder((shape[-1],), name="gamma")
    beta = te.placeholder((shape[-1],), name="beta")
    return te.create_prim_func([x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, axis=[-1])])


# -- naming ------------------------------------------------------------------------------------


def _conv_tail(p: dict[str, Any], k: str = "kernel_size", s: str = "stride", pad: str = "padding") -> str:
    return f"k{p[k]}s{p[s]}p{p[pad]}"


def _suffix(p: dict[str, Any]) -> str:
    out = ""
    if p.get("groups", 1) != 1:
        out += f"/g{p['groups']}"
    if p.get("dilation", 1) != 1:
        out += f"/d{p['dilation']}"
    if p.get("factor", 1) != 1:
        out += f"/m{p['factor']}"
    return out


def _x(*dims: Any) -> str:
    return "x".join(str(d) for d in dims)


def _te_name(op: str, p: dict[str, Any]) -> str:
    """Readable unique name of a te_workload call; every shape argument appears in it."""
    if op == "conv1d_nlc":
        return f"conv1d_nlc/{_x(p['N'], p['L'], p['CI'])}/{_conv_tail(p)}/{p['CO']}{_suffix(p)}"
    if op in ("conv2d_nhwc", "conv2d_transpose_nhwc"):
        return f"{op}/{_x(p['N'], p['H'], p['W'], p['CI'])}/{_conv_tail(p)}/{p['CO']}{_suffix(p)}"
    if op == "conv3d_ndhwc":
        return f"conv3d_ndhwc/{_x(p['N'], p['D'], p['H'], p['W'], p['CI'])}/{_conv_tail(p)}/{p['CO']}{_suffix(p)}"
    if op == "depthwise_conv2d_nhwc":
        return f"depthwise_conv2d_nhwc/{_x(p['N'], p['H'], p['W'], p['C'])}/{_conv_tail(p)}{_suffix(p)}"
    if op == "conv2d_capsule_nhwijc":
        cap = p["capsule_size"]
        return f"conv2d_capsule_nhwijc/{_x(p['N'], p['H'], p['W'], cap, cap, p['CI'])}/{_conv_tail(p)}/{p['CO']}"
    if op == "conv2d_nhwc_bn_relu":
        return f"conv2d_nhwc_bn_relu/{_x(p['N'], p['H'], p['W'], p['CI'])}/{_conv_tail(p, s='strides')}/{p['CO']}{_suffix(p)}"
    if op == "conv2d_winograd_nhwc":
        r = p["kernel_size"] - p["tile_size"] + 1  # kernel_size is the transformed alpha
        tail = f"k{r}s{p['stride']}p{p['padding']}"
        return (
            f"conv2d_winograd_nhwc/{_x(p['N'], p['H'], p['W'], p['CI'])}/{tail}/{p['CO']}/t{p['tile_size']}{_suffix(p)}"
        )
    if op == "batch_matmul_nkkm":
        return f"batch_matmul/{_x(p['B'], p['N'], p['M'], p['K'])}"
    if op == "transpose_batch_matmul":
        return f"transpose_batch_matmul/{_x(p['batch'], p['seq_len'], p['n_head'], p['n_dim'])}"
    if op == "norm_bmn":
        return f"norm/{_x(p['B'], p['M'], p['N'])}"
    if op == "softmax_mn":
        return f"softmax/{_x(p['m'], p['n'])}"
    raise ValueError(f"no naming rule for te_workload.{op}")  # pragma: no cover - new TVM ops


def _te_params(op: str, args: tuple[Any, ...]) -> dict[str, Any]:
    bound = inspect.signature(_te_workload_func(op)).bind(*args)
    bound.apply_defaults()
    return {"op": op, **bound.arguments}


def _te_workload(family: str, op: str, args: tuple[Any, ...], prefix: str = "") -> Workload:
    params = _te_params(op, tuple(args))
    name = _te_name(op, params)
    call = ", ".join(f"{k}={v}" for k, v in params.items() if k != "op")
    return Workload(
        name=f"{prefix}{name}",
        family=family,
        params=params,
        _builder=functools.partial(_build_te_workload, op, tuple(args)),
        description=f"te_workload.{op}({call})",
    )


# -- the tables --------------------------------------------------------------------------------


def benchmark_workloads() -> list[Workload]:
    """The 53 operators of MetaSchedule's `te_workload.CONFIGS`, in CONFIGS order."""
    from tvm.s_tir.meta_schedule.testing import te_workload

    out = []
    for family, (func, shapes) in te_workload.CONFIGS.items():
        for args in shapes:
            out.append(_te_workload(family, func.__name__, tuple(args)))
    return out


def _resnet50_convs() -> list[tuple[int, ...]]:
    """conv2d_nhwc args (N, H, W, CI, CO, k, stride, pad) of every ResNet-50 v1.5 conv layer."""
    convs: list[tuple[int, ...]] = [(1, 224, 224, 3, 64, 7, 2, 3)]
    size, cin = 56, 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        cout = width * 4
        for b in range(blocks):
            s = stride if b == 0 else 1
            out_size = size // s
            convs.append((1, size, size, cin, width, 1, 1, 0))  # 1x1 reduce
            convs.append((1, size, size, width, width, 3, s, 1))  # 3x3 (strided in block 0)
            convs.append((1, out_size, out_size, width, cout, 1, 1, 0))  # 1x1 expand
            if b == 0:
                convs.append((1, size, size, cin, cout, 1, s, 0))  # downsample shortcut
            size, cin = out_size, cout
    return convs


def _mobilenetv2_layers() -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(conv2d_nhwc args, depthwise_conv2d_nhwc args) of every MobileNet-V2 1.0 layer."""
    convs: list[tuple[int, ...]] = [(1, 224, 224, 3, 32, 3, 2, 1)]  # stem
    dws: list[tuple[int, ...]] = []
    size, cin = 112, 32
    for t, c, n, s in (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            if t != 1:
                convs.append((1, size, size, cin, hidden, 1, 1, 0))  # 1x1 expand
            dws.append((1, size, size, hidden, 3, stride, 1))  # 3x3 depthwise
            size = size // stride
            convs.append((1, size, size, hidden, c, 1, 1, 0))  # 1x1 project
            cin = c
    convs.append((1, size, size, cin, 1280, 1, 1, 0))  # final 1x1
    return convs, dws


def _dense_workload(family: str, M: int, K: int, N: int) -> Workload:
    return Workload(
        name=f"{family}/dense/{M}x{K}/{N}",
        family=family,
        params={"op": "dense", "M": M, "K": K, "N": N},
        _builder=functools.partial(_build_dense, M, K, N),
        description=f"topi.nn.dense: data {M}x{K} times weight {N}x{K} transposed",
    )


def _nchw_conv_workload(family: str, args: tuple[int, ...]) -> Workload:
    """The NCHW twin of a network's `conv2d_nhwc` layer (args in conv2d_nhwc's order)."""
    N, H, W, CI, CO, k, s, p = args
    params = {
        "op": "conv2d_nchw",
        "N": N,
        "CI": CI,
        "H": H,
        "W": W,
        "CO": CO,
        "kernel_size": k,
        "stride": s,
        "padding": p,
    }
    return Workload(
        name=f"{family}/conv2d_nchw/{_x(N, CI, H, W)}/{_conv_tail(params)}/{CO}",
        family=family,
        params=params,
        _builder=functools.partial(_build_conv2d_nchw, N, CI, H, W, CO, k, s, p),
        description=f"topi.nn.conv2d_nchw: data {_x(N, CI, H, W)}, weight {_x(CO, CI, k, k)}, stride {s}, padding {p}",
    )


def _dedup(wls: list[Workload]) -> list[Workload]:
    seen: dict[str, Workload] = {}
    for wl in wls:
        seen.setdefault(wl.name, wl)
    return list(seen.values())


def network_workloads() -> list[Workload]:
    """The operator shapes of ResNet-50, MobileNet-V2 and BERT-base, each family deduplicated."""
    resnet = [_te_workload("resnet50", "conv2d_nhwc", a, "resnet50/") for a in _resnet50_convs()]
    resnet.append(_dense_workload("resnet50", 1, 2048, 1000))
    resnet += [_nchw_conv_workload("resnet50", a) for a in _resnet50_convs()]

    convs, dws = _mobilenetv2_layers()
    mnv2 = [_te_workload("mobilenetv2", "conv2d_nhwc", a, "mobilenetv2/") for a in convs]
    mnv2 += [_te_workload("mobilenetv2", "depthwise_conv2d_nhwc", a, "mobilenetv2/") for a in dws]
    mnv2.append(_dense_workload("mobilenetv2", 1, 1280, 1000))
    mnv2 += [_nchw_conv_workload("mobilenetv2", a) for a in convs]

    seq, hidden, heads, ffn = 128, 768, 12, 3072
    head_dim = hidden // heads
    bert = [
        _dense_workload("bert", seq, hidden, hidden),
        _dense_workload("bert", seq, hidden, ffn),
        _dense_workload("bert", seq, ffn, hidden),
        # scores = Q . K^T: (12, 128, 64) . (12, 64, 128); context = P . V: (12,128,128) . (12,128,64)
        _te_workload("bert", "batch_matmul_nkkm", (heads, seq, seq, head_dim), "bert/"),
        _te_workload("bert", "batch_matmul_nkkm", (heads, seq, head_dim, seq), "bert/"),
        Workload(
            name=f"bert/softmax/{_x(heads, seq, seq)}",
            family="bert",
            params={"op": "softmax", "shape": [heads, seq, seq], "axis": -1},
            _builder=functools.partial(_build_softmax, (heads, seq, seq)),
            description="topi.nn.softmax over the last axis of the attention scores",
        ),
        Workload(
            name=f"bert/layer_norm/{_x(seq, hidden)}",
            family="bert",
            params={"op": "layer_norm", "shape": [seq, hidden], "axis": -1},
            _builder=functools.partial(_build_layer_norm, (seq, hidden)),
            description="topi.nn.layer_norm over the hidden axis, with gamma and beta",
        ),
    ]
    return _dedup(resnet) + _dedup(mnv2) + _dedup(bert)
