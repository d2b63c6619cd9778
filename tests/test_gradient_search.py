"""GradientSearch on a real MetaSchedule design space: propose / observe, dedup, fallback reason."""

from __future__ import annotations

import math

import pytest

from autosearch.search.gradient import GradientSearch, relax_reason
from autosearch.search.gradient.model import GradientCostModel
from autosearch.search.gradient.sketch import to_json


@pytest.fixture(scope="module")
def matmul(host):
    from tvm.s_tir import meta_schedule as ms

    from autosearch.workloads import get_workload

    ctx = ms.TuneContext(
        mod=get_workload("batch_matmul/1x128x128x128").mod(),
        target=host,
        space_generator="post-order-apply",
        search_strategy="replay-trace",
        task_name="mm",
        num_threads=1,
        rand_state=0,
    )
    return ctx, list(ctx.generate_design_space())


def test_propose_gives_new_valid_postprocessed_candidates(matmul) -> None:
    ctx, spaces = matmul
    assert relax_reason(spaces) is None
    gs = GradientSearch(
        ctx, spaces, model=GradientCostModel(hidden=16, seed=0), seed=0, starts=4, steps=6, checkpoints=(3,)
    )
    first = gs.propose(6)
    assert len(first) == 6 and gs.last_search_seconds > 0
    keys = []
    for c in first:
        trace = to_json(c.sch.trace)
        assert any(inst[0] == "EnterPostproc" for inst in trace[0])  # MetaSchedule's post-processors ran
        hit = gs.sset.match(trace)
        assert hit is not None
        keys.append(hit)
    assert len(set(keys)) == 6
    # synthetic latencies (a stand-in law, not a measurement): big innermost tiles are slow; one failed
    lats: list[float | None] = [float(math.prod(f[-1] for f in k[1][0])) * 1e-6 for k in keys]
    lats[0] = None
    gs.observe(first, lats)
    assert gs.model.n_trained > 0 and sum(len(v) for v in gs.measured.values()) == 6
    second = gs.propose(6)
    again = {gs.sset.match(to_json(c.sch.trace)) for c in second}
    assert len(second) == 6 and not (again & set(keys))


def test_options_are_checked(matmul) -> None:
    ctx, spaces = matmul
    from autosearch.errors import InputError

    with pytest.raises(InputError, match="unknown option"):
        GradientSearch(ctx, spaces, model=GradientCostModel(), bogus=1)
    with pytest.raises(InputError, match="eps_greedy"):
        GradientSearch(ctx, spaces, model=GradientCostModel(), eps_greedy=2.0)


@pytest.mark.slow
def test_one_measured_round_improves_nothing_is_lost(matmul, host) -> None:
    import numpy as np

    from autosearch.backends.tvm.measure import EvaluatorSettings, Measurer

    ctx, spaces = matmul
    gs = GradientSearch(ctx, spaces, model=GradientCostModel(hidden=16), seed=1, starts=4, steps=6)
    m = Measurer(host, EvaluatorSettings(number=1, repeat=2, min_repeat_ms=1))
    cands = gs.propose(4)
    res = m.measure(cands)
    lats = [float(np.median(r.latencies)) if r.status == "ok" else None for r in res]
    assert any(x is not None for x in lats)
    gs.observe(cands, lats)
    best = gs.best()
    assert best is not None and best[0] == min(x for x in lats if x is not None)
