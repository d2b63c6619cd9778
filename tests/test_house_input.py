"""Bad input found by trying it (issue 69, defect groups 5-12): each gets one clear line (an
`error:` and exit 2, or a `warning:` where the run goes on) and loses nothing.

Every test here failed on the code before its fix (commit 15354e2), except the one that says it
guards a fix (the Ctrl-C while a factory hangs); the comment above each names the defect.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import error_line, run_cli, tiny_db

CLI = [sys.executable, "-c", "from autosearch.cli import main; main()"]


# -- 5. nan, inf and negative numbers of float options ------------------------------------------------
def _float_cases() -> list[object]:
    """(argv with BAD where the value goes, the option named in the error). `--db` is a folder: the
    code before the fix went on with the value and stopped there (or ran, or failed inside)."""
    model = ["tune-model", "MODEL", "--input", "x:float32:1,4", "--db", "DIR"]
    cases = [
        ("collect", ["collect", "-w", "softmax/256x256", "--db", "DIR", "--budget-minutes", "BAD"], "--budget-minutes"),
        ("sparse-collect", ["sparse", "collect", "--db", "DIR", "--budget-minutes", "BAD"], "--budget-minutes"),
        ("tune-model", [*model, "--budget-minutes", "BAD"], "--budget-minutes"),
        ("tune", ["tune", "softmax/256x256", "--db", "DIR", "--retrain-fraction", "BAD"], "--retrain-fraction"),
        ("train", ["train", "--db", "DIR", "--out", "OUT", "--valid-fraction", "BAD"], "--valid-fraction"),
        ("halide-autotune", ["halide", "autotune", "blur", "--batches", "0", "--lr", "BAD"], "--lr"),
    ]
    return [
        pytest.param(argv, option, bad, id=f"{name}-{bad}")
        for name, argv, option in cases
        for bad in ("nan", "inf", "-1")
    ]


@pytest.mark.parametrize(("argv", "option", "bad"), _float_cases())
def test_a_float_option_refuses_nan_inf_and_negatives_in_one_line(
    tmp_path: Path, argv: list[str], option: str, bad: str
) -> None:
    (tmp_path / "dir").mkdir()
    model = tmp_path / "model.py"
    model.write_text("import torch\ndef make_model():\n    return torch.nn.ReLU()\n")
    fill = {"BAD": bad, "DIR": str(tmp_path / "dir"), "OUT": str(tmp_path / "out"), "MODEL": f"{model}:make_model"}
    line = error_line(run_cli(*[fill.get(a, a) for a in argv], cwd=tmp_path))
    assert line.startswith(f"error: {option} must be a finite number"), line
    assert line.endswith(f"got {bad}"), line
    assert not (tmp_path / "out").exists() and not any((tmp_path / "dir").iterdir())


# -- 6. a model factory that never returns under --budget-minutes --------------------------------------
#: A factory that does not return for a minute (in its call or in its module's import): longer
#: than any budget below, short enough for the thread left sleeping in this process to end.
HANGS = {
    "call": "import time\ndef make_model():\n    open('called', 'w').close()\n    time.sleep(60)\n",
    "import": "import time\nopen('called', 'w').close()\ntime.sleep(60)\ndef make_model():\n    pass\n",
}
_HANG_ARGV = ["tune-model", "hang.py:make_model", "--input", "x:float32:1,4", "--db", "h.db"]


@pytest.mark.parametrize("where", ["call", "import"])
def test_a_factory_that_hangs_is_stopped_at_the_budget_in_one_line(tmp_path: Path, where: str) -> None:
    """The docs say the budget covers the import: the code before the fix waited in the user's
    code as long as it ran (forever, for one that hangs; here a minute, then another error)."""
    (tmp_path / "hang.py").write_text(HANGS[where])
    t0 = time.monotonic()
    line = error_line(run_cli(*_HANG_ARGV, "--budget-minutes", "0.05", cwd=tmp_path))
    assert time.monotonic() - t0 < 40
    assert (tmp_path / "called").exists()  # it was the user's code that was waited for
    assert line.startswith("error: hang.py:make_model did not return within the budget"), line


def test_ctrl_c_while_the_factory_hangs_ends_the_run_at_once(tmp_path: Path) -> None:
    """The user's code now runs in a thread of its own: the main thread must still take a Ctrl-C
    at once, and say so. The code before the fix exited 130 without a word (typer turned the
    KeyboardInterrupt into a silent exit status). In a process of its own, as a user runs it: in
    the test worker's process an earlier test's Ctrl-C handling could hold the signal back (seen
    once in a fresh-clone CI: the factory ran its 60 s out)."""
    (tmp_path / "hang.py").write_text(HANGS["call"])
    proc = subprocess.Popen(
        [*CLI, *_HANG_ARGV, "--budget-minutes", "5"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a test run started in the background of a shell inherits SIGINT ignored; Ctrl-C is the point
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        t0 = time.monotonic()
        while not (tmp_path / "called").exists() and proc.poll() is None and time.monotonic() - t0 < 120:
            time.sleep(0.05)
        assert (tmp_path / "called").exists(), "the factory was never called"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    said = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 130, (proc.returncode, said)
    assert said and said[-1] == "interrupted", said
    assert not any("Traceback" in ln or ln.startswith(("error", "internal error")) for ln in said), said
    assert took < 2.0, f"the run ended {took:.1f} s after the Ctrl-C"


# -- 7. apply of a best.json of a newer format -------------------------------------------------------
def test_apply_refuses_a_best_json_of_a_newer_format(saved_best: Path) -> None:
    """The code before the fix applied (and would time) a best.json with format_version 99, where
    `run` and `eval` refuse what a newer autosearch wrote."""
    best = saved_best
    assert run_cli("apply", str(best), "--no-show").returncode == 0
    data = json.loads(best.read_text())
    best.write_text(json.dumps({**data, "format_version": 99}))
    line = error_line(run_cli("apply", str(best), "--no-show"))
    assert "has best-schedule format 99; this autosearch reads up to 1" in line, line
    best.write_text(json.dumps({**data, "format_version": "one"}))
    assert "format_version must be a whole number" in error_line(run_cli("apply", str(best), "--no-show"))


# -- 8. a target whose num-cores is not a count ------------------------------------------------------
@pytest.mark.parametrize("cores", [-4, 0, 2.5, '"4"', "true"])
def test_a_target_with_num_cores_below_one_or_not_whole_is_refused(tmp_path: Path, cores: object) -> None:
    """The code before the fix described, tuned and stored `{"num-cores": -4}` (runtime_threads -4)."""
    spec = f'{{"kind": "llvm", "num-cores": {cores}}}'
    line = error_line(run_cli("target", "--target", spec, "--json"))
    assert line == f"error: the target's num-cores must be a whole number >= 1, got {cores}", line
    db = tmp_path / "t.db"
    line = error_line(run_cli("collect", "-w", "softmax/256x256", "--target", spec, "--db", str(db)))
    assert "num-cores must be a whole number >= 1" in line and not db.exists()


# -- 9. db export into a folder that cannot be written -------------------------------------------------
def test_export_into_a_path_under_a_file_is_one_line(tmp_path: Path) -> None:
    """A regular file where the folder should be (tests run as root: permissions would not stop a
    write): the code before the fix ended in an internal error (NotADirectoryError)."""
    db = tiny_db(tmp_path)
    (tmp_path / "afile").write_text("keep me\n")
    wf, rf = tmp_path / "afile" / "sub" / "w.json", tmp_path / "afile" / "sub" / "r.json"
    line = error_line(run_cli("db", "export", str(wf), str(rf), "--db", str(db)))
    assert line.startswith(f"error: cannot write {wf}: Not a directory") and "nothing was written" in line, line
    assert (tmp_path / "afile").read_text() == "keep me\n"
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("tiny.db")] == ["afile"]  # no partial file


# -- 10. running out of memory -------------------------------------------------------------------------
#: An address-space limit under which the interpreter and the CLI's imports start but TVM does not
#: load (found by trying: 300-1300 MB all end in running out of memory here).
_AS_LIMIT = 500 * 2**20


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (_AS_LIMIT, _AS_LIMIT))


# slow: under the limit a `tune` run once waited on a worker process that could not start and never
# ended (300 s, one full-suite run in three), a hang the one-line handler does not reach; kept out of
# `make test` until the worker start fails in one line too (issue 69 closing note)
@pytest.mark.slow
def test_running_out_of_memory_is_one_line(tmp_path: Path) -> None:
    """Under `ulimit -v` the code before the fix printed a traceback of 87-101 lines ending in a
    MemoryError: the error handler itself ran out of memory while formatting its line."""
    start = subprocess.run(
        [sys.executable, "-c", "from autosearch.cli import main"],
        preexec_fn=_limit_memory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if start.returncode != 0:
        pytest.skip(f"the interpreter cannot even start under a {_AS_LIMIT >> 20} MB address-space limit here")
    argv = ["tune", "batch_matmul/1x128x128x128", "--trials", "4", "--trials-per-round", "4", "--no-baseline"]
    proc = subprocess.run(
        [*CLI, *argv, "--db", "m.db", "--out", "out"],
        cwd=tmp_path,
        preexec_fn=_limit_memory,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode != 0, "the run fit in the limit: lower _AS_LIMIT"
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-3000:])
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith(("error", "internal error"))]
    assert errors == [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:], proc.stderr[-3000:]
    assert errors[0].startswith("error: out of memory: "), errors


# -- 11. TVM_NUM_THREADS that is no count, or more threads than CPUs -----------------------------------
#: A command that needs no TVM (the warning comes first, at start), then what TVM's runtime will
#: read in this process and its workers, and this machine's physical cores.
_THREADS_RUN = """
import os
from autosearch.backends.tvm.target import physical_cores
from autosearch.cli import main
try:
    main(["db", "stats", "--db", "missing.db"])
except SystemExit:
    pass
print(os.environ["TVM_NUM_THREADS"], physical_cores())
"""


def _with_threads(value: str, tmp_path: Path) -> tuple[list[str], str, int]:
    """stderr lines, the TVM_NUM_THREADS TVM reads and the physical cores, under TVM_NUM_THREADS=value."""
    proc = subprocess.run(
        [sys.executable, "-c", _THREADS_RUN],
        cwd=tmp_path,
        env={**os.environ, "TVM_NUM_THREADS": value},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    tvm_reads, cores = proc.stdout.split()
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[1:] == ["error: no database at missing.db"], proc.stderr  # the command ran as ever
    return lines[:1], tvm_reads, int(cores)


@pytest.mark.parametrize("value", ["abc", "0", "-2", ""])
def test_tvm_num_threads_that_is_no_count_warns_and_is_ignored(value: str, tmp_path: Path) -> None:
    """The code before the fix ignored TVM_NUM_THREADS=abc silently, and left it for TVM to read."""
    warning, tvm_reads, cores = _with_threads(value, tmp_path)
    assert warning == [
        f"warning: TVM_NUM_THREADS={value!r} is not a whole number >= 1: ignored, TVM's kernels run on this "
        f"machine's {cores} physical cores"
    ]
    assert tvm_reads == str(cores)


def test_tvm_num_threads_above_the_cpus_warns(tmp_path: Path) -> None:
    """More threads than CPUs share cores (the timings measure that): a warning, the value kept."""
    cpus = len(os.sched_getaffinity(0))
    warning, tvm_reads, _ = _with_threads(str(cpus * 8), tmp_path)
    assert warning == [
        f"warning: TVM_NUM_THREADS={cpus * 8} is more than the {cpus} CPUs of this machine: the threads share cores"
    ]
    assert tvm_reads == str(cpus * 8)


# -- 12a. an ONNX file's declared input shapes -----------------------------------------------------------
def _relu_onnx(path: Path, dims: list[str | int]) -> Path:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    w = helper.make_tensor("w", TensorProto.FLOAT, [1], [2.0])  # an initializer listed as a graph input
    w_in = helper.make_tensor_value_info("w", TensorProto.FLOAT, [1])
    nodes = [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x, w_in], [y], initializer=[w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_onnx_inputs_are_read_from_the_file(tmp_path: Path) -> None:
    """The code before the fix asked for --input although the file declares x: float32 2x8."""
    from autosearch.networks.inputs import InputSpec, parse_inputs

    model = _relu_onnx(tmp_path / "m.onnx", [2, 8])
    assert parse_inputs(onnx=str(model)) == [InputSpec("x", "float32", (2, 8))]
    assert parse_inputs(["x:float32:4,8"], onnx=str(model)) == [InputSpec("x", "float32", (4, 8))]  # --input wins
    # the command gets past its inputs to the next check (the target), where it asked for --input
    line = error_line(run_cli("tune-model", str(model), "--target", "warp-drive", "--db", str(tmp_path / "n.db")))
    assert line.startswith("error: unknown target 'warp-drive'"), line


def test_an_onnx_input_with_a_dynamic_dimension_asks_for_its_shape_by_name(tmp_path: Path) -> None:
    model = _relu_onnx(tmp_path / "dyn.onnx", ["batch", 8])
    line = error_line(run_cli("tune-model", str(model), "--db", str(tmp_path / "n.db")))
    assert line == (
        f"error: {model}: input x has a dynamic dimension (batch); give its shape with --input x:float32:SHAPE"
    ), line
    assert not (tmp_path / "n.db").exists()


@pytest.mark.slow
def test_tune_model_of_an_onnx_file_without_input_options(tmp_path: Path) -> None:
    """End to end (20 s here): the shapes read from the file are the ones imported and exported."""
    model = _relu_onnx(tmp_path / "m.onnx", [2, 8])
    proc = run_cli("tune-model", str(model), "--trials", "0", "--db", str(tmp_path / "n.db"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (spec,) = json.loads(proc.stdout)["inputs"]
    assert (spec["name"], spec["dtype"], spec["shape"]) == ("x", "float32", [2, 8])


# -- 12b. a crashing Halide pipeline and the store ----------------------------------------------------------
def test_a_crashing_halide_pipeline_leaves_no_store_behind(tmp_path: Path) -> None:
    """The code before the fix made the store (48 KiB of empty tables) before the pipeline crashed."""
    bad = tmp_path / "bad_pipeline.py"
    bad.write_text("import ctypes\ndef pipeline():\n    ctypes.string_at(0)  # reads address 0: SIGSEGV\n")
    argv = ["halide", "sample", str(bad), "--batch-size", "2", "--samples-dir", "s", "--threads", "1"]
    proc = subprocess.run(
        [*CLI, *argv, "--db", "a.db"],
        cwd=tmp_path,
        env={**os.environ, "AUTOSEARCH_HALIDE_BUILD_TIMEOUT": "30"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "crashed the worker" in error_line(proc)
    assert not (tmp_path / "a.db").exists()


# -- 12c. db import of a log that repeats itself --------------------------------------------------------------
def test_import_says_how_many_duplicates_it_skipped(tmp_path: Path) -> None:
    """The code before the fix said "imported 144 records" of a log holding each record 4 times."""
    db = tiny_db(tmp_path)
    wf, rf = tmp_path / "w.json", tmp_path / "r.json"
    assert run_cli("db", "export", str(wf), str(rf), "--db", str(db)).returncode == 0
    lines = rf.read_text().splitlines()
    rf.write_text("\n".join(lines * 4) + "\n")
    new = tmp_path / "new.db"
    proc = run_cli("db", "import", str(wf), str(rf), "--db", str(new), "--no-features")
    assert proc.returncode == 0, proc.stderr[-2000:]
    n = len(lines)
    said = proc.stdout.strip()
    assert said.startswith(f"imported {n} records of 6 workloads"), said
    assert said.endswith(f"; skipped {3 * n:,} duplicates (repeated in the log or already in the store)"), said
    again = run_cli("db", "import", str(wf), str(rf), "--db", str(new), "--no-features").stdout.strip()
    assert again.startswith("imported 0 records") and f"skipped {4 * n:,} duplicates" in again, again


# -- 12d. Click's usage errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["tune", "--bogus"], "error: no such option --bogus (see autosearch tune --help)"),
        (
            ["tune", "--trails", "4"],
            "error: no such option --trails; did you mean --trials? (see autosearch tune --help)",
        ),
        (["--bogus"], "error: no such option --bogus (see autosearch --help)"),
        (["db", "import", "w.json"], "error: missing argument 'record_file' (see autosearch db import --help)"),
        (["collect"], "error: give --workloads or --network (see autosearch collect --help)"),
        (["no-such-command"], "error: no such command 'no-such-command' (see autosearch --help)"),
        (
            ["collect", "-w", "softmax/256x256", "--budget-minutes", "soon"],
            "error: invalid value for '--budget-minutes': ",
        ),
    ],
)
def test_a_usage_error_is_one_line_naming_the_help(argv: list[str], expected: str) -> None:
    """The code before the fix printed Click's usage block, its `Try ... --help` line and the error."""
    line = error_line(run_cli(*argv))
    if expected.endswith("--help)"):
        assert line == expected
    else:
        assert line.startswith(expected) and line.endswith("(see autosearch collect --help)"), line
