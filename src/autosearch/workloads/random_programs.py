"""Seeded random tensor programs: the TVM analogue of Halide's random pipeline generator.

`random_program(seed)` draws, with `random.Random(seed)` only, a small program of 2-6 operators
over float32 tensors and returns it as a `Workload` named ``random/<seed>`` (family ``random``,
params ``{"seed": seed}``). The same seed always gives the same plan, hence the same `PrimFunc`
and the same key, in any process.

Generation has two steps, so that the randomness never touches TVM:

1. `random_plan(seed)` makes a `RandomPlan`: a list of `Node`s (inputs and operators with their
   attributes and output shapes), pure Python, readable with `describe()`.
2. `build_prim_func(plan)` turns it into TE computes and `te.create_prim_func`.

The program starts from one input, an image ``(1, H, W, C)`` (NHWC), a batch of matrices
``(B, M, K)`` or a matrix ``(M, K)``, and applies operators to the latest result:

- elementwise unary: relu, tanh, sigmoid, exp (of min(x, 10), so that chains never overflow),
  square, scale by a constant;
- elementwise binary (add, sub, mul, max) with a fresh input of the same shape or with an
  earlier result of the same shape (a skip connection: the program becomes a DAG);
- fork-join: two unary branches of one tensor joined by a binary op (three operators);
- broadcast: bias add or per-channel scale along the last axis (fresh 1-D input);
- reduction: sum / max / mean over one axis, or global average pooling of an NHWC image;
- matmul (2-D, fresh weight K x N) and batch matmul (3-D, fresh weight B x K x N);
- conv2d NHWC (1x1 or 3x3, stride 1 or 2, same padding) and depthwise 3x3 conv2d;
- pooling NHWC: max or average, 2x2 stride 2 or 3x3 stride 1 padding 1;
- softmax over the last axis; transpose of the last two axes.

Sizes are small: every tensor holds at most `MAX_ELEMENTS` floats and the whole program does
about `MAX_WORK` multiply-accumulates at most (the heaviest of the first 1000 seeds runs in well
under a millisecond on one core scheduled, about a millisecond unscheduled), and a program compiles in a
fraction of a second. At most `MAX_REDUCTIONS`
reduction blocks keep MetaSchedule's design space small (at most a few dozen schedules), and
DAG shapes that make MetaSchedule 0.27 fail are never drawn (see `_MATERIALIZED`).
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, field
from typing import Any

from autosearch.errors import WorkloadError
from autosearch.workloads.base import RANDOM_FAMILY, Workload

__all__ = [
    "MAX_ELEMENTS",
    "MAX_WORK",
    "Node",
    "RandomPlan",
    "build_prim_func",
    "random_plan",
    "random_program",
]

#: Largest tensor any node may produce (float32 elements: 128 KiB).
MAX_ELEMENTS = 32 * 1024
#: Most multiply-accumulates (or element operations) one program may do in all.
MAX_WORK = 400_000
#: Most reduction blocks per program. MetaSchedule's CPU design space has ~3 alternatives per
#: reduction block (write-cache choices of multi-level tiling, rfactor), so a program with k of
#: them has up to 3**k design spaces: 3**6 = 729 took tens of seconds to generate, 3**3 = 27 well under one.
MAX_REDUCTIONS = 3
#: Bump when the generator changes what a seed produces (keys of old seeds change with it).
GENERATOR_VERSION = 2

_UNARY = ("relu", "tanh", "sigmoid", "exp", "square", "scale")
_BINARY = ("add", "sub", "mul", "max")
#: Operators whose result MetaSchedule keeps in its own buffer: every reduction, and `exp`
#: (the CPU AutoInline rule refuses to inline blocks calling `tir.exp`). Injective operators
#: (the other unary and binary ones, broadcasts, transpose) are inlined into their consumers.
#:
#: The planner keeps, for every node, the set of such buffers a reader of it reads after
#: inlining, and refuses a block that would read two of them. In TVM 0.27 MetaSchedule's
#: multi-level tiling fuses the consumer of a tiled block into its tile (`reverse_compute_at`)
#: without checking the consumer's other producers, and raises "requires all the producer(s) of
#: the given block to be present under the target loop": no design space at all, for every
#: random state. Seen with ``tanh(max_pool(softmax(x)) + softmax(x))`` and with
#: ``softmax(channel_scale(depthwise_conv2d(x), s))`` (the softmax's max, tiled because of the
#: broadcast, is consumed by the exp block that also reads the convolution).
_MATERIALIZED = frozenset(
    {
        "exp",
        "softmax",
        "reduce_sum",
        "reduce_max",
        "reduce_mean",
        "global_avg_pool",
        "matmul",
        "batch_matmul",
        "conv2d",
        "depthwise_conv2d",
        "max_pool",
        "avg_pool",
    }
)
#: Operators that get MetaSchedule's multi-level tiling (a large space of distinct schedules).
_TILED = frozenset({"matmul", "batch_matmul", "conv2d", "depthwise_conv2d"})
#: Reduction blocks each operator adds to the TIR (softmax: max and sum of exponentials).
_REDUCTIONS = {
    "reduce_sum": 1,
    "reduce_max": 1,
    "reduce_mean": 1,
    "global_avg_pool": 1,
    "matmul": 1,
    "batch_matmul": 1,
    "conv2d": 1,
    "depthwise_conv2d": 1,
    "max_pool": 1,
    "avg_pool": 1,
    "softmax": 2,
}


@dataclass(frozen=True)
class Node:
    """One tensor of the plan: an input (`op == "input"`) or an operator applied to earlier nodes."""

    op: str
    inputs: tuple[int, ...]
    shape: tuple[int, ...]
    attrs: dict[str, Any] = field(default_factory=dict, hash=False)

    def describe(self, index: int) -> str:
        args = [f"x{i}" for i in self.inputs] + [f"{k}={v}" for k, v in self.attrs.items()]
        shape = "x".join(map(str, self.shape))
        if self.op == "input":
            return f"x{index}=input[{shape}]"
        return f"x{index}={self.op}({', '.join(args)})[{shape}]"


@dataclass(frozen=True)
class RandomPlan:
    """The program drawn for one seed; the last node is its only output."""

    seed: int
    nodes: tuple[Node, ...]
    #: Multiply-accumulates (or element operations) of one run, as the planner counted them.
    work: int = 0

    @property
    def num_ops(self) -> int:
        return sum(1 for n in self.nodes if n.op != "input")

    def describe(self) -> str:
        return "; ".join(n.describe(i) for i, n in enumerate(self.nodes))


# -- planning (pure Python, deterministic in the seed) -----------------------------------------


def _prod(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


class _Planner:
    def __init__(self, seed: int | str) -> None:
        self.rng = random.Random(seed)
        self.nodes: list[Node] = []
        #: per node: the materialised nodes (see _MATERIALIZED) a reader of it reads
        self.mat: list[frozenset[int]] = []
        self.work = 0
        self.reductions = 0

    def add(self, op: str, inputs: tuple[int, ...], shape: tuple[int, ...], attrs: dict | None = None) -> int:
        """Append a node; its id, or -1 when a block would read two materialised producers."""
        reads = frozenset().union(*(self.mat[i] for i in inputs))
        if len(reads) > 1:
            return -1
        # softmax reads its input twice (max, then exp(x - max)); if the input is an inlined
        # function of a materialised node, the max may be tiled and the exp block reads both.
        if op == "softmax" and reads and reads != {inputs[0]}:
            return -1
        node_id = len(self.nodes)
        self.nodes.append(Node(op, inputs, tuple(shape), dict(attrs or {})))
        self.mat.append(frozenset({node_id}) if op in _MATERIALIZED else reads)
        return node_id

    def start(self) -> int:
        rng = self.rng
        kind = rng.choice(("image", "image", "batch", "matrix"))
        while True:
            if kind == "image":
                h = rng.choice((4, 6, 7, 8, 12, 14, 16, 28))
                w = h if rng.random() < 0.7 else rng.choice((4, 6, 7, 8, 12, 14, 16, 28))
                shape: tuple[int, ...] = (1, h, w, rng.choice((3, 4, 8, 12, 16, 24, 32)))
            elif kind == "batch":
                shape = (rng.choice((1, 2, 4, 8, 12)), rng.choice((8, 16, 24, 32, 48, 64)), rng.choice((8, 16, 32, 64)))
            else:
                shape = (rng.choice((8, 16, 32, 48, 64, 128, 256)), rng.choice((8, 16, 32, 64, 96, 128)))
            if _prod(shape) <= MAX_ELEMENTS:
                return self.add("input", (), shape)

    # Long by nature: a dispatch over every operator kind, each with its own shape rule.
    # A proposal is None (not applicable) or a list of (op, input ids, output shape, attrs, work),
    # one per node it adds; input id -1 is a fresh input, -2 / -3 the two branches of a fork.
    def propose(self, cur: int, ops_left: int) -> list[tuple[str, tuple[int, ...], tuple[int, ...], dict, int]] | None:
        rng = self.rng
        shape = self.nodes[cur].shape
        n = _prod(shape)
        rank = len(shape)
        choices = ["unary", "unary", "binary", "binary", "broadcast", "reduce", "transpose", "softmax"]
        if ops_left >= 3:
            choices.append("fork")
        if rank == 2:
            choices += ["matmul", "matmul", "matmul"]
        if rank == 3:
            choices += ["matmul", "matmul"]
        if rank == 4:
            choices += ["conv2d", "conv2d", "conv2d", "depthwise", "pool", "pool"]
        kind = rng.choice(choices)

        if kind == "unary":
            op = rng.choice(_UNARY)
            attrs = {"factor": rng.choice((0.5, 2.0, -1.0))} if op == "scale" else {}
            return [(op, (cur,), shape, attrs, n)]
        if kind == "binary":
            op = rng.choice(_BINARY)
            same = [i for i, nd in enumerate(self.nodes) if i != cur and nd.op != "input" and nd.shape == shape]
            if same and rng.random() < 0.6:
                return [(op, (cur, rng.choice(same)), shape, {}, n)]
            return [(op, (cur, -1), shape, {}, n)]  # -1: a fresh input of the same shape
        if kind == "fork":
            a, b = rng.sample(_UNARY, 2)
            attrs_a = {"factor": 0.5} if a == "scale" else {}
            attrs_b = {"factor": 2.0} if b == "scale" else {}
            join = rng.choice(_BINARY)
            # node ids -2 / -3 are resolved to the two branch nodes when added
            return [(a, (cur,), shape, attrs_a, n), (b, (cur,), shape, attrs_b, n), (join, (-2, -3), shape, {}, n)]
        if kind == "broadcast":
            op = rng.choice(("bias_add", "channel_scale"))
            return [(op, (cur, -1), shape, {}, n)]
        if kind == "reduce":
            if rank == 1:
                return None
            if rank == 4 and rng.random() < 0.5:
                return [("global_avg_pool", (cur,), (shape[0], shape[3]), {}, n)]
            axis = rng.randrange(rank)
            out = shape[:axis] + shape[axis + 1 :]
            return [(rng.choice(("reduce_sum", "reduce_max", "reduce_mean")), (cur,), out, {"axis": axis}, n)]
        if kind == "transpose":
            if rank < 2:
                return None
            out = shape[:-2] + (shape[-1], shape[-2])
            return [("transpose", (cur,), out, {}, n)]
        if kind == "softmax":
            return [("softmax", (cur,), shape, {}, 4 * n)]
        if kind == "matmul":
            units = rng.choice((4, 8, 16, 24, 32, 48, 64, 96, 128))
            out = shape[:-1] + (units,)
            op = "matmul" if rank == 2 else "batch_matmul"
            return [(op, (cur, -1), out, {"units": units}, _prod(out) * shape[-1])]
        if kind == "conv2d":
            k = rng.choice((1, 3, 3))
            s = rng.choice((1, 1, 2)) if min(shape[1], shape[2]) >= 4 else 1
            p = k // 2
            co = rng.choice((4, 8, 12, 16, 24, 32, 48, 64))
            oh, ow = (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1
            out = (shape[0], oh, ow, co)
            return [
                (
                    "conv2d",
                    (cur, -1),
                    out,
                    {"kernel": k, "stride": s, "pad": p, "out_channels": co},
                    _prod(out) * k * k * shape[3],
                )
            ]
        if kind == "depthwise":
            s = rng.choice((1, 1, 2)) if min(shape[1], shape[2]) >= 4 else 1
            oh, ow = (shape[1] + 2 - 3) // s + 1, (shape[2] + 2 - 3) // s + 1
            out = (shape[0], oh, ow, shape[3])
            return [("depthwise_conv2d", (cur, -1), out, {"kernel": 3, "stride": s, "pad": 1}, _prod(out) * 9)]
        if kind == "pool":
            op = rng.choice(("max_pool", "avg_pool"))
            if min(shape[1], shape[2]) >= 2 and rng.random() < 0.6:
                attrs = {"kernel": 2, "stride": 2, "pad": 0}
            else:
                attrs = {"kernel": 3, "stride": 1, "pad": 1}
            kp, sp, pp = int(attrs["kernel"]), int(attrs["stride"]), int(attrs["pad"])
            out = (shape[0], (shape[1] + 2 * pp - kp) // sp + 1, (shape[2] + 2 * pp - kp) // sp + 1, shape[3])
            return [(op, (cur,), out, attrs, _prod(out) * kp * kp)]
        raise AssertionError(kind)  # pragma: no cover

    def step(self, cur: int, ops_left: int) -> int:
        for _ in range(32):
            prop = self.propose(cur, ops_left)
            if prop is None or len(prop) > ops_left:
                continue
            work = sum(p[4] for p in prop)
            reductions = sum(_REDUCTIONS.get(p[0], 0) for p in prop)
            if self.work + work > MAX_WORK or self.reductions + reductions > MAX_REDUCTIONS:
                continue
            if any(_prod(p[2]) > MAX_ELEMENTS or min(p[2]) < 1 for p in prop):
                continue
            mark = len(self.nodes)
            added: list[int] = []
            for op, inputs, shape, attrs, _ in prop:
                resolved = []
                for i in inputs:
                    if i == -1:  # a fresh input: same shape, or the weight the op needs
                        i = self.add("input", (), _fresh_input_shape(op, self.nodes[cur].shape, shape, attrs))
                    elif i in (-2, -3):  # the two branches of a fork, added just before
                        i = added[-2 - i]
                    resolved.append(i)
                node_id = self.add(op, tuple(resolved), shape, attrs)
                if node_id < 0:
                    break
                added.append(node_id)
            else:
                self.work += work
                self.reductions += reductions
                return added[-1]
            del self.nodes[mark:], self.mat[mark:]  # refused: roll back, draw again
        self.work += _prod(self.nodes[cur].shape)  # nothing fits: a cheap elementwise op
        return self.add("relu", (cur,), self.nodes[cur].shape)


def _fresh_input_shape(op: str, in_shape: tuple[int, ...], out_shape: tuple[int, ...], attrs: dict) -> tuple[int, ...]:
    if op in _BINARY:
        return in_shape
    if op in ("bias_add", "channel_scale"):
        return (in_shape[-1],)
    if op == "matmul":
        return (in_shape[-1], attrs["units"])
    if op == "batch_matmul":
        return (in_shape[0], in_shape[-1], attrs["units"])
    if op == "conv2d":
        return (attrs["kernel"], attrs["kernel"], in_shape[3], attrs["out_channels"])
    if op == "depthwise_conv2d":
        return (attrs["kernel"], attrs["kernel"], in_shape[3])
    raise AssertionError(op)  # pragma: no cover


@functools.lru_cache(maxsize=4096)
def random_plan(seed: int) -> RandomPlan:
    """The plan of random program `seed` (2-6 operators), made with `random.Random(seed)` only.

    Every plan holds at least one operator MetaSchedule tiles (matmul, conv): a program of only
    elementwise ops has a handful of distinct schedules, too few to learn from. A draw without
    one is redrawn from a derived seed, so seeds whose first draw qualifies keep their program.
    """
    for attempt in range(64):
        planner = _Planner(seed if attempt == 0 else f"{seed}/redraw{attempt}")
        cur = planner.start()
        total = planner.rng.randint(2, 6)
        done = 0
        while done < total:
            before = len([n for n in planner.nodes if n.op != "input"])
            cur = planner.step(cur, total - done)
            done += len([n for n in planner.nodes if n.op != "input"]) - before
        if any(n.op in _TILED for n in planner.nodes):
            break
    return RandomPlan(seed=seed, nodes=tuple(planner.nodes), work=planner.work)


# -- building (TE) -----------------------------------------------------------------------------


def _unary(op: str, x: Any, attrs: dict, name: str) -> Any:
    from tvm import te, tirx

    def f32(v: float) -> Any:
        return tirx.const(v, "float32")

    fns = {
        "relu": lambda v: te.max(v, f32(0.0)),
        "tanh": te.tanh,
        "sigmoid": te.sigmoid,
        "exp": lambda v: te.exp(te.min(v, f32(10.0))),
        "square": lambda v: v * v,
        "scale": lambda v: v * f32(attrs.get("factor", 1.0)),
    }
    fn = fns[op]
    return te.compute(x.shape, lambda *i: fn(x(*i)), name=name)


def _binary(op: str, a: Any, b: Any, name: str) -> Any:
    from tvm import te

    fns = {
        "add": lambda u, v: u + v,
        "sub": lambda u, v: u - v,
        "mul": lambda u, v: u * v,
        "max": lambda u, v: te.max(u, v),
    }
    fn = fns[op]
    return te.compute(a.shape, lambda *i: fn(a(*i), b(*i)), name=name)


def _padded(x: Any, p: int, pad_value: Any, name: str) -> Any:
    """Accessor ``(n, h, w, c) -> value`` of NHWC `x` padded by `p` on H and W.

    A program input gets its own pad stage (`topi.nn.pad`, as in TVM's conv2d). An intermediate
    result is padded inside its consumer instead (an `if_then_else` on the index): in TVM 0.27,
    MetaSchedule's multi-level tiling fuses a pad stage into its producer's tile with
    `reverse_compute_at`, which computes only the interior of the padded buffer and leaves its
    border uninitialised, so such schedules compute garbage (seen on conv2d -> conv2d chains).
    """
    from tvm import te, tirx, topi

    if not p:
        return x
    if isinstance(x.op, te.PlaceholderOp):
        return topi.nn.pad(x, [0, p, p, 0], pad_value=pad_value, name=name)
    H, W = int(x.shape[1]), int(x.shape[2])

    def value(n: Any, h: Any, w: Any, c: Any) -> Any:
        inside = tirx.all(h >= p, h < H + p, w >= p, w < W + p)
        return te.if_then_else(inside, x[n, h - p, w - p, c], pad_value)

    return value


# Long by nature: a dispatch over every operator kind the generator emits, one TE expression each.
def _build_node(node: Node, args: list[Any], name: str) -> Any:
    from tvm import te, tirx

    op, attrs = node.op, node.attrs
    if op in _UNARY:
        return _unary(op, args[0], attrs, name)
    if op in _BINARY:
        return _binary(op, args[0], args[1], name)
    x = args[0]
    if op == "bias_add":
        b = args[1]
        return te.compute(x.shape, lambda *i: x(*i) + b[i[-1]], name=name)
    if op == "channel_scale":
        b = args[1]
        return te.compute(x.shape, lambda *i: x(*i) * b[i[-1]], name=name)
    if op in ("reduce_sum", "reduce_max", "reduce_mean"):
        axis = attrs["axis"]
        r = te.reduce_axis((0, int(x.shape[axis])), name="r")

        def index(i: tuple) -> tuple:
            return (*i[:axis], r, *i[axis:])

        if op == "reduce_max":
            return te.compute(node.shape, lambda *i: te.max(x(*index(i)), axis=r), name=name)
        total = te.compute(
            node.shape, lambda *i: te.sum(x(*index(i)), axis=r), name=f"{name}_sum" if op == "reduce_mean" else name
        )
        if op == "reduce_sum":
            return total
        inv = tirx.const(1.0 / int(x.shape[axis]), "float32")
        return te.compute(node.shape, lambda *i: total(*i) * inv, name=name)
    if op == "global_avg_pool":
        rh = te.reduce_axis((0, int(x.shape[1])), name="rh")
        rw = te.reduce_axis((0, int(x.shape[2])), name="rw")
        total = te.compute(node.shape, lambda n, c: te.sum(x[n, rh, rw, c], axis=[rh, rw]), name=f"{name}_sum")
        inv = tirx.const(1.0 / (int(x.shape[1]) * int(x.shape[2])), "float32")
        return te.compute(node.shape, lambda n, c: total[n, c] * inv, name=name)
    if op == "transpose":
        return te.compute(node.shape, lambda *i: x(*i[:-2], i[-1], i[-2]), name=name)
    if op == "softmax":  # topi.nn.softmax's four stages, with names unique to this node
        n = int(x.shape[-1])
        k1 = te.reduce_axis((0, n), name="k")
        k2 = te.reduce_axis((0, n), name="k")
        mx = te.compute(node.shape[:-1], lambda *i: te.max(x(*i, k1), axis=k1), name=f"{name}_maxelem")
        ex = te.compute(node.shape, lambda *i: te.exp(x(*i) - mx(*i[:-1])), name=f"{name}_exp")
        sm = te.compute(node.shape[:-1], lambda *i: te.sum(ex(*i, k2), axis=k2), name=f"{name}_expsum")
        return te.compute(node.shape, lambda *i: ex(*i) / sm(*i[:-1]), name=name)
    if op == "matmul":
        w = args[1]
        k = te.reduce_axis((0, int(x.shape[1])), name="k")
        return te.compute(node.shape, lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name=name)
    if op == "batch_matmul":
        w = args[1]
        k = te.reduce_axis((0, int(x.shape[2])), name="k")
        return te.compute(node.shape, lambda b, i, j: te.sum(x[b, i, k] * w[b, k, j], axis=k), name=name)
    if op in ("conv2d", "depthwise_conv2d"):
        w = args[1]
        kk, s, p = attrs["kernel"], attrs["stride"], attrs["pad"]
        xp = _padded(x, p, tirx.const(0.0, "float32"), f"{name}_pad")
        rh = te.reduce_axis((0, kk), name="rh")
        rw = te.reduce_axis((0, kk), name="rw")
        if op == "depthwise_conv2d":
            return te.compute(
                node.shape,
                lambda n, h, ww, c: te.sum(xp(n, h * s + rh, ww * s + rw, c) * w[rh, rw, c], axis=[rh, rw]),
                name=name,
            )
        rc = te.reduce_axis((0, int(x.shape[3])), name="rc")
        return te.compute(
            node.shape,
            lambda n, h, ww, co: te.sum(xp(n, h * s + rh, ww * s + rw, rc) * w[rh, rw, rc, co], axis=[rh, rw, rc]),
            name=name,
        )
    if op in ("max_pool", "avg_pool"):
        kk, s, p = attrs["kernel"], attrs["stride"], attrs["pad"]
        pad_value = tirx.min_value("float32") if op == "max_pool" else tirx.const(0.0, "float32")
        xp = _padded(x, p, pad_value, f"{name}_pad")
        rh = te.reduce_axis((0, kk), name="rh")
        rw = te.reduce_axis((0, kk), name="rw")
        if op == "max_pool":
            return te.compute(
                node.shape, lambda n, h, ww, c: te.max(xp(n, h * s + rh, ww * s + rw, c), axis=[rh, rw]), name=name
            )
        total = te.compute(
            node.shape, lambda n, h, ww, c: te.sum(xp(n, h * s + rh, ww * s + rw, c), axis=[rh, rw]), name=f"{name}_sum"
        )
        inv = tirx.const(1.0 / (kk * kk), "float32")  # padding counts: count_include_pad=True
        return te.compute(node.shape, lambda n, h, ww, c: total[n, h, ww, c] * inv, name=name)
    raise AssertionError(op)  # pragma: no cover


def build_prim_func(plan: RandomPlan) -> Any:
    """The plan as a `PrimFunc`: arguments are the inputs in plan order, then the output."""
    from tvm import te

    tensors: list[Any] = []
    inputs: list[Any] = []
    for i, node in enumerate(plan.nodes):
        if node.op == "input":
            t = te.placeholder(node.shape, "float32", name=f"x{i}")
            inputs.append(t)
        else:
            t = _build_node(node, [tensors[j] for j in node.inputs], f"x{i}_{node.op}")
        tensors.append(t)
    return te.create_prim_func([*inputs, tensors[-1]])


def _build_seed(seed: int) -> Any:
    return build_prim_func(random_plan(seed))


def random_program(seed: int) -> Workload:
    """Random program `seed` as a `Workload` named ``random/<seed>`` (family ``random``)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise WorkloadError(f"random program seed must be a non-negative integer, got {seed!r}")
    plan = random_plan(seed)
    return Workload(
        name=f"{RANDOM_FAMILY}/{seed}",
        family=RANDOM_FAMILY,
        params={"seed": seed},
        _builder=functools.partial(_build_seed, seed),
        description=f"random program v{GENERATOR_VERSION}, {plan.num_ops} ops: {plan.describe()}",
    )
