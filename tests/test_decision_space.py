"""Decision-space tokens are the tokenizer's tokens of the same decisions, without TVM or text."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from autosearch.errors import InputError
from autosearch.features import trace_tokens as tt
from autosearch.features.decision_space import DecisionSpace, SketchHead, decisions_by_inst, factorizations
from autosearch.store.db import Store

TINY = Path(__file__).parent / "data" / "tiny_tvm.db"


def _records() -> list[tuple[str, str, float | None]]:
    with Store(TINY, readonly=True) as st:
        wls = {w.id: w for w in st.workloads()}
        return [(m.schedule, wls[m.workload_id].ir, wls[m.workload_id].flops) for m in st.measurements()]


def _one_per_workload() -> list[tuple[str, str, float | None]]:
    seen: dict[str, tuple[str, str, float | None]] = {}
    for rec in _records():
        seen.setdefault(rec[1], rec)
    return list(seen.values())


def test_prefix_tokens_are_the_full_tokens_before_post_processing() -> None:
    """Fast and reference paths agree; the prefix is the first rows of the full token matrix plus
    the emulated post-processing columns, which only Reorder rows have."""
    pre, full = tt.TraceTokenizer(postproc=False), tt.TraceTokenizer()
    post = slice(tt.FEATURE_WIDTH, tt.PREFIX_FEATURE_WIDTH)
    reorder = tt.PREFIX_FEATURE_NAMES.index("kind=Reorder")
    for trace, ir, flops in _records():
        got = pre(trace, ir, flops)
        wl = tt.workload_tokens(ir, flops, postproc=False)
        np.testing.assert_array_equal(got, np.concatenate([wl, tt.trace_tokens(trace, ir, postproc=False)]))
        whole = full(trace, ir, flops)
        assert whole.shape[1] == tt.FEATURE_WIDTH and got.shape[1] == tt.PREFIX_FEATURE_WIDTH
        assert got.shape[0] < whole.shape[0]  # these traces all have post-processing instructions
        np.testing.assert_array_equal(got[:, : tt.FEATURE_WIDTH], whole[: got.shape[0]])
        assert (got[:, post] != 0).any() and not (got[got[:, reorder] == 0][:, post]).any()


def test_decision_vectors_tokenize_like_their_traces() -> None:
    """Random vectors of each workload's space: tokens equal the tokenizer's on the written-back trace."""
    tok = tt.TraceTokenizer(postproc=False)
    rng = np.random.default_rng(0)
    for trace, ir, flops in _one_per_workload():
        space = DecisionSpace(trace, ir, flops)
        assert space.n_knobs >= 2 and any(k.kind == "tile" for k in space.knobs)
        np.testing.assert_allclose(space.tokens(space.current)[0], tok(trace, ir, flops), atol=1e-5)
        x = space.sample(40, rng)
        assert ((x >= 0) & (x < space.sizes)).all()
        got = space.tokens(x)
        assert got.shape == (40, space.n_tokens, tt.PREFIX_FEATURE_WIDTH) and got.dtype == np.float32
        for i in range(len(x)):
            text = json.dumps(space.trace(x[i]), separators=(",", ":"))
            np.testing.assert_allclose(got[i], tok(text, ir, flops), atol=1e-5)
        assert len({g.tobytes() for g in got}) > 1  # the decisions reach the tokens


def test_written_back_decisions_are_valid_tilings() -> None:
    trace, ir, flops = _one_per_workload()[0]
    space = DecisionSpace(trace, ir, flops)
    insts = space.instructions
    x = space.sample(20, np.random.default_rng(1))
    for row in x:
        for idx, d in space.decisions(row):
            ins = insts[idx]
            if ins[0] == "SamplePerfectTile" and any(k.inst == idx for k in space.knobs):
                knob = next(k for k in space.knobs if k.inst == idx)
                assert math.prod(d) == math.prod(knob.options[0]) and len(d) == ins[2][0]
                assert ins[2][1] <= 0 or d[-1] <= ins[2][1]
            elif ins[0] == "SampleCategorical":
                assert 0 <= d < len(ins[2][0])


def test_mutate_moves_exactly_one_knob() -> None:
    trace, ir, flops = _one_per_workload()[0]
    space = DecisionSpace(trace, ir, flops)
    rng = np.random.default_rng(2)
    x = space.sample(200, rng)
    y = space.mutate(x, rng)
    changed = (x != y).sum(axis=1)
    movable = (space.sizes > 1).sum()
    assert movable >= 2 and changed.max() == 1 and changed.mean() > 0.5
    assert ((y >= 0) & (y < space.sizes)).all()


def test_bad_vectors_and_traces_are_one_line_errors() -> None:
    trace, ir, flops = _one_per_workload()[0]
    space = DecisionSpace(trace, ir, flops)
    bad = space.current.copy()[None, :]
    bad[0, int(np.argmax(space.sizes))] = int(space.sizes.max())
    with pytest.raises(InputError, match="outside"):
        space.tokens(bad)
    with pytest.raises(InputError, match="not valid JSON"):
        DecisionSpace("[[", ir, flops)


def test_factorizations_of_large_extents_are_quick_and_exact() -> None:
    got = factorizations(2**22, 2, 64)
    assert len(got) == 7 and all(a * b == 2**22 and b <= 64 for a, b in got)
    assert factorizations(12, 2) == ((1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1))


def test_live_candidates_tokenize_from_their_decisions_like_their_traces() -> None:
    """Tuning's featurizer for prefix-token models: decisions read out of TVM give the text path's tokens."""
    from types import SimpleNamespace

    import tvm

    from autosearch.features.per_store import candidate_from_trace
    from autosearch.search.featurize import _PrefixTokenFeaturizer, _TokenFeaturizer

    by_ir: dict[str, list[str]] = {}
    for trace, ir, _flops in _records():
        by_ir.setdefault(ir, []).append(trace)
    fast_total = 0
    for ir, traces in list(by_ir.items())[:3]:
        mod = tvm.script.from_source(ir)  # type: ignore[attr-defined]
        ctx = SimpleNamespace(mod=mod)
        cands = [candidate_from_trace(mod, t) for t in traces[:12]]
        live = _PrefixTokenFeaturizer()
        got = live(ctx, cands)
        want = _TokenFeaturizer(postproc=False)(ctx, cands)
        assert len(got) == len(want) == len(cands)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, atol=1e-5)
        fast_total += live.fast
    assert fast_total == 36  # every one from its decisions (each new sketch checked against its text once)


def test_tuning_picks_the_featurizer_of_the_model_extractor() -> None:
    from types import SimpleNamespace

    from autosearch.search.featurize import _PrefixTokenFeaturizer, _TokenFeaturizer, featurizer_for

    ex, f = featurizer_for(SimpleNamespace(extractor=tt.PREFIX_EXTRACTOR, device=False))
    assert ex == tt.PREFIX_EXTRACTOR and isinstance(f, _PrefixTokenFeaturizer)
    ex, f = featurizer_for(SimpleNamespace(extractor=tt.EXTRACTOR, device=False))
    assert ex == tt.EXTRACTOR and isinstance(f, _TokenFeaturizer) and f.tokenizer.postproc
    with pytest.raises(InputError, match="trace-prefix-tokens:v2"):
        featurizer_for(SimpleNamespace(extractor=("made-up", "v9"), device=False))


def test_row_plan_says_which_knobs_move_each_row() -> None:
    """Rows no knob moves are equal for every vector, a row one knob moves follows that knob alone,
    and `row_tokens` / `option_tokens` are slices of `tokens`."""
    rng = np.random.default_rng(3)
    for trace, ir, flops in _one_per_workload():
        space = DecisionSpace(trace, ir, flops)
        plan = space.row_plan
        rows = np.sort(np.concatenate([plan.const, [r for r, _ in plan.single], plan.mixed]).astype(np.int64))
        np.testing.assert_array_equal(rows, np.arange(space.n_tokens))  # a partition of the rows
        assert plan.single and 0 in plan.const  # workload tokens move with no knob
        x = space.sample(30, rng)
        full = space.tokens(x)
        assert (full[:, plan.const] == full[:1, plan.const]).all()
        some = np.array([space.n_tokens - 1, 0, *plan.mixed])
        np.testing.assert_array_equal(space.row_tokens(x, some), full[:, some])
        for r, j in plan.single:
            opts = space.option_tokens(j, np.array([r]))[:, 0]
            np.testing.assert_array_equal(opts[x[:, j]], full[:, r])
        if plan.mixed.size:  # several knobs: no one of them fixes the row
            assert len({full[i, plan.mixed[0]].tobytes() for i in range(len(x))}) > 1


def test_vector_reads_back_the_decisions_of_a_vector() -> None:
    """`vector` inverts `decisions`; a decision outside its knob or a changed fixed one is not in the space."""
    rng = np.random.default_rng(5)
    for trace, ir, flops in _one_per_workload():
        space = DecisionSpace(trace, ir, flops)
        for x in space.sample(10, rng):
            by_inst = {i: (tuple(d) if isinstance(d, list) else d) for i, d in space.decisions(x)}
            np.testing.assert_array_equal(space.vector(by_inst), x)
        with pytest.raises(InputError, match="outside"):
            space.decisions(-np.ones(space.n_knobs, dtype=np.int64))  # would wrap to the last option
        tile = next(k for k in space.knobs if k.kind == "tile")
        assert space.vector({**by_inst, tile.inst: (0,) * len(tile.options[0])}) is None
        if space.fixed:
            i = next(iter(space.fixed))
            assert space.vector({**by_inst, i: "elsewhere"}) is None


def test_a_sketch_head_tells_sketches_apart_without_building_a_space() -> None:
    """Traces of one sketch under other decisions share the space's `SketchHead.signature`, and
    the space reads their decisions back from the head alone; other sketches' signatures differ
    (two shapes of one operator may share one: a search holds one workload's sketches)."""
    rng = np.random.default_rng(3)
    signatures = []
    for trace, ir, flops in _one_per_workload():
        space = DecisionSpace(trace, ir, flops)
        head = SketchHead.read(trace)
        assert head.signature == space.signature and head.knobs == space.knobs and head.fixed == space.fixed
        for x in space.sample(5, rng):
            other = SketchHead.read(space.trace(x))
            assert other.signature == space.signature
            np.testing.assert_array_equal(space.vector(decisions_by_inst(other.representative)), x)
        signatures.append(head.signature)
    assert len(set(signatures)) > 1
