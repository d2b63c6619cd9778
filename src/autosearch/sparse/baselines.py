"""What a co-searched sparse kernel is compared with, and the ratios the headline figures come from.

The baselines a sparse user really has, each called the way its documentation recommends and on
the same thread count as ours:

- `mkl`: oneMKL's inspector-executor API (`sparse.mkl`): a CSR handle with the mv / mm hint and
  `mkl_sparse_optimize`, executor calls into preallocated outputs (SpMV, SpMM; oneMKL's C API
  has no SDDMM);
- `torch`: torch.sparse CSR with 32-bit indices, `torch.mv` / `torch.mm` with `out=`, and for
  SDDMM `torch.sparse.sampled_addmm(beta=0, out=)` followed by an in-place multiply by A's values
  (sampled_addmm samples X Y^T at A's pattern; it does not scale by A);
- `scipy`: scipy.sparse's own CSR kernels (`csr_matvec` / `csr_matvecs`, single-threaded) into a
  zeroed preallocated output; its SDDMM is numpy (row / column gathers and a row-wise dot, in
  preallocated chunks), since scipy has none;
- `bestformat`: one fixed configuration of our own space (parallel ones included), the best on
  training matrices of the test matrices' size range (`rank_fixed_configs`), never seeded into
  the search;
- `default_csr`: our serial CSR kernel (reported, not in the headline set).

Every contender is checked against the scipy reference once, then timed by the one harness
(`measure.time_callable`) in interleaved rounds (`side_by_side`), keeping each one's fastest
repeat. One-time preparation (our format conversion, MKL's inspector, torch's tensor build) is
timed separately (`Contender.prepare_s`) and turned into a break-even number of runs.
"""

from __future__ import annotations

import math
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosearch.sparse.measure import MatrixBench, Outcome, Timing, config_reason, threads, time_callable
from autosearch.sparse.records import Group
from autosearch.sparse.space import SuperSchedule, default_config, with_dense

__all__ = [
    "BASELINES",
    "HEADLINE",
    "LIBRARY",
    "SIDE_TIMING",
    "Contender",
    "best_fixed_config",
    "bestformat_by_op",
    "bestformat_candidates",
    "break_even_runs",
    "confirm_best",
    "contenders_for",
    "fixed_for",
    "geomean",
    "prepare_mkl",
    "prepare_ours",
    "prepare_scipy",
    "prepare_torch",
    "rank_fixed_configs",
    "side_by_side",
    "speedup_over_best",
    "verify",
]

#: Every baseline reported; HEADLINE: the ones the headline speed-up is taken over (per matrix, the best of them).
BASELINES = ("mkl", "torch", "scipy", "bestformat", "default_csr")
HEADLINE = ("mkl", "torch", "scipy", "bestformat")
#: What each name calls, as reported beside the numbers.
LIBRARY = {
    "ours": "co-searched format + schedule (TVM)",
    "mkl": "oneMKL inspector-executor (mv/mm hint + mkl_sparse_optimize)",
    "torch": "torch.sparse CSR int32 (sddmm: sampled_addmm * A)",
    "scipy": "scipy.sparse csr_matvec(s), 1 thread (sddmm: numpy gathers)",
    "bestformat": "best fixed configuration on training matrices (TVM)",
    "default_csr": "serial CSR kernel (TVM)",
}
#: The side-by-side timing: 300 ms of idleness before each contender lets the previous one's
#: thread pool stop spinning (Intel OpenMP spins for 200 ms after a call by default).
SIDE_TIMING = Timing(repeat=5, min_repeat_ms=10.0, warmup=3, settle_ms=300.0)


@dataclass
class Contender:
    """One kernel ready to call: `call()` computes into a preallocated output, `result()` reads it
    back in CSR order (SDDMM) or as the dense output (SpMV / SpMM)."""

    name: str
    call: Callable[[], Any]
    result: Callable[[], np.ndarray]
    prepare_s: float
    library: str
    keep: list[Any] = field(default_factory=list)  # objects the call needs alive (MKL handle, tensors)


def _zero_then(zero: np.ndarray, fn: Callable[[], Any]) -> Callable[[], None]:
    def call() -> None:
        zero.fill(0.0)
        fn()

    return call


def prepare_ours(mb: MatrixBench, cfg: SuperSchedule, name: str = "ours") -> Contender | None:
    """A generated kernel with its converted matrix and preallocated operands (None if it cannot
    apply or build). `prepare_s` is the format conversion from CSR."""
    from autosearch.sparse.kernels import build_kernel

    if config_reason(cfg, mb.a):
        return None
    try:
        f = build_kernel(cfg).mod["kernel"]
    except Exception:  # a kernel that does not build is not a contender
        return None
    cv = mb.converted(cfg)
    args = mb._args(cfg, cv)
    return Contender(name, lambda: f(*args), lambda: mb._result(cfg, cv, args), cv.seconds, LIBRARY.get(name, name))


def prepare_mkl(mb: MatrixBench) -> Contender | None:
    """oneMKL's optimised handle (None for SDDMM, which oneMKL's C API lacks). Raises MklUnavailable
    when libmkl_rt is not installed."""
    from autosearch.sparse import mkl

    if mb.op == "sddmm":
        return None
    mkl.set_threads(threads())
    h = mkl.MklCsr(mb.a, mb.dense)
    if mb.op == "spmv":
        x, y = np.ascontiguousarray(mb.x), np.zeros(mb.a.shape[0], np.float32)
        return Contender("mkl", h.bind(x, y), lambda: y, h.inspect_s, LIBRARY["mkl"], [h, x, y])
    b, c = np.ascontiguousarray(mb.B), np.zeros((mb.a.shape[0], mb.dense), np.float32)
    return Contender("mkl", h.bind(b, c), lambda: c, h.inspect_s, LIBRARY["mkl"], [h, b, c])


def prepare_torch(mb: MatrixBench) -> Contender | None:
    """torch.sparse CSR (32-bit indices) with preallocated outputs; None where torch lacks the op."""
    import torch

    threads()
    a = mb.a
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR is in beta" / invariant-check notices
        t = torch.sparse_csr_tensor(
            torch.from_numpy(a.indptr.astype(np.int32)),
            torch.from_numpy(a.indices.astype(np.int32)),
            torch.from_numpy(a.data.astype(np.float32)),
            size=a.shape,
        )
    prep = time.perf_counter() - t0
    fn: Callable[[], Any]
    if mb.op == "spmv":
        x, y = torch.from_numpy(mb.x), torch.zeros(a.shape[0])
        fn, res = (lambda: torch.mv(t, x, out=y)), (lambda: y.numpy())
    elif mb.op == "spmm":
        b, c = torch.from_numpy(mb.B), torch.zeros(a.shape[0], mb.dense)
        fn, res = (lambda: torch.mm(t, b, out=c)), (lambda: c.numpy())
    else:
        X, Yt = torch.from_numpy(mb.X), torch.from_numpy(mb.Y).T.contiguous()
        out, vals = t.clone(), t.values()

        def fn() -> None:
            torch.sparse.sampled_addmm(t, X, Yt, beta=0.0, out=out)
            out.values().mul_(vals)

        res = lambda: out.values().numpy()  # noqa: E731 - a one-line closure is clearest here

    try:  # no tensor requires grad, so the call needs no no_grad() context (one less per-call cost)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except (RuntimeError, NotImplementedError):
        return None
    return Contender("torch", fn, res, prep, LIBRARY["torch"], [t])


def prepare_scipy(mb: MatrixBench, chunk: int = 16384) -> Contender:
    """scipy.sparse's CSR kernels (single-threaded) into zeroed preallocated outputs; SDDMM in numpy."""
    from scipy.sparse import _sparsetools

    a = mb.a
    m, k = a.shape
    ip, ix, d = a.indptr, a.indices, a.data
    if mb.op == "spmv":
        x, y = mb.x, np.zeros(m, np.float32)
        return Contender(
            "scipy", _zero_then(y, lambda: _sparsetools.csr_matvec(m, k, ip, ix, d, x, y)), lambda: y, 0.0,
            LIBRARY["scipy"],
        )  # fmt: skip
    if mb.op == "spmm":
        n = mb.dense
        b, c = np.ascontiguousarray(mb.B), np.zeros((m, n), np.float32)
        bf, cf = b.ravel(), c.ravel()
        return Contender(
            "scipy", _zero_then(c, lambda: _sparsetools.csr_matvecs(m, k, n, ip, ix, d, bf, cf)), lambda: c, 0.0,
            LIBRARY["scipy"],
        )  # fmt: skip
    rows = np.repeat(np.arange(m, dtype=np.int32), np.diff(ip))
    X, Y, dd = mb.X, mb.Y, mb.dense
    out = np.zeros(a.nnz, np.float32)
    g1, g2 = np.empty((chunk, dd), np.float32), np.empty((chunk, dd), np.float32)

    def sddmm() -> None:
        for s in range(0, a.nnz, chunk):
            e = min(s + chunk, a.nnz)
            n_ = e - s
            np.take(X, rows[s:e], axis=0, out=g1[:n_])
            np.take(Y, ix[s:e], axis=0, out=g2[:n_])
            np.einsum("ij,ij->i", g1[:n_], g2[:n_], out=out[s:e])
        np.multiply(out, d, out=out)

    return Contender("scipy", sddmm, lambda: out, 0.0, LIBRARY["scipy"])


def verify(mb: MatrixBench, c: Contender) -> str:
    """Call once and compare with the scipy reference; '' when it matches (same tolerance as ours)."""
    c.call()
    got, want = np.asarray(c.result(), dtype=np.float32)[: len(mb.ref)], np.asarray(mb.ref, dtype=np.float32)
    if got.shape != want.shape:
        return f"{c.name}: result shape {got.shape}, expected {want.shape}"
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1.0)
    err = float(np.abs(got - want).max()) if want.size else 0.0
    if not np.isfinite(err) or err > 1e-3 * scale:
        return f"{c.name}: result differs from scipy by {err:.3g} (scale {scale:.3g})"
    return ""


def contenders_for(
    mb: MatrixBench,
    ours: SuperSchedule | None,
    bestformat: SuperSchedule | None,
    default_csr: bool = True,
    mkl: bool = True,
) -> tuple[dict[str, Contender], dict[str, str]]:
    """The contenders of one (operator, matrix), each verified; also why any is missing."""
    out: dict[str, Contender] = {}
    why: dict[str, str] = {}
    prep: list[tuple[str, Callable[[], Contender | None]]] = []
    if ours is not None:
        prep.append(("ours", lambda: prepare_ours(mb, ours, "ours")))
    if mkl:
        prep.append(("mkl", lambda: prepare_mkl(mb)))
    prep += [("torch", lambda: prepare_torch(mb)), ("scipy", lambda: prepare_scipy(mb))]
    if bestformat is not None:
        prep.append(("bestformat", lambda: prepare_ours(mb, bestformat, "bestformat")))
    if default_csr:
        prep.append(("default_csr", lambda: prepare_ours(mb, default_config(mb.op, mb.dense), "default_csr")))
    for name, make in prep:
        c = make()
        if c is None:
            why[name] = "not available for this operator / matrix"
            continue
        bad = verify(mb, c)
        if bad:
            why[name] = bad
            continue
        out[name] = c
    return out, why


def side_by_side(mb: MatrixBench, contenders: dict[str, Contender], rounds: int = 2, timing: Timing = SIDE_TIMING) -> dict[str, float]:  # fmt: skip
    """Seconds per call of each contender: the fastest repeat of `time_callable` over `rounds`
    interleaved rounds (neighbours' work only ever adds time, so on a shared machine the minimum is
    the least disturbed estimate; used for every contender alike)."""
    threads()
    out: dict[str, float] = defaultdict(lambda: math.inf)
    for _ in range(rounds):
        for name, c in contenders.items():
            out[name] = min(out[name], min(time_callable(c.call, timing)))
    return {k: float(v) for k, v in out.items()}


def speedup_over_best(times: dict[str, float], baselines: Sequence[str] = HEADLINE) -> tuple[float, str]:
    """(time of the fastest baseline / time of ours, that baseline's name) for one matrix; the
    headline figure is the geomean of the first element over matrices. nan when ours did not run;
    a baseline that did not run (absent or inf) is not the best."""
    ours = times.get("ours", math.inf)
    ran = {b: times[b] for b in baselines if math.isfinite(times.get(b, math.inf))}
    if not math.isfinite(ours) or ours <= 0 or not ran:
        return math.nan, ""
    best = min(ran, key=lambda b: ran[b])
    return ran[best] / ours, best


def break_even_runs(prep_ours: float, t_ours: float, prep_base: float, t_base: float) -> float:
    """Calls after which ours, having paid its extra preparation (format conversion) up front, has
    caught up with the baseline (which paid its own, e.g. MKL's inspector): 0 when ours prepares no
    slower, inf when ours is not faster per call."""
    extra = prep_ours - prep_base
    if extra <= 0:
        return 0.0 if t_ours <= t_base else math.inf
    if t_ours >= t_base:
        return math.inf
    return float(math.ceil(extra / (t_base - t_ours)))


def geomean(xs: Sequence[float]) -> float:
    """Geometric mean of the finite positive values (nan when there are none)."""
    v = np.asarray([x for x in xs if math.isfinite(x) and x > 0], dtype=float)
    return float(np.exp(np.log(v).mean())) if v.size else math.nan


# -- BestFormat ------------------------------------------------------------------------------------
def best_fixed_config(groups: list[Group]) -> SuperSchedule | None:
    """The configuration with the best mean normalised throughput over the groups (counted 0
    where it was not measured or could not apply), among those measured on at least half of them
    (what a model's config.json records as its training data's BestFormat)."""
    ranked = _store_ranking(groups, min_share=0.5)
    return ranked[0] if ranked else None


def _store_ranking(groups: list[Group], min_share: float) -> list[SuperSchedule]:
    score: dict[str, float] = defaultdict(float)
    seen: dict[str, int] = defaultdict(int)
    cfgs: dict[str, SuperSchedule] = {}
    for g in groups:
        best = g.best()
        for c, t in zip(g.configs, g.latencies):
            key = c.to_json()
            cfgs[key] = c
            seen[key] += 1
            score[key] += best / t
    ok = [k for k in score if seen[k] >= max(1.0, len(groups) * min_share)]
    return [cfgs[k] for k in sorted(ok, key=lambda k: -score[k] / len(groups))]


def bestformat_by_op(groups: list[Group]) -> dict[str, str]:
    """BestFormat of every operator present, as configuration JSON (kept in a model's config.json)."""
    out = {}
    for op in sorted({g.op for g in groups}):
        c = best_fixed_config([g for g in groups if g.op == op])
        if c is not None:
            out[op] = c.to_json()
    return out


def bestformat_candidates(groups: list[Group], op: str, dense: int, k: int = 12) -> list[SuperSchedule]:
    """Candidates for BestFormat: the k configurations (any format, serial or parallel) with the best
    mean normalised throughput over the training groups of `op` where they were measured on at
    least a tenth of them, at this N / D, plus the default CSR kernel.

    Why a short list: measuring the whole pool (240 configurations) on large training matrices
    would cost more than the search it is compared with; the store already ranks the pool on
    every training matrix, and `rank_fixed_configs` then decides on matrices of the test size."""
    out: list[SuperSchedule] = []
    for c in _store_ranking([g for g in groups if g.op == op], min_share=0.1):
        try:
            c = with_dense(c, dense)
        except Exception:  # vec no longer divides N
            continue
        if c not in out:
            out.append(c)
        if len(out) >= k:
            break
    d = default_config(op, dense)
    return out + ([d] if d not in out else [])


def rank_fixed_configs(
    benches: Sequence[MatrixBench], candidates: Sequence[SuperSchedule], timing: Timing = Timing(repeat=3)
) -> list[tuple[SuperSchedule, float]]:
    """Measure every candidate on every (training) matrix and rank them by mean normalised
    throughput (fastest-on-that-matrix / own time, 0 where it could not run): BestFormat is the
    first of the ranking that applies to a test matrix (`fixed_for`)."""
    lat = np.full((len(candidates), len(benches)), np.inf)
    for j, mb in enumerate(benches):
        for i, c in enumerate(candidates):
            out: Outcome = mb.run(c, timing)
            lat[i, j] = out.median
    best = lat.min(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        norm = np.where(np.isfinite(lat), best[None, :] / lat, 0.0)
    score = norm.mean(axis=1) if benches else np.zeros(len(candidates))
    order = np.argsort(-score, kind="stable")
    return [(candidates[i], float(score[i])) for i in order if score[i] > 0]


def fixed_for(ranking: Sequence[tuple[SuperSchedule, float]] | Sequence[SuperSchedule], a: Any) -> SuperSchedule | None:
    """The best-ranked fixed configuration that applies to matrix `a` (None if none does)."""
    for item in ranking:
        c = item[0] if isinstance(item, tuple) else item
        if not config_reason(c, a):
            return c
    return None


def confirm_best(
    mb: MatrixBench,
    measured: list[tuple[SuperSchedule, float]],
    k: int = 3,
    rounds: int = 2,
    timing: Timing = Timing(repeat=5, min_repeat_ms=10.0),
) -> SuperSchedule | None:
    """Re-time the k fastest configurations a search measured (interleaved rounds) and keep the fastest.

    Why: a search's latencies were taken one at a time on a shared machine, and the minimum of
    20 noisy numbers favours a lucky one. No new configuration is measured, so the search's
    budget stands; the chosen one is then timed afresh beside the baselines (`side_by_side`).
    """
    ok = sorted((t, i) for i, (_c, t) in enumerate(measured) if math.isfinite(t))[:k]
    if not ok:
        return None
    best = {i: math.inf for _t, i in ok}
    for _ in range(rounds):
        for i in best:
            out = mb.run(measured[i][0], timing, verify=False)
            best[i] = min(best[i], min(out.latencies) if out.status == "ok" and out.latencies else math.inf)
    return measured[min(best, key=lambda i: best[i])][0]
