"""A network's task scorers pool what they learn (search/pooled.py), on real prefix tokens of real
measurements (tests/data/tiny_tvm.db) and the shipped prefix prior."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from autosearch.backends.tvm.target import host_target
from autosearch.cli.models import load_model_data
from autosearch.search.adapter import ModelAdapter
from autosearch.search.assemble import assemble_network
from autosearch.search.pooled import PooledPrior, TaskScorers
from conftest import tiny_db


def _weights(adapter: ModelAdapter) -> list[torch.Tensor]:
    return [p.detach().clone() for net in adapter.model.nets for p in net.parameters()]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_task_scorers_learn_into_one_pooled_prior_that_later_tasks_start_from(
    tmp_path: Path,
) -> None:
    _, scorers = assemble_network("pretrained-prefix", target=host_target())
    assert isinstance(scorers, PooledPrior)
    ds = load_model_data(str(tiny_db(tmp_path)), ("trace-prefix-tokens", "v2"))
    assert ds.n_groups >= 2

    first = scorers()
    assert isinstance(first, ModelAdapter)
    shipped = _weights(first)
    assert not scorers.learned  # nothing learned on this network yet
    for g in ds.groups:  # the first task's scorer observes every group's results
        feats = [ds.rows[ds.offsets[i] : ds.offsets[i + 1]] for i in range(g.start, g.stop)]
        lats = [float(x) if np.isfinite(x) else None for x in ds.latencies[g.start : g.stop]]
        first.observe(g.workload_key, feats, lats)

    assert scorers.learned > 0
    pooled = _weights(scorers.pool)
    assert not _same(pooled, shipped)  # the pool was fine-tuned on what the task observed
    second = scorers()
    assert isinstance(second, ModelAdapter)
    assert second.model is not scorers.pool.model  # a copy: the task fine-tunes its own
    assert _same(_weights(second), pooled)
    # the second task learning its own group moves its copy, not the pool beyond what it observed
    g = ds.groups[0]
    feats = [ds.rows[ds.offsets[i] : ds.offsets[i + 1]] for i in range(g.start, g.stop)]
    lats = [float(x) if np.isfinite(x) else None for x in ds.latencies[g.start : g.stop]]
    before = scorers.learned
    second.observe(g.workload_key, feats, lats)
    assert scorers.learned >= before and not _same(_weights(second), pooled)


def test_a_model_fitted_on_the_run_alone_is_not_pooled() -> None:
    _, scorers = assemble_network("xgb", search="evolutionary", target=host_target())
    assert type(scorers) is TaskScorers
    assert scorers() is not scorers()  # a fresh scorer per task
