"""A network's Relax build compiled once: every VM of the run and the artifact use one compiled form.

Why: a VM made from `relax.build`'s executable compiles its LLVM module in memory (MCJIT), and
writing the artifact compiled it again into an object file: on a 2-core Zen 3, ResNet-18's tuned
build spent ~18 s in each (profiled `tune-model`). On a CPU the build is now exported to a shared
library once and loaded from it; the artifact copies that file. Where the export cannot run (no C
compiler to link with), the build is run as Relax runs it, as before. On a GPU the build is run as
Relax runs it: its device code is compiled at build time.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from autosearch import interrupts
from autosearch.networks.codegen import export_parallel

__all__ = ["JitBuild", "LibraryBuild", "compile_network"]


class LibraryBuild:
    """A build exported once to a shared library in a folder of its own, and loaded from there."""

    def __init__(self, executable: Any) -> None:
        import tvm

        self._folder = tempfile.TemporaryDirectory(prefix="autosearch-network-")  # removed with this object
        self.path = Path(self._folder.name) / "model.so"
        try:
            export_parallel(executable, str(self.path))  # its modules written on every core
        except Exception:  # a module this export does not know how to write: TVM's own export
            interrupts.check()
            executable.export_library(str(self.path))
        #: the loaded library (`relax.VirtualMachine(build.module, dev)`)
        self.module = tvm.runtime.load_module(str(self.path))

    def export_library(self, path: str) -> None:
        """The compiled library copied to `path` (as `Executable.export_library` writes one)."""
        shutil.copyfile(self.path, path)


class JitBuild:
    """A build run as Relax runs it: compiled in memory when first loaded."""

    def __init__(self, executable: Any) -> None:
        self.executable = executable
        self.module = executable.jit()

    def export_library(self, path: str) -> None:
        self.executable.export_library(path)


def compile_network(executable: Any, target: Any) -> LibraryBuild | JitBuild:
    """`relax.build`'s executable in the form every VM of the run loads (`.module`) and the
    artifact writes (`.export_library`)."""
    from autosearch.backends.tvm.target import is_gpu

    if is_gpu(target):
        return JitBuild(executable)
    try:
        return LibraryBuild(executable)
    except Exception:  # no C compiler to link the library with: compiled in memory instead
        interrupts.check()  # ... unless TVM turned a Ctrl-C into an error of its own
        return JitBuild(executable)
