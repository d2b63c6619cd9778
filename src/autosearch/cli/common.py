"""What every `autosearch` sub-command module shares: the consoles and the one-line error rule."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, Optional

import typer
from rich.console import Console

from autosearch.errors import AutosearchError, InputError

__all__ = [
    "check_number",
    "console",
    "emit_json",
    "err",
    "finite_json",
    "one_line_errors",
    "parse_params",
    "parse_rpc",
]

# Tables stay readable when piped (rich would otherwise assume 80 columns).
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A command that fails with an AutosearchError prints `error: <one line>` and exits 2;
    a warning (a skipped group or candidate) is one line on stderr, not a source-file trace."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import warnings

        warnings.showwarning = lambda msg, *a, **k: err.print(
            f"[yellow]warning:[/] {msg}", highlight=False, soft_wrap=True
        )
        try:
            return fn(*args, **kwargs)
        except AutosearchError as exc:
            err.print(f"[red]error:[/] {' '.join(str(exc).split())}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


def check_number(
    value: float | None,
    option: str,
    *,
    low: float = 0.0,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float | None:
    """`value` of a float option, refused in one line unless it is a finite number within
    [`low`, `high`] (`*_open`: that end excluded); None (an option not given) passes.

    Why here: Click reads `nan`, `inf` and `-1` as floats, and a budget of NaN minutes or a
    learning rate of infinity went on into the run (an internal error deep in it, or a run that
    never stops); every float option of every command is checked by this one rule."""
    import math

    if value is None:
        return None
    lo = f"> {low:g}" if low_open else f">= {low:g}"
    hi = "" if high is None else (f" and < {high:g}" if high_open else f" and <= {high:g}")
    bad = (
        not math.isfinite(value)
        or value < low
        or (low_open and value == low)
        or (high is not None and (value > high or (high_open and value == high)))
    )
    if bad:
        raise InputError(f"{option} must be a finite number {lo}{hi}, got {value:g}")
    return value


def parse_params(items: Optional[list[str]]) -> dict[str, Any]:
    """`-p KEY=VALUE` options to a dict; values are JSON where they parse, else strings."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise InputError(f"--param expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out


def finite_json(obj: Any) -> Any:
    """`obj` with every NaN / infinity replaced by None: `--json` output must be valid JSON."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return finite_json(obj.item())
    return obj


def emit_json(obj: Any) -> None:
    """Print one JSON document on stdout (strict: no NaN, no Infinity)."""
    console.print_json(json.dumps(finite_json(obj), allow_nan=False))


def parse_rpc(tracker: str | None, key: str | None) -> tuple[str, int, str] | None:
    """(host, port, key) of `--rpc-tracker HOST:PORT --rpc-key KEY`, or None for local runs."""
    if tracker is None:
        if key is not None:
            raise AutosearchError("--rpc-key needs --rpc-tracker HOST:PORT")
        return None
    host, _, port = tracker.rpartition(":")
    if not host or not port.isdigit():
        raise AutosearchError(f"--rpc-tracker must be HOST:PORT, got {tracker!r}")
    if not key:
        raise AutosearchError("--rpc-tracker needs --rpc-key KEY")
    return host, int(port), key
