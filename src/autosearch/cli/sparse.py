"""`autosearch sparse ...`: sparse format + schedule co-search (issue 13; commands land with it)."""

from __future__ import annotations

import typer

__all__ = ["app"]

app = typer.Typer(
    help="Sparse SpMV / SpMM / SDDMM: format + schedule co-search with a learned cost model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
