"""Shared fixtures. `collected_db` is a real collection (two small workloads), made once per run."""

from __future__ import annotations

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
    from autosearch.search.collect import collect
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
