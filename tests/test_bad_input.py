"""Bad input found by trying it (issue 10): each gets one clear line, a nonzero exit, and loses nothing.

Every test here failed on the code before the fix: it names the defect it pins.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from autosearch.errors import InputError, StoreError, TargetError
from conftest import run_cli as _cli

CLI = [sys.executable, "-c", "from autosearch.cli import main; main()"]


def _one_line(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines, "no message on stderr"
    return proc.stderr


# -- 1. usage errors and unexpected exceptions: one line, never a ModuleNotFoundError(click) -----
def test_usage_errors_exit_2_without_traceback() -> None:
    out = _one_line(_cli("tune", "--no-such-option"))
    assert "no such option" in out and "click" not in out
    out = _one_line(_cli("train", "--epochs", "abc"))
    assert "--epochs" in out
    _one_line(_cli("no-such-command"))


def test_directory_as_database_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "db").mkdir()
    out = _one_line(_cli("db", "stats", "--db", str(tmp_path / "db")))
    assert out.strip() == f"error: {tmp_path / 'db'} is a directory, not an SQLite database"


def test_unexpected_exception_is_one_line_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception that is no AutosearchError (a bug): its type and first line, exit 1, no trace."""
    from autosearch.store import Store

    def broken(self: Store) -> None:
        raise RuntimeError("boom\n  at a C++ frame")

    monkeypatch.setattr(Store, "stats", broken)
    with Store(tmp_path / "x.db"):
        pass
    out = _one_line(_cli("db", "stats", "--db", str(tmp_path / "x.db")), code=1)
    assert out.strip() == "internal error: RuntimeError: boom (AUTOSEARCH_TRACEBACK=1 shows the trace)"


# -- 2. reading data never runs code -------------------------------------------------------------
def _saved_best(tmp_path: Path, **fields: object) -> Path:
    best = {
        "format": "autosearch-best-schedule",
        "format_version": 1,
        "workload_name": "custom/evil.make",
        "workload_key": "0" * 16,
        "trace": [[], []],
        "module": None,
        **fields,
    }
    p = tmp_path / "best.json"
    p.write_text(json.dumps(best))
    return p


def test_apply_never_imports_the_module_a_json_names(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('x')\ndef make():\n    raise SystemExit(0)\n")
    best = _saved_best(tmp_path, module=f"{evil}:make")
    out = _one_line(_cli("apply", str(best), "--no-show"))
    assert "--module" in out
    assert not marker.exists(), "apply imported the module named in best.json"


def test_best_schedule_script_holds_values_as_literals(tmp_path: Path) -> None:
    from autosearch.search.apply import write_script
    from autosearch.workloads import get_workload

    wl = get_workload("softmax/256x256")
    name = 'softmax"""; import os; os.system("touch PWNED"); """'
    best = _saved_best(
        tmp_path,
        workload_name=name,
        workload_key=wl.key,
        trace=[[], []],
        model='m"\nimport os',
        target="llvm",
        best_latency_s=1e-5,
        trials_measured=3,
        runtime_threads='2"); os.system("touch PWNED',
    )
    script = write_script(best, wl)
    tree = ast.parse(script.read_text())
    assigned = {
        t.id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name) and t.id in ("WORKLOAD", "MODEL", "TRIALS", "TUNED_LATENCY_S", "TARGET")
    }
    assert assigned["WORKLOAD"] == name and assigned["MODEL"] == 'm"\nimport os' and assigned["TRIALS"] == 3
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert {a.name for n in imports for a in n.names} <= {"os", "numpy", "tvm", "tvm.script", "ArgInfo"}
    # the one call before TVM's import sets the threads from a number, whatever best.json held
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "setdefault"]
    assert len(calls) == 1 and [ast.literal_eval(a) for a in calls[0].args][1].isdigit()
    assert "PWNED" not in script.read_text().split("TIR =")[0].replace(name, "")


def test_module_function_calling_sys_exit_is_an_error(tmp_path: Path) -> None:
    from autosearch.workloads.module import load_module_object

    f = tmp_path / "quits.py"
    f.write_text("import sys\ndef make():\n    sys.exit(0)\n")
    with pytest.raises(InputError, match=r"sys.exit\(0\)"):
        load_module_object(f"{f}:make")


# -- 3. Ctrl-C during building ---------------------------------------------------------------------
# integration: a real collection in a fresh process, stopped by Ctrl-C (~25 s)
@pytest.mark.integration
def test_ctrl_c_during_collect_exits_130_and_keeps_the_database(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    proc = subprocess.Popen(
        [
            *CLI,
            "collect",
            "-w",
            "conv2d_nhwc/1x56x56x64/k3s2p1/128/g4",
            "-n",
            "64",
            "--batch-size",
            "32",
            "--repeats",
            "1",
            "--min-repeat-ms",
            "1",
            "--db",
            str(db),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a test run started in the background of a shell inherits SIGINT ignored; Ctrl-C is the point
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:  # wait until it is building
            if db.exists():
                try:
                    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
                        if c.execute("SELECT COUNT(*) FROM workloads").fetchone()[0]:
                            break
                except sqlite3.Error:
                    pass
            time.sleep(0.5)
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=120)
        # ~1 s alone; a builder pool left open once made the exit wait ~10 s for its threads
        assert time.monotonic() - sent < 5, err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "cannot join" not in err, err[-2000:]
    from autosearch.store import Store

    with Store(db, readonly=True) as st:  # intact and resumable
        assert len(st.workloads()) == 1


def test_a_ctrl_c_that_something_swallowed_is_raised_at_the_next_check() -> None:
    """TVM's C++ side polls Python's signals and may drop the KeyboardInterrupt it gets; the
    handler remembers the Ctrl-C so the next batch boundary stops anyway."""
    import concurrent.futures
    import contextlib
    import threading

    from autosearch import interrupts

    old = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        interrupts.install()
        interrupts.check()  # nothing yet
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except BaseException:
            pass  # what a C++ `catch (...)` around TVM's signal poll does
        assert interrupts.interrupted()
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
        interrupts.clear()
        interrupts.check()
        # a wait on a future that completes late gives way to a Ctrl-C within its poll interval,
        late: concurrent.futures.Future[int] = concurrent.futures.Future()

        # ... including one whose KeyboardInterrupt was raised and dropped elsewhere (a pool thread)
        def swallowed() -> None:
            with contextlib.suppress(KeyboardInterrupt):
                interrupts._handler(signal.SIGINT, None)

        threading.Timer(0.3, swallowed).start()
        threading.Timer(8, late.set_result, args=(0,)).start()  # a blocking wait ends only here
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            interrupts.wait([late], poll=0.1)
        assert time.monotonic() - t0 < 5
        interrupts.clear()
        # inside `deferred()` (TVM's threaded C++ work) a Ctrl-C is counted, raised only after it
        reached_end = False
        with pytest.raises(KeyboardInterrupt), interrupts.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            reached_end = True
        assert reached_end
    finally:
        interrupts.clear()
        signal.signal(signal.SIGINT, old)


# -- 4. the store ------------------------------------------------------------------------------------
def test_read_only_path_with_a_hash_is_not_a_uri_fragment(tmp_path: Path) -> None:
    from autosearch.store import Store

    db = tmp_path / "a#b.db"
    with Store(db) as st:
        st.add_workload(_wl_record())
    with Store(db, readonly=True) as st:
        assert [w.name for w in st.workloads()] == ["w"]
    assert not (tmp_path / "a").exists()


def test_non_integer_schema_version_is_a_store_error(tmp_path: Path) -> None:
    from autosearch.store import Store

    db = tmp_path / "s.db"
    with Store(db):
        pass
    with sqlite3.connect(db) as c:
        c.execute("UPDATE meta SET value='abc' WHERE key='schema_version'")
    with pytest.raises(StoreError, match="schema version 'abc'"):
        Store(db)


def test_valid_database_on_read_only_media_is_not_called_corrupt(tmp_path: Path) -> None:
    from autosearch.store import Store

    d = tmp_path / "ro"
    d.mkdir()
    db = d / "x.db"
    with Store(db) as st:
        st.add_workload(_wl_record())
    for f in d.iterdir():
        if f != db:
            f.unlink()
    if subprocess.run(["chattr", "+i", str(db), str(d)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i (an immutable file stands in for read-only media) is not available here")
    try:
        with pytest.raises(StoreError) as exc:
            Store(db)
        assert "corrupt" not in str(exc.value) and "read-only" in str(exc.value)
        with Store(db, readonly=True) as st:
            assert len(st.workloads()) == 1
    finally:
        subprocess.run(["chattr", "-i", str(db), str(d)], capture_output=True)


def _wl_record():  # type: ignore[no-untyped-def]
    from autosearch.store import WorkloadRecord

    return WorkloadRecord(key="k" * 16, name="w", family="f", backend="tvm", params={}, ir="")


# -- 5. model directories ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from autosearch.models import make_model
    from autosearch.training.dataset import Dataset

    rng = np.random.default_rng(0)
    groups = [
        (f"g{g}", "llvm", [rng.random((3, 4)).astype(np.float32) for _ in range(20)], list(rng.random(20) + 0.1))
        for g in range(2)
    ]
    ds = Dataset.from_groups(groups)
    m = make_model("xgb", n_rounds=5)
    m.fit(ds)
    d = tmp_path_factory.mktemp("m") / "xgb"
    m.save(d)
    return d


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("weights", "../../etc/passwd", "plain file name"),
        ("weights", 5, "plain file name"),
        ("kind", ["mlp"], "'kind' must be a string"),
        ("n_features", "abc", "positive integer"),
        ("extractor", "per-store-feature", r"\[name, version\]"),
        ("weights_sha256", None, "64 hex digits"),
    ],
)
def test_bad_config_fields_are_one_line_errors(
    model_dir: Path, tmp_path: Path, field: str, value: object, message: str
) -> None:
    import shutil

    from autosearch.models import load_model

    d = Path(shutil.copytree(model_dir, tmp_path / "m"))
    cfg = json.loads((d / "config.json").read_text())
    cfg[field] = value
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=message):
        load_model(d)


def test_checksum_is_required_and_checked_on_the_file_the_loader_reads(model_dir: Path, tmp_path: Path) -> None:
    import shutil

    from autosearch.models import load_model

    d = Path(shutil.copytree(model_dir, tmp_path / "m"))
    cfg = json.loads((d / "config.json").read_text())
    (d / "decoy.json").write_bytes((d / cfg["weights"]).read_bytes())
    (d / cfg["weights"]).write_text("{}")  # what the loader reads is now corrupt
    cfg["weights"] = "decoy.json"  # config points the checksum at an intact decoy
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="keeps its weights in model.json"):
        load_model(d)
    del cfg["weights_sha256"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="lacks the field 'weights_sha256'"):
        load_model(d)


def test_train_refuses_a_negative_epoch_count(tmp_path: Path) -> None:
    out = tmp_path / "m"
    proc = _cli(
        "train",
        "--model",
        "mlp",
        "--epochs",
        "-3",
        "--db",
        "tests/data/tiny_tvm.db",
        "--out",
        str(out),
        cwd=Path(__file__).resolve().parents[1],
    )
    assert "--epochs" in _one_line(proc)
    assert not out.exists()


# -- 6. tuning and files ---------------------------------------------------------------------------------
def test_gpu_target_without_a_gpu_is_refused_before_the_budget(tmp_path: Path) -> None:
    from autosearch.backends.tvm.target import parse_target
    from autosearch.search.tune import _check_device

    tvm = pytest.importorskip("tvm")
    if tvm.cuda(0).exist:
        pytest.skip("this machine has a GPU")
    with pytest.raises(TargetError, match="no device on this machine"):
        _check_device(parse_target("cuda-h100"))


def test_out_pointing_at_a_file_fails_before_anything_is_measured(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("")
    out = _one_line(
        _cli(
            "tune",
            "batch_matmul/1x128x128x128",
            "--model",
            "random",
            "--trials",
            "16",
            "--out",
            str(f),
            "--db",
            str(tmp_path / "t.db"),
        )
    )
    assert "is a file" in out
    assert (
        not (tmp_path / "t.db").exists()
        or os.path.getsize(tmp_path / "t.db") == 0
        or _no_measurements(tmp_path / "t.db")
    )


def _no_measurements(db: Path) -> bool:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 0


def test_json_output_never_holds_nan() -> None:
    from autosearch.cli.common import finite_json

    text = json.dumps(
        finite_json({"a": float("nan"), "b": [float("inf"), 1.0], "c": np.float64("nan")}), allow_nan=False
    )
    assert json.loads(text) == {"a": None, "b": [None, 1.0], "c": None}


def test_xz_cache_is_private_and_never_follows_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lzma

    from autosearch.training.dataset import resolve_db

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = tmp_path / "d.db"
    src.write_bytes(b"payload")
    xz = tmp_path / "d.db.xz"
    xz.write_bytes(lzma.compress(b"payload"))
    out = Path(resolve_db(xz))
    assert out.read_bytes() == b"payload" and str(out).startswith(str(tmp_path / "cache"))
    assert (out.parent.stat().st_mode & 0o777) == 0o700
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out.unlink()
    out.symlink_to(victim)  # someone plants a link where the cache will be written
    with pytest.raises(InputError, match="never follows links"):
        resolve_db(xz)
    assert victim.read_text() == "keep"


def test_huge_number_in_an_imported_log_is_one_line(tmp_path: Path) -> None:
    from autosearch.store import Store
    from autosearch.store.metaschedule_json import import_json_database

    wf, rf = tmp_path / "w.json", tmp_path / "r.json"
    wf.write_text('["0x1", {}]\n')
    rf.write_text("[0, [[[], []], [" + "9" * 10_000 + "]]]\n")
    with Store(tmp_path / "x.db") as st, pytest.raises(InputError, match=r"r.json:1: .*digit"):
        import_json_database(st, wf, rf)
