"""Register only the tensor intrinsics a target can use, before the first TuneContext of a process.

Why: `TuneContext()` imports `tvm.s_tir.tensor_intrin`, whose package imports the intrinsics of
every target TVM knows (CUDA, ROCm, Hexagon, Arm, x86, RISC-V). That import is most of the first
design space's cost (docs/tuning.md has the figures); an x86 CPU needs only the x86 ones (VNNI /
AVX-512 dot products for int8), a small part of it, and a CUDA GPU only the CUDA ones (tensor cores, async copies). For those two we register the package without
running its `__init__` and import that one submodule; any other target (Arm, ROCm, ...) gets the
full import. Later imports of other submodules still work. An x86 CPU also gets autosearch's own
bf16 and int8 dot products (`lowp`), which its low-precision records replay with.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

__all__ = ["register_tensor_intrinsics"]

_PKG = "tvm.s_tir.tensor_intrin"
#: Whether this process registered the package without running its __init__ (x86 or CUDA only).
_STATE = {"partial": False}


def _is_x86_cpu(target: Any) -> bool:
    if target.kind.name != "llvm":
        return False
    triple = str(target.attrs.get("mtriple", "") or "")
    if triple:
        return triple.startswith(("x86_64", "i686", "i386"))
    import platform

    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def _own_submodule(target: Any) -> str | None:
    """The one intrinsics submodule `target` can tensorize with, where one is enough."""
    if target.kind.name == "cuda":
        return "cuda"
    return "x86" if _is_x86_cpu(target) else None


def register_tensor_intrinsics(target: Any) -> None:
    """Make the intrinsics `target` may tensorize with known to TVM, as cheaply as possible."""
    own = _own_submodule(target)
    if own == "x86":
        from autosearch.backends.tvm.lowp import register_dot_kernels

        register_dot_kernels(target)
    if _PKG in sys.modules:
        if own:
            importlib.import_module(f"{_PKG}.{own}")
        else:
            _full_package()
        return
    if own is None:
        importlib.import_module(_PKG)
        return
    import tvm.s_tir

    spec = importlib.util.find_spec(_PKG)
    if spec is None or spec.submodule_search_locations is None:  # another TVM layout: do what TVM does
        importlib.import_module(_PKG)
        return
    pkg = types.ModuleType(_PKG, f"Intrinsics for tensorization ({own} registered by autosearch; others on import).")
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = spec
    pkg.__package__ = _PKG
    sys.modules[_PKG] = pkg
    tvm.s_tir.tensor_intrin = pkg
    importlib.import_module(f"{_PKG}.{own}")
    _STATE["partial"] = True


def _full_package() -> None:
    """Another target after a partial registration: import every submodule the package would."""
    if not _STATE["partial"]:
        return
    from tvm.runtime import enabled

    importlib.import_module(f"{_PKG}.cuda")
    if enabled("llvm"):
        for name in ("arm_cpu", "x86", "rocm", "hexagon", "riscv_cpu"):
            importlib.import_module(f"{_PKG}.{name}")
    _STATE["partial"] = False
