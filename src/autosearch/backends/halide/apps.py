"""The classic Halide apps that Adams et al. 2019 evaluated on, as Python pipelines, each with a
numpy reference of what it computes.

Why: a cost model and its autotuning are judged on real image-processing and learning kernels,
not only on random programs, and every app is checked against numpy on small inputs
(`tests/test_halide_apps.py`) so a wrong port cannot hide behind a fast schedule.

Conventions: Halide dimension 0 is the innermost (x), so a Halide buffer of extents (w, h, c) is
a numpy array of shape (c, h, w); references take and return numpy arrays in that layout. Every
input is float32 and read through `repeat_edge` where the algorithm reads past its edge, so the
reference pads with numpy's `edge` mode. `PipelineDef.keepalive` lists intermediate Funcs whose
inlining would make Halide's *default* schedule compile for minutes (the tests compute them at
root; autoschedulers ignore the list). `AppInfo.params` are the sizes users run: those of
Halide's own apps (their generators' estimates: 1536 x 2560 images, nl_means 614 x 1024, a
conv layer of 5 x 128 x 100 x 80 -> 128, stencil_chain 8 stages, max_filter radius 26; mat_mul
1024), run on every physical core; `AppInfo.small` the sizes of the numpy reference tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosearch.backends.halide.pipeline_def import PipelineDef

__all__ = ["APPS", "BUILDERS", "AppInfo"]


@dataclass(frozen=True)
class AppInfo:
    """One app: how to build it, its realistic and test sizes, and its numpy reference."""

    build: Callable[..., PipelineDef]
    params: dict[str, Any]
    small: dict[str, Any]
    reference: Callable[..., np.ndarray]  # (input arrays in PipelineDef.inputs order, **params) -> output
    about: str


def _total(parts: Iterable[np.ndarray]) -> np.ndarray:
    """Sum of arrays (typed: the builtin `sum` starts from the int 0)."""
    it = iter(parts)
    out = np.array(next(it), dtype=np.float64)
    for p in it:
        out = out + p
    return out


def _hl() -> Any:
    import halide as hl

    return hl


# -- the first builtins: blur, matmul, conv_layer, unsharp -----------------------------------------------------------------------------------
def _blur_builtin(width: int, height: int) -> PipelineDef:
    import halide as hl

    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.UInt(16), 2, "input")
    bx, by = hl.Func("blur_x"), hl.Func("blur_y")
    bx[x, y] = (inp[x, y] + inp[x + 1, y] + inp[x + 2, y]) / 3
    by[x, y] = (bx[x, y] + bx[x, y + 1] + bx[x, y + 2]) / 3
    return PipelineDef([by], [(width, height)], [(inp, (width + 2, height + 2))], "blur_x: 3-tap x; blur_y: 3-tap y")


def _matmul_builtin(n: int) -> PipelineDef:
    import halide as hl

    i, j = hl.Var("i"), hl.Var("j")
    a = hl.ImageParam(hl.Float(32), 2, "A")
    b = hl.ImageParam(hl.Float(32), 2, "B")
    k = hl.RDom([(0, n)], "k")
    prod = hl.Func("matmul")
    prod[i, j] = hl.f32(0)
    prod[i, j] += a[k.x, j] * b[i, k.x]
    out = hl.Func("output")
    out[i, j] = prod[i, j]
    return PipelineDef([out], [(n, n)], [(a, (n, n)), (b, (n, n))], f"C[i,j] = sum_k A[k,j] * B[i,k], n={n}")


def _conv_layer_builtin(width: int, height: int, in_channels: int, out_channels: int, batch: int) -> PipelineDef:
    import halide as hl

    c, x, y, n = hl.Var("c"), hl.Var("x"), hl.Var("y"), hl.Var("n")
    inp = hl.ImageParam(hl.Float(32), 4, "input")  # (ci, x, y, n)
    filt = hl.ImageParam(hl.Float(32), 4, "filter")  # (co, ci, kx, ky)
    bias = hl.ImageParam(hl.Float(32), 1, "bias")
    r = hl.RDom([(0, in_channels), (0, 3), (0, 3)], "r")
    conv = hl.Func("conv")
    conv[c, x, y, n] = bias[c]
    conv[c, x, y, n] += filt[c, r.x, r.y, r.z] * inp[r.x, x + r.y, y + r.z, n]
    relu = hl.Func("relu")
    relu[c, x, y, n] = hl.max(hl.f32(0), conv[c, x, y, n])
    return PipelineDef(
        [relu],
        [(out_channels, width, height, batch)],
        [
            (inp, (in_channels, width + 2, height + 2, batch)),
            (filt, (out_channels, in_channels, 3, 3)),
            (bias, (out_channels,)),
        ],
        "conv 3x3 + bias + relu",
    )


def _unsharp_builtin(width: int, height: int) -> PipelineDef:
    import halide as hl

    x, y, c = hl.Var("x"), hl.Var("y"), hl.Var("c")
    inp = hl.ImageParam(hl.Float(32), 3, "input")
    clamped = hl.BoundaryConditions.repeat_edge(inp, [(0, width), (0, height), (0, 3)])
    gray = hl.Func("gray")
    gray[x, y] = hl.f32(0.299) * clamped[x, y, 0] + hl.f32(0.587) * clamped[x, y, 1] + hl.f32(0.114) * clamped[x, y, 2]
    kernel = [0.0625, 0.25, 0.375, 0.25, 0.0625]
    by = hl.Func("blur_y")
    by[x, y] = sum(hl.f32(kernel[i]) * gray[x, y + i - 2] for i in range(5))
    bx = hl.Func("blur_x")
    bx[x, y] = sum(hl.f32(kernel[i]) * by[x + i - 2, y] for i in range(5))
    sharpen = hl.Func("sharpen")
    sharpen[x, y] = 2 * gray[x, y] - bx[x, y]
    ratio = hl.Func("ratio")
    ratio[x, y] = sharpen[x, y] / (gray[x, y] + hl.f32(1e-3))
    out = hl.Func("output")
    out[x, y, c] = ratio[x, y] * clamped[x, y, c]
    return PipelineDef(
        [out],
        [(width, height, 3)],
        [(inp, (width, height, 3))],
        "unsharp mask: gray, blur_y, blur_x, sharpen, ratio, output",
    )


# -- stencil_chain ---------------------------------------------------------------------------
_TAPS = (1.0, 2.0, 3.0, 2.0, 1.0)


def _stencil_chain(width: int, height: int, stages: int) -> PipelineDef:
    hl = _hl()
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.Float(32), 2, "input")
    prev = hl.Func("clamped")
    prev[x, y] = hl.BoundaryConditions.repeat_edge(inp)[x, y]
    funcs = []
    for s in range(stages):
        f = hl.Func(f"stage_{s}")
        f[x, y] = sum(
            hl.f32(_TAPS[i] * _TAPS[j] / 81.0) * prev[x + i - 2, y + j - 2] for i in range(5) for j in range(5)
        )
        funcs.append(f)
        prev = f
    return PipelineDef(
        [prev], [(width, height)], [(inp, (width, height))], f"{stages} chained 5x5 stencils", keepalive=funcs[:-1]
    )


def _stencil_chain_ref(inp: np.ndarray, width: int, height: int, stages: int) -> np.ndarray:
    cur = np.pad(inp.astype(np.float64), 2 * stages, mode="edge")
    for _ in range(stages):
        h, w = cur.shape[0] - 4, cur.shape[1] - 4
        cur = _total(_TAPS[i] * _TAPS[j] / 81.0 * cur[j : j + h, i : i + w] for i in range(5) for j in range(5))
    return cur


# -- harris ----------------------------------------------------------------------------------
def _harris(width: int, height: int) -> PipelineDef:
    hl = _hl()
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.Float(32), 3, "input")
    cl = hl.BoundaryConditions.repeat_edge(inp)
    gray = hl.Func("gray")
    gray[x, y] = hl.f32(0.299) * cl[x, y, 0] + hl.f32(0.587) * cl[x, y, 1] + hl.f32(0.114) * cl[x, y, 2]
    ix, iy = hl.Func("Ix"), hl.Func("Iy")
    ix[x, y] = (
        (gray[x + 1, y - 1] - gray[x - 1, y - 1])
        + 2 * (gray[x + 1, y] - gray[x - 1, y])
        + (gray[x + 1, y + 1] - gray[x - 1, y + 1])
    ) / hl.f32(12)
    iy[x, y] = (
        (gray[x - 1, y + 1] - gray[x - 1, y - 1])
        + 2 * (gray[x, y + 1] - gray[x, y - 1])
        + (gray[x + 1, y + 1] - gray[x + 1, y - 1])
    ) / hl.f32(12)
    ixx, iyy, ixy = hl.Func("Ixx"), hl.Func("Iyy"), hl.Func("Ixy")
    ixx[x, y], iyy[x, y], ixy[x, y] = ix[x, y] * ix[x, y], iy[x, y] * iy[x, y], ix[x, y] * iy[x, y]
    r = hl.RDom([(-1, 3), (-1, 3)], "box")
    sxx, syy, sxy = hl.Func("Sxx"), hl.Func("Syy"), hl.Func("Sxy")
    sxx[x, y] = hl.sum(ixx[x + r.x, y + r.y])
    syy[x, y] = hl.sum(iyy[x + r.x, y + r.y])
    sxy[x, y] = hl.sum(ixy[x + r.x, y + r.y])
    out = hl.Func("harris")
    det = sxx[x, y] * syy[x, y] - sxy[x, y] * sxy[x, y]
    trace = sxx[x, y] + syy[x, y]
    out[x, y] = det - hl.f32(0.04) * trace * trace
    return PipelineDef([out], [(width, height)], [(inp, (width, height, 3))], "Harris corner response")


def _harris_ref(inp: np.ndarray, width: int, height: int) -> np.ndarray:
    p = np.pad(inp.astype(np.float64), ((0, 0), (2, 2), (2, 2)), mode="edge")
    g = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]  # (h+4, w+4), origin at (-2, -2)

    def at(dx: int, dy: int) -> np.ndarray:  # gray shifted, on the (h+2, w+2) region starting at (-1, -1)
        return g[1 + dy : 1 + dy + height + 2, 1 + dx : 1 + dx + width + 2]

    ix = ((at(1, -1) - at(-1, -1)) + 2 * (at(1, 0) - at(-1, 0)) + (at(1, 1) - at(-1, 1))) / 12
    iy = ((at(-1, 1) - at(-1, -1)) + 2 * (at(0, 1) - at(0, -1)) + (at(1, 1) - at(1, -1))) / 12

    def box(a: np.ndarray) -> np.ndarray:
        return _total(a[j : j + height, i : i + width] for i in range(3) for j in range(3))

    sxx, syy, sxy = box(ix * ix), box(iy * iy), box(ix * iy)
    return sxx * syy - sxy * sxy - 0.04 * (sxx + syy) ** 2


# -- iir_blur --------------------------------------------------------------------------------
def _scan_y(hl: Any, src: Any, extent: int, alpha: float, name: str) -> Any:
    """First-order recursive filter down y, then back up (causal + anti-causal), as the app does."""
    x, y, c = hl.Var("x"), hl.Var("y"), hl.Var("c")
    causal = hl.Func(f"{name}_causal")
    causal[x, y, c] = src[x, y, c]
    ry = hl.RDom([(1, extent - 1)], f"{name}_ry")
    causal[x, ry, c] = hl.f32(1 - alpha) * causal[x, ry - 1, c] + hl.f32(alpha) * src[x, ry, c]
    anti = hl.Func(f"{name}_anti")
    anti[x, y, c] = causal[x, y, c]
    ry2 = hl.RDom([(1, extent - 1)], f"{name}_ry2")
    yy = extent - 1 - ry2
    anti[x, yy, c] = hl.f32(1 - alpha) * anti[x, yy + 1, c] + hl.f32(alpha) * causal[x, yy, c]
    return anti


def _iir_blur(width: int, height: int, channels: int, alpha: float) -> PipelineDef:
    hl = _hl()
    x, y, c = hl.Var("x"), hl.Var("y"), hl.Var("c")
    inp = hl.ImageParam(hl.Float(32), 3, "input")
    src = hl.Func("src")
    src[x, y, c] = inp[x, y, c]
    cols = _scan_y(hl, src, height, alpha, "cols")
    transposed = hl.Func("transposed")
    transposed[x, y, c] = cols[y, x, c]
    rows = _scan_y(hl, transposed, width, alpha, "rows")
    out = hl.Func("iir_blur")
    out[x, y, c] = rows[y, x, c]
    return PipelineDef(
        [out],
        [(width, height, channels)],
        [(inp, (width, height, channels))],
        "recursive blur down and up the columns, then the rows (via transposes)",
    )


def _scan_ref(a: np.ndarray, alpha: float) -> np.ndarray:
    """The causal + anti-causal scan along axis -2 (numpy (c, y, x) layout: y)."""
    a = a.astype(np.float64)
    out = a.copy()
    for i in range(1, a.shape[-2]):
        out[..., i, :] = (1 - alpha) * out[..., i - 1, :] + alpha * a[..., i, :]
    anti = out.copy()
    for i in range(a.shape[-2] - 2, -1, -1):
        anti[..., i, :] = (1 - alpha) * anti[..., i + 1, :] + alpha * out[..., i, :]
    return anti


def _iir_blur_ref(inp: np.ndarray, width: int, height: int, channels: int, alpha: float) -> np.ndarray:
    cols = _scan_ref(inp, alpha)
    return np.swapaxes(_scan_ref(np.swapaxes(cols, -1, -2), alpha), -1, -2)


# -- max_filter ------------------------------------------------------------------------------
def _max_filter(width: int, height: int, channels: int, radius: int) -> PipelineDef:
    hl = _hl()
    x, y, c = hl.Var("x"), hl.Var("y"), hl.Var("c")
    inp = hl.ImageParam(hl.Float(32), 3, "input")
    cl = hl.BoundaryConditions.repeat_edge(inp)
    r = hl.RDom([(-radius, 2 * radius + 1)], "r")
    vmax = hl.Func("vmax")
    vmax[x, y, c] = hl.maximum(cl[x, y + r.x, c])
    r2 = hl.RDom([(-radius, 2 * radius + 1)], "r2")
    out = hl.Func("max_filter")
    out[x, y, c] = hl.maximum(vmax[x + r2.x, y, c])
    return PipelineDef(
        [out],
        [(width, height, channels)],
        [(inp, (width, height, channels))],
        f"square max filter of radius {radius}, separable",
    )


def _max_filter_ref(inp: np.ndarray, width: int, height: int, channels: int, radius: int) -> np.ndarray:
    p = np.pad(inp, ((0, 0), (radius, radius), (radius, radius)), mode="edge")
    v = np.max([p[:, j : j + height, :] for j in range(2 * radius + 1)], axis=0)
    return np.max([v[:, :, i : i + width] for i in range(2 * radius + 1)], axis=0)


# -- nl_means --------------------------------------------------------------------------------
def _nl_means(width: int, height: int, patch_radius: int, search_radius: int, sigma: float) -> PipelineDef:
    hl = _hl()
    x, y, c, dx, dy = hl.Var("x"), hl.Var("y"), hl.Var("c"), hl.Var("dx"), hl.Var("dy")
    inp = hl.ImageParam(hl.Float(32), 3, "input")
    cl = hl.BoundaryConditions.repeat_edge(inp)
    inv = hl.f32(1.0 / (sigma * sigma))
    d = hl.Func("dist")
    d[x, y, dx, dy] = sum((cl[x, y, k] - cl[x + dx, y + dy, k]) ** 2 for k in range(3))
    p = hl.RDom([(-patch_radius, 2 * patch_radius + 1)], "p")
    by = hl.Func("blur_d_y")
    by[x, y, dx, dy] = hl.sum(d[x, y + p.x, dx, dy])
    p2 = hl.RDom([(-patch_radius, 2 * patch_radius + 1)], "p2")
    bd = hl.Func("blur_d")
    bd[x, y, dx, dy] = hl.sum(by[x + p2.x, y, dx, dy])
    w = hl.Func("weight")
    w[x, y, dx, dy] = hl.exp(-bd[x, y, dx, dy] * inv)
    s = hl.RDom([(-search_radius, 2 * search_radius + 1), (-search_radius, 2 * search_radius + 1)], "s")
    num, den = hl.Func("num"), hl.Func("den")
    num[x, y, c] = hl.sum(w[x, y, s.x, s.y] * cl[x + s.x, y + s.y, c])
    den[x, y] = hl.sum(w[x, y, s.x, s.y])
    out = hl.Func("nl_means")
    out[x, y, c] = num[x, y, c] / den[x, y]
    return PipelineDef(
        [out],
        [(width, height, 3)],
        [(inp, (width, height, 3))],
        f"non-local means, patch radius {patch_radius}, search radius {search_radius}",
    )


def _nl_means_ref(
    inp: np.ndarray, width: int, height: int, patch_radius: int, search_radius: int, sigma: float
) -> np.ndarray:
    pr, sr = patch_radius, search_radius
    m = pr + sr
    p = np.pad(inp.astype(np.float64), ((0, 0), (m, m), (m, m)), mode="edge")
    base = p[:, sr : sr + height + 2 * pr, sr : sr + width + 2 * pr]  # region grown by the patch radius
    num = np.zeros((3, height, width))
    den = np.zeros((height, width))
    for oy in range(-sr, sr + 1):
        for ox in range(-sr, sr + 1):
            shifted = p[:, sr + oy : sr + oy + height + 2 * pr, sr + ox : sr + ox + width + 2 * pr]
            d = ((base - shifted) ** 2).sum(axis=0)
            bd = _total(d[j : j + height, i : i + width] for i in range(2 * pr + 1) for j in range(2 * pr + 1))
            wgt = np.exp(-bd / (sigma * sigma))
            num += wgt * shifted[:, pr : pr + height, pr : pr + width]
            den += wgt
    return num / den


# -- bilateral_grid --------------------------------------------------------------------------
def _bilateral_grid(width: int, height: int, s_sigma: int, r_sigma: float) -> PipelineDef:
    hl = _hl()
    x, y, z, c = hl.Var("x"), hl.Var("y"), hl.Var("z"), hl.Var("c")
    inp = hl.ImageParam(hl.Float(32), 2, "input")
    cl = hl.BoundaryConditions.repeat_edge(inp)
    r = hl.RDom([(0, s_sigma), (0, s_sigma)], "r")
    val = hl.clamp(cl[x * s_sigma + r.x - s_sigma // 2, y * s_sigma + r.y - s_sigma // 2], hl.f32(0), hl.f32(1))
    zi = hl.i32(val * hl.f32(1.0 / r_sigma) + hl.f32(0.5))
    hist = hl.Func("histogram")
    hist[x, y, z, c] = hl.f32(0)
    hist[x, y, zi, c] += hl.select(c == 0, val, hl.f32(1))
    taps = (1.0, 4.0, 6.0, 4.0, 1.0)
    bz, bx, by = hl.Func("blurz"), hl.Func("blurx"), hl.Func("blury")
    bz[x, y, z, c] = sum(hl.f32(t) * hist[x, y, z + k - 2, c] for k, t in enumerate(taps))
    bx[x, y, z, c] = sum(hl.f32(t) * bz[x + k - 2, y, z, c] for k, t in enumerate(taps))
    by[x, y, z, c] = sum(hl.f32(t) * bx[x, y + k - 2, z, c] for k, t in enumerate(taps))
    v = hl.clamp(cl[x, y], hl.f32(0), hl.f32(1))
    zv = v * hl.f32(1.0 / r_sigma)
    zi2 = hl.i32(zv)
    zf = zv - zi2
    xf = hl.f32(x % s_sigma) / hl.f32(s_sigma)
    yf = hl.f32(y % s_sigma) / hl.f32(s_sigma)
    xi, yi = x // s_sigma, y // s_sigma

    def lerp(a: Any, b: Any, t: Any) -> Any:
        return a + (b - a) * t

    interp = hl.Func("interpolated")
    interp[x, y, c] = lerp(
        lerp(
            lerp(by[xi, yi, zi2, c], by[xi + 1, yi, zi2, c], xf),
            lerp(by[xi, yi + 1, zi2, c], by[xi + 1, yi + 1, zi2, c], xf),
            yf,
        ),
        lerp(
            lerp(by[xi, yi, zi2 + 1, c], by[xi + 1, yi, zi2 + 1, c], xf),
            lerp(by[xi, yi + 1, zi2 + 1, c], by[xi + 1, yi + 1, zi2 + 1, c], xf),
            yf,
        ),
        zf,
    )
    out = hl.Func("bilateral_grid")
    out[x, y] = interp[x, y, 0] / interp[x, y, 1]
    return PipelineDef(
        [out],
        [(width, height)],
        [(inp, (width, height))],
        f"bilateral grid, spatial sigma {s_sigma}, range sigma {r_sigma}",
        keepalive=[bz, bx, by, interp],
    )


def _bilateral_grid_ref(inp: np.ndarray, width: int, height: int, s_sigma: int, r_sigma: float) -> np.ndarray:
    s = s_sigma
    inp32 = inp.astype(np.float32)
    gw, gh = width // s + 2, height // s + 2  # grid cells read by the interpolation: [0, w/s + 1]
    nz = int(1.0 / r_sigma + 0.5) + 2  # z values 0 .. 1/r_sigma (+1 read by the interpolation)
    pad = 4  # blur x / y read 2 cells either side
    hist = np.zeros((2, nz + 4, gh + 2 * pad, gw + 2 * pad))
    for gy in range(-pad, gh + pad):
        for gx in range(-pad, gw + pad):
            ys = np.clip(gy * s + np.arange(s) - s // 2, 0, height - 1)
            xs = np.clip(gx * s + np.arange(s) - s // 2, 0, width - 1)
            vals = np.clip(inp32[np.ix_(ys, xs)], 0, 1).ravel()
            zis = (vals * np.float32(1.0 / r_sigma) + np.float32(0.5)).astype(np.int32)
            for val, zz in zip(vals, zis):
                hist[0, zz + 2, gy + pad, gx + pad] += val
                hist[1, zz + 2, gy + pad, gx + pad] += 1
    taps = (1.0, 4.0, 6.0, 4.0, 1.0)
    bz = _total(t * np.roll(hist, 2 - k, axis=1) for k, t in enumerate(taps))  # hist[z + k - 2]
    bx = _total(t * np.roll(bz, 2 - k, axis=3) for k, t in enumerate(taps))
    by = _total(t * np.roll(bx, 2 - k, axis=2) for k, t in enumerate(taps))
    v: np.ndarray = np.clip(inp32, 0, 1)
    zv: np.ndarray = v * np.float32(1.0 / r_sigma)
    zi = zv.astype(np.int32)
    zf: np.ndarray = zv - zi
    yy, xx = np.mgrid[0:height, 0:width]
    xf: np.ndarray = (xx % s) / s
    yf: np.ndarray = (yy % s) / s
    xi, yi = xx // s + pad, yy // s + pad
    out = []
    for ch in range(2):
        g = by[ch]

        def at(dz: int, dy: int, dx: int, g: np.ndarray = g) -> np.ndarray:
            return g[zi + 2 + dz, yi + dy, xi + dx]

        def lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
            return a + (b - a) * t

        lo = lerp(lerp(at(0, 0, 0), at(0, 0, 1), xf), lerp(at(0, 1, 0), at(0, 1, 1), xf), yf)
        hi = lerp(lerp(at(1, 0, 0), at(1, 0, 1), xf), lerp(at(1, 1, 0), at(1, 1, 1), xf), yf)
        out.append(lerp(lo, hi, zf))
    return out[0] / out[1]


# -- references of the apps whose builders are the first builtins: unsharp, conv_layer, mat_mul ------------------------
def _unsharp_ref(inp: np.ndarray, width: int, height: int) -> np.ndarray:
    p = np.pad(inp.astype(np.float64), ((0, 0), (2, 2), (2, 2)), mode="edge")
    gray = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]
    k = (0.0625, 0.25, 0.375, 0.25, 0.0625)
    by = _total(k[i] * gray[i : i + height, :] for i in range(5))  # (h, w + 4)
    bx = _total(k[i] * by[:, i : i + width] for i in range(5))
    g = gray[2 : 2 + height, 2 : 2 + width]
    ratio = (2 * g - bx) / (g + 1e-3)
    return ratio[None] * inp


def _conv_layer_ref(
    inp: np.ndarray,
    filt: np.ndarray,
    bias: np.ndarray,
    width: int,
    height: int,
    in_channels: int,
    out_channels: int,
    batch: int,
) -> np.ndarray:
    i_h, f_h = inp.T.astype(np.float64), filt.T.astype(np.float64)  # Halide order: (ci, x, y, n), (co, ci, kx, ky)
    out = np.zeros((out_channels, width, height, batch)) + bias.astype(np.float64)[:, None, None, None]
    for kx in range(3):
        for ky in range(3):
            out += np.einsum("ci,ixyn->cxyn", f_h[:, :, kx, ky], i_h[:, kx : kx + width, ky : ky + height, :])
    return np.maximum(out, 0).T


def _mat_mul_ref(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    # Halide: C[i, j] = sum_k A[k, j] * B[i, k]; numpy layout C[j, i] = sum_k a[j, k] * b[k, i]
    return a.astype(np.float64) @ b.astype(np.float64)


APPS: dict[str, AppInfo] = {
    "bilateral_grid": AppInfo(
        _bilateral_grid,
        {"width": 1536, "height": 2560, "s_sigma": 8, "r_sigma": 0.1},
        {"width": 40, "height": 28, "s_sigma": 8, "r_sigma": 0.1},
        _bilateral_grid_ref,
        "edge-aware smoothing through a 3-D histogram grid",
    ),
    "conv_layer": AppInfo(
        _conv_layer_builtin,
        {"width": 100, "height": 80, "in_channels": 128, "out_channels": 128, "batch": 5},
        {"width": 8, "height": 6, "in_channels": 4, "out_channels": 5, "batch": 2},
        _conv_layer_ref,
        "3x3 convolution + bias + ReLU",
    ),
    "harris": AppInfo(
        _harris, {"width": 1536, "height": 2560}, {"width": 37, "height": 23}, _harris_ref, "Harris corner detector"
    ),
    "iir_blur": AppInfo(
        _iir_blur,
        {"width": 1536, "height": 2560, "channels": 3, "alpha": 0.1},
        {"width": 19, "height": 13, "channels": 2, "alpha": 0.1},
        _iir_blur_ref,
        "first-order recursive blur, both directions, both axes",
    ),
    "mat_mul": AppInfo(_matmul_builtin, {"n": 1024}, {"n": 24}, _mat_mul_ref, "dense matrix multiply"),
    "max_filter": AppInfo(
        _max_filter,
        {"width": 1536, "height": 2560, "channels": 3, "radius": 26},
        {"width": 30, "height": 20, "channels": 2, "radius": 3},
        _max_filter_ref,
        "square max filter",
    ),
    "nl_means": AppInfo(
        _nl_means,
        {"width": 614, "height": 1024, "patch_radius": 3, "search_radius": 3, "sigma": 0.12},
        {"width": 21, "height": 15, "patch_radius": 1, "search_radius": 2, "sigma": 0.5},
        _nl_means_ref,
        "non-local means denoising",
    ),
    "stencil_chain": AppInfo(
        _stencil_chain,
        {"width": 1536, "height": 2560, "stages": 8},
        {"width": 33, "height": 21, "stages": 3},
        _stencil_chain_ref,
        "a chain of 5x5 stencils",
    ),
    "unsharp": AppInfo(
        _unsharp_builtin, {"width": 1536, "height": 2560}, {"width": 35, "height": 22}, _unsharp_ref, "unsharp mask"
    ),
}

#: Every hand-written builder by pipeline name (the first builtins and the apps).
BUILDERS: dict[str, Callable[..., PipelineDef]] = {
    "blur": _blur_builtin,
    "matmul": _matmul_builtin,
    "conv_layer": _conv_layer_builtin,
    "unsharp": _unsharp_builtin,
    **{name: app.build for name, app in APPS.items()},
}
