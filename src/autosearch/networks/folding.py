"""Constant subgraphs of a network computed in NumPy before TVM's `FoldConstant` sees them.

Why: Relax's `FoldConstant` evaluates a call on constants by legalizing it and compiling the
kernel with LLVM, one kernel per operator and shape (about 50 ms each here). A network's weights
reach many such calls: DenseNet-121's pre-activation BatchNorms decompose into ~300 constant
`expand_dims`/`add`/`multiply` chains and its blocked convolutions into 427 weight
`layout_transform`s, and the two `FoldConstant` runs took 64 s of a 66-s import. NumPy computes
the same numbers in milliseconds. Only operators whose NumPy result is the one TVM's kernel
computes are folded here (element-wise arithmetic exact in IEEE, shape and index moves); any
other call is left to `FoldConstant`, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from autosearch.networks.rewrite import rewrite_calls, rewrite_functions, static_shape

__all__ = [
    "Copy",
    "batch_norms_as_scale_shift",
    "exporter_zeros_dropped",
    "fold_in_numpy",
    "index_copies",
    "moved",
    "prepacks_in_numpy",
]

_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "relax.add": np.add,
    "relax.subtract": np.subtract,
    "relax.multiply": np.multiply,
    "relax.maximum": np.maximum,
    "relax.minimum": np.minimum,
}
_FLOAT_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {"relax.divide": np.divide}
#: Comparisons and logic, exact on any dtype (a mask built from `arange` by the exporter).
_PREDICATES: dict[str, Callable[..., np.ndarray]] = {
    "relax.equal": np.equal,
    "relax.not_equal": np.not_equal,
    "relax.greater": np.greater,
    "relax.greater_equal": np.greater_equal,
    "relax.less": np.less,
    "relax.less_equal": np.less_equal,
    "relax.logical_not": np.logical_not,
    "relax.logical_and": np.logical_and,
    "relax.logical_or": np.logical_or,
    "relax.where": np.where,
}
_FLOAT_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relax.sqrt": np.sqrt,
    "relax.rsqrt": lambda x: np.divide(np.ones((), x.dtype), np.sqrt(x)),
    "relax.negative": np.negative,
}


def _ints(values: Any) -> list[int] | None:
    """A list of Python ints from an attribute or shape (None when any entry is not constant)."""
    if values is None:
        return None
    out = []
    for v in values:
        value = getattr(v, "value", v)
        if not isinstance(value, int):
            return None
        out.append(int(value))
    return out


def _index_values(expr: Any, env: dict[Any, np.ndarray]) -> np.ndarray | None:
    """An index expression of an `IndexMap` evaluated on arrays of indices; None for any node
    outside integer arithmetic (a map this folder does not know stays TVM's to fold)."""
    from tvm import tirx

    if isinstance(expr, tirx.Var):
        return env.get(expr)
    if isinstance(expr, tirx.IntImm):
        return np.asarray(int(expr.value), dtype=np.int64)
    ops: dict[type, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
        tirx.Add: np.add,
        tirx.Sub: np.subtract,
        tirx.Mul: np.multiply,
        tirx.FloorDiv: np.floor_divide,
        tirx.FloorMod: np.mod,
    }
    op = ops.get(type(expr))
    if op is None:
        return None
    a, b = _index_values(expr.a, env), _index_values(expr.b, env)
    return None if a is None or b is None else op(a, b)


def _layout_transform(x: np.ndarray, attrs: Any) -> np.ndarray | None:
    """`relax.layout_transform` of a constant (`moved`)."""
    return moved(x, attrs.index_map, getattr(getattr(attrs, "pad_value", None), "value", 0) or 0)


def moved(x: np.ndarray, index_map: Any, pad: Any = 0) -> np.ndarray | None:
    """`x` with each element moved where `index_map` (a TVM `IndexMap`) sends it, positions no
    element reaches (padding) set to `pad`; None for a map outside integer arithmetic."""
    shape = _ints(index_map.map_shape(list(x.shape)))
    if shape is None or len(index_map.initial_indices) != x.ndim:
        return None
    grid = np.indices(x.shape, dtype=np.int64) if x.ndim else np.zeros((0,), np.int64)
    env = dict(zip(index_map.initial_indices, grid, strict=False))
    where = [w for w in (_index_values(e, env) for e in index_map.final_indices) if w is not None]
    if len(where) != len(index_map.final_indices):
        return None
    out = np.full(shape, pad, dtype=x.dtype)
    out[tuple(np.broadcast_to(w, x.shape) for w in where)] = x
    return out


def _evaluate(name: str, call: Any, args: list[Any]) -> np.ndarray | None:
    """The NumPy value of one call whose tensor arguments are all constants (`args`: arrays, shapes
    as int lists, tuples as lists of arrays); None where this folder leaves it to TVM."""
    a = call.attrs
    x = args[0]
    floating = isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating)
    if name in _BINARY:
        return _BINARY[name](x, args[1])
    if name in _FLOAT_BINARY and floating and args[1].dtype == x.dtype:
        return _FLOAT_BINARY[name](x, args[1])
    if name in _FLOAT_UNARY and floating:
        return _FLOAT_UNARY[name](x)
    if name in _PREDICATES:
        return _PREDICATES[name](*args)
    if name == "relax.arange" and all(np.ndim(v) == 0 for v in args):
        return np.arange(*args, dtype=str(a.dtype))
    if name == "relax.astype":
        return x.astype(str(a.dtype))
    if name == "relax.expand_dims":
        axes = sorted(ax % (x.ndim + len(a.axis)) for ax in _ints(a.axis) or [])
        return np.expand_dims(x, tuple(axes)) if axes else None
    if name == "relax.squeeze":
        return np.squeeze(x) if a.axis is None else np.squeeze(x, tuple(_ints(a.axis) or []))
    if name == "relax.permute_dims":
        return np.transpose(x, None if a.axes is None else _ints(a.axes))
    if name in ("relax.reshape", "relax.broadcast_to") and isinstance(args[1], list):
        return x.reshape(args[1]) if name == "relax.reshape" else np.broadcast_to(x, args[1]).copy()
    if name == "relax.concat" and isinstance(x, list) and x:
        return np.concatenate(x, axis=int(a.axis))
    if name == "relax.layout_transform":
        return _layout_transform(x, a)
    return None


def fold_in_numpy(mod: Any) -> Any:
    """`mod` with every call whose arguments are constants (directly or through earlier folded
    bindings) replaced by its value, for the operators listed in the module doc."""
    import tvm
    from tvm import relax
    from tvm.relax import expr_functor

    names = {*_BINARY, *_FLOAT_BINARY, *_FLOAT_UNARY, *_PREDICATES, "relax.arange"}
    names |= {"relax.astype", "relax.expand_dims", "relax.squeeze", "relax.permute_dims", "relax.reshape"}
    names |= {"relax.broadcast_to", "relax.concat", "relax.layout_transform"}
    constant = tvm.ir.expr.Constant

    @expr_functor.mutator
    class NumPyFold(relax.PyExprMutator):
        def _value(self, expr: Any) -> Any:
            """An argument as NumPy (arrays, int lists, lists of arrays), or None if not constant."""
            expr = _bound(self, expr)  # an unbound variable: no case below, None
            if isinstance(expr, constant):  # a tensor, or a scalar (`x + eps` of a BatchNorm)
                value = expr.value
                if hasattr(value, "numpy"):
                    return value.numpy()
                dtype = str(getattr(getattr(expr, "ty", None), "dtype", ""))
                return np.asarray(value, dtype) if isinstance(value, (int, float)) and dtype else None
            kind = type(expr).__name__
            if kind == "PrimValue":  # `arange`'s bounds
                v = getattr(expr.value, "value", None)
                return np.asarray(v) if isinstance(v, (int, float)) else None
            if kind == "ShapeExpr":
                return _ints(expr.values)
            if kind == "Tuple":
                fields = [self._value(f) for f in expr.fields]
                ok = all(isinstance(f, np.ndarray) for f in fields)
                return fields if ok else None
            return None

        def visit_call_(self, call: Any) -> Any:
            new = super().visit_call_(call)
            name = str(getattr(new.op, "name", ""))
            if name not in names or not new.args:
                return new
            args = [self._value(arg) for arg in new.args]
            if any(v is None for v in args):
                return new
            dtype = str(getattr(getattr(call, "ty", None), "dtype", ""))
            try:
                value = _evaluate(name, new, args)
            except (ValueError, TypeError, IndexError, AttributeError):  # NumPy refuses: TVM's to decide
                return new
            if value is None or str(value.dtype) != dtype:
                return new
            return relax.const(np.array(value, order="C"), dtype)  # ascontiguousarray makes a scalar (1,)

    return rewrite_functions(NumPyFold, mod)


def _bound(mutator: Any, expr: Any) -> Any:
    """What a variable is bound to in `mutator`'s function, followed through variables to a call
    or a constant (`expr` itself where it is no bound variable)."""
    from tvm import relax

    while isinstance(expr, relax.Var):
        bound = mutator.lookup_binding(expr)
        if bound is None:
            return expr
        expr = bound
    return expr


def _array(expr: Any) -> np.ndarray | None:
    """A tensor constant's value as NumPy; None for anything else."""
    import tvm

    value: Any = getattr(expr, "value", None) if isinstance(expr, tvm.ir.expr.Constant) else None
    return value.numpy() if hasattr(value, "numpy") else None


def batch_norms_as_scale_shift(mod: Any) -> Any:
    """Every inference BatchNorm left after `FoldBatchnormToConv2D`, which Relax's
    `DecomposeOpsForInference` writes as `(x - mean) / sqrt(var + eps) * gamma + beta`, as
    `x * scale + shift` with `scale = gamma / sqrt(var + eps)` and `shift = beta - mean * scale`
    computed once here: the chain of four constants, each a `subtract`, `divide`, `multiply`,
    `add` on a tensor, whose first operand is the only non-constant.

    Why: a BatchNorm that follows no convolution (DenseNet's pre-activation BatchNorm + ReLU
    before each layer, 120 of them) stays in the graph, and each became a task of four
    operations a pass, a division among them, where ONNX Runtime and OpenVINO run one multiply-add
    per element. The same numbers within float32 rounding (a few ulp of the output)."""
    from tvm import relax
    from tvm.relax import expr_functor

    chain = ("relax.add", "relax.multiply", "relax.divide", "relax.subtract")

    @expr_functor.mutator
    class ScaleShift(relax.PyExprMutator):
        def _tensor(self, expr: Any) -> np.ndarray | None:
            return _array(_bound(self, expr))

        def visit_call_(self, call: Any) -> Any:
            new = super().visit_call_(call)
            x: Any = new
            consts = []
            for name in chain:  # walk back from the add to the subtract
                x = _bound(self, x)
                if str(getattr(getattr(x, "op", None), "name", "")) != name or len(x.args) != 2:
                    return new
                c = self._tensor(x.args[1])
                if c is None or c.dtype != np.float32:
                    return new
                consts.append(c)
                x = x.args[0]
            beta, gamma, std, mean = consts
            dtype = str(getattr(getattr(x, "ty", None), "dtype", ""))
            if dtype != "float32" or len({c.shape for c in consts}) != 1:
                return new
            scale = (gamma / std).astype(np.float32)
            shift = (beta - mean * scale).astype(np.float32)
            return relax.op.add(relax.op.multiply(x, relax.const(scale)), relax.const(shift))

    return rewrite_functions(ScaleShift, mod)


def exporter_zeros_dropped(mod: Any) -> Any:
    """Before the weights are bound: `x + 0` where the zeros are a constant the graph computed
    (not a weight) and leave `x`'s shape, as `x`; a `where` branch that is a uniform constant or
    `full_like(_, c)` as the scalar `c`. The same numbers (`x + 0.0` is `x` but for the sign of
    a zero).

    Why: `torch.export` writes scaled-dot-product attention as the math kernel, which adds a bias
    built from `arange` even with no mask (zeros, ViT-base's 12 x [1, 12, 197, 197] adds, a task
    each), and `_safe_softmax` as `where(all -inf row, zeros_like(out), out)`, which read a
    1.9 MB zero tensor a layer inside ViT-base's softmax task. Before binding, so a weight that
    happens to be zero (a bias a model initialised to zeros) is left as the model has it."""
    import tvm
    from tvm import relax
    from tvm.relax import expr_functor

    constant = tvm.ir.expr.Constant

    @expr_functor.mutator
    class Zeros(relax.PyExprMutator):
        def _uniform(self, expr: Any) -> np.ndarray | None:
            """The one value of a constant all of whose elements are equal (or of `full_like`)."""
            e = _bound(self, expr)
            if str(getattr(getattr(e, "op", None), "name", "")) == "relax.full_like":
                e = _bound(self, e.args[1])
            v = _array(e)
            if v is None:
                return None
            return v.reshape(-1)[:1].reshape(()) if v.size and np.all(v == v.reshape(-1)[0]) else None

        def visit_call_(self, call: Any) -> Any:
            new = super().visit_call_(call)
            name = str(getattr(new.op, "name", ""))
            out = static_shape(call)
            if out is None:
                return new
            if name == "relax.add":
                a, b = new.args
                for x, other in ((a, b), (b, a)):
                    zero = self._uniform(other)
                    computed = isinstance(_bound(self, other), constant)  # not `full_like` of a tensor
                    if computed and zero is not None and zero == 0 and static_shape(x) == out:
                        return x
            if name == "relax.where" and len(new.args) == 3:
                args = list(new.args)
                for i in (1, 2):
                    c = self._uniform(args[i])
                    dtype = str(getattr(getattr(args[i], "ty", None), "dtype", ""))
                    if c is not None and dtype and static_shape(args[i]) != ():
                        args[i] = relax.const(c.astype(dtype), dtype)
                shapes = [static_shape(a) for a in args]
                changed = any(x is not y for x, y in zip(args, new.args))
                if changed and None not in shapes and tuple(np.broadcast_shapes(*shapes)) == out:  # type: ignore[arg-type]
                    return relax.op.where(*args)
            return new

    return rewrite_functions(Zeros, mod)


class Copy(NamedTuple):
    """A block that copies a parameter into a buffer under an index map (a weight's packing)."""

    source: int  # the parameter it reads
    target: int | None  # the parameter it writes (None: a buffer of the function's own)
    index_map: Any  # tirx.IndexMap: where each element goes (`moved`)


def index_copies(func: Any, selected: Callable[[Any], bool] | None = None) -> list[Copy] | None:
    """Each block at the root of PrimFunc `func` (each one `selected` takes) as a `Copy`; None
    where one of them is not a plain copy (an element read at the block's own indices, written
    under an index map)."""
    import tvm
    from tvm import s_tir, tirx

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    out = []
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(rv)
        if selected is not None and not selected(block):
            continue
        store = block.body
        read = getattr(getattr(store, "value", None), "source", None)
        source = [k for k, p in enumerate(func.params) if read is not None and p.same_as(read)]
        target = [k for k, p in enumerate(func.params) if p.same_as(getattr(store, "buffer", None))]
        loaded = list(store.value.indices) if source else []
        plain = all(isinstance(v, tirx.Var) for v in loaded) and len({v.name for v in loaded}) == len(loaded)
        if len(source) != 1 or not loaded or not plain:
            return None
        out.append(Copy(source[0], target[0] if target else None, tirx.IndexMap(loaded, list(store.indices), None)))
    return out


def prepacks_in_numpy(mod: Any) -> Any:
    """`mod` with each call of a weight pre-packing PrimFunc on constants (what
    `SplitLayoutRewritePreproc` splits off a tuned kernel: copies of its weights into their blocked
    layouts) replaced by the packed constants, moved in NumPy (`moved`), and the functions no
    longer called removed.

    Why: `FoldConstant` compiled each pre-packing function with LLVM and ran it: DenseNet-121's 120
    took 2.2 s of its prior-only build on an Intel `rocketlake`."""
    import tvm
    from tvm import relax

    packings = {}
    for gv, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc) and gv.name_hint.endswith("_weight_prepack"):
            copies = index_copies(func)
            if copies and all(c.target is not None for c in copies):
                packings[gv] = (func, copies)

    def packed(call: Any, _builder: Any) -> Any:
        gv = call.args[0]
        if gv not in packings or not isinstance(call.args[1], relax.Tuple):
            return None
        func, copies = packings[gv]
        inputs = [_array(a) for a in call.args[1].fields]
        n_out = len(func.params) - len(inputs)
        outs: dict[int, np.ndarray] = {}
        for c in copies:
            x = inputs[c.source] if c.source < len(inputs) else None
            value = None if x is None else moved(x, c.index_map)
            assert c.target is not None  # `packings` keeps the functions whose copies write parameters
            out = c.target - len(inputs)
            if value is None or value.shape != tuple(int(d) for d in func.params[c.target].shape) or out in outs:
                return None
            outs[out] = value
        if sorted(outs) != list(range(n_out)):
            return None
        consts = [relax.const(outs[k]) for k in range(n_out)]
        return relax.Tuple(consts) if isinstance(call.ty, relax.TupleType) else consts[0]

    if not packings:
        return mod
    return relax.transform.DeadCodeElimination()(rewrite_calls(mod, "relax.call_tir", packed))
