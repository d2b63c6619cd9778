"""Bad input found by trying it (issue 46): each gets one clear line, exit 2, and loses nothing.

Every test here failed on the code before its fix; the comment above each names the defect.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from autosearch.errors import StoreError
from conftest import DATA, error_line, run_cli, tiny_db


# -- 3. the disk filling during collect's write ----------------------------------------------------
def _cap_pages(store, extra: int = 1) -> None:  # type: ignore[no-untyped-def]
    """Let the file grow by `extra` pages only: SQLite then fails a write with SQLITE_FULL
    ("database or disk is full"), the very error a full disk gives."""
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages + extra}")


def test_full_disk_on_a_batch_write_is_one_line_and_keeps_the_earlier_rows(tmp_path: Path) -> None:
    import numpy as np

    from autosearch.store import MeasurementRecord, Store

    db = tiny_db(tmp_path)
    with Store(db) as store:
        (wl, *_) = store.workloads()
        before = sum(1 for _ in store.measurements())
        _cap_pages(store)
        recs = [MeasurementRecord(wl.key, "llvm", "dev", f"s{i}", "ok", [1e-3]) for i in range(40)]
        with pytest.raises(StoreError) as exc:
            store.add_measurements(recs, [np.ones((40, 164))] * 40, ("x", "1"))
        assert sum(1 for _ in store.measurements()) == before  # the batch rolled back, nothing else lost
    msg = str(exc.value)
    assert "\n" not in msg and "the disk is full" in msg and "this batch of 40 records was not written" in msg
    assert f"the {before} measurements written before are kept" in msg, msg


@pytest.mark.slow
def test_full_disk_during_collect_is_one_line_and_keeps_the_earlier_batches(tmp_path: Path, host) -> None:
    """SQLite's own SQLITE_FULL ("database or disk is full"), the error a full disk gives, made by
    capping the file's pages (`PRAGMA max_page_count`) just above what the earlier rows need."""
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.collect import collect
    from autosearch.store import Store
    from autosearch.workloads import resolve_workloads

    db = tiny_db(tmp_path)
    with Store(db) as store:
        before = sum(1 for _ in store.measurements())
        _cap_pages(store)
        with pytest.raises(StoreError) as exc:
            collect(
                resolve_workloads("softmax/256x256"),
                store,
                host,
                per_workload=4,
                batch_size=4,
                evaluator=EvaluatorSettings(number=1, repeat=1, min_repeat_ms=1),
                progress=False,
            )
    msg = str(exc.value)
    assert "\n" not in msg and "the disk is full" in msg, msg
    assert f"the {before} measurements written before are kept" in msg, msg
    with Store(db, readonly=True) as store:
        assert sum(1 for _ in store.measurements()) == before


# -- 4. db export with a garbage trace, db stats with garbage latencies ---------------------------
def test_export_of_a_garbage_trace_names_it_and_leaves_no_partial_pair(tmp_path: Path) -> None:
    db = tiny_db(tmp_path)
    with sqlite3.connect(db) as c:
        (mid,) = c.execute("SELECT MAX(id) FROM measurements").fetchone()
        c.execute("UPDATE measurements SET schedule='[[\"garbage' WHERE id=?", (mid,))
    out = tmp_path / "out"
    out.mkdir()
    w, r = out / "w.json", out / "r.json"
    line = error_line(run_cli("db", "export", str(w), str(r), "--db", str(db)))
    assert f"measurement {mid} " in line and "nothing was written" in line, line
    assert list(out.iterdir()) == []  # neither file of the pair, nor a temporary one
    with sqlite3.connect(db) as c:
        c.execute("DELETE FROM measurements WHERE id=?", (mid,))
    proc = run_cli("db", "export", str(w), str(r), "--db", str(db))  # the rerun is not blocked
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["r.json", "w.json"]
    assert len(r.read_text().splitlines()) == sum(1 for _ in sqlite3.connect(db).execute("SELECT id FROM measurements"))


@pytest.mark.parametrize("garbage", ["not json", '{"a": 1}', '["x"]'])
def test_stats_with_garbage_latencies_names_the_record(tmp_path: Path, garbage: str) -> None:
    db = tiny_db(tmp_path)
    with sqlite3.connect(db) as c:
        (mid,) = c.execute("SELECT MIN(id) FROM measurements WHERE status='ok'").fetchone()
        c.execute("UPDATE measurements SET latencies=? WHERE id=?", (garbage, mid))
    line = error_line(run_cli("db", "stats", "--db", str(db)))
    assert f"measurement {mid} holds latencies {garbage[:40]!r}" in line, line


# -- 6. db import: a non-UTF-8 workload file, and a long log read whole -----------------------------
def test_import_names_the_workload_file_that_is_not_utf8(tmp_path: Path) -> None:
    wf, rf = tmp_path / "w.json", tmp_path / "r.json"
    wf.write_bytes(b'["0x1", "caf\xe9"]\n')
    rf.write_text('[0, [[[], []], [1e-3], {"kind": "llvm"}, []]]\n')
    line = error_line(run_cli("db", "import", str(wf), str(rf), "--db", str(tmp_path / "x.db")))
    assert f"{wf}:1: not UTF-8 text (byte 0xe9" in line and "r.json" not in line, line


@pytest.fixture(scope="module")
def one_workload_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real MetaSchedule JSONDatabase pair: one workload of tests/data/tiny_tvm.db, its records."""
    d = tmp_path_factory.mktemp("log")
    db = tiny_db(d)
    with sqlite3.connect(db) as c:
        (wid,) = c.execute("SELECT MIN(id) FROM workloads").fetchone()
        c.execute("DELETE FROM features")
        c.execute("DELETE FROM measurements WHERE workload_id != ?", (wid,))
        c.execute("DELETE FROM workloads WHERE id != ?", (wid,))
    wf, rf = d / "w.json", d / "r.json"
    assert run_cli("db", "export", str(wf), str(rf), "--db", str(db)).returncode == 0
    return wf, rf


_PEAK = """
import resource, sys
from pathlib import Path
from autosearch.store import Store
from autosearch.store.metaschedule_json import import_json_database
w, small, big, d = (Path(a) for a in sys.argv[1:])
with Store(d / "warm.db") as st:  # every lazy import and TVM's first parse, before the baseline
    import_json_database(st, w, small)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with Store(d / "big.db") as st:
    n = import_json_database(st, w, big)
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(n.records, grew // 1024)
"""


def test_import_streams_a_long_log(one_workload_log: tuple[Path, Path], tmp_path: Path) -> None:
    """12 MB of one repeated line: imported once, and the peak memory does not grow with the file
    (the importer read the whole log into TVM's JSONDatabase: +23 MB of RSS per MB of log)."""
    import sys

    wf, rf = one_workload_log
    line = rf.read_text().splitlines()[0] + "\n"
    small, big = tmp_path / "small.json", tmp_path / "big.json"
    small.write_text(line)
    big.write_text(line * (12 * 2**20 // len(line) + 1))
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, str(wf), str(small), str(big), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    records, grew_mb = (int(x) for x in proc.stdout.split())
    assert records == 1  # the warm-up store is another file: the big log's one distinct record
    assert grew_mb < 40, f"peak RSS grew {grew_mb} MB importing a 12 MB log"


# -- 5. eval on a store on read-only media -----------------------------------------------------------
def _eval_prefix(db: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("eval", "--model", "pretrained-prefix", "--db", str(db), "--workloads", "C1D", "--json")


def _fingerprint(path: Path) -> tuple[bytes, int, list[str]]:
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())


def test_eval_never_writes_to_the_store(tmp_path: Path) -> None:
    """The store lacks the model's trace tokens: eval computes them elsewhere (it backfilled them
    into the store, so it failed on read-only media)."""
    import json

    db = tiny_db(tmp_path)
    before = _fingerprint(db)
    proc = _eval_prefix(db)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(json.loads(proc.stdout)["per_group"]) == 4  # the four C1D workloads, scored
    after = _fingerprint(db)
    assert after[:2] == before[:2]  # bytes and mtime: SQLite's `mode=ro` read it
    from autosearch.store import Store

    with Store(db, readonly=True) as st:
        assert st.missing_features(("trace-prefix-tokens", "v2"))  # still lacks them: nothing written


def test_eval_on_read_only_media(tmp_path: Path) -> None:
    """`chattr +i` on the file and its folder: not even root can write or create a -wal/-shm file."""
    d = tmp_path / "ro"
    d.mkdir()
    db = tiny_db(d)
    if subprocess.run(["chattr", "+i", str(db), str(d)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i (an immutable file stands in for read-only media) is not available here")
    try:
        before = _fingerprint(db)
        proc = _eval_prefix(db)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert _fingerprint(db) == before  # bytes, mtime, and no -wal/-shm file beside it
    finally:
        subprocess.run(["chattr", "-i", str(db), str(d)], capture_output=True)


# -- 7. a model whose weights are NaN --------------------------------------------------------------
def _prefix_with_weights(tmp_path: Path, value: float) -> Path:
    """The shipped pretrained-prefix model with every weight set to `value` (checksum updated)."""
    import hashlib
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from autosearch.search.model_spec import pretrained_dir

    d = tmp_path / "model"
    shutil.copytree(pretrained_dir("pretrained-prefix"), d)
    f = d / "model.safetensors"
    state = load_file(str(f))
    save_file({k: torch.full_like(v, value) if v.is_floating_point() else v for k, v in state.items()}, str(f))
    cfg = json.loads((d / "config.json").read_text())
    cfg["weights_sha256"] = hashlib.sha256(f.read_bytes()).hexdigest()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_eval_refuses_a_model_with_nan_weights(tmp_path: Path) -> None:
    d = _prefix_with_weights(tmp_path, float("nan"))
    line = error_line(run_cli("eval", "--model", str(d), "--db", str(tiny_db(tmp_path)), "--workloads", "GMM"))
    assert "tensors hold NaN or infinite weights" in line and "model.safetensors" in line, line


def test_eval_refuses_nan_predictions(tmp_path: Path) -> None:
    """Finite weights so large that every score overflows: the predictions are NaN, not the weights."""
    d = _prefix_with_weights(tmp_path, 3e38)
    line = error_line(run_cli("eval", "--model", str(d), "--db", str(tiny_db(tmp_path)), "--workloads", "GMM"))
    assert "NaN predictions are an error" in line and "batch_matmul/1x128x128x128" in line, line


# -- 8. an LLVM target without num-cores, or with an mcpu LLVM does not know -----------------------
def test_llvm_target_without_num_cores_gets_this_machines_and_is_searchable() -> None:
    """MetaSchedule refused `{"kind":"llvm"}` deep inside the search (an internal error of tune and
    collect): its space is now generated and sampled."""
    from autosearch.backends.tvm.space import TaskSpace
    from autosearch.backends.tvm.target import parse_target, physical_cores
    from autosearch.workloads import get_workload

    for spec in ('{"kind": "llvm"}', "llvm-generic", '{"kind": "cuda", "host": {"kind": "llvm"}}'):
        t = parse_target(spec)
        cpu = t if t.kind.name == "llvm" else t.host
        assert int(cpu.attrs["num-cores"]) == physical_cores(), spec
    space = TaskSpace(get_workload("softmax/256x256").mod(), parse_target('{"kind": "llvm"}'), seed=0)
    assert len(space.sample(1, set())) == 1


def test_mcpu_llvm_does_not_know_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    for target in ('{"kind": "llvm", "mcpu": "not-a-cpu"}', '{"kind": "llvm", "mcpu": 7}'):
        proc = run_cli("collect", "-w", "softmax/256x256", "-n", "1", "--target", target, "--db", str(db))
        line = error_line(proc)
        assert "LLVM does not know the CPU" in line and "(mcpu)" in line, line
    assert not db.exists()
    assert run_cli("target", "--target", '{"kind": "llvm", "mcpu": "x86-64"}', "--json").returncode == 0


# -- 11. apply: a tampered trace, a target that is not JSON, a GPU target with no GPU -------------
def _edit_best(path: Path, **fields: object) -> None:
    import json

    best = json.loads(path.read_text())
    best.update(fields)
    path.write_text(json.dumps(best))


def test_apply_refuses_a_tampered_decision(saved_best: Path) -> None:
    import json

    assert run_cli("apply", str(saved_best), "--no-show").returncode == 0
    trace = json.loads(saved_best.read_text())["trace"]
    (tile,) = [d for d in trace[1] if d[1] == [16, 2, 1, 4]]
    tile[1] = [4, 2, 1, 16]  # another legal tiling: it replays, and is not the measured schedule
    _edit_best(saved_best, trace=trace)
    line = error_line(run_cli("apply", str(saved_best), "--no-show"))
    assert "does not match its schedule_hash" in line and "refusing to apply it" in line, line


@pytest.mark.parametrize(
    ("target", "message"),
    [("{not json", "is not valid JSON"), ("warp-drive", "unknown target"), (7, "must be a string")],
)
def test_apply_measure_with_a_bad_saved_target_is_one_line(saved_best: Path, target: object, message: str) -> None:
    _edit_best(saved_best, target=target)
    line = error_line(run_cli("apply", str(saved_best), "--no-show", "--measure"))
    assert message in line and "best.json" in line, line


def test_apply_measure_on_a_gpu_target_without_a_gpu_says_why(saved_best: Path) -> None:
    tvm = pytest.importorskip("tvm")
    if tvm.cuda(0).exist:
        pytest.skip("this machine has a GPU")
    line = error_line(run_cli("apply", str(saved_best), "--no-show", "--measure", "--target", "cuda-h100"))
    assert "target cuda has no device on this machine" in line, line


# -- 2. Ctrl-C during tune's decision search --------------------------------------------------------
def test_a_ctrl_c_stops_decision_scoring_at_the_next_chunk() -> None:
    """Inside `interrupts.deferred()` (where tune runs a round's search) a Ctrl-C is only counted;
    the decision search's scoring must act on it between chunks, not score every sketch's
    population first (measured: 25-27 s from the signal to the exit)."""
    import signal

    import numpy as np

    from autosearch import interrupts
    from autosearch.features.decision_space import DecisionSpace
    from autosearch.models import load_model
    from autosearch.search.model_spec import pretrained_dir
    from autosearch.store import Store

    with Store(DATA / "tiny_tvm.db", readonly=True) as st:
        wl = st.workload("batch_matmul/1x128x128x128")
        assert wl is not None
        (m, *_) = st.measurements(workload_key=wl.key)
    space = DecisionSpace(m.schedule, wl.ir, wl.flops)
    model = load_model(pretrained_dir("pretrained-prefix"))
    x = space.sample(64, np.random.default_rng(0))
    assert model.predict_space_members(space, x).shape[1] == 64  # scores without a Ctrl-C
    old = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupts.install()
    try:
        with pytest.raises(KeyboardInterrupt), interrupts.deferred():
            signal.raise_signal(signal.SIGINT)  # counted, not raised: TVM's C++ may be running
            assert interrupts.interrupted()
            model.predict_space_members(space, x)
            pytest.fail("a whole batch was scored after a Ctrl-C")
    finally:
        signal.signal(signal.SIGINT, old)
        interrupts.clear()


@pytest.mark.slow
def test_ctrl_c_during_tunes_decision_search_exits_at_once(tmp_path: Path) -> None:
    """SIGINT 10 s into the first round of a workload whose first round of scoring takes longer
    (conv2d 14x14x256: 20-40 s here): exit 130 within 3.5 s, the partial result saved."""
    import json
    import os
    import signal
    import sys
    import threading
    import time

    out, db = tmp_path / "out", tmp_path / "t.db"
    cmd = [sys.executable, "-c", "from autosearch.cli import main; main()", "tune"]
    cmd += ["conv2d_nhwc/1x14x14x256/k3s1p1/256", "--search", "decision", "--trials", "64"]
    cmd += ["--no-baseline", "--db", str(db), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    lines: list[tuple[float, str]] = []
    started = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.monotonic(), line))
            if line.startswith("tuning "):
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(120), "".join(ln for _, ln in lines)
        time.sleep(10)  # past the setup (space, runner: 2-5 s), inside the first round's search
        assert proc.poll() is None, "".join(ln for _, ln in lines)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(5)
    text = "".join(ln for _, ln in lines)
    assert code == 130, text[-2000:]
    assert took < 3.5, f"exited {took:.1f} s after Ctrl-C"
    assert any(ln.startswith("interrupted: the 0 measured schedules") for _, ln in lines), text[-2000:]
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True
