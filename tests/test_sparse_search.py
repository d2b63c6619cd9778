"""Sparse search, collection into the store, and the CLI's one-line errors (tiny matrices)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from autosearch.sparse.baselines import prepare_ours
from autosearch.sparse.collect import collect
from autosearch.sparse.matrices import MatrixSpec, generate, load_matrix
from autosearch.sparse.measure import MatrixBench
from autosearch.sparse.models import build_model
from autosearch.sparse.records import load_groups
from autosearch.sparse.search import tune
from autosearch.sparse.space import SuperSchedule, default_config
from autosearch.store.db import Store

os.environ.setdefault("AUTOSEARCH_SPARSE_CACHE", "")


def test_random_search_keeps_the_fastest_valid_config_that_reproduces_the_output() -> None:
    a = generate(MatrixSpec("banded", 300, 300, 4.0, seed=1))
    first = [default_config("spmm", 16)]
    mb = MatrixBench("spmm", a, 16)
    res = tune(a, "spmm", 16, model=None, trials=4, n_candidates=30, batch=2, seed=0, first=first, bench=mb)
    assert 1 <= len(res.measured) <= 4 and res.measured[0][0] == first[0]
    assert len({c.to_json() for c, _ in res.measured}) == len(res.measured)  # no configuration measured twice
    lats = [t for _, t in res.measured]
    assert res.best_latency == min(lats) and res.best == res.measured[int(np.argmin(lats))][0]
    assert res.best_latency <= res.measured[0][1]  # at least as fast as the seeded candidate, same harness
    bests = [h["best"] for h in res.history]
    assert bests == sorted(bests, reverse=True)  # best so far never gets worse
    assert res.breakdown["measure"] > 0 and res.breakdown["predict"] == 0
    # the configuration found is valid, survives its JSON, and its kernel reproduces A @ B
    assert res.best is not None
    again = SuperSchedule.from_json(res.best.to_json())
    c = prepare_ours(mb, again)
    assert c is not None
    c.call()
    np.testing.assert_allclose(c.result(), a @ mb.B, rtol=1e-4, atol=1e-4)


def test_model_search_measures_the_models_top_pick_first() -> None:
    """Without seeds, the first configuration measured is the one the (shipped) model ranks best:
    the search follows the model, not the candidate order."""
    from autosearch.sparse.features import matrix_info, pattern_image
    from autosearch.sparse.models import SELECTED, SHIPPED_DIR, load_model, shipped_model
    from autosearch.sparse.search import candidates_for
    from autosearch.sparse.train import predict_configs

    path = shipped_model("spmv")
    chosen = json.loads((SHIPPED_DIR / SELECTED).read_text())["selected"]["spmv"]
    assert path is not None and path.name == chosen["dir"] and 0 < chosen["valid_top1"] <= 1  # chosen by validation
    model, _ = load_model(path)
    a = generate(MatrixSpec("powerlaw", 400, 400, 5.0, seed=3))
    cands, _ = candidates_for(a, "spmv", 0, 60, np.random.default_rng(5))
    scores = predict_configs(model, pattern_image(a), matrix_info(a), cands)
    res = tune(a, "spmv", 0, model=model, trials=2, n_candidates=60, batch=2, eps=0.0, online=False, seed=5)
    top2 = [cands[i] for i in np.argsort(-scores)[:2]]
    assert [c for c, _ in res.measured] == top2
    assert top2 != cands[:2]  # the model's picks are not simply the first candidates


def test_model_search_predicts_and_updates_online() -> None:
    a = generate(MatrixSpec("uniform", 200, 250, 3.0, seed=2))
    res = tune(a, "spmv", 0, model=build_model("AutoSparseNet", channels=8), trials=4, n_candidates=40, batch=2)
    assert len(res.measured) == 4 and math.isfinite(res.best_latency)
    assert res.breakdown["predict"] > 0 and res.breakdown["update"] > 0


def test_collect_writes_workloads_and_resumes(tmp_path) -> None:
    db = tmp_path / "s.db"
    with Store(db) as store:
        rep = collect(store, 1, 3, ops=("spmv",), max_rows=1000, max_nnz=3000)
        assert rep.measured - rep.failed == 3 and rep.workloads == 1
        again = collect(store, 1, 3, ops=("spmv",), max_rows=1000, max_nnz=3000)
        assert again.measured == 0  # resumed: nothing measured twice
        (g,) = load_groups(store)
        wl = store.workload(g.key)
    assert len(g.configs) == 3 and g.configs[0] == default_config("spmv") and all(t > 0 for t in g.latencies)
    assert wl is not None and wl.backend == "sparse" and wl.params["op"] == "spmv"
    spec = MatrixSpec.from_dict(json.loads(wl.ir))  # the IR text rebuilds the measured matrix
    assert load_matrix(spec, wl.params["matrix_hash"]).nnz == wl.params["nnz"]


def test_cli_errors_are_one_line(tmp_path) -> None:
    from autosearch.cli.sparse import app

    r = CliRunner().invoke(app, ["tune", str(tmp_path / "missing.mtx")])
    assert r.exit_code == 2 and "no Matrix Market file" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["collect", "--db", str(tmp_path / "x.db"), "--ops", "spmx"])
    assert r.exit_code == 2 and "unknown operator" in r.output
    r = CliRunner().invoke(app, ["eval", str(tmp_path)])
    assert r.exit_code == 2 and "not a sparse model directory" in r.output


def test_cli_reads_a_compressed_store(tmp_path) -> None:
    """The committed sparse datasets are `.db.xz`: eval (and train) unpack them instead of
    calling the archive a corrupt database."""
    import lzma

    from autosearch.cli.sparse import app
    from autosearch.sparse.models import save_model

    db = tmp_path / "s.db"
    with Store(db) as store:
        collect(store, 2, 4, ops=("spmv",), max_rows=1000, max_nnz=3000)
    xz = tmp_path / "s.db.xz"
    xz.write_bytes(lzma.compress(db.read_bytes()))
    model = save_model(build_model("WACONet", channels=8), tmp_path / "m")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    try:
        r = CliRunner().invoke(app, ["eval", str(model), "--db", str(xz), "--ops", "spmv", "--all"])
    finally:
        del os.environ["XDG_CACHE_HOME"]
    assert r.exit_code == 0, r.output
    assert "spmv" in r.output and "Traceback" not in r.output
    os.environ["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    try:
        r = CliRunner().invoke(app, ["eval", str(model), "--db", str(xz), "--ops", "spmv", "--all", "--json"])
        bad = CliRunner().invoke(app, ["eval", str(model), "--db", str(xz), "--holdout-family", "community,nope"])
        tr = CliRunner().invoke(app, ["train", str(tmp_path / "t"), "--db", str(xz), "--op", "spmv", "--model", "WACONet",
                                      "--epochs", "1", "--holdout-family", "", "--json"])  # fmt: skip
    finally:
        del os.environ["XDG_CACHE_HOME"]
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)["ops"]["spmv"]
    assert rep["groups"] == 2 and 0.0 <= rep["top1"] <= 1.0
    assert bad.exit_code == 2 and "unknown family ['nope']" in bad.output
    assert tr.exit_code == 0, tr.output
    doc = json.loads(tr.stdout)
    assert doc["train_groups"] == 2 and len(doc["losses"]) == 1 and (tmp_path / "t" / "config.json").is_file()


def _mtx(path, header: str, size: str, lines: list[str]):
    path.write_text(f"%%MatrixMarket matrix coordinate {header} general\n{size}\n" + "\n".join(lines) + "\n")
    return str(path)


def test_cli_refuses_complex_values_and_problems_too_large_in_one_line(tmp_path) -> None:
    from autosearch.cli.sparse import app

    cases = {
        "complex values": _mtx(tmp_path / "c.mtx", "complex", "3 3 2", ["1 1 1.0 2.0", "2 2 3.0 -1.0"]),
        "GiB for its operands": _mtx(tmp_path / "w.mtx", "real", "100000000 100000000 3", ["1 1 1", "2 2 3", "99999999 5 1"]),
        "beyond 32-bit indices": _mtx(tmp_path / "t.mtx", "real", "3000000000 3 3", ["1 1 1", "2 2 3", "5 3 1"]),
    }  # fmt: skip
    for why, path in cases.items():
        r = CliRunner().invoke(app, ["tune", path, "--op", "spmm", "-N", "64", "--out", str(tmp_path / "o.json")])
        assert r.exit_code == 2 and why in r.output, (why, r.output)
        assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
        assert not (tmp_path / "o.json").exists()


def test_cli_tune_json_uses_the_shipped_model_and_reports_the_ratio(tmp_path) -> None:
    import scipy.io

    from autosearch.cli.sparse import app
    from autosearch.sparse.baselines import HEADLINE

    path = tmp_path / "m.mtx"
    scipy.io.mmwrite(str(path), generate(MatrixSpec("uniform", 500, 400, 6.0, seed=2)))
    r = CliRunner().invoke(app, ["tune", str(path), "--op", "spmv", "--trials", "2", "--json",
                                 "--out", str(tmp_path / "best.json")])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    from autosearch.sparse.models import shipped_model

    assert doc["model"] == str(shipped_model("spmv")) and doc["measured"] == 2  # the shipped model by default
    times = doc["times_s"]
    assert {"ours", "torch", "scipy"} <= set(times) and all(t > 0 for t in times.values())
    best = min((b for b in HEADLINE if b in times), key=lambda b: times[b])
    assert doc["best_baseline"] == best
    assert doc["speedup_over_best_baseline"] == pytest.approx(times[best] / times["ours"])
    assert SuperSchedule.from_json(doc["config"]).op == "spmv"
    assert json.loads((tmp_path / "best.json").read_text())["config"] == doc["config"]


def test_cli_check_json(tmp_path) -> None:
    from autosearch.cli.sparse import app

    r = CliRunner().invoke(app, ["check", "--ops", "spmv", "--n", "3", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)["ops"]["spmv"]
    assert rep["match"] + rep["not_applicable"] == 3 and rep["wrong"] == []
