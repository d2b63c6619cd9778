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
    with pytest.raises(InputError, match="stall patience"):
        GradientSearch(ctx, spaces, model=GradientCostModel(), stall_patience=-1)
    with pytest.raises(InputError, match="eps_max"):
        GradientSearch(ctx, spaces, model=GradientCostModel(), eps_greedy=0.3, eps_max=0.2)
    assert GradientSearch(ctx, spaces, model=GradientCostModel(), eps_greedy=0.8).stall.cap == 0.8


def _round(gs: GradientSearch, n: int, latency: float) -> None:
    """Propose n candidates and report them all measured at `latency` (synthetic, not a measurement)."""
    cands = gs.propose(n)
    assert len(cands) == n
    gs.observe(cands, [latency] * n)


def test_search_widens_after_stalled_rounds_and_narrows_on_improvement(matmul) -> None:
    ctx, spaces = matmul
    opts = dict(starts=4, steps=4, checkpoints=(2,), eps_greedy=0.05)
    gs = GradientSearch(ctx, spaces, model=GradientCostModel(hidden=16, seed=0), seed=0, **opts)
    _round(gs, 4, 1e-3)  # the first result is an improvement (over nothing)
    assert gs.stall.stalled == 0 and gs.exploration() == (0.05, 0.5)
    _round(gs, 4, 0.995e-3)  # better by less than 1%: a stalled round
    assert gs.stall.stalled == 1 and gs.exploration() == (0.05, 0.5)  # within patience (2)
    _round(gs, 4, 2e-3)
    assert gs.stall.stalled == 2 and gs.exploration() == (0.125, 0.25)
    _round(gs, 4, 2e-3)
    assert gs.exploration() == (0.25, 0.25)
    for _ in range(3):
        _round(gs, 4, 2e-3)
    assert gs.exploration() == (0.5, 0.25)  # capped at eps_max
    assert gs.eps_history == [0.05, 0.05, 0.05, 0.125, 0.25, 0.5, 0.5]  # what each propose used
    _round(gs, 4, 0.5e-3)  # the best improves again: back to eps_greedy
    assert gs.stall.stalled == 0 and gs.exploration() == (0.05, 0.5)

    fixed = GradientSearch(ctx, spaces, model=GradientCostModel(hidden=16, seed=0), seed=0, stall_patience=0, **opts)
    for _ in range(4):
        _round(fixed, 4, 1e-3)
    assert fixed.stall.stalled == 3 and fixed.exploration() == (0.05, 0.5)  # patience 0: never widens


def test_widened_rounds_draw_more_random_schedules(matmul) -> None:
    """A widened round takes half its schedules from uniform draws; a normal one takes them from the descents."""
    ctx, spaces = matmul

    def outside_the_pool(stalled: int) -> int:
        gs = GradientSearch(
            ctx, spaces, model=GradientCostModel(hidden=16, seed=0), seed=0, starts=8, steps=4, checkpoints=(2,)
        )
        _round(gs, 4, 1e-3)
        gs.stall.stalled = stalled
        pooled: set = set()
        pool = gs._gradient_pool

        def recorded() -> list:
            ranked = pool()
            pooled.update(k for _, k in ranked)
            return ranked

        gs._gradient_pool = recorded  # type: ignore[method-assign]
        cands = gs.propose(8)
        assert len(cands) == 8 and len(pooled) >= 8
        return sum(gs._pending[id(c)] not in pooled for c in cands)

    assert outside_the_pool(0) == 0  # eps 0.05 of 8 rounds to no random draw
    assert outside_the_pool(10) >= 3  # eps 1/2: four draws (one may coincide with a descent's point)


@pytest.mark.slow
def test_descent_raises_the_model_score_after_a_measured_round(matmul, host) -> None:
    """One real measured round trains the knob model (nothing measured is lost: the best is the
    fastest of the round), and the next descents end where that model scores higher than where
    they started (on average and at best) — the gradient search follows its model."""
    import numpy as np

    from autosearch.backends.tvm.measure import EvaluatorSettings, Measurer

    ctx, spaces = matmul
    gs = GradientSearch(ctx, spaces, model=GradientCostModel(hidden=16), seed=1, starts=8, steps=12)
    m = Measurer(host, EvaluatorSettings(number=1, repeat=2, min_repeat_ms=1))
    cands = gs.propose(4)
    res = m.measure(cands)
    lats = [float(np.median(r.latencies)) if r.status == "ok" else None for r in res]
    assert any(x is not None for x in lats)
    gs.observe(cands, lats)
    assert gs.model.n_trained > 0
    best = gs.best()
    assert best is not None and best[0] == min(x for x in lats if x is not None)
    for s, fn in enumerate(gs.sset.fns):
        state = gs.rng.getstate()
        starts = gs._init_points(s)
        gs.rng.setstate(state)  # the descent draws the same starting points
        found = [d for _, d in gs._descend(s)]
        before, after = gs.model.predict(fn.of_decisions(starts)), gs.model.predict(fn.of_decisions(found))
        assert after.mean() > before.mean() and after.max() >= before.max(), s
