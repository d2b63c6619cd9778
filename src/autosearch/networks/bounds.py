"""Token ids kept inside their tables by the compiled library itself, whatever its manifest says.

Why: TVM imports an embedding lookup as `take(table, ids)` and lowers it in its "fast" mode, which
reads `table[id]` with no bounds check, so an id past the table reads memory outside it (a
segmentation fault, or garbage) where PyTorch raises IndexError. `model.json` records each
token-id input's bound (`graph.index_bounds`) and `artifact.load_artifact` checks the ids against
it, but that file is the user's to edit: a bound raised there, in a manifest rewritten without
its checksum, lets any id reach the library. So at import the module is rewritten once, with the
bounds taken from the tables' own shapes:
- every `take` whose indices are computed (not constants) clamps them into its table
  (`mode="clip"`): an index out of range can never read outside the table, through whatever
  operators it was computed;
- on a CPU, each integer input of `main` that indexes a table (through casts and reshapes only,
  as `index_bounds` follows it) first goes through a small kernel of its own that copies it and
  fails, in the kernel's own code, at the first id outside `[0, rows)` (the smallest table it
  indexes) with `ERROR_TEXT` naming the input and the rows, before any kernel reads the table;
  `artifact.CompiledModel` turns that error into one line naming the offending id. (A GPU kernel
  cannot raise: there the clamp alone guards the table.)

The check is one pass over the ids and the clamp two comparisons on an index the gather loads
anyway: next to reading a row of the table per id, neither is noticeable. (Relax's own
`assert_op` was not used: it calls back into Python on every call, which cost more than the
whole lookup.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from autosearch.networks.inputs import InputSpec
from autosearch.networks.rewrite import rewrite_calls

__all__ = ["CHECK_PREFIX", "ERROR_TEXT", "checked_ids", "guard_token_ids", "out_of_range"]

#: Operators whose output holds the same integers as their first argument (a cast, a reshape).
_INDEX_PRESERVING = frozenset(
    {
        "relax.astype",
        "relax.reshape",
        "relax.expand_dims",
        "relax.squeeze",
        "relax.flatten",
        "relax.permute_dims",
        "relax.broadcast_to",
    }
)
#: The library's error for an id outside its table: the input's name and the table's row count.
ERROR_TEXT = "token id out of range [0, {rows}) for input {name}"
_ERROR = re.compile(r"token id out of range \[0, (\d+)\) for input (\S+)")
#: The name each check kernel is compiled under (one per checked input, numbered).
CHECK_PREFIX = "token_ids_in_range"


def out_of_range(text: str) -> tuple[str, int] | None:
    """(input name, rows) of the library's own id check in an error's text; None if it is not one."""
    m = _ERROR.search(text)
    return (m.group(2), int(m.group(1))) if m else None


def _clip_takes(mod: Any) -> Any:
    """Every `take` with computed indices in `mode="clip"` (a constant index is as written)."""
    import tvm
    from tvm import relax

    def clipped(call: Any, builder: Any) -> Any:
        if isinstance(call.args[1], tvm.ir.expr.Constant) or str(call.attrs.mode) == "clip":
            return None
        axis = call.attrs.axis
        return relax.op.take(call.args[0], call.args[1], None if axis is None else int(axis), mode="clip")

    return rewrite_calls(mod, "relax.take", clipped)


def checked_ids(func: Any, specs: Sequence[InputSpec]) -> dict[str, tuple[Any, int]]:
    """For each integer input of `func` that indexes a table (through casts and reshapes only):
    its name -> (its parameter, the rows of the smallest table it indexes). Inputs match the
    parameters by name, else by position (PyTorch's exporter names them after `forward`'s
    arguments, not `--input`). `graph.index_bounds` (the manifest's bounds) is this, less the
    parameters: one walk for both."""
    import math

    from tvm import relax

    params = list(func.params)
    names = [str(getattr(p, "name_hint", None) or p.name) for p in params]
    ints = [s for s in specs if s.dtype.startswith("int")]
    by_name = all(s.name in names for s in ints)
    origin: dict[Any, str] = {}
    param_of: dict[str, Any] = {}
    for i, s in enumerate(specs):
        if s in ints and (by_name or i < len(params)):
            p = params[names.index(s.name) if by_name else i]
            origin[p], param_of[s.name] = s.name, p
    rows_of: dict[str, int] = {}
    for binding in (b for block in getattr(func.body, "blocks", []) for b in block.bindings):
        call = getattr(binding, "value", None)
        if not isinstance(call, relax.Call) or not call.args:
            continue
        op = str(getattr(call.op, "name", ""))
        if op in _INDEX_PRESERVING and call.args[0] in origin:
            origin[binding.var] = origin[call.args[0]]
        elif op == "relax.take" and len(call.args) >= 2 and call.args[1] in origin:
            dims = getattr(getattr(getattr(call.args[0], "ty", None), "shape", None), "values", None)
            if dims is None or not all(hasattr(d, "value") for d in dims):
                continue
            axis = getattr(call.attrs, "axis", None)
            sizes = [int(d.value) for d in dims]
            rows = math.prod(sizes) if axis is None else sizes[int(axis)]
            name = origin[call.args[1]]
            rows_of[name] = min(rows, rows_of.get(name, rows))
    return {name: (param_of[name], rows) for name, rows in rows_of.items()}


def _check_kernel(symbol: str, shape: tuple[int, ...], dtype: str, rows: int, message: str) -> Any:
    """A public PrimFunc `symbol` that copies its input, failing with `message` at the first
    element outside [0, rows): the check in the kernel's own code (no call back into Python).

    Called by name (`call_dps_packed`), not through `call_tir`, so MetaSchedule extracts no task
    from it, and marked scheduled, so no pass schedules it: it is built as written, beside the
    tuned kernels. Written as TVMScript: a TE compute cannot hold an assertion."""
    import tvm.script
    from tvm.script import tirx as T

    loops = ", ".join(f"i{k}" for k in range(len(shape)))
    at = ", ".join(f"v{k}" for k in range(len(shape)))
    bound = f"T.{dtype}({{}})"
    axes = "\n".join(f"            v{k} = T.axis.spatial({d}, i{k})" for k, d in enumerate(shape))
    source = f"""
@T.prim_func(s_tir=True)
def check(ids: T.Buffer({shape!r}, {dtype!r}), out: T.Buffer({shape!r}, {dtype!r})):
    T.func_attr({{"global_symbol": {symbol!r}, "tirx.is_scheduled": True, "tirx.noalias": True}})
    for {loops} in T.grid({", ".join(map(str, shape))}):
        with T.sblock("check"):
{axes}
            T.reads(ids[{at}])
            T.writes(out[{at}])
            assert ids[{at}] >= {bound.format(0)} and ids[{at}] < {bound.format(rows)}, {message!r}
            out[{at}] = ids[{at}]
"""
    return tvm.script.from_source(source, extra_vars={"T": T})


def guard_token_ids(mod: Any, specs: Sequence[InputSpec], target: Any) -> Any:
    """`mod` (as imported, before the graph passes) with its takes clamped and, on a CPU, each
    token-id input of `main` checked against its table before anything reads it (module doc)."""
    from tvm import relax

    mod = _clip_takes(mod)
    if str(target.kind.name) != "llvm":  # a GPU kernel cannot raise: the clamp alone guards it
        return mod
    func = mod["main"]
    bb = relax.BlockBuilder(mod)
    checks: list[Any] = []
    replaced: dict[Any, Any] = {}
    for name, (param, rows) in sorted(checked_ids(func, specs).items()):
        ty = param.ty
        dims = getattr(getattr(ty, "shape", None), "values", None)
        if not dims or not all(hasattr(d, "value") for d in dims):
            continue  # a scalar or a symbolic shape: the clamp alone keeps its ids inside the table
        shape = tuple(int(d.value) for d in dims)
        symbol = f"{CHECK_PREFIX}_{len(checks)}"
        bb.add_func(_check_kernel(symbol, shape, str(ty.dtype), rows, ERROR_TEXT.format(rows=rows, name=name)), symbol)
        var = relax.Var(f"{name}_checked", ty)
        checks.append(relax.VarBinding(var, relax.call_dps_packed(symbol, [param], out_ty=ty)))
        replaced[param] = var
    if not checks:
        return mod
    mod = bb.get()
    inner = func.bind_params(replaced)  # the body reads the checked copies
    # outside any dataflow block: fused with nothing, it stays the kernel it is
    body = relax.SeqExpr([relax.BindingBlock(checks), *inner.body.blocks], inner.body.body)
    mod["main"] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
    out = relax.transform.Normalize()(mod)
    return out
