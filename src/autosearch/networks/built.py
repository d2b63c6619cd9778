"""Candidates a prior worker process builds and exports for the run's process to time: each a
function in a shared library, with the arguments it takes and whether it was checked.

Why a module of its own: `register_blocks` (a task's candidates) and `spatial` (a task's loop
nests) both build them, and the pass (`prior_pass`, `prior_workers`) carries them between.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, NamedTuple

__all__ = ["ArgShape", "Built", "export_library"]


class ArgShape(NamedTuple):
    """An argument of a built candidate as it takes it (`verify.arrays_for` reads these)."""

    shape: tuple[int, ...]
    dtype: str


class Built(NamedTuple):
    """A candidate built and exported by a prior worker process (`register_blocks.built_candidates`,
    `spatial.built_forms`), timed in the run's own process (`register_blocks.timed_built`)."""

    trace: str  # its whole trace
    verified: bool  # checked against the unscheduled task (where it was built, or the prior's pick when chosen)
    library: str  # the exported shared library
    function: str  # its function in the library
    args: list[ArgShape]  # as built: a weight that `RewriteLayout` packs, packed


def export_library(lib: Any, directory: str) -> str:
    """`lib` exported as a new shared library under `directory`: its path."""
    fd, path = tempfile.mkstemp(suffix=".so", dir=directory)
    os.close(fd)
    lib.export_library(path)
    return path
