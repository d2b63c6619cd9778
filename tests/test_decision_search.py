"""`--search decision`: proposals are real, post-processed, new schedules of the workload's sketches,
and measured results steer the next rounds (no kernel is built or run here)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autosearch.backends.tvm.measure import MeasureResult
from autosearch.backends.tvm.space import trace_json
from autosearch.backends.tvm.target import host_target
from autosearch.errors import InputError
from autosearch.features import trace_tokens as tt
from autosearch.models.tlp import TLPModel, TLPNet
from autosearch.search.adapter import ModelAdapter
from autosearch.search.featurize import featurizer_for
from autosearch.search.scorer import NativeScorer
from autosearch.search.strategies import DecisionSettings, DecisionStrategy
from autosearch.search.tune import TuneSettings
from autosearch.workloads.registry import get_workload


def _prefix_model() -> ModelAdapter:
    """An untrained-but-valid tlp on prefix tokens (its scores are arbitrary and deterministic)."""
    import torch

    torch.manual_seed(0)
    model = TLPModel(members=1, hidden=16, heads=2)
    model.nets = [TLPNet(tt.PREFIX_FEATURE_WIDTH, 16, 2)]
    model.net, model.n_features, model.extractor = model.nets[0], tt.PREFIX_FEATURE_WIDTH, tt.PREFIX_EXTRACTOR
    adapter = ModelAdapter(model)
    adapter.extractor, adapter.featurize = featurizer_for(model)
    adapter.label = "prefix"
    return adapter


#: The decision search's knobs these tests run with (a small population, one generation).
SMALL = DecisionSettings(population=64, genetic_num_iters=1)


def test_decision_search_proposes_new_schedules_and_learns_from_results() -> None:
    settings = TuneSettings(trials=32, seed=0)
    source = DecisionStrategy(
        get_workload("batch_matmul/1x128x128x128"), host_target(), _prefix_model(), settings, SMALL
    )
    assert source.kind == "decision"  # what a run reports (its `search` object is another attribute)
    first = source.propose(8)
    assert len(first) == 8
    hashes = {c.sch.mod.script() for c in first}
    assert len(hashes) == 8  # distinct schedules
    texts = [trace_json(c.sch) for c in first]
    assert all('["EnterPostproc"' in t for t in texts)  # post-processed, ready to build
    # where TVM's post-processor made a parallel loop, the prefix tokens' emulation said it would
    tok, col = tt.TraceTokenizer(postproc=False), tt.PREFIX_FEATURE_NAMES.index("post_par_extent")
    ir = get_workload("batch_matmul/1x128x128x128").mod().script()
    for t in texts:
        emulated = tok(t, ir)[:, col].max() > 0
        assert emulated == ('["Parallel"' in t[t.index('["EnterPostproc"') :])
    # the fastest result's vector becomes a parent of the next round
    fake = [MeasureResult("ok", [1e-3 * (i + 1)] * 3) for i in range(len(first))]
    fake[3] = MeasureResult("build_error", [], "refused")
    source.notify(first, fake)
    assert source.search.best and source.search.best[0][0] == pytest.approx(1e-3)
    second = source.propose(8)
    assert len(second) == 8 and not hashes & {c.sch.mod.script() for c in second}
    _lat, s, best_vec = source.search.best[0]
    seeds = source.search._initial(s, source.search.sketches[s])
    one_off = ((seeds != best_vec).sum(axis=1) == 1).sum()
    elites = min(16, sum(1 for _, si, _ in source.search.best if si == s))
    assert one_off >= source.search.population // (4 * elites)  # the next generation starts from the best's mutants
    measured = {si for _, si, _ in source.search.best}
    other = next((i for i in range(len(source.search.sketches)) if i not in measured), None)
    if other is not None:  # a sketch with no measured result starts from random vectors alone
        assert len(source.search._initial(other, source.search.sketches[other])) == source.search.population
    from autosearch.search.scorer import runner_results

    assert runner_results(fake)[3].error_msg == "refused"
    # a warm-start seed the search did not propose becomes a parent, read back into a sketch and
    # vector that replay to the same program; random controls do not (issue 46: as parents they
    # measured no better)
    search = source.search
    before = [lat for lat, _, _ in search.best]
    controls = source.draw(2)
    source.notify(controls, [MeasureResult("ok", [1e-4] * 3), MeasureResult("ok", [2e-4] * 3)])
    assert [lat for lat, _, _ in search.best] == before
    seed_cand = source.draw(1)[0]
    seed_row = SimpleNamespace(schedule=trace_json(seed_cand.sch), median=5e-5, latencies=[5e-5])
    # a stored trace that no longer replays is skipped, and the next one keeps its own latency
    assert len(source.seed([SimpleNamespace(schedule="not a trace", median=1e-5), seed_row])) == 1
    assert [lat for lat, _, _ in search.best[:2]] == pytest.approx([5e-5, 1e-3])
    _, s, v = search.best[0]
    replayed = search._replay(search.sketches[s].trace(v))
    assert replayed.sch.mod.script() == seed_cand.sch.mod.script()
    assert (s, v.tobytes()) in search.tried  # never proposed again


def test_a_sketch_held_already_is_not_read_into_a_space_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The design spaces and the uniform draws repeat sketches; each is built into a
    `DecisionSpace` (the costly part: its token tables) once, and the draws of it only read."""
    from autosearch.features import decision_space
    from autosearch.search.decision_search import _SKETCH_DRAWS

    built: list[int] = []

    class Counted(decision_space.DecisionSpace):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(decision_space, "DecisionSpace", Counted)
    source = DecisionStrategy(
        get_workload("batch_matmul/1x128x128x128"),
        host_target(),
        _prefix_model(),
        TuneSettings(trials=32, seed=0),
        SMALL,
    )
    sketches = source.search.sketches
    assert 0 < len(built) == len(sketches) < 3 + _SKETCH_DRAWS
    assert len({s.signature for s in sketches}) == len(sketches)


def test_decision_search_needs_a_prefix_token_model() -> None:
    from autosearch.search.assemble import check_search

    settings = TuneSettings(trials=32, seed=0)
    with pytest.raises(InputError, match="trace-prefix-tokens"):
        DecisionStrategy(
            get_workload("batch_matmul/1x128x128x128"),
            host_target(),
            NativeScorer(None, "tvm"),
            settings,
            DecisionSettings(population=64),
        )
    with pytest.raises(InputError, match="--search must be one of"):
        check_search("decisions")


def test_auto_search_runs_the_decision_search_only_with_a_prefix_prior_on_a_cpu() -> None:
    import json

    from autosearch.backends.tvm.target import parse_target
    from autosearch.search.assemble import assemble, resolve_search
    from autosearch.search.model_spec import default_model, make_scorer, pretrained_dir
    from autosearch.search.strategies import EvolutionarySettings, GradientSettings

    cpu, gpu = host_target(), parse_target("cuda-h100")
    assert default_model(cpu) == "pretrained-prefix" and default_model(gpu) == "pretrained"
    prefix = make_scorer("pretrained-prefix", target=cpu)
    assert prefix.label == "pretrained-prefix" and tuple(prefix.extractor) == tt.PREFIX_EXTRACTOR
    assert resolve_search("auto", prefix, cpu) == "decision"
    on_gpu = make_scorer("pretrained-prefix", target=gpu)
    assert resolve_search("auto", on_gpu, gpu) == "evolutionary"  # it never saw a GPU trace
    assert resolve_search("gradient", prefix, cpu) == "gradient"  # an explicit choice stays
    for other in ("pretrained", "pretrained+xgb", "xgb", "tvm-xgb"):
        assert resolve_search("auto", make_scorer(other, target=cpu), cpu) == "evolutionary"
    assert make_scorer("pretrained-prefix+xgb").label == "pretrained-prefix+xgb"
    # the assembled pair: the strategy `auto` chose, with its fallback where a workload has nothing to decide
    strategy, scorer = assemble("pretrained-prefix", target=cpu, warn=False)
    assert isinstance(strategy, DecisionSettings) and not strategy.by_name and scorer.label == "pretrained-prefix"
    assert isinstance(strategy.fallback, EvolutionarySettings)
    assert isinstance(assemble("pretrained-prefix", "gradient", target=cpu, warn=False)[0], GradientSettings)
    assert isinstance(assemble("pretrained-prefix", target=gpu, warn=False)[0], EvolutionarySettings)
    # `--explore auto` on a CPU the prior never saw: random controls, except under the decision search
    new_cpu = parse_target('{"kind":"llvm","mcpu":"x86-64","num-cores":2}')
    for search, gated in (("auto", False), ("decision", False), ("evolutionary", True)):
        strategy, _ = assemble("pretrained-prefix", search, "auto", target=new_cpu, warn=False)
        assert (strategy.explore == "control") == gated, search
    # every shipped prior (the zero-trial pass's orderer too) holds out the same families, so the
    # tuning benchmark's workloads stay unseen
    from autosearch.networks.prior import ORDER_MODEL

    dirs = [pretrained_dir("pretrained"), pretrained_dir("pretrained-prefix"), Path(ORDER_MODEL)]
    splits = [json.loads((d / "split.json").read_text()) for d in dirs]
    for split in splits[1:]:
        assert set(splits[0]["test"]) == set(split["test"]) and not set(split["test"]) & set(split["train"])


def test_a_round_spreads_its_picks_over_loop_structures() -> None:
    """At most an eighth of a round's picks share a sketch and loop structure while other
    structures are left in the pool; the rest follow in score order."""
    import numpy as np

    from autosearch.search.decision_search import _spread

    v = [np.array([i]) for i in range(6)]
    pool = [(6.0 - i, 0, v[i], b"A" if i < 4 else b"B") for i in range(6)]  # four of A score highest
    assert [int(x[0]) for _, x in _spread(pool, 2)] == [0, 1, 4, 5, 2, 3]
    pool[5] = (1.0, 1, v[5], b"A")  # the same structure in another sketch is another structure
    assert [int(x[0]) for _, x in _spread(pool, 1)] == [0, 4, 5, 1, 2, 3]
    # in a real space: a categorical knob (the unroll depth) and the emulated parallel/vector
    # extents tell structures apart; the same vector always gives the same structure
    settings = TuneSettings(trials=32, seed=0)
    source = DecisionStrategy(
        get_workload("batch_matmul/1x128x128x128"), host_target(), _prefix_model(), settings, SMALL
    )
    space = max(source.search.sketches, key=lambda sp: sp.n_knobs)
    x = space.sample(256, np.random.default_rng(0))
    shapes = space.structure(x)
    assert shapes.shape[0] == 256 and np.array_equal(shapes, space.structure(x))
    assert 4 < len({r.tobytes() for r in shapes}) < 256
    cat = next(j for j, k in enumerate(space.knobs) if k.kind == "categorical")
    y = x.copy()
    y[:, cat] = (y[:, cat] + 1) % space.sizes[cat]
    assert not (space.structure(y) == shapes).all(axis=1).any()
    picks = source.propose(8)
    seen = [source.search._origin[id(c)] for c in picks]
    keys = [(s, source.search.sketches[s].structure(vec[None])[0].tobytes()) for s, vec in seen]
    assert len(set(keys)) == len(keys)  # eight picks, eight structures (cap 1 of 8)
    n_sketches = len(source.search.sketches)
    assert len({s for s, _ in seen}) >= min(n_sketches, 4)  # the first round covers the sketches (up to half)


def test_the_first_round_covers_the_sketches_then_follows_the_scores() -> None:
    """Each sketch's best vector first, best sketch first, at most k; then the given order."""
    import numpy as np

    from autosearch.search.decision_search import _cover_sketches, _spread

    v = [np.array([i]) for i in range(6)]
    pool = [(6.0 - i, 0 if i < 4 else i - 3, v[i], b"A") for i in range(6)]  # sketch 0 holds the top four
    order = [int(x[0]) for _, x in _cover_sketches(pool, 8, _spread(pool, 8))]
    assert order[:3] == [0, 4, 5]  # one per sketch, in the order of their best scores
    assert order[3:] == [0, 1, 2, 3, 4, 5]  # then the scores (a repeat is skipped as already tried)
    assert [int(x[0]) for _, x in _cover_sketches(pool, 2, iter([]))] == [0, 4]  # at most k sketches


def test_each_distinct_vector_is_scored_once_a_round() -> None:
    """A population's repeated vectors, and vectors kept from the last generation, reach the model
    once a round with the score the model gives them; a new round (the model was fine-tuned) scores
    them again. Under an exploration gate every batch is scored whole."""
    import numpy as np

    settings = TuneSettings(trials=32, seed=0)
    source = DecisionStrategy(
        get_workload("batch_matmul/1x128x128x128"), host_target(), _prefix_model(), settings, SMALL
    )
    search, adapter = source.search, source.search.adapter
    seen: list[int] = []
    real = adapter.score_space

    real_spread = adapter.score_space_spread

    def counting(space: Any, x: Any) -> Any:
        seen.append(len(x))
        return real(space, x)

    def counting_spread(space: Any, x: Any) -> Any:
        seen.append(len(x))
        return real_spread(space, x)

    adapter.score_space, adapter.score_space_spread = counting, counting_spread
    s = max(range(len(search.sketches)), key=lambda i: search.sketches[i].n_knobs)
    x = search.sketches[s].sample(40, np.random.default_rng(1))
    pop = np.concatenate([x, x[:25], x[::-1]])
    got = search._score(s, pop)
    assert seen == [len(np.unique(x, axis=0))]
    np.testing.assert_allclose(got, np.asarray(real(search.sketches[s], pop)), rtol=1e-5, atol=1e-5)
    assert got[0] == got[40] == got[len(pop) - 1]  # a repeated vector has one score
    assert np.array_equal(search._score(s, x[:10]), got[:10]) and len(seen) == 1  # scored already this round
    source.propose(4)  # a new round
    seen.clear()
    search._score(s, x[:10])
    assert seen == [10]
    # an exploration policy that z-scores each batch: its batches reach it whole, repeats included
    from autosearch.search.explore import ControlExploration

    search.policy, seen[:] = ControlExploration(), []
    search._score(s, pop)
    assert seen == [len(pop)]


def test_a_task_of_many_sketches_shares_the_prior_passs_population_and_one_of_few_keeps_1024_a_sketch() -> None:
    """`sketch_population`: alone, each sketch 1024 (or more where asked); shared (the prior
    pass's 4,096), up to four sketches keep 1024 each, more split it, never below the floor."""
    from autosearch.search.decision_search import MIN_SKETCH_POPULATION, sketch_population

    assert sketch_population(23, 256) == 1024 and sketch_population(2, 2048) == 2048
    assert [sketch_population(n, 256, 4096) for n in (1, 4, 5, 8, 23)] == [1024, 1024, 819, 512, 256]
    assert sketch_population(100, 256, 4096) == MIN_SKETCH_POPULATION
