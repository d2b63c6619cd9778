"""The one helper every Relax graph rewrite of a network uses (`graph`, `layouts`): its own module
so that neither imports the other."""

from __future__ import annotations

from typing import Any

__all__ = ["rewrite_functions"]


def rewrite_functions(mutator: Any, mod: Any) -> Any:
    """`mod` with every Relax function rewritten by `mutator` (a `relax.PyExprMutator` class)."""
    from tvm import relax

    rewriter = mutator(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()
