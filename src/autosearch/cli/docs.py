"""docs/cli.md, generated from the Typer app: `python -m autosearch.cli.docs > docs/cli.md`.

Why generated: a hand-written reference went stale as options were added and renamed; this one is
what `--help` says, and tests/test_house_cli.py fails when the committed file differs. The output
depends on nothing but the app (no terminal width, no rich markup): every command and sub-command
of the click app behind Typer, its help, its usage line and a table of its arguments and options
(names, type, default, help). Hidden options (old spellings kept for one release) are left out.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["REGENERATE", "commands", "render", "write"]

#: The command that regenerates the committed file (the test's failure message quotes it).
REGENERATE = ".venv/bin/python -m autosearch.cli.docs > docs/cli.md"

_INTRO = """\
# Command reference

Every `autosearch` command and option, generated from the Typer app behind
`autosearch COMMAND --help` (the same names, types, help text and defaults it prints) by
`python -m autosearch.cli.docs > docs/cli.md`: edit the commands' docstrings and option help, not
this file. How to use them: the guides ([tuning.md](tuning.md), [networks.md](networks.md),
[models.md](models.md), [halide.md](halide.md), [sparse.md](sparse.md),
[gradient.md](gradient.md)).

**Exit status**: 0 on success; 2 with one `error: ...` line for bad input (an unknown workload, a
file that is not what it should be, a value out of range), nothing lost; 130 after Ctrl-C, with
what was completed saved; 1 with one line for an unexpected internal error
(`AUTOSEARCH_TRACEBACK=1` prints the traceback).

**Environment**: `TVM_NUM_THREADS` (threads a TVM kernel runs on; default the target's
`num-cores`; `--threads` overrides it), `AUTOSEARCH_TRACEBACK=1`, `AUTOSEARCH_HALIDE_BUILD_TIMEOUT`
(seconds one Halide build may take, default 300), `AUTOSEARCH_SPARSE_CACHE` (compiled sparse
kernels; default `~/.cache/autosearch/sparse-kernels`, `''` disables), `MKL_RT` (path to oneMKL's
`libmkl_rt` for the sparse baseline; default: the `mkl` wheel's), `XDG_CACHE_HOME` (where `.db.xz`
stores are decompressed, under `autosearch/`).

**Common options**: `--db` is the SQLite store (default `./autosearch.db`; `train`, `eval` and
`report` also read a `.db.xz`, through a decompressed copy in the cache); `--target` is a JSON
dict, a TVM tag or a preset (`llvm-generic`, `cuda-h100`, `cuda-h200`, `cuda-a100`), default this
CPU; `--threads N` is the threads the kernels are measured with (on the TVM commands also the
target's `num-cores`); `--repeats` is timed repeats; `--out` is where a command writes; `--json`
prints one machine-readable summary instead of tables.
"""


def _root() -> Any:
    import typer

    from autosearch.cli.main import app

    return typer.main.get_command(app)


def commands(root: Any = None) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, click command) of every visible command and group, depth first in the app's order."""

    def walk(cmd: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        for name, sub in getattr(cmd, "commands", {}).items():
            if getattr(sub, "hidden", False):
                continue
            yield (*path, name), sub
            yield from walk(sub, (*path, name))

    yield from walk(root if root is not None else _root(), ())


def _text(s: str | None) -> str:
    """Help text on one line: docstring line breaks and indentation folded into spaces."""
    return " ".join(inspect.cleandoc(s or "").split())


def _cell(s: str) -> str:
    """Text for a table cell: `|` escaped, and `<` outside code spans (else `<id>` reads as HTML)."""
    parts = s.replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-")


def _default(p: Any) -> str:
    if p.required:
        return "required"
    d = p.default
    if callable(d) or d is None or d == [] or d == ():
        return ""
    if getattr(p, "is_flag", False) and p.secondary_opts:
        return (p.opts if d else p.secondary_opts)[0]
    if isinstance(d, bool):
        return str(d).lower()
    if isinstance(d, Path):
        return str(d)
    if isinstance(d, (list, tuple)):
        return ", ".join(map(str, d))
    return str(d)


def _usage(path: tuple[str, ...], cmd: Any) -> str:
    pieces = ["autosearch", *path, "[OPTIONS]"]
    for p in cmd.params:
        if p.param_type_name != "argument":
            continue
        name = p.name.upper() + ("..." if p.nargs == -1 else "")
        pieces.append(name if p.required else f"[{name}]")
    return " ".join(pieces)


def _section(path: tuple[str, ...], cmd: Any) -> list[str]:
    from typer._click import Context

    title = f"`autosearch {' '.join(path)}`"
    out = [f"### {title}", "", _cell(_text(cmd.help)), ""]
    subs = [n for n, c in getattr(cmd, "commands", {}).items() if not getattr(c, "hidden", False)]
    if subs:
        prefix = "autosearch " + " ".join(path)
        links = ", ".join(f"[`{n}`](#{_anchor(f'{prefix} {n}')})" for n in subs)
        return [*out, f"Sub-commands: {links}.", ""]
    out += ["```", _usage(path, cmd), "```", ""]
    ctx = Context(cmd, info_name=path[-1])
    rows = []
    for p in cmd.params:
        if getattr(p, "hidden", False):
            continue
        if p.param_type_name == "argument":
            names = f"`{p.name.upper()}` (argument)"
        else:
            names = ", ".join(f"`{o}`" for o in (*p.opts, *p.secondary_opts))
        kind = "flag" if getattr(p, "is_flag", False) else p.display_type(ctx).strip("<>")
        if getattr(p, "multiple", False):
            kind += ", repeatable"
        default = _default(p)
        rows.append(
            f"| {names} | {_cell(kind)} | {_cell(f'`{default}`' if default else '')} | {_cell(_text(p.help))} |"
        )
    if rows:
        out += ["| argument / option | type | default | what it does |", "|---|---|---|---|", *rows, ""]
    return out


def render() -> str:
    """The whole of docs/cli.md."""
    cmds = list(commands())
    lines = [_INTRO, "| command | what |", "|---|---|"]
    for path, cmd in cmds:
        title = f"autosearch {' '.join(path)}"
        lines.append(f"| [`{' '.join(path)}`](#{_anchor(title)}) | {_cell(_text(cmd.help))} |")
    lines += ["", "## Commands", ""]
    for path, cmd in cmds:
        lines += _section(path, cmd)
    return "\n".join(lines).rstrip("\n") + "\n"


def write(stream: Any = None) -> None:
    (stream or sys.stdout).write(render())


if __name__ == "__main__":
    write()
