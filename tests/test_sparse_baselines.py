"""The sparse baselines (oneMKL inspector-executor, torch.sparse, scipy, BestFormat), the one timing
harness, and the ratio code the headline figures come from -- on small real matrices."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import scipy.sparse as sp

from autosearch.sparse import mkl
from autosearch.sparse.baselines import (
    HEADLINE,
    Contender,
    bestformat_candidates,
    break_even_runs,
    contenders_for,
    fixed_for,
    geomean,
    prepare_scipy,
    rank_fixed_configs,
    side_by_side,
    speedup_over_best,
    verify,
)
from autosearch.sparse.matrices import MatrixSpec, generate
from autosearch.sparse.measure import MatrixBench, Timing, time_callable
from autosearch.sparse.records import Group
from autosearch.sparse.space import SuperSchedule, default_config

needs_mkl = pytest.mark.skipif(not mkl.available(), reason="oneMKL's libmkl_rt is not installed (pip install mkl)")
FAST = Timing(repeat=2, min_repeat_ms=1.0, warmup=1, settle_ms=0.0)


@pytest.fixture(scope="module")
def a() -> sp.csr_matrix:
    m = generate(MatrixSpec("powerlaw", 700, 500, 5.0, seed=4))
    m = m.tolil()
    m[3, :] = 0  # an empty row: every library must leave its output row at zero
    return sp.csr_matrix(m, dtype=np.float32)


@needs_mkl
def test_mkl_inspector_executor_matches_scipy(a: sp.csr_matrix) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(a.shape[1]).astype(np.float32)
    y = np.full(a.shape[0], 7.0, np.float32)  # beta = 0: what was in the output must not leak in
    with mkl.MklCsr(a) as h:
        h.mv(x, y)
        assert h.inspect_s > 0
    np.testing.assert_allclose(y, a @ x, rtol=1e-5, atol=1e-5)
    b = rng.standard_normal((a.shape[1], 8)).astype(np.float32)
    c = np.full((a.shape[0], 8), 7.0, np.float32)
    with mkl.MklCsr(a, 8) as h:
        h.mm(b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert "Math Kernel Library" in mkl.version()


@pytest.mark.parametrize("op", ["spmv", "spmm", "sddmm"])
def test_every_baseline_reproduces_the_scipy_reference(a: sp.csr_matrix, op: str) -> None:
    mb = MatrixBench(op, a, 8)
    ours = SuperSchedule(op=op, parallel=True, chunk=4, dense=mb.dense)
    cons, why = contenders_for(mb, ours, default_config(op, mb.dense), mkl=mkl.available())
    expected = {"ours", "torch", "scipy", "bestformat", "default_csr"} | (
        {"mkl"} if mkl.available() and op != "sddmm" else set()
    )
    assert set(cons) == expected, why
    for c in cons.values():
        assert verify(mb, c) == ""
        got = np.asarray(c.result())[: len(mb.ref)]
        np.testing.assert_allclose(got, mb.ref, rtol=1e-4, atol=1e-4)
    if op == "sddmm":
        assert "mkl" in why  # oneMKL's C API has no SDDMM: missing, and said so


def test_verify_refuses_a_baseline_with_a_wrong_result(a: sp.csr_matrix) -> None:
    mb = MatrixBench("spmv", a)
    good = prepare_scipy(mb)
    out = np.zeros(a.shape[0], np.float32)
    wrong = Contender("bad", lambda: np.copyto(out, (a @ mb.x) * 1.01), lambda: out, 0.0, "off by 1%")
    assert verify(mb, good) == ""
    assert "differs from scipy" in verify(mb, wrong)
    cons, why = contenders_for(mb, None, None, default_csr=False, mkl=False)
    assert set(cons) == {"torch", "scipy"} and not why


def test_time_callable_counts_warmup_repeats_and_per_call_time() -> None:
    calls = []

    def fn() -> None:
        calls.append(1)
        time.sleep(0.002)

    t0 = time.perf_counter()
    lat = time_callable(fn, Timing(repeat=3, min_repeat_ms=30.0, warmup=2, settle_ms=50.0))
    assert time.perf_counter() - t0 >= 0.05  # the settle pause happened
    number = (len(calls) - 2) // 3
    assert number >= 2 and len(calls) == 2 + 3 * number  # warm-up calls, then repeat x number (>= 30 ms each)
    assert len(lat) == 3 and all(0.0019 < t < 0.012 for t in lat)  # seconds per call, not per repeat


def test_side_by_side_times_every_contender_and_the_ratio_is_over_the_fastest(a: sp.csr_matrix) -> None:
    mb = MatrixBench("spmm", a, 8)
    ours = SuperSchedule(op="spmm", parallel=True, chunk=4, vec=8, vectorize=True, dense=8)
    cons, _ = contenders_for(mb, ours, None, mkl=mkl.available())
    times = side_by_side(mb, cons, rounds=1, timing=FAST)
    assert set(times) == set(cons) and all(0 < t < 1 for t in times.values())
    ratio, base = speedup_over_best(times)
    ran = [b for b in HEADLINE if b in times]
    assert base == min(ran, key=lambda b: times[b]) and base != "default_csr"
    assert ratio == pytest.approx(times[base] / times["ours"])


def test_speedup_over_best_and_geomean_by_hand() -> None:
    t = {"ours": 1.0, "mkl": 1.5, "torch": 3.0, "scipy": 4.0, "bestformat": 2.0, "default_csr": 0.5}
    assert speedup_over_best(t) == (1.5, "mkl")  # default_csr is reported, not a headline baseline
    assert speedup_over_best({**t, "mkl": math.inf}) == (2.0, "bestformat")  # a baseline that did not run
    assert speedup_over_best({k: v for k, v in t.items() if k != "mkl"}) == (2.0, "bestformat")
    r, name = speedup_over_best({**t, "ours": math.inf})
    assert math.isnan(r) and name == ""
    assert speedup_over_best({"ours": 2.0, "scipy": 1.0}) == (0.5, "scipy")  # slower than a baseline: below 1
    assert geomean([2.0, 0.5, 4.0]) == pytest.approx(4 ** (1 / 3))
    assert geomean([2.0, math.nan, math.inf]) == pytest.approx(2.0) and math.isnan(geomean([]))


def test_break_even_runs() -> None:
    assert break_even_runs(0.010, 1e-4, 0.0, 2e-4) == 100  # 10 ms of conversion, 0.1 ms saved per call
    assert break_even_runs(0.010, 1e-4, 0.004, 2e-4) == 60  # the baseline's own inspector counts for it
    assert break_even_runs(0.001, 1e-4, 0.050, 2e-4) == 0  # ours prepares faster and runs faster
    assert math.isinf(break_even_runs(0.010, 3e-4, 0.0, 2e-4))  # never: ours is slower per call


def test_bestformat_ranks_measured_configs_and_falls_back_to_one_that_applies() -> None:
    mats = [generate(MatrixSpec("uniform", 600, 600, 4.0, seed=s)) for s in (1, 2)]
    par = SuperSchedule(op="spmv", parallel=True, chunk=16)
    blocky = SuperSchedule(op="spmv", fmt="bcsr", br=8, bc=8)  # 64-slot blocks on a scattered pattern: refused
    ser = default_config("spmv")
    # the store ranking the candidates come from: `blocky` looked best there, `par` second
    groups = [
        Group(f"k{i}", f"m{i}", "spmv", 0, "uniform", MatrixSpec("uniform", 600, 600, 4.0, seed=i), "h",
              [blocky, par, ser], [1.0, 2.0, 4.0])
        for i in range(3)
    ]  # fmt: skip
    cands = bestformat_candidates(groups, "spmv", 0, k=2)
    assert cands == [blocky, par, ser]  # top 2 by the store, then the default CSR kernel
    ranking = rank_fixed_configs([MatrixBench("spmv", m) for m in mats], cands, FAST)
    names = [c for c, _ in ranking]
    assert blocky not in names and set(names) <= {par, ser}  # measured, not assumed: blocky never ran
    assert all(0 < s <= 1 for _, s in ranking) and [s for _, s in ranking] == sorted(
        [s for _, s in ranking], reverse=True
    )
    assert fixed_for([blocky, par], mats[0]) == par  # the first of a ranking that applies
    assert fixed_for([blocky], mats[0]) is None
