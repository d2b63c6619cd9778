"""Defects found by running the Halide side the way users do (issues 10 and 15); each test failed
on the code before its fix.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from autosearch.backends.halide.autoschedule import autoschedule, autoschedule_and_benchmark
from autosearch.backends.halide.pipelines import resolve_pipeline
from autosearch.backends.halide.sample_io import load_from_dir
from autosearch.backends.halide.weights import Weights
from autosearch.errors import InputError

QUICK_START = textwrap.dedent(
    """
    from autosearch.halide import autosampler

    gen_path = "blur"
    demo_name = "blur_demo"
    batch_num = 1
    autosampler.retrain_cost_model(gen_path, demo_name, batch_num, batch_size=2, train_iters=2, threads=1,
                                   repeats=1, pipeline_params={"width": 48, "height": 32}, progress=False)
    print("QUICK START DONE")
    """
)


def _run_quick_start(cwd: Path, via_stdin: bool) -> subprocess.CompletedProcess[str]:
    if via_stdin:
        return subprocess.run(
            [sys.executable, "-"], input=QUICK_START, cwd=cwd, capture_output=True, text=True, timeout=300, check=False
        )
    script = cwd / "quick_start.py"  # no `if __name__ == "__main__":` guard, as the seed's README shows it
    script.write_text(QUICK_START)
    return subprocess.run(
        [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize(
    "via_stdin", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["script-without-main-guard", "python-stdin"]
)
def test_quick_start_from_a_plain_script_writes_samples_and_weights(tmp_path, via_stdin):
    res = _run_quick_start(tmp_path, via_stdin)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "QUICK START DONE" in res.stdout
    samples = load_from_dir(tmp_path / "default_samples", strict=True)
    assert len(samples) == 2 and all(s.runtime_ms > 0 for s in samples)
    w = Weights.load(tmp_path / "random_init.weights")
    assert w != Weights.random(0)  # trained on those samples, not just the random start


def test_a_batch_without_any_successful_sample_is_an_error_and_writes_no_weights(tmp_path):
    from autosearch.halide import autosampler

    broken = tmp_path / "reads_past_its_input.py"
    broken.write_text(
        "import halide as hl\n"
        "from autosearch.halide.autosampler import PipelineDef\n"
        "def pipeline(n=32):\n"
        "    x, y = hl.Var('x'), hl.Var('y')\n"
        "    inp = hl.ImageParam(hl.Float(32), 2, 'input')\n"
        "    f = hl.Func('f')\n"
        "    f[x, y] = inp[x, y] + inp[x + 5, y]\n"
        "    return PipelineDef([f], [(n, n)], [(inp, (n, n))])  # the input is 5 columns short\n"
    )
    wp = tmp_path / "w.weights"
    with pytest.raises(autosampler.NoSamplesError, match="none of its 2 schedules ran"):
        autosampler.retrain_cost_model(
            str(broken),
            "broken",
            1,
            batch_size=2,
            samples_dir=str(tmp_path / "s"),
            weight_path=str(wp),
            train_iters=2,
            threads=1,
            repeats=1,
            beam_size=1,
            progress=False,
        )
    assert not wp.exists()


def test_no_temp_folder_is_left_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    spec = resolve_pipeline("blur", {"width": 32, "height": 32})
    assert autoschedule(spec, {"parallelism": 1, "beam_size": 1}).status == "ok"
    res = autoschedule_and_benchmark(spec, [{"parallelism": 1, "beam_size": 1}], threads=1, repeats=1)
    assert res[0].status == "ok"
    assert not list(tmp_path.glob("autosearch-halide-*"))


def _children(pid: int) -> list[int]:
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def test_sigterm_on_a_halide_run_takes_its_worker_down(tmp_path):
    import psutil

    # The worker spends 60 s inside the user's pipeline() without a word to its parent: only dying
    # with the parent stops it then (the old worker died only at its next write to the closed pipe).
    slow = tmp_path / "slow_pipeline.py"
    slow.write_text(
        "import time\ndef pipeline():\n    time.sleep(60)\n    raise RuntimeError('not reached in this test')\n"
    )
    script = tmp_path / "long_run.py"
    script.write_text(
        "from autosearch.backends.halide.autoschedule import autoschedule_and_benchmark\n"
        "from autosearch.backends.halide.pipelines import resolve_pipeline\n"
        "if __name__ == '__main__':  # the guard lets the old multiprocessing worker start too\n"
        f"    spec = resolve_pipeline({str(slow)!r})\n"
        "    autoschedule_and_benchmark(spec, [{'parallelism': 1, 'beam_size': 1}], threads=1, repeats=1)\n"
    )
    # SIGTERM ends the run before its `finally` removes its log folder: make that folder here, not in /tmp
    parent = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        workers: list[int] = []
        deadline = time.time() + 120
        while time.time() < deadline and not workers:
            time.sleep(0.5)
            workers = _children(parent.pid)
        assert workers, "the run never started a worker"
        time.sleep(1.0)
        workers = _children(parent.pid) or workers  # everything it started by now
        parent.send_signal(signal.SIGTERM)
        parent.wait(30)
        deadline = time.time() + 10
        alive = workers
        while time.time() < deadline and alive:
            time.sleep(0.2)
            alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        assert not alive, f"worker(s) {alive} outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        for p in _children(parent.pid) + [p for p in locals().get("workers", []) if psutil.pid_exists(p)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".hidden", "", "x y"])
def test_sample_names_must_be_plain_file_names(tmp_path, name):
    from autosearch.halide.autosampler import sample_batch

    spec = resolve_pipeline("blur", {"width": 32, "height": 32})
    with pytest.raises(InputError, match="plain file name"):
        sample_batch(spec, tmp_path / "s", batch_size=1, name=name, threads=1, repeats=1)
    assert not (tmp_path / "s").exists() and not (tmp_path.parent / "x").exists()


def test_cli_refuses_a_name_that_escapes_the_samples_dir(tmp_path):
    from typer.testing import CliRunner

    from autosearch.cli.halide import app

    res = CliRunner().invoke(
        app,
        [
            "sample",
            "blur",
            "-p",
            "width=32",
            "-p",
            "height=32",
            "--batch-size",
            "1",
            "--samples-dir",
            str(tmp_path / "s"),
            "--name",
            "../../x",
            "--db",
            "",
        ],
    )
    assert res.exit_code == 2
    out = (res.output or "") + (getattr(res, "stderr", "") or "")
    assert "plain file name" in out and "Traceback" not in out
    assert not list(tmp_path.rglob("x_batch_*"))


# -- issue 46, defect 1: a pipeline file that segfaults or never returns ---------------------------
SEGFAULT = "import ctypes\ndef pipeline():\n    ctypes.string_at(0)  # reads address 0: SIGSEGV\n"
FOREVER = "def pipeline():\n    while True:\n        pass\n"


def _cli(args: list[str], cwd: Path, build_timeout: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real CLI in its own process: a crash in the user's file must not take it down."""
    env = dict(os.environ, AUTOSEARCH_HALIDE_BUILD_TIMEOUT=build_timeout)
    return subprocess.run(
        [sys.executable, "-c", "from autosearch.cli import main; main()", "halide", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


_CRASH = (SEGFAULT, "crashed the worker (killed by SIGSEGV)")  # long before a 30 s timeout
_HANG = (FOREVER, "did not finish within 1 s")


@pytest.mark.parametrize(
    ("command", "body", "expect"),
    [
        pytest.param("sample", *_CRASH, id="sample-segfault"),
        pytest.param("retrain", *_CRASH, id="retrain-segfault", marks=pytest.mark.slow),  # same check as sample's
        pytest.param("autotune", *_CRASH, id="autotune-segfault", marks=pytest.mark.slow),
        pytest.param("sample", *_HANG, id="sample-loops-forever"),
        pytest.param("retrain", *_HANG, id="retrain-loops-forever", marks=pytest.mark.slow),
        pytest.param("autotune", *_HANG, id="autotune-loops-forever", marks=pytest.mark.slow),
    ],
)
def test_a_pipeline_file_that_crashes_or_hangs_is_one_error_line(tmp_path, command, body, expect):
    bad = tmp_path / "bad_pipeline.py"
    bad.write_text(body)
    args = {
        "sample": ["sample", str(bad), "--batch-size", "2", "--samples-dir", str(tmp_path / "s")],
        "retrain": ["retrain", str(bad), "--batch-size", "2", "--samples-dir", str(tmp_path / "s")],
        "autotune": ["autotune", str(bad), "--batches", "1", "--batch-size", "2", "--out", str(tmp_path / "run")],
    }[command]
    t0 = time.time()
    res = _cli([*args, "--threads", "1", "--db", str(tmp_path / "a.db")], tmp_path, "30" if body == SEGFAULT else "1")
    assert time.time() - t0 < 60
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-500:])
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], res.stderr
    assert str(bad) in lines[0]
    assert not list(tmp_path.rglob("*.sample")) and not list(tmp_path.rglob("*.weights"))


def test_a_pipeline_file_that_raises_keeps_its_message(tmp_path):
    from autosearch.backends.halide.sampling import describe_pipeline

    bad = tmp_path / "raises.py"
    bad.write_text("def pipeline():\n    raise ValueError('no such size')\n")
    with pytest.raises(InputError, match=r"pipeline\(\) raised ValueError: no such size"):
        describe_pipeline(resolve_pipeline(str(bad)))


def test_a_batch_builds_in_parallel_workers_and_measures_every_candidate(monkeypatch):
    """Issue 50: candidates autoscheduled and compiled in 2 worker processes at once, then
    measured one at a time; same schedules as one worker builds, every round measured."""
    import autosearch.backends.halide.autoschedule as aut

    starts = []
    orig = aut._start_worker

    def counting(job, threads, permit, keep_stdin=False):
        starts.append((len(job["cands"]), keep_stdin))
        return orig(job, threads, permit, keep_stdin)

    monkeypatch.setattr(aut, "_start_worker", counting)
    spec = resolve_pipeline("blur", {"width": 48, "height": 32})
    params = [{"parallelism": 1, "beam_size": 1, "random_dropout": 50, "random_dropout_seed": s} for s in range(4)]
    par = autoschedule_and_benchmark(spec, params, threads=1, repeats=3, build_workers=2)
    assert starts == [(2, True), (2, True)]  # two workers, two candidates each, waiting for "go"
    one = autoschedule_and_benchmark(spec, params, threads=1, repeats=1)
    assert all(r.status == "ok" and len(r.latencies) == 3 for r in par)
    assert [r.featurization for r in par] == [r.featurization for r in one]  # the same schedules


def test_a_parallel_build_worker_that_dies_loses_only_its_current_candidate(tmp_path, monkeypatch):
    import autosearch.backends.halide.autoschedule as aut

    starts = []
    orig = aut._start_worker

    def counting(job, threads, permit, keep_stdin=False):
        starts.append(keep_stdin)
        return orig(job, threads, permit, keep_stdin)

    monkeypatch.setattr(aut, "_start_worker", counting)
    marker = tmp_path / "crashed_once"
    crash_once = tmp_path / "crash_once.py"
    crash_once.write_text(
        "import ctypes, pathlib\n"
        "import halide as hl\n"
        "from autosearch.backends.halide.pipeline_def import PipelineDef\n"
        f"MARK = pathlib.Path({str(marker)!r})\n"
        "def pipeline():\n"
        "    try:\n"
        "        MARK.touch(exist_ok=False)  # the first build anywhere crashes, no other\n"
        "        ctypes.string_at(0)\n"
        "    except FileExistsError:\n"
        "        pass\n"
        "    x, y = hl.Var('x'), hl.Var('y')\n"
        "    inp = hl.ImageParam(hl.Float(32), 2, 'input')\n"
        "    f = hl.Func('f')\n"
        "    f[x, y] = inp[x, y] * 2\n"
        "    return PipelineDef([f], [(32, 32)], [(inp, (32, 32))])\n"
    )
    spec = resolve_pipeline(str(crash_once))
    params = [{"parallelism": 1, "beam_size": 1, "random_dropout": 50, "random_dropout_seed": s} for s in range(4)]
    res = autoschedule_and_benchmark(spec, params, threads=1, repeats=2, build_workers=2)
    failed = [r for r in res if r.status != "ok"]
    assert len(failed) == 1 and failed[0].status == "build_error" and "worker died" in failed[0].error
    assert all(len(r.latencies) == 2 for r in res if r.status == "ok")
    assert starts == [True, True, False]  # two parallel workers, then one for the dead one's other candidate
