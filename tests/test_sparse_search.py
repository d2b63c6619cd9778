"""Sparse search, collection into the store, and the CLI's one-line errors (tiny matrices)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
from typer.testing import CliRunner

from autosearch.sparse.collect import collect
from autosearch.sparse.matrices import MatrixSpec, generate, load_matrix
from autosearch.sparse.models import build_model
from autosearch.sparse.records import load_groups
from autosearch.sparse.search import tune
from autosearch.sparse.space import default_config
from autosearch.store.db import Store

os.environ.setdefault("AUTOSEARCH_SPARSE_CACHE", "")


def test_random_search_respects_the_budget_and_keeps_the_best() -> None:
    a = generate(MatrixSpec("banded", 300, 300, 4.0, seed=1))
    first = [default_config("spmm", 16)]
    res = tune(a, "spmm", 16, model=None, trials=4, n_candidates=30, batch=2, seed=0, first=first)
    assert 1 <= len(res.measured) <= 4 and res.measured[0][0] == first[0]
    lats = [t for _, t in res.measured]
    assert res.best_latency == min(lats) and res.best == res.measured[int(np.argmin(lats))][0]
    bests = [h["best"] for h in res.history]
    assert bests == sorted(bests, reverse=True)  # best so far never gets worse
    assert res.breakdown["measure"] > 0 and res.breakdown["predict"] == 0


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
