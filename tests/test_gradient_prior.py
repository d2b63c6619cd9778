"""Gradient search on the shipped prior: the prefix tokens as a differentiable function of a sketch's
relaxed knobs (equal to the tokenizer's at integral points), and Adam on the prior's score."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from autosearch.backends.tvm.space import trace_json
from autosearch.features import trace_tokens as tt
from autosearch.features.decision_space import DecisionSpace
from autosearch.features.trace_tokens.columns import _C_POSTPAR
from autosearch.search.gradient.prior_descent import DescentOptions, _every_vector, descend, descend_many
from autosearch.search.gradient.prior_tokens import RelaxedTokens, prior_scores, prior_scores_many

#: conv2d, dense, depthwise, softmax: the sketches of each family's design space
WORKLOADS = (
    "conv2d_nhwc/1x56x56x64/k1s1p0/64",
    "bert/dense/128x768/768",
    "depthwise_conv2d_nhwc/1x112x112x32/k3s1p1",
    "softmax/256x256",
)


@pytest.fixture(scope="module")
def prior() -> Any:
    from autosearch.models import load_model
    from autosearch.search.model_spec import pretrained_dir

    return load_model(pretrained_dir("pretrained-prefix"))


@pytest.fixture(scope="module")
def sketches(host) -> dict[str, tuple[Any, str, list[DecisionSpace]]]:
    """name -> (TuneContext, IR text, the decision spaces of its design spaces)."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.workloads import get_workload

    out = {}
    for name in WORKLOADS:
        ctx = ms.TuneContext(
            mod=get_workload(name).mod(),
            target=host,
            space_generator="post-order-apply",
            search_strategy="replay-trace",
            task_name=name,
            num_threads=1,
            rand_state=0,
        )
        ir = ctx.mod.script()
        spaces = [DecisionSpace(trace_json(s), ir) for s in ctx.generate_design_space()]
        out[name] = (ctx, ir, [s for s in spaces if s.n_knobs])
    return out


def test_relaxed_tokens_are_the_tokenizers_at_integral_points(sketches, prior) -> None:
    """Bit for bit: workload rows, tile factor columns, loop extents, the summary's sums, the
    categorical values and the emulated post-processing columns; and the prior scores them as
    it scores the decision vectors from its tables."""
    tok = tt.TraceTokenizer(postproc=False)
    rng = np.random.default_rng(0)
    post = slice(_C_POSTPAR, _C_POSTPAR + 3)
    for name, (_ctx, ir, spaces) in sketches.items():
        assert spaces, name
        moved_post = False
        for space in spaces:
            relaxed = RelaxedTokens(space, ir)
            x = np.concatenate([space.current[None], space.sample(24, rng)])
            got = relaxed.tokens(*relaxed.integral(x)).numpy()
            want = np.stack([tok(space.trace(v), ir) for v in x])
            assert got.shape == want.shape == (len(x), space.n_tokens, tt.PREFIX_FEATURE_WIDTH), name
            np.testing.assert_array_equal(got, want, err_msg=name)
            moved_post |= bool((want[:, :, post] != want[:1, :, post]).any())
            with torch.no_grad():
                scores = prior_scores(prior.nets, torch.from_numpy(got)).double().numpy()
            np.testing.assert_allclose(scores, prior.predict_space(space, x), rtol=1e-4, atol=1e-4, err_msg=name)
        if name != "softmax/256x256":  # the tiled nests' parallel / vector extents vary with the decisions
            assert moved_post, name


def test_the_prior_score_has_a_finite_nonzero_gradient_in_the_knobs(sketches, prior) -> None:
    """At a relaxed (non-integral) point the score moves with each workload's tile logits, and with
    the categorical choices (the unroll step)."""
    gen = torch.Generator().manual_seed(0)
    cat_moved = 0
    for name, (_ctx, ir, spaces) in sketches.items():
        tile_moved = 0
        for space in spaces:
            relaxed = RelaxedTokens(space, ir)
            zs = {
                j: torch.randn(8, len(space.knobs[j].options[0]), generator=gen, dtype=torch.float64)
                for j in relaxed.tile_knobs
            }
            ws = {
                j: torch.randn(8, len(space.knobs[j].options), generator=gen, dtype=torch.float64)
                for j in relaxed.cat_knobs
            }
            leaves = [t.requires_grad_(True) for t in (*zs.values(), *ws.values())]
            u: list[Any] = [None] * space.n_knobs
            p: list[Any] = [None] * space.n_knobs
            for j, z in zs.items():
                u[j] = torch.softmax(z, 1) * relaxed.log2_extent[j]
            for j, w in ws.items():
                p[j] = torch.softmax(w, 1)
            score = prior_scores(prior.nets, relaxed.tokens(u, p)).sum()
            grads = torch.autograd.grad(score, leaves)
            assert all(torch.isfinite(g).all() for g in grads), name
            tile_moved += sum(int(g.abs().sum() > 0) for g, j in zip(grads, zs) if relaxed.log2_extent[j] > 0)
            cat_moved += sum(int(g.abs().sum() > 0) for g in grads[len(zs) :])
        assert tile_moved > 0, name
    assert cat_moved > 0


def test_descent_raises_the_prior_score_and_rounds_to_schedules_that_build(sketches, prior, host, tmp_path) -> None:
    """Adam from uniform starts: the rounded vectors score better under the prior than the starts
    (on average and at best), are valid factorisations, and replay, post-process and build."""
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.schedule import Trace

    from autosearch.backends.tvm.build import build_in_process
    from autosearch.backends.tvm.space import replay_postprocessed

    ctx, ir, spaces = sketches["depthwise_conv2d_nhwc/1x112x112x32/k3s1p1"]
    space = spaces[0]
    relaxed = RelaxedTokens(space, ir)
    starts = space.sample(12, np.random.default_rng(1))
    opts = DescentOptions(steps=30, checkpoints=(15,))
    found = descend(relaxed, prior.nets, starts, opts, torch.Generator().manual_seed(0))
    assert len(found) >= 4
    space.validate(found)  # every knob at one of its options: valid factorisations
    for j in relaxed.tile_knobs:  # the innermost factor within the design space's limit
        assert (np.exp2(relaxed.log2_options[j][found[:, j], -1]) <= 2 ** relaxed.log2_limit[j] + 1e-9).all()
    before, after = prior.predict_space(space, starts), prior.predict_space(space, found)
    assert after.mean() > before.mean() + 0.5 and after.max() > before.max()
    top = found[np.argsort(-after)[:3]]
    postprocs = list(ctx.space_generator.postprocs)
    cands = []
    for v in top:
        trace = space.trace(v)
        sch = replay_postprocessed(ctx.mod, postprocs, lambda s, t=trace: Trace.apply_json_to_schedule(t, s))
        assert sch is not None
        cands.append(MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
    built = build_in_process(cands, host, str(tmp_path))  # not run: the artifacts go with tmp_path
    assert all(b.error_msg is None and b.artifact_path for b in built), [b.error_msg for b in built]


def test_one_batched_pass_scores_and_descends_sketches_of_different_lengths(sketches, prior) -> None:
    """`prior_scores_many` on sketches with different token counts gives each sketch's own
    `prior_scores`; `descend_many` returns valid vectors for each sketch, in the given order."""
    chosen = [(ir, space) for _ctx, ir, spaces in sketches.values() for space in spaces[:1]]
    relaxed = [RelaxedTokens(space, ir) for ir, space in chosen]
    assert len({r.n_tokens for r in relaxed}) > 1
    rng = np.random.default_rng(2)
    xs = [r.space.sample(5, rng) for r in relaxed]
    tokens = [r.tokens(*r.integral(x)) for r, x in zip(relaxed, xs)]
    with torch.no_grad():
        together = prior_scores_many(prior.nets, tokens)
        alone = [prior_scores(prior.nets, t) for t in tokens]
    for a, b in zip(together, alone):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)
    found = descend_many(relaxed, prior.nets, xs, DescentOptions(steps=6, checkpoints=(3,)), torch.Generator())
    assert len(found) == len(relaxed)
    for r, f in zip(relaxed, found):
        assert len(f) >= 1
        r.space.validate(f)


def test_every_vector_of_a_small_space() -> None:
    """A sketch with at most `DescentOptions.whole` vectors is scored whole: each vector once."""
    x = _every_vector(np.array([3, 1, 4]))
    assert x.shape == (12, 3) and len(np.unique(x, axis=0)) == 12
    assert (x.min(0) == 0).all() and (x.max(0) == [2, 0, 3]).all()


def test_gradient_search_on_the_prior_proposes_descended_schedules_and_learns_its_parents(host) -> None:
    """`--search gradient` with the prefix prior runs the descent on it (not the knob model's search):
    new, distinct, post-processed schedules, most of them from descents; measured ones (stand-in
    latencies here) become the next round's starting points and the centres of its screen's one- and
    two-knob moves, and are never proposed again."""
    from autosearch.backends.tvm.measure import MeasureResult
    from autosearch.search.assemble import assemble
    from autosearch.search.strategies import PriorGradientStrategy
    from autosearch.search.tune import TuneSettings
    from autosearch.workloads import get_workload

    strategy, scorer = assemble("pretrained-prefix", "gradient", target=host, warn=False)
    settings = TuneSettings(trials=32, seed=0)
    source = strategy.make(get_workload("bert/dense/128x768/768"), host, scorer, settings)
    assert isinstance(source, PriorGradientStrategy) and source.kind == "gradient"
    search = source.search
    search.options = DescentOptions(starts=8, steps=12, checkpoints=(6,), screen=64, descend_sketches=2)
    first = source.propose(8)
    assert len(first) == 8 and len({c.sch.mod.script() for c in first}) == 8
    assert all('["EnterPostproc"' in trace_json(c.sch) for c in first)
    assert search.descended[-1] > 0 and search.picked[-1] >= 4  # the descents' vectors lead the round
    source.notify(first, [MeasureResult("ok", [1e-3 * (i + 1)] * 3) for i in range(8)])
    assert len(search.best) == 8 and search.best[0][0] == pytest.approx(1e-3)
    _lat, s, fastest = search.best[0]
    others = search.sketches[s].sample(32, np.random.default_rng(0))
    starts = search._starts(s, others, np.zeros(len(others)))
    assert (starts == fastest).all(axis=1).any()  # the fastest measured vector is a starting point
    moved = (search._initial_screen(s, search.sketches[s]) != fastest).sum(axis=1)  # the screen around it
    assert (moved == 0).any() and (moved == 1).sum() >= 8 and (moved == 2).sum() >= 4  # one- and two-knob moves
    second = source.propose(8)
    assert len(second) == 8 and not {c.sch.mod.script() for c in first} & {c.sch.mod.script() for c in second}


@pytest.mark.slow
def test_tuning_with_gradient_search_on_the_prior_fine_tunes_it(host) -> None:
    """A real 16-trial run: the gradient search on the prefix prior measures, and the prior is
    fine-tuned on the measurements through the tuning loop's update path (as for the decision search)."""
    from autosearch.search.assemble import assemble
    from autosearch.search.strategies import PriorGradientStrategy
    from autosearch.search.tune import TuneRun, TuneSettings
    from autosearch.workloads import get_workload

    strategy, scorer = assemble("pretrained-prefix", "gradient", target=host, warn=False)
    run = TuneRun(
        get_workload("batch_matmul/1x128x128x128"),
        host,
        strategy,
        scorer,
        TuneSettings(trials=16, trials_per_round=8),
    )
    assert isinstance(run.strategy, PriorGradientStrategy)
    weights = [p.detach().clone() for p in scorer.model.nets[0].parameters()]
    while run.step():
        pass
    result = run.finish(baseline=False, reference=False)
    assert result.search == "gradient" and result.trials == 16 and result.best_latency is not None
    assert scorer.n_retrains >= 1
    assert any(not torch.equal(a, b) for a, b in zip(weights, scorer.model.nets[0].parameters()))
