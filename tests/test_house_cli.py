"""The command line's house rules (issue 69): one spelling per option across commands (the old
ones still accepted, with a warning), `--threads` reaching the target and the runtime on every
TVM command, docs/cli.md generated from the app, docs/architecture.md naming every module.

The `--threads` tests stop each command where it hands its settings to the tuner / collector /
network tuner (a stand-in that records what it got and raises), so they check what the parsed
value became without a tune.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autosearch.errors import InputError
from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


class _Stop(InputError):
    """Raised by the stand-ins: the command ends with one error line, exit 2."""


@pytest.fixture
def thread_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`--threads` sets process-wide state (TVM_NUM_THREADS, OMP_NUM_THREADS, the target module's
    user count, torch's threads): put it back after the test."""
    from autosearch.backends.tvm import target as target_mod

    monkeypatch.setattr(target_mod, "_USER_THREADS", target_mod._USER_THREADS)
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        if var in os.environ:
            monkeypatch.setenv(var, os.environ[var])
        else:
            monkeypatch.delenv(var, raising=False)
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        n = torch.get_num_threads()
        yield
        torch.set_num_threads(n)
    else:
        yield


def _recorder(monkeypatch: pytest.MonkeyPatch, module: str, name: str) -> dict[str, Any]:
    """Replace `module.name` by a stand-in that keeps its arguments and stops the command."""
    import importlib

    got: dict[str, Any] = {}

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        got["args"], got["kwargs"] = args, kwargs
        got["TVM_NUM_THREADS"] = os.environ.get("TVM_NUM_THREADS")
        got["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS")
        raise _Stop("stopped by the test")

    monkeypatch.setattr(importlib.import_module(module), name, stand_in)
    return got


def _targets(got: dict[str, Any]) -> list[Any]:
    import tvm

    return [a for a in (*got["args"], *got["kwargs"].values()) if isinstance(a, tvm.target.Target)]


def _check_threads_reached(got: dict[str, Any], n: int) -> None:
    from autosearch.backends.tvm.target import runtime_threads

    (tgt,) = _targets(got)
    assert int(tgt.attrs["num-cores"]) == n, str(tgt)
    assert runtime_threads(tgt) == n  # what each measuring worker sets its TVM pool to
    assert got["TVM_NUM_THREADS"] == str(n)  # this process (a network is timed here)
    assert got["OMP_NUM_THREADS"] == str(n)  # PyTorch's reference processes


def _stopped(proc: Any) -> None:
    assert proc.returncode == 2 and "stopped by the test" in proc.stderr, (proc.returncode, proc.stderr[-2000:])


def test_tune_threads_reach_the_target_and_runtime(monkeypatch: pytest.MonkeyPatch, thread_state: None) -> None:
    got = _recorder(monkeypatch, "autosearch.search.tune", "tune")
    proc = run_cli("tune", "softmax/256x256", "--model", "random", "--threads", "1", "--out", "/nonexistent/x")
    _stopped(proc)
    _check_threads_reached(got, 1)
    assert "warning" not in proc.stderr


def test_collect_threads_reach_the_target_and_runtime(
    monkeypatch: pytest.MonkeyPatch, thread_state: None, tmp_path: Path
) -> None:
    got = _recorder(monkeypatch, "autosearch.collect", "collect")
    proc = run_cli("collect", "-w", "softmax/256x256", "--threads", "1", "--db", str(tmp_path / "c.db"))
    _stopped(proc)
    _check_threads_reached(got, 1)


def test_tune_model_threads_reach_the_target_and_runtime(
    monkeypatch: pytest.MonkeyPatch, thread_state: None, tmp_path: Path
) -> None:
    got = _recorder(monkeypatch, "autosearch.networks.tune", "tune_network")
    net = tmp_path / "net.py"
    net.write_text("import torch\n\ndef make_model():\n    return torch.nn.Linear(4, 4)\n")
    proc = run_cli(
        "tune-model", f"{net}:make_model", "--input", "x:float32:1,4", "--model", "random", "--search",
        "evolutionary", "--threads", "1", "--db", str(tmp_path / "n.db"),
    )  # fmt: skip
    _stopped(proc)
    _check_threads_reached(got, 1)


def test_without_threads_the_target_keeps_its_cores(monkeypatch: pytest.MonkeyPatch, thread_state: None) -> None:
    from autosearch.backends.tvm.target import physical_cores

    got = _recorder(monkeypatch, "autosearch.search.tune", "tune")
    _stopped(run_cli("tune", "softmax/256x256", "--model", "random"))
    (tgt,) = _targets(got)
    assert int(tgt.attrs["num-cores"]) == physical_cores()


@pytest.mark.parametrize(
    "argv",
    [
        ["tune", "softmax/256x256", "--threads", "0"],
        ["collect", "-w", "softmax/256x256", "--threads", "-2"],
        ["tune-model", "net.py:f", "--threads", "0"],
        ["sparse", "tune", "m.mtx", "--threads", "0"],
        ["halide", "schedule", "blur", "--threads", "0"],
    ],
)
def test_threads_below_one_is_one_error_line(argv: list[str], tmp_path: Path) -> None:
    proc = run_cli(*argv, cwd=tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and lines == [f"error: --threads must be an integer >= 1, got {argv[-1]}"], proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_threads_above_the_cpus_warns_in_one_line(monkeypatch: pytest.MonkeyPatch, thread_state: None) -> None:
    from autosearch.cli.options import machine_cpus

    got = _recorder(monkeypatch, "autosearch.search.tune", "tune")
    n = machine_cpus() + 1
    proc = run_cli("tune", "softmax/256x256", "--model", "random", "--threads", str(n))
    _stopped(proc)
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert warnings == [
        f"warning: --threads {n} is more than the {machine_cpus()} CPUs of this machine: the threads share cores"
    ]
    _check_threads_reached(got, n)


def test_threads_on_a_gpu_target_is_refused(thread_state: None) -> None:
    proc = run_cli("tune", "softmax/256x256", "--model", "random", "--target", "cuda-h200", "--threads", "2")
    assert proc.returncode == 2 and proc.stderr.startswith("error: --threads applies to CPU (llvm) targets"), (
        proc.stderr
    )


# -- one spelling per option; the old one accepted for a release ------------------------------------
def test_repeats_and_its_old_spelling_reach_the_evaluator(monkeypatch: pytest.MonkeyPatch, thread_state: None) -> None:
    got = _recorder(monkeypatch, "autosearch.search.tune", "tune")
    proc = run_cli("tune", "softmax/256x256", "--model", "random", "--repeats", "4")
    _stopped(proc)
    assert got["kwargs"]["evaluator"].repeat == 4 and "deprecated" not in proc.stderr
    proc = run_cli("tune", "softmax/256x256", "--model", "random", "--repeat", "6")
    _stopped(proc)
    assert got["kwargs"]["evaluator"].repeat == 6
    assert "warning: --repeat is deprecated and goes in the next release; use --repeats" in proc.stderr


def test_collect_repeat_old_spelling_still_works(
    monkeypatch: pytest.MonkeyPatch, thread_state: None, tmp_path: Path
) -> None:
    got = _recorder(monkeypatch, "autosearch.collect", "collect")
    proc = run_cli("collect", "-w", "softmax/256x256", "--repeat", "2", "--db", str(tmp_path / "c.db"))
    _stopped(proc)
    assert got["kwargs"]["evaluator"].repeat == 2 and "use --repeats" in proc.stderr


def _options(path: list[str]) -> dict[str, Any]:
    """Every option name of the command at `path` -> its click parameter (hidden ones included)."""
    import typer

    from autosearch.cli.main import app

    cmd: Any = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return {opt: p for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize(
    ("path", "new", "old"),
    [
        (["collect"], "--repeats", "--repeat"),
        (["tune"], "--repeats", "--repeat"),
        (["run"], "--repeats", "--repeat"),
        (["halide", "schedule"], "--out", "--output"),
        (["sparse", "tune"], "--eps-greedy", "--eps"),
        (["sparse", "plots"], "--out", "--out-dir"),
    ],
)
def test_renamed_options_keep_the_old_spelling_hidden(path: list[str], new: str, old: str) -> None:
    opts = _options(path)
    assert not opts[new].hidden and opts[old].hidden


def test_one_spelling_per_option_across_commands() -> None:
    """No visible option is spelled the deprecated way anywhere, and the TVM commands take --threads."""
    import typer

    from autosearch.cli.main import app

    def walk(cmd: Any, path: tuple[str, ...]) -> Any:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, (*path, name))
        else:
            yield path, cmd

    visible: dict[tuple[str, ...], set[str]] = {}
    for path, cmd in walk(typer.main.get_command(app), ()):
        visible[path] = {o for p in cmd.params if not getattr(p, "hidden", False) for o in p.opts}
    for path, names in visible.items():
        assert not names & {"--repeat", "--output", "--eps", "--out-dir"}, (path, names)
    for path in (("tune",), ("tune-model",), ("collect",), ("sparse", "tune"), ("halide", "schedule")):
        assert "--threads" in visible[path], path


def test_sparse_tune_eps_greedy_out_of_range_names_the_new_spelling(tmp_path: Path) -> None:
    mtx = tmp_path / "m.mtx"
    mtx.write_text("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.0\n")
    proc = run_cli("sparse", "tune", str(mtx), "--eps", "2")  # fails before the threads are set
    assert proc.returncode == 2 and "error: --eps-greedy must be in [0, 1], got 2.0" in proc.stderr, proc.stderr
    assert "use --eps-greedy" in proc.stderr


# -- docs/cli.md is generated ---------------------------------------------------------------------
def test_docs_cli_md_is_what_the_generator_writes() -> None:
    from autosearch.cli.docs import REGENERATE, render

    committed = (ROOT / "docs" / "cli.md").read_text()
    assert render() == committed, f"docs/cli.md differs from the app's commands: run `{REGENERATE}`"


def test_docs_generator_ignores_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from autosearch.cli.docs import commands, render

    text = render()
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("TERM", "xterm-256color")
    assert render() == text
    assert "[bold" not in text and "\x1b[" not in text
    for path, cmd in commands():  # every command has its section, every visible option its row
        assert f"### `autosearch {' '.join(path)}`" in text
        for p in cmd.params:
            if p.param_type_name == "option" and not p.hidden:
                assert f"`{p.opts[0]}`" in text, (path, p.opts)


# -- docs/architecture.md is true -----------------------------------------------------------------
SRC = ROOT / "src" / "autosearch"
ARCH = ROOT / "docs" / "architecture.md"


def _package_rows(doc: str) -> dict[str, str]:
    """Table rows by each package named in their package cell (`search/`, `backends/tvm/`, `collect`)."""
    rows: dict[str, str] = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            for name in re.findall(r"`([\w/]+)`", cells[1]):
                rows[name.strip("/")] = line
    return rows


def _unnamed_modules(doc: str) -> list[str]:
    rows = _package_rows(doc)
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.name == "__init__.py":
            continue  # a package is named by its row
        parts = rel.with_suffix("").parts
        # the row of the longest package prefix: backends/tvm, search (for search/gradient/x), ...
        row = next(
            (rows["/".join(parts[:i])] for i in range(len(parts) - 1, 0, -1) if "/".join(parts[:i]) in rows),
            None,
        )
        stem = parts[-1]
        named_in_row = row is not None and re.search(rf"(?<![\w/.-]){re.escape(stem)}(?![\w-])", row)
        named_top = len(parts) == 1 and stem in rows
        named_by_path = str(rel) in doc or "/".join(parts) in doc
        if not (named_in_row or named_top or named_by_path):
            missing.append(str(rel))
    return missing


def test_architecture_names_every_module() -> None:
    missing = _unnamed_modules(ARCH.read_text())
    assert not missing, f"docs/architecture.md does not name these modules (in their package's row): {missing}"


def _named_paths(doc: str) -> list[str]:
    """The file paths the doc names: relative link targets and code spans that look like a path."""
    links = [t for t in re.findall(r"\]\(([^)#\s]+)", doc) if "://" not in t]
    spans = [t for t in re.findall(r"`([^`\s]+)`", doc) if "/" in t and re.fullmatch(r"[\w./-]+", t)]
    return [*links, *spans]


def _missing_paths(doc: str) -> list[str]:
    bad = []
    for name in _named_paths(doc):
        # relative to the doc, the repository, the package, or a sub-package (`strategies/` in the search row)
        bases = [ROOT / "docs", ROOT, SRC, *(p for p in SRC.rglob("*") if p.is_dir())]
        where = [(base / name).resolve() for base in bases]
        if not any(p.is_relative_to(ROOT) and p.exists() for p in where):
            bad.append(name)
    return bad


def test_architecture_names_only_files_in_the_repository() -> None:
    bad = _missing_paths(ARCH.read_text())
    assert not bad, f"docs/architecture.md names paths that are not in the repository: {bad}"


def test_architecture_checks_can_fail() -> None:
    """The two checks above catch a dropped module and a path outside the repository."""
    doc = ARCH.read_text()
    assert "backends/tvm/intrinsics.py" in _unnamed_modules(doc.replace("intrinsics", "x"))
    assert _missing_paths(doc + "\nsee [design](../shared/DESIGN.md) and `search/nope.py`\n") == [
        "../shared/DESIGN.md",
        "search/nope.py",
    ]
