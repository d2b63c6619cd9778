"""A network's kernels compiled by LLVM on every core: the build's PrimFuncs split into one group a
core, each group built (`build_parallel`) and written to its object file (`export_parallel`) in a
thread of its own.

Why: `relax.build` hands every kernel to one LLVM module and `export_library` writes it to one
object file, both on one core while the others stand idle: DenseNet-121's prior-only build took
19.4 s in `relax.build` (about 11 of it LLVM) and 10.9 s in the export on a 2-core Intel
`rocketlake`, a sixth of its compile. TVM's FFI releases the GIL in its calls, so threads compile
in parallel. The steps are `relax.build`'s and `export_library`'s own (`_vmcodegen`, `_vmlink`,
`ModulePackImportsToLLVM`), with the kernels in several modules instead of one; the loaded library
finds every kernel by its symbol, whichever object it came from.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["MAX_PARTS", "build_parallel", "export_parallel", "parts_for"]

#: The most groups the kernels are split into (one a physical core).
MAX_PARTS = 8


def parts_for(n_functions: int) -> int:
    """Groups for `n_functions` kernels: one a physical core, at most `MAX_PARTS`, at most one a
    kernel."""
    from autosearch.backends.tvm.target import physical_cores

    return max(1, min(physical_cores(), MAX_PARTS, n_functions))


def build_parallel(mod: Any, target: Any, pipeline: Any) -> Any:
    """`relax.build(mod, target, relax_pipeline=pipeline)` (under the caller's target, database and
    pass context) with its kernels built in `parts_for` groups, one thread each: the executable
    imports one LLVM module a group."""
    import tvm
    from tvm import relax
    from tvm.relax import vm_build

    with target:
        mod = pipeline(mod)
    attrs = dict(mod.attrs) if mod.attrs else {}
    ext_libs, constants = attrs.get("external_mods", []), attrs.get("const_name_to_constant", {})
    builder = relax.ExecBuilder()
    mod = vm_build._vmcodegen(builder, mod, "bytecode")
    kernels = vm_build._filter_tir(mod)
    libs: list[Any] = []
    if kernels is not None:
        items = list(kernels.functions.items())
        n = parts_for(len(items))
        groups = [tvm.IRModule(dict(items[k::n]), attrs=kernels.attrs) for k in range(n)]  # dealt in turn
        libs = _in_threads([functools.partial(tvm.tirx.build, g, target=target) for g in groups])
    return vm_build._vmlink(builder, target, None, ext_libs=list(ext_libs) + libs, params=dict(constants))


def export_parallel(executable: Any, path: str) -> None:
    """`executable.export_library(path)` with its modules written to their object files in threads
    of their own, then linked with the VM's packed imports as `export_library` links them."""
    from tvm.runtime import _ffi_api
    from tvm.support import cc

    with tempfile.TemporaryDirectory(prefix="autosearch-codegen-") as folder:
        modules = executable.mod._collect_dso_modules()
        files = [os.path.join(folder, f"lib{k}.{_file_format(m)}") for k, m in enumerate(modules)]
        _in_threads([functools.partial(m.write_to_file, f) for m, f in zip(modules, files, strict=True)])
        llvm = [m for m in modules if m.kind == "llvm"]
        if llvm and executable.mod.imports:
            target = llvm[0].get_function("_get_target_string")()
            packed = _ffi_api.ModulePackImportsToLLVM(executable.mod, False, target, "")
            files.append(os.path.join(folder, "devc.o"))
            packed.write_to_file(files[-1])
        cc.create_shared(path, files)


def _file_format(module: Any) -> str:
    """The file a module is written to, as `export_library` names it: an object, or C source."""
    if module.kind != "c":
        return "o"
    formats = [f for f in module.get_write_formats() if f in ("c", "cc", "cpp")]
    return formats[0] if formats else "c"


def _in_threads(jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    """Each of `jobs`' results, the jobs run one a thread."""
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        return list(pool.map(lambda job: job(), jobs))
