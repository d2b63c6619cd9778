"""The `autosearch` command: one Typer app per concern, mounted by `main`."""

from autosearch.cli.main import app, main

__all__ = ["app", "main"]
