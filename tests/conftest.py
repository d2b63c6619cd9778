"""Shared fixtures and helpers. `collected_db` is a real collection (two small workloads), and
`token_artifact` a real `tune-model` artifact of a token-embedding model, each made once per run
(`made_once`: once, not once per pytest-xdist worker).
`run_cli` runs the command in this process, `fresh_process` in its own; `error_line` is the one
`error:` line a command that failed on bad input must print; `load_script` imports one of the
repository's scripts (`bench/`, `examples/`: not a package) by its path."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TINY_WORKLOADS = "batch_matmul/1x128x128x128,softmax/256x256"
DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str) -> Any:
    """The repository's script at `relative` (e.g. "bench/network.py") as a module named `name`,
    registered in `sys.modules` (its dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


#: The token-embedding models of `token_net` (an embedding read by a linear layer; an embedding of
#: computed indices) and a factory that returns no module.
TOKEN_NET = """
import torch

class Tokens(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, ids):
        return self.fc(self.emb(ids))

class Shifted(torch.nn.Module):
    '''Indices computed from the input (ids + 1): no bound is recorded for `ids`, the clamp alone guards.'''
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)

    def forward(self, ids):
        return self.emb(ids + 1)

def make_tokens():
    torch.manual_seed(0)
    return Tokens()

def make_shifted():
    torch.manual_seed(0)
    return Shifted()

def not_a_module():
    return 42
"""
#: `make_tokens`' input: 2x12 token ids, drawn in [0, 50) (the table's rows).
TOKEN_INPUT = "ids:int64:2,12:0..50"


@pytest.fixture(scope="session")
def host():
    from autosearch.backends.tvm.target import host_target

    return host_target()


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `name` that `make(folder)` fills, once per test run: under pytest-xdist the first
    worker to ask makes it, and the others wait for it and share it (a session or module fixture is
    made once per worker, and `make test`'s two workers each tuned test_search_tune's run and
    built the token artifact and the collection). Its users only read it. A `make` that failed is
    tried again by the next worker to ask, which then fails the same way."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:  # one process: a folder of its own
        folder = tmp_path_factory.mktemp(name)
        make(folder)
        return folder
    # (xdist's `--dist loadgroup` would send the users to one worker, but it groups nothing under
    # pytest 9.2: pytest-xdist issue 1386)
    root = tmp_path_factory.getbasetemp().parent  # this run's folder, above each worker's own
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def collected_db(tmp_path_factory, host) -> Path:
    """A store holding 6 real measured schedules of each of two workloads, with features."""
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.collect import collect
    from autosearch.store import Store
    from autosearch.workloads import resolve_workloads

    def make(folder: Path) -> None:
        with Store(folder / "tiny.db") as store:
            collect(
                resolve_workloads(TINY_WORKLOADS),
                store,
                host,
                per_workload=6,
                batch_size=6,
                evaluator=EvaluatorSettings(number=1, repeat=3, min_repeat_ms=1),
                progress=False,
            )

    return made_once(tmp_path_factory, "collected", make) / "tiny.db"


def native_target(precision: str = "fp32") -> Any:
    """This machine's target as `--precision` compiles for it without a `--target` (a VM whose CPU
    LLVM names `rocketlake` but whose flags list AVX512_BF16 and AMX gets those features added);
    None where this CPU cannot run it."""
    from autosearch.backends.tvm.lowp import get_precision, precision_target
    from autosearch.backends.tvm.target import host_target
    from autosearch.errors import TargetError

    try:
        return precision_target(get_precision(precision), host_target(), measured_here=True, native=True)
    except TargetError:
        return None


def host_runs(precision: str) -> bool:
    """Whether `--precision` builds and runs here on this machine's own target (`native_target`)."""
    return native_target(precision) is not None


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


def fresh_process(*args: str) -> subprocess.CompletedProcess[str]:
    """`autosearch ARGS` in its own process: a library that crashes the process (SIGBUS, or SIGSEGV
    on an out-of-bounds read) shows as its exit code instead of taking the test run down."""
    code = "from autosearch.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)


def error_line(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The one `error:` line of a failed command (and that there is no traceback)."""
    assert proc.returncode == code, (proc.returncode, proc.stdout[-1000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    return lines[0]


def tiny_db(tmp_path: Path) -> Path:
    """A copy of tests/data/tiny_tvm.db (real measurements) in `tmp_path`, the test's to change."""
    db = tmp_path / "tiny.db"
    shutil.copy(DATA / "tiny_tvm.db", db)
    return db


@pytest.fixture
def saved_best(tmp_path: Path) -> Path:
    """best.json as `tune` saves it (`save_result`), holding the fastest stored schedule of a
    registry workload in tests/data/tiny_tvm.db."""
    from autosearch.search.results import TuneResult, save_result
    from autosearch.store import Store
    from autosearch.workloads import get_workload

    wl = get_workload("batch_matmul/1x128x128x128")
    with Store(DATA / "tiny_tvm.db", readonly=True) as st:
        (target,) = st.targets()
        (m,) = st.best(wl.key, target)
    result = TuneResult(wl.name, wl.key, wl.family, "m", target, 0, trials=1, ok=1)
    result.best_latency, result.best_trace, result.best_trial = m.median, m.schedule, 1
    return save_result(result, wl, tmp_path / "tuned") / "best.json"


@pytest.fixture(scope="session")
def token_net(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`TOKEN_NET` as a model file (`token_net:make_tokens` for `tune-model`)."""
    path = tmp_path_factory.mktemp("token_net") / "net.py"
    path.write_text(TOKEN_NET)
    return path


@pytest.fixture(scope="session")
def token_artifact(tmp_path_factory: pytest.TempPathFactory, token_net: Path) -> Path:
    """One artifact of `make_tokens` (`tune-model --trials 0`, without its PyTorch timing in a
    fresh process) for the whole run: read it only; a test that changes it takes `token_art`."""
    import autosearch.networks.tune as nt

    def make(folder: Path) -> None:
        out = folder / "art"
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(nt, "torch_latency_isolated", lambda *a, **k: None)
            proc = run_cli(
                "tune-model", f"{token_net}:make_tokens", "--input", TOKEN_INPUT, "--trials", "0",
                "--db", str(folder / "n.db"), "--out", str(out), "--json",
            )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert {p.name for p in out.iterdir()} == {"model.json", "model.so"}

    return made_once(tmp_path_factory, "token_artifact", make) / "art"


@pytest.fixture
def token_art(token_artifact: Path, tmp_path: Path) -> Path:
    """A copy of `token_artifact` of the test's own, to edit."""
    return Path(shutil.copytree(token_artifact, tmp_path / "art"))


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


@pytest.fixture
def no_pytorch_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    """tune-model without its PyTorch comparison (a fresh process that imports torch: ~3.5 s of
    CPU a run), for the tests that check something else; the summary then says None, as for an
    ONNX model. The prior-only build's test keeps the comparison, end to end."""
    import autosearch.networks.tune as nt

    monkeypatch.setattr(nt, "torch_latency_isolated", lambda *a, **k: None)
