"""Seeded random Halide pipelines, after Halide's `apps/random_pipeline` generator.

Why: Adams2019 was trained on thousands of random pipelines; retraining for a machine needs the
same kind of diverse, cheap-to-benchmark programs. Same seed = same pipeline (only Python's
`random.Random(seed)` drives the choices). Every Func is float32 over (x, y, c); stages pick from
pointwise ops, 1-D and 2-D stencils, pooling, down/up-sampling, transposes, channel mixing and
matmul-like spatial reductions, applied to random earlier stages, with random sizes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from autosearch.backends.halide.pipeline_def import PipelineDef
from autosearch.errors import WorkloadError

__all__ = ["STAGE_TYPES", "random_pipeline"]

STAGE_TYPES = (
    "pointwise",
    "binary",
    "stencil1d",
    "stencil2d",
    "pool",
    "downsample",
    "upsample",
    "transpose",
    "channel_mix",
    "matmul",
)


@dataclass
class _Stage:
    func: Any
    w: int
    h: int
    c: int

    @property
    def size(self) -> int:
        return self.w * self.h * self.c


def random_pipeline(
    seed: int = 0,
    min_stages: int = 2,
    max_stages: int = 6,
    max_elems: int = 1 << 20,
    sizes: tuple[int, ...] = (64, 96, 128, 192, 256),
    channels: tuple[int, ...] = (1, 3, 4, 8),
) -> PipelineDef:
    """Build the random pipeline of `seed`: between min_stages and max_stages stages after the input."""
    import halide as hl

    if not (1 <= int(min_stages) <= int(max_stages) <= 64):
        raise WorkloadError(f"need 1 <= min_stages <= max_stages <= 64, got {min_stages}, {max_stages}")
    sizes, channels = tuple(sizes), tuple(channels)  # lists come from JSON / -p options
    rng = random.Random(int(seed))
    x, y, c = hl.Var("x"), hl.Var("y"), hl.Var("c")
    w0, h0, c0 = rng.choice(sizes), rng.choice(sizes), rng.choice(channels)
    inp = hl.ImageParam(hl.Float(32), 3, "input")
    clamped = hl.BoundaryConditions.repeat_edge(inp, [(0, w0), (0, h0), (0, c0)])
    first = hl.Func("s0_input")
    first[x, y, c] = clamped[x, y, c]
    stages = [_Stage(first, w0, h0, c0)]
    notes = [f"s0 = input {w0}x{h0}x{c0}"]
    n_stages = rng.randint(int(min_stages), int(max_stages))

    def coef() -> float:
        return round(rng.uniform(-1.0, 1.0), 3)

    def resample(g: _Stage, f: _Stage) -> Any:
        """g read at f's coordinates (nearest neighbour), so any two stages can be combined."""
        gx = x if g.w == f.w else (x * g.w) // f.w
        gy = y if g.h == f.h else (y * g.h) // f.h
        gc = c if g.c == f.c else c % g.c
        return g.func[gx, gy, gc]

    for i in range(1, n_stages + 1):
        for _attempt in range(20):
            f = stages[rng.randrange(len(stages))] if rng.random() < 0.3 else stages[-1]
            kind = rng.choice(STAGE_TYPES)
            name = f"s{i}_{kind}"
            out = hl.Func(name)
            if kind == "pointwise":
                a, b = coef(), coef()
                act = rng.choice(["relu", "tanh", "abs", "square"])
                e = hl.f32(a) * f.func[x, y, c] + hl.f32(b)
                e = {"relu": hl.max(e, hl.f32(0)), "tanh": hl.tanh(e), "abs": hl.abs(e), "square": e * e}[act]
                out[x, y, c] = e
                new, note = _Stage(out, f.w, f.h, f.c), f"{act}({a}*f+{b})"
            elif kind == "binary":
                g = stages[rng.randrange(len(stages))]
                op = rng.choice(["+", "*", "max", "-"])
                fa, ga = f.func[x, y, c], resample(g, f)
                out[x, y, c] = {"+": fa + ga, "*": fa * ga, "max": hl.max(fa, ga), "-": fa - ga}[op]
                new, note = _Stage(out, f.w, f.h, f.c), f"f {op} resample(s{stages.index(g)})"
            elif kind == "stencil1d":
                r = rng.randint(1, 3)
                horiz = rng.random() < 0.5
                taps = [coef() for _ in range(2 * r + 1)]
                out[x, y, c] = sum(
                    hl.f32(t) * (f.func[x + k - r, y, c] if horiz else f.func[x, y + k - r, c])
                    for k, t in enumerate(taps)
                )
                new, note = _Stage(out, f.w, f.h, f.c), f"{2 * r + 1}-tap {'x' if horiz else 'y'} stencil"
            elif kind == "stencil2d":
                r = rng.randint(1, 2)
                rd = hl.RDom([(-r, 2 * r + 1), (-r, 2 * r + 1)], f"r{i}")
                out[x, y, c] = hl.f32(0)
                out[x, y, c] += (
                    hl.f32(coef()) * f.func[x + rd.x, y + rd.y, c] * (hl.f32(1) + hl.f32(0.125) * hl.f32(rd.x * rd.y))
                )
                new, note = _Stage(out, f.w, f.h, f.c), f"{2 * r + 1}x{2 * r + 1} stencil (reduction)"
            elif kind == "pool":
                if f.w < 16 or f.h < 16:
                    continue
                k = rng.choice([2, 3])
                rd = hl.RDom([(0, k), (0, k)], f"r{i}")
                if rng.random() < 0.5:
                    out[x, y, c] = hl.maximum(f.func[2 * x + rd.x, 2 * y + rd.y, c])
                    note = f"max pool {k}x{k} stride 2"
                else:
                    out[x, y, c] = hl.sum(f.func[2 * x + rd.x, 2 * y + rd.y, c]) / hl.f32(k * k)
                    note = f"avg pool {k}x{k} stride 2"
                new = _Stage(out, f.w // 2, f.h // 2, f.c)
            elif kind == "downsample":
                if f.w < 16 or f.h < 16:
                    continue
                if rng.random() < 0.5:
                    out[x, y, c] = (f.func[2 * x, y, c] + f.func[2 * x + 1, y, c]) * hl.f32(0.5)
                    new, note = _Stage(out, f.w // 2, f.h, f.c), "downsample x by 2"
                else:
                    out[x, y, c] = (f.func[x, 2 * y, c] + f.func[x, 2 * y + 1, c]) * hl.f32(0.5)
                    new, note = _Stage(out, f.w, f.h // 2, f.c), "downsample y by 2"
            elif kind == "upsample":
                if f.size * 2 > max_elems:
                    continue
                if rng.random() < 0.5:
                    out[x, y, c] = (f.func[x // 2, y, c] + f.func[(x + 1) // 2, y, c]) * hl.f32(0.5)
                    new, note = _Stage(out, f.w * 2, f.h, f.c), "linear upsample x by 2"
                else:
                    out[x, y, c] = f.func[x, y // 2, c]
                    new, note = _Stage(out, f.w, f.h * 2, f.c), "nearest upsample y by 2"
            elif kind == "transpose":
                out[x, y, c] = f.func[y, x, c]
                new, note = _Stage(out, f.h, f.w, f.c), "transpose x/y"
            elif kind == "channel_mix":
                co = rng.choice(channels + (16,))
                if f.w * f.h * co > max_elems:
                    continue
                rd = hl.RDom([(0, f.c)], f"r{i}")
                a, b = rng.randint(1, 7), rng.randint(1, 7)
                weight = hl.f32(((c * a + rd.x * b) % 5) - 2) * hl.f32(0.25)
                out[x, y, c] = hl.f32(0)
                out[x, y, c] += weight * f.func[x, y, rd.x]
                new, note = _Stage(out, f.w, f.h, co), f"channel mix {f.c}->{co} (1x1 conv)"
            else:  # matmul: out(x, y, c) = sum_r f(r, y, c) * g(x, r, c)
                g = stages[rng.randrange(len(stages))]
                k = max(1, min(f.w, g.h, 64))
                rd = hl.RDom([(0, k)], f"r{i}")
                out[x, y, c] = hl.f32(0)
                out[x, y, c] += f.func[rd.x, y, c] * g.func[x, rd.x, c % g.c]
                new, note = _Stage(out, g.w, f.h, f.c), f"matmul over {k} with s{stages.index(g)}"
            stages.append(new)
            notes.append(f"s{i} = {note} of s{stages.index(f)} -> {new.w}x{new.h}x{new.c}")
            break
        else:
            raise WorkloadError(f"random pipeline seed {seed}: could not place stage {i}")
    last = stages[-1]
    return PipelineDef([last.func], [(last.w, last.h, last.c)], [(inp, (w0, h0, c0))], "\n".join(notes))
