"""A user's own program as a workload: `--module FILE.py:FUNC` returning a TIR PrimFunc or IRModule.

Loading such a module *executes its code*: that is the point of `--module`, and the reason a saved
result never names a module that is imported without the user asking for it again.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autosearch.errors import AutosearchError, InputError, one_line
from autosearch.workloads.base import estimate_flops, structural_key

__all__ = ["ModuleWorkload", "check_module_spec", "load_module_object", "resolve_workload_spec"]


@dataclass
class ModuleWorkload:
    """A user's PrimFunc / IRModule (from `--module file.py:func`) behaving like a `Workload`."""

    name: str
    ir_module: Any
    source: str = ""
    family: str = "custom"
    params: dict[str, Any] = field(default_factory=dict)

    def mod(self) -> Any:
        return self.ir_module

    @property
    def key(self) -> str:
        return structural_key(self.ir_module["main"])

    @property
    def flops(self) -> float | None:
        return estimate_flops(self.ir_module)


def check_module_spec(spec: str) -> tuple[str, str]:
    """(path or module, function) of `file.py:func` after the checks that need no import, so a
    command can refuse a mistyped spec before it loads anything else."""
    if ":" not in spec:
        raise InputError(f"--module must be FILE.py:FUNCTION, got {spec!r}")
    path, _, func = spec.rpartition(":")
    if not func.isidentifier():
        raise InputError(f"--module {spec!r}: {func!r} is not a function name")
    if (path.endswith(".py") or os.sep in path) and not Path(path).is_file():
        raise InputError(f"module file {path} does not exist")
    return path, func


#: The least a deadline leaves the user's import and call: a budget the steps before spent whole
#: still lets a factory that returns at once be used (the run then builds from the prior).
MIN_IMPORT_SECONDS = 1.0


def load_module_object(spec: str, deadline: float | None = None) -> tuple[Any, str]:
    """Call `file.py:func` (or import `pkg.module:func`) and return (its result, absolute spec).

    `deadline` (a `time.perf_counter()` value; None: no limit) bounds the import and the call
    together: a module or function that has not returned by then (at least `MIN_IMPORT_SECONDS`
    from now) is an error that says so, where a `--budget-minutes` run used to hang in it forever.
    The user's code then runs in a daemon thread, left behind when it does not return (Python
    cannot stop a thread; the process exits after the error), while this thread waits in short
    slices so that a Ctrl-C still ends the run at once."""
    if deadline is None:
        return _load_module_object(spec)
    return _within(spec, deadline)


def _within(spec: str, deadline: float) -> tuple[Any, str]:
    import threading
    import time

    check_module_spec(spec)  # a mistyped spec is refused here, not in the thread
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = _load_module_object(spec)
        except BaseException as exc:  # handed to the caller's thread as it is
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"autosearch-import {spec}", daemon=True)
    start = time.perf_counter()
    end = max(deadline, start + MIN_IMPORT_SECONDS)
    worker.start()
    while worker.is_alive():
        left = end - time.perf_counter()
        if left <= 0:
            raise InputError(
                f"{spec} did not return within the budget: {time.perf_counter() - start:.1f} s in its import and "
                "call, which --budget-minutes covers; it may hang, or it needs a larger budget"
            )
        worker.join(min(0.1, left))  # short slices: a Ctrl-C raises here within one
    if "error" in box:
        raise box["error"]
    value: tuple[Any, str] = box["value"]
    return value


def _load_module_object(spec: str) -> tuple[Any, str]:
    import importlib
    import importlib.util

    path, func = check_module_spec(spec)
    p = Path(path)
    if path.endswith(".py") or os.sep in path:
        name = f"_autosearch_user_{abs(hash(str(p.resolve()))):x}"
        try:
            sp = importlib.util.spec_from_file_location(name, p)
            if sp is None or sp.loader is None:
                raise InputError(f"cannot import {path} as a Python file")
            module = importlib.util.module_from_spec(sp)
            sp.loader.exec_module(module)
        except AutosearchError:
            raise
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise InputError(f"importing {path} failed: {type(exc).__name__}: {one_line(exc)}") from None
        full = f"{p.resolve()}:{func}"
    else:
        try:
            module = importlib.import_module(path)
        except Exception as exc:
            raise InputError(f"cannot import module {path}: {type(exc).__name__}: {one_line(exc)}") from None
        full = spec
    fn = getattr(module, func, None)
    if fn is None:
        raise InputError(f"{path} has no attribute {func!r}")
    if not callable(fn):
        return fn, full
    try:
        return fn(), full
    except KeyboardInterrupt:
        raise
    except SystemExit as exc:  # sys.exit() in the user's function must not end autosearch silently
        raise InputError(f"{spec} called sys.exit({exc.code!r}) instead of returning a value") from None
    except Exception as exc:  # the user's code may raise anything
        raise InputError(f"{spec} raised {type(exc).__name__}: {one_line(exc)}") from None


def _as_irmodule(obj: Any, spec: str) -> Any:
    import tvm
    from tvm.tirx import PrimFunc

    if isinstance(obj, PrimFunc):
        return tvm.IRModule({"main": obj})
    if isinstance(obj, tvm.IRModule):
        funcs = [gv for gv, f in obj.functions.items() if isinstance(f, PrimFunc)]
        if len(funcs) != 1 or len(obj.functions) != 1:
            raise InputError(f"{spec} returned an IRModule with {len(obj.functions)} functions: give one PrimFunc")
        gv = funcs[0]
        return obj if gv.name_hint == "main" else tvm.IRModule({"main": obj[gv]})
    raise InputError(f"{spec} returned {type(obj).__name__}, not a TIR PrimFunc or IRModule")


def resolve_workload_spec(spec: str | None, module: str | None = None) -> Any:
    """A registry name, `random:SEED` / `random/SEED`, or a `--module file.py:func` workload."""
    from autosearch.workloads import get_workload

    if module is not None:
        obj, full = load_module_object(module)
        mod = _as_irmodule(obj, module)
        name = spec or f"custom/{Path(module.rpartition(':')[0]).stem}.{module.rpartition(':')[2]}"
        return ModuleWorkload(name=name, ir_module=mod, source=full)
    if not spec:
        raise InputError("name a workload (e.g. batch_matmul/1x128x128x128, random:3) or pass --module FILE.py:FUNC")
    m = re.fullmatch(r"random[:/](\d+)", spec.strip())
    if m:
        return get_workload(f"random/{m.group(1)}")
    return get_workload(spec)
