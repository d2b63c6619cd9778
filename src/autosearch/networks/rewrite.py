"""The helpers every Relax graph rewrite of a network uses (`graph`, `layouts`, `lowp`, `bounds`,
`folding`): their own module so that none imports another."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["rewrite_calls", "rewrite_functions", "static_shape"]

#: A call's replacement: (the call, its arguments rewritten; the block builder to emit into) ->
#: the expression it becomes, or None to keep it.
CallRewrite = Callable[[Any, Any], Any]


def rewrite_functions(mutator: Any, mod: Any) -> Any:
    """`mod` with every Relax function rewritten by `mutator` (a `relax.PyExprMutator` class)."""
    from tvm import relax

    rewriter = mutator(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()


def rewrite_calls(mod: Any, op_name: str | None, rewrite: CallRewrite) -> Any:
    """`mod` with every call of the Relax operator `op_name` (e.g. `relax.matmul`; None: every
    call) replaced by `rewrite(call, builder)` where that gives an expression, innermost calls
    first, in the order of the bindings."""
    from tvm import relax
    from tvm.relax import expr_functor

    @expr_functor.mutator
    class Calls(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if op_name is not None and str(getattr(call.op, "name", "")) != op_name:
                return call
            out = rewrite(call, self.builder_)
            return call if out is None else out

    return rewrite_functions(Calls, mod)


def static_shape(expr: Any) -> tuple[int, ...] | None:
    """An expression's tensor shape as ints; None where it has no known shape or an extent is
    symbolic (a batch or sequence length left to run time)."""
    dims = getattr(getattr(getattr(expr, "ty", None), "shape", None), "values", None)
    if dims is None:
        return None
    values = [getattr(d, "value", None) for d in dims]
    return tuple(values) if all(isinstance(v, int) for v in values) else None  # type: ignore[arg-type]
