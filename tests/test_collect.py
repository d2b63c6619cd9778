"""Real collection on this CPU: store contents, resume, SIGKILL safety, failures recorded."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from autosearch.features.per_store import EXTRACTOR, FEATURE_WIDTH
from autosearch.store import Store
from conftest import TINY_WORKLOADS, run_cli

CLI = [sys.executable, "-c", "from autosearch.cli import main; main()"]


def test_collect_fills_store_with_features(collected_db):
    with Store(collected_db, readonly=True) as s:
        stats = {r["workload"]: r for r in s.stats()}
        assert set(stats) == set(TINY_WORKLOADS.split(","))
        for r in stats.values():
            assert r["records"] == 6 and r["ok"] >= 1
            assert r["best_latency_s"] > 0 and r["features"] >= r["ok"]
        rows = list(s.iter_features(EXTRACTOR))
        assert rows and all(f.features.shape[1] == FEATURE_WIDTH and np.isfinite(f.features).all() for f in rows)
        for m in s.measurements(status="ok"):
            assert len(m.latencies) == 3 and m.median == sorted(m.latencies)[1]
            assert len({m.schedule_hash for m in s.measurements(workload_key=m.workload_key)}) == 6


def test_collect_resumes_and_tops_up(collected_db, host, tmp_path):
    import shutil

    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.collect import collect
    from autosearch.workloads import resolve_workloads

    db = tmp_path / "copy.db"
    shutil.copy(collected_db, db)
    ev = EvaluatorSettings(repeat=2, min_repeat_ms=1)
    wls = resolve_workloads(TINY_WORKLOADS)
    with Store(db) as s:
        again = collect(wls, s, host, per_workload=6, evaluator=ev, progress=False)
        assert again.measured == 0 and again.skipped_full == 2
        more = collect(wls[:1], s, host, per_workload=8, evaluator=ev, progress=False)
        assert more.measured == 2
        hashes = [m.schedule_hash for m in s.measurements(workload_key=wls[0].key)]
        assert len(hashes) == len(set(hashes)) == 8


# slow: a real collection killed mid-batch and resumed (~30 s)
@pytest.mark.slow
def test_sigkill_loses_at_most_the_batch_in_flight(tmp_path):
    db = tmp_path / "killed.db"
    args = CLI + [
        "collect",
        "-w",
        "batch_matmul/1x128x128x128",
        "-n",
        "16",
        "--batch-size",
        "4",
        "--repeats",
        "2",
        "--min-repeat-ms",
        "1",
        "--db",
        str(db),
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    n = 0
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
        if db.exists():
            try:
                n = (
                    sqlite3.connect(f"file:{db}?mode=ro", uri=True)
                    .execute("SELECT COUNT(*) FROM measurements")
                    .fetchone()[0]
                )
            except sqlite3.OperationalError:
                continue
            if n >= 4:
                break
    assert n >= 4, "collection did not write a first batch in time"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    with Store(db) as s:  # opens: not corrupt
        before = list(s.measurements())
        assert (len(before) % 4 == 0 and len(before) < 16) or len(before) == 16
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with Store(db, readonly=True) as s:
        after = list(s.measurements())
        assert len(after) == 16 and len({m.schedule_hash for m in after}) == 16
        assert {m.id: m.median for m in before} == {m.id: m.median for m in after if m.id in {b.id for b in before}}


def _crashing_candidate():
    import tvm
    from tvm import te
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    a = te.placeholder((16,), name="A")
    b = te.compute((16,), lambda i: a[i + (1 << 34)], name="B")  # reads 64 GiB past the buffer
    sch = Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def test_crashing_and_hanging_kernels_are_recorded_as_failures(host):
    from autosearch.backends.tvm.measure import EvaluatorSettings, Measurer

    crash = Measurer(host, EvaluatorSettings(repeat=1, min_repeat_ms=1), run_timeout=20).measure(
        [_crashing_candidate()]
    )
    assert crash[0].status in ("run_error", "timeout") and crash[0].latencies == [] and crash[0].error
    # A kernel that cannot finish its minimum measuring time inside the timeout: a hang.
    hang = Measurer(host, EvaluatorSettings(repeat=3, min_repeat_ms=60_000), run_timeout=2)
    from autosearch.backends.tvm.space import TaskSpace
    from autosearch.workloads import get_workload

    space = TaskSpace(get_workload("softmax/256x256").mod(), host)
    ((cand, _, _),) = space.sample(1, set())
    res = hang.measure([cand])
    assert res[0].status == "timeout" and "Timeout" in res[0].error


def _summing_candidate(n: int):
    """A kernel that sums 16 products n times: ~n x 16 dependent float adds, slow for n = 2**28."""
    import tvm
    from tvm import te
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    a = te.placeholder((16,), name="A")
    k, j = te.reduce_axis((0, n), name="k"), te.reduce_axis((0, 16), name="j")
    b = te.compute((1,), lambda i: te.sum(a[j] * a[j], axis=[k, j]), name="B")
    sch = Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def test_a_capped_run_is_cut_off_at_the_cap_not_the_runner_timeout(host):
    import time

    from autosearch.backends.tvm.build import pool_builder
    from autosearch.backends.tvm.measure import EvaluatorSettings, Measurer, adaptive_run_timeout

    assert adaptive_run_timeout([0.2] * 7, 30.0) == 30.0  # too few runs to judge: the runner's timeout
    assert adaptive_run_timeout([0.2] * 8, 30.0) == 5.0  # 10 x 0.2 s, but at least 5 s
    assert adaptive_run_timeout([0.2] * 4 + [2.0] * 8, 30.0) == 20.0  # the median of recent runs
    assert adaptive_run_timeout([9.0] * 8, 30.0) == 30.0  # never above the runner's timeout

    slow, fast = _summing_candidate(2**28), _summing_candidate(16)
    cands = [slow, slow, fast]  # two in a row: a hung pick often has hung siblings
    m = Measurer(host, EvaluatorSettings(repeat=3, min_repeat_ms=10), run_timeout=30)
    t0 = time.perf_counter()
    res = m.run_built(cands, pool_builder().build(cands, host), timeout=1.0)
    took = time.perf_counter() - t0
    assert [r.status for r in res] == ["timeout", "timeout", "ok"], [r.error for r in res]
    slow_runs = [res[0], res[1]]
    # every slow run, the one right after a kill too, is cut at the cap (the killed worker restarts
    # in an untimed empty task first, so its start-up does not eat into the next run's cap)
    assert all("1.0 seconds" in r.error for r in slow_runs) and all(0.8 < r.seconds < 2 for r in slow_runs)
    assert res[2].seconds > 0 and res[2].latencies and took < 30


def test_releasing_the_workers_after_ctrl_c_ends_a_run_in_progress(host, monkeypatch):
    """`cli.main` releases the workers after Ctrl-C: the shared Measurer's too, so a kernel being
    timed is killed rather than holding the exit until it ends (measured before: 17.7 s)."""
    import threading
    import time

    import autosearch.backends.tvm.build as build
    import autosearch.backends.tvm.measure as measure
    from autosearch.cli.main import _release_workers

    slow = _summing_candidate(2**28)  # seconds a call; warm-up and 3 repeats: well over 10 s
    built = build.pool_builder().build([slow], host)
    # only this test's workers are released: the process's others serve the tests after it
    monkeypatch.setattr(build, "_BUILDERS", {})
    monkeypatch.setattr(measure, "_SHARED", {})
    m = measure.shared_measurer(host, measure.EvaluatorSettings(repeat=3, min_repeat_ms=10))
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["result"] = m.run_built([slow], built)
        except BaseException as exc:  # what the killed worker leaves is the point, not its type
            out["error"] = exc

    start = m._worker_start  # the runner's worker start, begun in the background
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    if start is not None:  # the worker has started (on a loaded machine this takes seconds) ...
        start.result(timeout=60)
    time.sleep(1.5)  # ... and is timing the kernel
    assert worker.is_alive() and not out
    t0 = time.monotonic()
    _release_workers()
    worker.join(8)
    assert not worker.is_alive(), "the run went on after the workers were released"
    assert time.monotonic() - t0 < 8
    res = out.get("result")
    assert "error" in out or (isinstance(res, list) and res[0].status != "ok"), out


@pytest.mark.skipif("TVM_NUM_THREADS" in os.environ, reason="the user's TVM_NUM_THREADS overrides the target")
def test_the_runner_runs_kernels_on_the_targets_cores_not_tvms_half():
    from autosearch.backends.tvm.measure import Measurer
    from autosearch.backends.tvm.target import current_threads, host_target

    # TVM alone: half the logical CPUs on x86-64 (1 on a 2-core machine without SMT)
    for cores in (1, 2):
        m = Measurer(host_target(num_cores=cores))
        try:
            assert m.runner.pool.submit(current_threads).result() == cores
        finally:
            m.close()


#: True in a process where `import torch` fails at once (`backends.tvm.worker` blocked it).
_TORCH_BLOCKED = "__import__('sys').modules.get('torch', 0) is None"


def test_the_runners_worker_starts_in_the_background_without_pytorch_and_runs_once_started():
    """A local runner returns before its worker process has started (TVM's LocalRunner waits for
    it), so the start overlaps the caller's own work; the first task runs after the start, in the
    worker, under its own timeout. The worker never imports torch (`backends.tvm.worker`)."""
    import functools

    from autosearch.backends.tvm.measure import _starting_runner

    runner_class = _starting_runner()  # its first call imports TVM's runner: not part of the start timed here
    t0 = time.perf_counter()
    runner = runner_class(timeout_sec=2, initializer=functools.partial(time.sleep, 3))
    try:
        assert time.perf_counter() - t0 < 2.5  # the worker's start takes 3 s and more
        # queued behind the 3 s start, yet not timed out at 2 s: a task's timeout starts at its send
        assert runner.pool.submit(os.getpid).result() != os.getpid()
        assert time.perf_counter() - t0 >= 3
        assert runner.pool.submit(eval, _TORCH_BLOCKED).result() is True
    finally:
        from autosearch.backends.tvm.build import shutdown_pool

        shutdown_pool(runner.pool)


def test_a_builder_builds_without_pytorch_and_removes_the_artifacts_no_run_removed(host):
    import os

    from autosearch.backends.tvm.build import PoolBuilder

    builder = PoolBuilder(max_workers=1, timeout=60)
    (built,) = builder.build([_summing_candidate(16)], host)
    # its worker built the kernel without torch (tvm_ffi imports it if it can: 4.3 s of a 6 s start)
    assert builder.pool.submit(eval, _TORCH_BLOCKED).result() is True
    # built but never run (a batch cut short by Ctrl-C): the artifact still lives in the builder's dir
    assert built.error_msg is None and built.artifact_path.startswith(builder.artifacts + os.sep)
    assert os.path.exists(built.artifact_path)
    builder.close()
    assert not os.path.exists(builder.artifacts)


def test_cli_errors_are_one_line(tmp_path):
    # the first case runs the real CLI in a fresh interpreter; the others in-process (seconds each saved)
    bad = subprocess.run(
        CLI + ["collect", "-w", "batch_matmull/1x128x128x128", "--db", str(tmp_path / "x.db")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert "unknown workload" in bad.stderr and "batch_matmul/1x128x128x128" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"\x00garbage" * 100)
    res = run_cli("db", "stats", "--db", str(junk))
    assert res.returncode == 2 and "not an SQLite database" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert junk.read_bytes() == b"\x00garbage" * 100
    res = run_cli("target", "--target", "{oops")
    assert res.returncode == 2 and "not valid JSON" in res.stderr and len(res.stderr.strip().splitlines()) == 1
