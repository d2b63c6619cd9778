"""Where the time of scoring a candidate with `tlp` goes: reading the trace out of TVM, tokenizing it,
and the network, each timed alone on the same stored schedules (issue 11's 20,000 candidates/s).

Search holds MetaSchedule schedules, so a candidate's trace must first leave TVM. This times the
ways there are, on schedules replayed from the store:
- `trace_json` (what autosearch stores and tokenizes: `trace.as_json()` + plain-JSON conversion);
- `trace.as_json()` alone, and the C++ `TraceAsJSON` call alone (the rest is Python walking TVM
  containers, one FFI call per element);
- `ffi.ToJSONGraphString` and `ffi.ReprPrint` (one string from one C++ call each);
then trace-prefix tokens read from a live schedule's decisions (search.featurize, the path of
`trace-prefix-tokens` models in tuning; cold: each new sketch builds its DecisionSpace once),
the tokenizer (stored trace text -> token matrix, a fresh tokenizer and a warm one) and the
tlp network alone (untrained weights: the speed does not depend on them): one network at 1 and 2
threads, and the default number of networks (three) at 2 threads.

Last, scoring without TVM or text (`features.decision_space`): per workload, the design space of
one stored trace as decision vectors; `--decisions N` random vectors of it are tokenized
(`trace-prefix-tokens`, the instructions before post-processing) and scored by the network, 1,024
at a time (as a search scores a population): each step alone and both end to end; and the same
vectors scored from the model's tables (`TLPModel.predict_space`: each token row's first layers
tabulated per knob option, no tokens; the same scores, checked here). Building each workload's
DecisionSpace, and its tables for a model (each once per sketch in a tuning run), is timed apart.

    python bench/scoring_breakdown.py --db data/reference.db.xz --n 300
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _rate(items: list[Any], fn: Callable[[Any], Any]) -> float:
    t = time.perf_counter()
    for x in items:
        fn(x)
    return len(items) / (time.perf_counter() - t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="data/reference.db.xz", help="a store (.db or .db.xz) with TVM records")
    ap.add_argument("--n", type=int, default=300, help="schedules replayed from the store for the trace timings")
    ap.add_argument("--tokens", type=int, default=4000, help="stored traces for the tokenizer and network timings")
    ap.add_argument("--decisions", type=int, default=4000, help="decision vectors per workload, decision-space path")
    ap.add_argument("--workloads", type=int, default=24, help="workloads of the decision-space path")
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    import tvm
    import tvm_ffi
    from tvm.s_tir.schedule import _ffi_api

    from autosearch.backends.tvm.space import trace_json
    from autosearch.backends.tvm.target import host_target
    from autosearch.features.per_store import candidate_from_trace
    from autosearch.features.trace_tokens import FEATURE_WIDTH, TraceTokenizer
    from autosearch.models.base import FeatureBatch
    from autosearch.models.tlp import TLPModel, TLPNet
    from autosearch.training.dataset import resolve_db
    from prediction_quality import _sample_records

    db = resolve_db(args.db)
    print(f"target {host_target()}; load average at start {os.getloadavg()[0]:.2f}")
    recs = _sample_records(db, args.n)
    mods: dict[str, Any] = {}
    scheds = []
    for w, tr in recs:
        mod = mods.setdefault(w.key, tvm.script.from_source(w.ir))  # type: ignore[attr-defined]
        scheds.append(candidate_from_trace(mod, tr).sch)
    graph = tvm_ffi.get_global_func("ffi.ToJSONGraphString")
    repr_print = tvm_ffi.get_global_func("ffi.ReprPrint")
    rows: list[tuple[str, float]] = [
        ("trace_json (as_json + plain JSON)", _rate(scheds, trace_json)),
        ("trace.as_json()", _rate(scheds, lambda s: s.trace.as_json())),
        ("TraceAsJSON, C++ only", _rate(scheds, lambda s: _ffi_api.TraceAsJSON(s.trace, False))),
        ("TraceAsJSON + ToJSONGraphString", _rate(scheds, lambda s: graph(_ffi_api.TraceAsJSON(s.trace, False), None))),
        ("ReprPrint(trace), one string", _rate(scheds, lambda s: repr_print(s.trace))),
    ]
    from types import SimpleNamespace

    from autosearch.search.featurize import _PrefixTokenFeaturizer

    live = _PrefixTokenFeaturizer()
    ctxs = {id(m): SimpleNamespace(mod=m) for m in mods.values()}
    by_mod = [(ctxs[id(mods[w.key])], s) for (w, _), s in zip(recs, scheds)]  # type: ignore[attr-defined]
    for label in ("cold", "warm"):  # cold: each new sketch builds its DecisionSpace; warm: lookups only
        rows.append(
            (
                f"prefix tokens from decisions, {label}",
                _rate(by_mod, lambda cs: live(cs[0], [SimpleNamespace(sch=cs[1])])),
            )
        )
    texts = _sample_records(db, args.tokens)
    tok = TraceTokenizer()
    rows.append(("tokenize stored text, cold", _rate(texts, lambda r: tok(r[1], r[0].ir, r[0].flops))))
    rows.append(("tokenize stored text, warm", _rate(texts, lambda r: tok(r[1], r[0].ir, r[0].flops))))
    mats = [tok(t, w.ir, w.flops) for w, t in texts]  # type: ignore[attr-defined]
    model = TLPModel()
    default_members = model.members
    batch = FeatureBatch.from_list(mats)
    for members, threads in ((1, 1), (1, 2), (default_members, 2)):
        model.nets = [TLPNet(FEATURE_WIDTH) for _ in range(members)]
        model.net, model.n_features, model.threads = model.nets[0], FEATURE_WIDTH, threads
        with torch.no_grad():
            model._predict(batch)  # warm-up
            t = time.perf_counter()
            model._predict(batch)
        rows.append(
            (f"tlp network alone, {members} net(s), {threads} thread(s)", len(mats) / (time.perf_counter() - t))
        )
    print(
        f"\n{len(scheds)} replayed schedules, {len(mats)} stored traces (mean {np.mean([m.shape[0] for m in mats]):.1f} tokens)"
    )
    print(f"{'step':40s} {'per s':>10s} {'us each':>10s}")
    for name, rate in rows:
        print(f"{name:40s} {rate:10,.0f} {1e6 / rate:10.1f}")
    per_s = dict(rows)
    tokenize = 1 / per_s["tokenize stored text, warm"]
    one_net = 1 / (tokenize + 1 / per_s["tlp network alone, 1 net(s), 2 thread(s)"])
    text_path = 1 / (tokenize + 1 / per_s[f"tlp network alone, {default_members} net(s), 2 thread(s)"])
    live_path = 1 / (1 / per_s["trace_json (as_json + plain JSON)"] + 1 / text_path)
    dec = decision_space_rates(db, args.decisions, args.workloads, default_members)
    print(f"\ndecision-space path: {dec['workloads']} workloads x {args.decisions} random decision vectors")
    print(f"{'step':40s} {'per s':>10s} {'us each':>10s}")
    for k in sorted({1, default_members}):
        for name in (f"network, {k} net(s)", f"end to end, {k} net(s)"):
            if name.startswith("network") and k == 1:
                print(f"{'tokens':40s} {dec['tokens']:10,.0f} {1e6 / dec['tokens']:10.1f}")
            print(f"{name:40s} {dec[name]:10,.0f} {1e6 / dec[name]:10.1f}")
    for k in sorted({1, default_members}):
        name = f"tables, {k} net(s)"
        print(f"{name:40s} {dec[name]:10,.0f} {1e6 / dec[name]:10.1f}")
    print(f"{'mean tokens per candidate':40s} {dec['mean_tokens']:10.1f}")
    print(f"{'build a DecisionSpace (ms per sketch)':40s} {'':10s} {dec['build_ms'] * 1e3:10.1f}")
    for k in sorted({1, default_members}):
        label = f"build its tables, {k} net(s) (ms)"
        print(f"{label:40s} {'':10s} {dec[f'tables_ms, {k}'] * 1e3:10.1f}")
    print(f"tables vs tokens + network: largest relative score difference {dec['tables_rel_diff']:.1e}")
    d_one, d_all = dec["end to end, 1 net(s)"], dec[f"end to end, {default_members} net(s)"]
    t_one, t_all = dec["tables, 1 net(s)"], dec[f"tables, {default_members} net(s)"]
    print(
        f"SUMMARY tlp on trace-prefix tokens from decision vectors, features + model: {t_all:,.0f}/s with "
        f"{default_members} networks from tables ({d_all:,.0f}/s through tokens, ratio {t_all / d_all:.2f}), "
        f"{t_one:,.0f}/s with one ({d_one:,.0f}/s through tokens); goal 20,000/s"
    )
    print(
        f"SUMMARY tlp scoring ({default_members} networks, the default), features + model: {text_path:,.0f}/s from "
        f"stored trace text ({one_net:,.0f}/s with one network), {live_path:,.0f}/s from a live schedule (trace_json "
        f"first); goal 20,000/s; the C++ trace serialisation alone is "
        f"{1e6 / per_s['TraceAsJSON, C++ only']:.0f} us of the 50 us a candidate may take"
    )
    return 0


def decision_space_rates(db: str, n: int, n_workloads: int, members: int, chunk: int = 1024) -> dict[str, float]:
    """Candidates/s of the decision-space path: tokens of random decision vectors, the network, and
    both end to end, `chunk` vectors at a time (as a search scores a population)."""
    import numpy as np
    import torch

    from autosearch.features.decision_space import DecisionSpace
    from autosearch.features.trace_tokens import PREFIX_FEATURE_WIDTH as FEATURE_WIDTH
    from autosearch.models.base import FeatureBatch
    from autosearch.models.tlp import TLPModel, TLPNet
    from autosearch.store.db import Store

    with Store(db, readonly=True) as st:
        reps = {}
        for w in st.workloads(backend="tvm"):
            m = next(iter(st.measurements(workload_key=w.key, limit=1)), None)
            if m is not None:
                reps[w.key] = (w, m.schedule)
    keys = sorted(reps)[:: max(1, len(reps) // n_workloads)][:n_workloads]
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    spaces = [DecisionSpace(reps[k][1], reps[k][0].ir, reps[k][0].flops) for k in keys]
    build = (time.perf_counter() - t) / len(spaces)
    chunks = [(sp, x[c : c + chunk]) for sp in spaces for x in [sp.sample(n, rng)] for c in range(0, n, chunk)]
    total = len(spaces) * n

    def batch(tk: np.ndarray) -> FeatureBatch:
        return FeatureBatch(tk.reshape(-1, FEATURE_WIDTH), np.arange(tk.shape[0] + 1, dtype=np.int64) * tk.shape[1])

    for sp, x in chunks[: len(spaces)]:  # warm-up
        sp.tokens(x[:64])
    t = time.perf_counter()
    toks = [sp.tokens(x) for sp, x in chunks]
    out = {"tokens": total / (time.perf_counter() - t), "build_ms": build, "workloads": float(len(spaces))}
    out["mean_tokens"] = float(np.mean([tk.shape[1] for tk in toks]))
    for k in sorted({1, members}):
        model = TLPModel(threads=2, members=k)
        model.nets = [TLPNet(FEATURE_WIDTH) for _ in range(k)]
        model.net, model.n_features = model.nets[0], FEATURE_WIDTH
        with torch.no_grad():
            model._predict(batch(toks[0]))  # warm-up
            t = time.perf_counter()
            for tk in toks:
                model._predict(batch(tk))
            out[f"network, {k} net(s)"] = total / (time.perf_counter() - t)
            t = time.perf_counter()
            for sp, x in chunks:
                model._predict(batch(sp.tokens(x)))
            out[f"end to end, {k} net(s)"] = total / (time.perf_counter() - t)
            model._tables.clear()
            t = time.perf_counter()
            for sp in spaces:  # the tables of every sketch, once per model (as in a tuning run)
                model.predict_space(sp, sp.current)
            out[f"tables_ms, {k}"] = (time.perf_counter() - t) / len(spaces)
            t = time.perf_counter()
            for sp, x in chunks:
                model.predict_space(sp, x)
            out[f"tables, {k} net(s)"] = total / (time.perf_counter() - t)
            sp, x = chunks[0]
            ref = model._predict(batch(sp.tokens(x)))
            diff = float(np.abs(model.predict_space(sp, x) - ref).max() / max(np.abs(ref).max(), 1e-12))
            out["tables_rel_diff"] = max(out.get("tables_rel_diff", 0.0), diff)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
