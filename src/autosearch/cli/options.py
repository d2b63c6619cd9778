"""Option declarations more than one command shares: `--threads`, and the old spellings of renamed
options.

Why a module of its own: one option must mean the same in every command, so it is declared once.
`--threads` on a TVM command sets the target's `num-cores` (what MetaSchedule makes the schedules
parallel for) and the threads TVM's runtime and PyTorch run the kernels with, here and in every
worker started after, so the schedules are made, measured and compared on the same count. A
renamed option keeps its old spelling for one release, hidden from `--help`, with a warning that
says the new one.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional, TypeVar

import typer

from autosearch.errors import InputError

__all__ = [
    "HALIDE_THREADS_OPT",
    "SPARSE_THREADS_OPT",
    "TVM_THREADS_OPT",
    "apply_threads",
    "check_threads",
    "deprecated_spelling",
    "machine_cpus",
    "renamed",
]

T = TypeVar("T")


def machine_cpus() -> int:
    """The logical CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _warn(msg: str) -> None:
    from autosearch.cli.common import err

    err.print(f"[yellow]warning:[/] {msg}", highlight=False, soft_wrap=True)


def check_threads(n: Optional[int], *, local: bool = True) -> Optional[int]:
    """`--threads` as given: None (the command's default) or an integer >= 1. Above this machine's
    CPUs (`local`: the kernels run here) it warns in one line: the threads then take turns on the
    cores, and the timings say more about the scheduler than about the schedule."""
    if n is None:
        return None
    if n < 1:
        raise InputError(f"--threads must be an integer >= 1, got {n}")
    cpus = machine_cpus()
    if local and n > cpus:
        _warn(f"--threads {n} is more than the {cpus} CPUs of this machine: the threads share cores")
    return n


def _threads_callback(value: Optional[int]) -> Optional[int]:
    return check_threads(value)


def _tvm_threads_callback(value: Optional[int]) -> Optional[int]:
    # the warning waits for `apply_threads`, which knows whether the kernels run here or over RPC
    if value is not None and value < 1:
        raise InputError(f"--threads must be an integer >= 1, got {value}")
    return value


#: `--threads` of the TVM commands (`tune`, `tune-model`, `collect`); see `apply_threads`.
TVM_THREADS_OPT: Any = typer.Option(
    None,
    "--threads",
    callback=_tvm_threads_callback,
    help="Threads the kernels are measured (and a network timed) with, by TVM and PyTorch; sets the target's "
    "num-cores. Default: TVM_NUM_THREADS if set, else the physical cores.",
)
#: `--threads` of the sparse commands (TVM, PyTorch and oneMKL timed on the same count).
SPARSE_THREADS_OPT: Any = typer.Option(
    None,
    "--threads",
    callback=_threads_callback,
    help="Threads for TVM, torch and oneMKL (default: physical cores).",
)
#: `--threads` of the Halide commands (the pipelines' thread pool and Adams2019's parallelism).
HALIDE_THREADS_OPT: Any = typer.Option(
    None,
    "--threads",
    callback=_threads_callback,
    help="Threads for Halide (and Adams2019 parallelism); default: one per physical core.",
)


def apply_threads(n: Optional[int], target: Any, rpc: Any = None) -> Any:
    """`target` with `--threads n` applied (n None: `target` unchanged).

    A CPU target gets `num-cores` n; TVM's runtime here and in every worker started from now on
    runs kernels on n threads (over TVM_NUM_THREADS: the option is the later, explicit choice),
    and PyTorch's reference timings use n as well. A GPU target's kernels do not run on CPU
    threads: the option is refused there rather than silently meaning nothing."""
    if n is None:
        return target
    if target.kind.name != "llvm":
        raise InputError(
            f"--threads applies to CPU (llvm) targets; the kernels of a {target.kind.name} target do not run on "
            "CPU threads"
        )
    check_threads(n, local=rpc is None)
    import tvm

    from autosearch.backends.tvm.target import set_user_threads

    cfg = dict(target.export())
    cfg["num-cores"] = int(n)
    host = cfg.pop("host", None)
    set_user_threads(int(n))
    os.environ["OMP_NUM_THREADS"] = str(n)  # PyTorch in the isolated reference processes
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(n))
    return tvm.target.Target(cfg, host=host) if host is not None else tvm.target.Target(cfg)


def renamed(old: str, new: str) -> Any:
    """The hidden option that still accepts `old`, the spelling `new` replaced (for one release)."""
    return typer.Option(None, old, hidden=True, help=f"Deprecated spelling of {new}.")


def deprecated_spelling(value: T, old_value: Optional[T], old: str, new: str) -> T:
    """The option's value: `old_value` where the old spelling was given (with a one-line warning
    that names the new one), else `value`."""
    if old_value is None:
        return value
    _warn(f"{old} is deprecated and goes in the next release; use {new}")
    return old_value
