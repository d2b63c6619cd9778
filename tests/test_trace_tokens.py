"""trace-tokens: real stored traces (tests/data/tiny_tvm.db) to token matrices, no lowering."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from autosearch.errors import InputError
from autosearch.features import trace_tokens as tt
from autosearch.features.trace_tokens.ir import parse_ir_blocks
from autosearch.features.trace_tokens.postproc import _Limits, _Post
from autosearch.store.db import Store
from conftest import load_script

TINY = Path(__file__).parent / "data" / "tiny_tvm.db"
COL = {n: i for i, n in enumerate(tt.FEATURE_NAMES)}


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    dst = tmp_path / "tiny.db"
    shutil.copy(TINY, dst)
    return dst


def _records(db: Path) -> list[tuple[str, str, float | None]]:
    with Store(db, readonly=True) as st:
        wls = {w.id: w for w in st.workloads()}
        return [(m.schedule, wls[m.workload_id].ir, wls[m.workload_id].flops) for m in st.measurements()]


def test_columns_are_named_once() -> None:
    assert len(set(tt.FEATURE_NAMES)) == tt.FEATURE_WIDTH == len(tt.FEATURE_NAMES)
    assert tt.EXTRACTOR == ("trace-tokens", "v1")


def test_fast_path_equals_reference_path() -> None:
    """The cached tokenizer must give exactly the reference tokens for every real trace."""
    tok = tt.TraceTokenizer()
    for trace, ir, flops in _records(TINY):
        wl, _blocks = tok.workload(ir, flops)
        ref = np.concatenate([wl, tt.trace_tokens(trace, ir)])
        got = tok(trace, ir, flops)
        assert got.dtype == np.float32 and got.shape[1] == tt.FEATURE_WIDTH
        np.testing.assert_array_equal(got, ref)
        assert np.isfinite(got).all()


def test_decisions_reach_the_split_token() -> None:
    """Changing a sampled tile decision changes exactly the factor columns of its Split."""
    trace, ir, flops = _records(TINY)[0]
    obj = json.loads(trace)
    insts, decisions = obj
    k = next(
        i
        for i, (idx, d) in enumerate(decisions)
        if insts[idx][0] == "SamplePerfectTile" and len(d) == 4 and math.prod(d) > 1
    )
    idx = decisions[k][0]
    extent = math.prod(decisions[k][1])
    new = [extent, 1, 1, 1] if decisions[k][1] != [extent, 1, 1, 1] else [1, 1, 1, extent]
    obj2 = [insts, [[i, new if i == idx else d] for i, d in decisions]]
    tok = tt.TraceTokenizer()
    a, b = tok(trace, ir, flops), tok(json.dumps(obj2, separators=(",", ":")), ir, flops)
    rows = np.nonzero((a != b).any(axis=1))[0]
    assert len(rows) == 2  # the summary token and the Split
    summary, split = b[rows[0]], b[rows[1]]
    assert summary[COL["kind=summary"]] == 1.0 and rows[0] == tok.workload(ir, flops)[0].shape[0]
    assert sum(summary[COL[f"tiles_s{i}"]] for i in range(4)) == pytest.approx(
        math.log2(extent)
        + sum(a[rows[0], COL[f"tiles_s{i}"]] for i in range(4))
        - sum(math.log2(f) for f in decisions[k][1])
    )
    assert split[COL["kind=Split"]] == 1.0
    got = [split[COL[f"factor{i}"]] for i in range(4)]
    assert got == pytest.approx([math.log2(f) + 1 for f in new])


def test_workload_tokens_name_the_operator() -> None:
    ir = next(ir for _, ir, _ in _records(TINY) if 'T.sblock("Z")' in ir)
    wl = tt.workload_tokens(ir, 2 * 128**3)
    assert wl.shape == (1, tt.FEATURE_WIDTH)
    row = wl[0]
    assert row[COL["kind=workload"]] == 1.0
    assert row[COL["wl_n_spatial"]] == 3 and row[COL["wl_n_reduce"]] == 1 and row[COL["wl_init"]] == 1
    assert row[COL["wl_op_mul"]] == 1 and row[COL["wl_op_add"]] == 1
    assert row[COL["wl_iters"]] == pytest.approx(math.log2(1 + 128**3))
    blocks = parse_ir_blocks(ir)
    assert [b.extents for b in blocks] == [[1, 128, 128, 128]]


def test_int64_extents_of_a_relax_program_read_as_numbers() -> None:
    """Relax legalises an operator with int64 indices (every `tune-model` task): its script spells
    extents `T.int64(128)`. They read as the same numbers as plain ones; they had read as 0, so
    a network task's workload tokens said nothing of its shape."""
    ir = next(ir for _, ir, _ in _records(TINY) if 'T.sblock("Z")' in ir)
    as_int64 = ir.replace("T.grid(1, 128, 128, 128)", "T.grid(T.int64(1), T.int64(128), T.int64(128), T.int64(128))")
    assert as_int64 != ir  # the replacement happened
    assert [b.extents for b in parse_ir_blocks(as_int64)] == [[1, 128, 128, 128]]
    assert np.array_equal(tt.workload_tokens(as_int64, 2 * 128**3), tt.workload_tokens(ir, 2 * 128**3))
    ranged = "for i in T.serial(T.int64(0), T.int64(64)):\n" + '    with T.sblock("B"):\n        B[i] = A[i]\n'
    assert [b.extents for b in parse_ir_blocks(ranged)] == [[64]]


def test_bad_traces_are_one_line_errors() -> None:
    with pytest.raises(InputError, match="not valid JSON"):
        tt.trace_tokens("[[", None)
    with pytest.raises(InputError, match="instructions, decisions"):
        tt.trace_tokens('{"a": 1}', None)
    with pytest.raises(InputError, match="instruction 0"):
        tt.trace_tokens('[[["Split"]], []]', None)
    with pytest.raises(InputError, match="decisions"):
        tt.trace_tokens("[[], [5]]", None)


def test_crop_and_unknown_kinds() -> None:
    insts = [["FutureInstruction", [], [], []]] + [["Annotate", ["b0", 1], ["pragma_x"], []]] * 200
    out = tt.trace_tokens([insts, []], None)
    assert out.shape == (tt.MAX_TRACE_TOKENS, tt.FEATURE_WIDTH)
    assert out[0, COL["kind=summary"]] == 1.0
    assert out[1, COL["kind=other"]] == 1.0 and out[2, COL["annotation=other"]] == 1.0


def test_backfill_and_coverage(tiny: Path) -> None:
    with Store(tiny) as st:
        n = tt.backfill(st, batch=50)
        assert n == 144
        assert tt.backfill(st) == 0  # resumable: nothing left
        rows = {fr.measurement_id: fr.features for fr in st.iter_features(tt.EXTRACTOR)}
        cov = tt.coverage(st)
    assert len(rows) == 144 and all(r.shape[1] == tt.FEATURE_WIDTH for r in rows.values())
    assert cov["records"] == 144 and cov["covered_fraction"] == 1.0 and cov["longest"] <= tt.MAX_TRACE_TOKENS
    assert tt.ensure_features(str(tiny), tt.EXTRACTOR) == 0
    assert tt.ensure_features(str(tiny), ("per-store-feature", "tvm-0.27")) == 0


def test_backfill_writes_while_another_process_writes(tiny: Path) -> None:
    """A second process writing to the store between backfill's read and its write (two trainings
    on one store) must not fail it: SQLite refuses to turn a read snapshot older than the other
    write into a write ("database is locked", at once), so backfill must not write under an open read."""
    import sqlite3

    with Store(tiny) as st:
        real_add = st.add_features

        def add_after_another_writer(items, extractor):  # type: ignore[no-untyped-def]
            other = sqlite3.connect(tiny, timeout=5)
            with other:
                n = other.execute("SELECT COUNT(*) FROM features").fetchone()[0]
                other.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('another_writer', ?)", (str(n),))
            other.close()
            return real_add(items, extractor)

        st.add_features = add_after_another_writer  # type: ignore[method-assign]
        assert tt.backfill(st, batch=50) == 144
    with Store(tiny, readonly=True) as st:
        assert len(st.missing_features(tt.EXTRACTOR)) == 0


def test_post_processing_is_worked_out_as_tvm_rewrites_parallel_and_vectorize() -> None:
    """`_Post` follows RewriteParallelVectorizeUnroll: outer spatial loops fuse into the parallel
    loop until their product passes the limit (that loop included) or a loop holds a computed-at
    block; the innermost loop is vectorized when spatial, longer than 1 and within the vector limit."""
    lim = _Limits()
    lim.par, lim.vec = 32, 64
    post = _Post(["a", "b", "c", "d", "e"], [2, 8, 4, 1, 16], "SSRSS", lim)

    def run(ext: list[int], cut: int = -1) -> list[float]:
        got = post.values([np.asarray([float(e)]) for e in ext], cut)[0]
        return [round(float(v), 4) for v in got]

    v17 = round(math.log2(17), 4)
    assert run([2, 8, 4, 1, 16]) == [4.0, 2.0, v17]  # 2*8 <= 32, then a reduction loop stops it
    assert run([8, 8, 4, 1, 16]) == [6.0, 2.0, v17]  # 8*8 passes 32: that loop is fused in, then stop
    assert run([8, 8, 4, 1, 16], cut=0) == [3.0, 1.0, v17]  # a block computed at loop 0 stops the fusion
    assert run([1, 1, 4, 1, 128]) == [0.0, 0.0, 0.0]  # no parallel extent; 128 lanes are over 64
    assert run([1, 4, 4, 4, 1]) == [2.0, 2.0, 0.0]  # a unit innermost loop: no second (strided) loop joins
    lim.multi.add("a")
    assert run([8, 8, 4, 1, 16]) == [3.0, 1.0, v17]
    lim.par = lim.vec = 0  # a GPU trace asks for neither
    assert run([8, 8, 4, 1, 16]) == [0.0, 0.0, 0.0]


def test_an_older_token_version_is_refused_in_one_line_unless_the_store_holds_it(tiny: Path) -> None:
    """v1 prefix tokens are no longer computed: asking for them on a store without them names the
    current version; a store that already holds them may still be read."""
    with pytest.raises(InputError, match="computes trace-prefix-tokens:v2"):
        tt.ensure_features(str(tiny), ("trace-prefix-tokens", "v1"))
    with Store(tiny) as st:
        m = next(iter(st.measurements()))
        st.add_features([(m.id, np.zeros((2, 3), np.float32))], ("trace-prefix-tokens", "v1"))
    assert tt.ensure_features(str(tiny), ("trace-prefix-tokens", "v1")) == 0


def test_emulated_post_processing_matches_the_tir_tvm_makes(tiny: Path) -> None:
    """On stored schedules replayed through TVM (their post-processing included), the tiled
    block's parallel loop and innermost vector loop have the extents the prefix tokens say
    (read from the TIR as `bench/post_emulation.py` reads it)."""
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    bench = load_script("bench/post_emulation.py", "post_emulation")
    col = tt.PREFIX_FEATURE_NAMES.index("post_par_extent")
    reorder = tt.PREFIX_FEATURE_NAMES.index("kind=Reorder")
    tok, checked = tt.TraceTokenizer(postproc=False), 0
    for trace, ir, flops in _records(tiny)[::6]:
        rows = tok(trace, ir, flops)
        rows = rows[rows[:, reorder] == 1]
        insts = json.loads(trace)[0]
        names = {x[3][0]: x[2][0] for x in insts if x[0] == "GetSBlock"}
        tiled = [names[x[1][0]] for x in insts if x[0] == "Annotate" and x[2] == ["meta_schedule.tiling_structure"]]
        if len(rows) != 1 or len(tiled) != 1:
            continue
        sch = Schedule(tvm.script.from_source(ir))
        Trace.apply_json_to_schedule(json.loads(trace), sch)
        real = bench._tir_extents(sch.mod.script(), tiled[0])
        assert real is not None
        parallel, vector = real
        assert round(2 ** float(rows[0, col])) == parallel if rows[0, col] > 0 else parallel == 1
        assert round(2 ** float(rows[0, col + 2]) - 1) == vector if rows[0, col + 2] > 0 else vector == 1
        checked += 1
    assert checked >= 10
