"""Whether TVM can lower every operator of an imported network, asked before any schedule is chosen.

Why: an operator that neither the library dispatch nor `LegalizeOps` turns into a kernel stays a
bare Relax call, and the VM code generator refuses it only at `relax.build`, after the whole prior
pass (minutes on a large model), as an internal error ("CodeGenVM cannot emit this Relax operator
directly"). Checked right after the graph passes, the same model is refused in one line that names
the operator and the model, before the first task is scheduled.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from autosearch.errors import WorkloadError

__all__ = ["UnsupportedOperatorError", "check_lowered", "unlowered_operators"]

#: Relax operators the VM runs itself, or that its own lowering passes turn into VM instructions:
#: calls into kernels and packed functions, closures, shapes, and the memory and VM builtins.
_RUNTIME_PREFIXES = ("relax.call_", "relax.builtin.", "relax.memory.", "relax.vm.")
_RUNTIME_OPS = frozenset(
    {
        "relax.assert_op",
        "relax.hint_on_device",
        "relax.invoke_closure",
        "relax.invoke_pure_closure",
        "relax.make_closure",
        "relax.null_value",
        "relax.print",
        "relax.shape_of",
        "relax.tensor_to_shape",
        "relax.to_vdevice",
    }
)


class UnsupportedOperatorError(WorkloadError):
    """The model uses an operator TVM has no kernel for on this target: it cannot be built."""


def unlowered_operators(mod: Any) -> Counter[str]:
    """The Relax operators left in `mod`'s Relax functions that are neither a kernel call nor a VM
    builtin, with how many calls each: after the graph passes, what `relax.build` cannot emit."""
    from tvm import ir, relax

    left: Counter[str] = Counter()

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, ir.Op):
            name = str(expr.op.name)
            if not name.startswith(_RUNTIME_PREFIXES) and name not in _RUNTIME_OPS:
                left[name] += 1

    for _gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return left


def check_lowered(mod: Any, spec: str, target: Any) -> None:
    """Raise `UnsupportedOperatorError`, one line naming each operator and the model, where
    `unlowered_operators(mod)` is not empty."""
    left = unlowered_operators(mod)
    if not left:
        return
    ops = ", ".join(f"{name.removeprefix('relax.')} ({n} call{'s' if n > 1 else ''})" for name, n in left.most_common())
    kind = getattr(getattr(target, "kind", None), "name", "this target")
    word = "operator" if len(left) == 1 else "operators"
    raise UnsupportedOperatorError(
        f"{spec}: TVM has no {kind} kernel for {word} {ops}, so the model cannot be built; "
        "replace it in the model (or compute it outside)"
    )
