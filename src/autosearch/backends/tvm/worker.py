"""TVM's pool workers (builds and runs), started without PyTorch.

Why: `tvm_ffi` imports `torch` whenever it is installed, and it is here (the networks need it).
That import was most of each worker's start (CHANGELOG.md has the figures), and every `tune`,
`collect` and `tune-model` starts three workers: two builders and a runner. No worker needs torch: they build and export TIR, and they
time compiled kernels on NumPy-made arrays. `lean_workers` points TVM's worker pool at this
module, which blocks the import and then runs TVM's own worker loop.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

__all__ = ["lean_workers"]

_TVM_WORKER = "tvm.exec.popen_worker"


class _Launcher:
    """`subprocess` as TVM's pool module sees it, except that a worker starts through this module."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(cmd: Any, *args: Any, **kwargs: Any) -> subprocess.Popen:  # subprocess's name, as TVM calls it
        if isinstance(cmd, list) and cmd[1:3] == ["-m", _TVM_WORKER]:
            cmd = [cmd[0], "-m", __name__, *cmd[3:]]
        return subprocess.Popen(cmd, *args, **kwargs)


def lean_workers() -> None:
    """Start TVM's pool workers through this module from now on (idempotent).

    Process-wide: every `PopenWorker` TVM starts afterwards in this process (MetaSchedule's own
    builders and runners, an RPC server started from here) has torch blocked for good, so that no
    later lazy import of tvm_ffi's brings it in during a timed run. A task of one's own sent to
    such a pool that imports torch gets an ImportError."""
    from tvm.support import popen_pool

    if not isinstance(popen_pool.subprocess, _Launcher):
        popen_pool.subprocess = _Launcher()


if __name__ == "__main__":
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` now fails at once
    import runpy

    runpy.run_module(_TVM_WORKER, run_name="__main__", alter_sys=True)
