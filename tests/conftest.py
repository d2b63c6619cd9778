"""Shared fixtures. `collected_db` is a real collection (two small workloads), made once per run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

TINY_WORKLOADS = "batch_matmul/1x128x128x128,softmax/256x256"


@pytest.fixture(scope="session")
def host():
    from autosearch.backends.tvm.target import host_target

    return host_target()


@pytest.fixture(scope="session")
def collected_db(tmp_path_factory, host) -> Path:
    """A store holding 6 real measured schedules of each of two workloads, with features."""
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.collect import collect
    from autosearch.store import Store
    from autosearch.workloads import resolve_workloads

    path = tmp_path_factory.mktemp("collected") / "tiny.db"
    with Store(path) as store:
        collect(
            resolve_workloads(TINY_WORKLOADS),
            store,
            host,
            per_workload=6,
            batch_size=6,
            evaluator=EvaluatorSettings(number=1, repeat=3, min_repeat_ms=1),
            progress=False,
        )
    return path


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The `autosearch` command run in this process (a fresh interpreter costs seconds of imports):
    its exit code, stdout and stderr, the rich consoles included."""
    import contextlib
    import io

    from autosearch.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = Path.cwd()
    code: int | str | None = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            from autosearch.cli import common

            common.console.file, common.err.file = out, err
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code
    finally:
        os.chdir(old)
        # back to following sys.stdout / sys.stderr at write time, as the consoles were made
        common.console.file, common.err.file = None, None  # type: ignore[assignment]
    return subprocess.CompletedProcess(list(args), int(code or 0), out.getvalue(), err.getvalue())


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread_per_test_worker():
    """Under `make test`'s two pytest workers on two cores, each worker's PyTorch on two threads
    oversubscribes the cores and its spinning threads wait on each other; one thread a worker
    keeps both cores busy without that. Tests that time PyTorch set their own thread count."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
