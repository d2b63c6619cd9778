"""The import rule of docs/architecture.md: no file imports a later layer, no import cycles.

Both checks read the source with `ast`, so lazy imports inside functions count too: a layer that
reaches back up at run time is as tangled as one that does so at import time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "autosearch"

#: The layers in data-flow order (docs/architecture.md). A module may import its own layer or an
#: earlier one. Keys are the first dotted component under `autosearch`.
LAYERS: list[set[str]] = [
    {
        "atomic_write",
        "errors",
        "formatting",
        "hashing",
        "hostinfo",
        "interrupts",
        "native_log",
        "adams2019_sizes",
        "__init__",
    },
    {"workloads"},
    {"backends"},
    {"reference"},
    {"store"},
    {"features"},
    {"collect"},
    {"training"},
    {"models"},
    {"search"},
    {"networks"},
    {"reports"},
    {"sparse"},
    {"halide"},
    {"cli"},
]


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every `autosearch.*` module a file imports, resolved to the longest existing module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    me = _module_name(path)
    pkg = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for n in names:
            if n.startswith("autosearch.") or n == "autosearch":
                out.add(_resolve(n))
    out.discard(me)
    return out


def _resolve(name: str) -> str:
    parts = name.split(".")
    while parts:
        cand = SRC.parent.joinpath(*parts)
        if cand.with_suffix(".py").is_file() or (cand / "__init__.py").is_file():
            return ".".join(parts)
        parts.pop()
    return name


def _layer(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    for i, names in enumerate(LAYERS):
        if key in names:
            return i
    raise AssertionError(f"{module}: its top-level name {key!r} is in no layer of LAYERS (docs/architecture.md)")


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(SRC.rglob("*.py"))}


def test_every_module_has_a_layer() -> None:
    for mod in _graph():
        _layer(mod)


def test_no_import_runs_back_up_a_layer() -> None:
    bad = [
        f"{mod} (layer {_layer(mod)}) imports {dep} (layer {_layer(dep)})"
        for mod, deps in _graph().items()
        for dep in sorted(deps)
        if dep != "autosearch" and _layer(dep) > _layer(mod)
    ]
    assert not bad, "imports against the data flow:\n" + "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of size > 1 (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    # A package's __init__ re-exporting its own modules is not a cycle between files.
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in _graph().items()}
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_checks_can_fail() -> None:
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    with pytest.raises(AssertionError):
        _layer("autosearch.nowhere.x")


#: The one module of models/ that uses TVM: TVM's own XGBModel / MLPModel behind `CostModel`
#: (the `tvm-xgb` / `tvm-mlp` anchors), TVM imported inside its methods.
TVM_IN_MODELS = {"autosearch.models.tvm_anchors"}


def _tvm_importers(graph_dir: Path) -> set[str]:
    out = set()
    for path in sorted(graph_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            if any(n == "tvm" or n.startswith("tvm.") for n in names):
                out.add(_module_name(path))
    return out


def test_models_know_nothing_of_tvm_but_the_anchors() -> None:
    # docs/architecture.md: models/ knows nothing of TVM; the anchors are the named exception
    assert _tvm_importers(SRC / "models") == TVM_IN_MODELS
    assert "autosearch.backends.tvm.space" in _tvm_importers(SRC / "backends" / "tvm")  # the check sees TVM imports
