"""Where the time of scoring a candidate with `tlp` goes: reading the trace out of TVM, tokenizing it,
and the network, each timed alone on the same stored schedules (issue 11's 20,000 candidates/s).

Search holds MetaSchedule schedules, so a candidate's trace must first leave TVM. This times the
ways there are, on schedules replayed from the store:
- `trace_json` (what autosearch stores and tokenizes: `trace.as_json()` + plain-JSON conversion);
- `trace.as_json()` alone, and the C++ `TraceAsJSON` call alone (the rest is Python walking TVM
  containers, one FFI call per element);
- `ffi.ToJSONGraphString` and `ffi.ReprPrint` (one string from one C++ call each);
then the tokenizer (stored trace text -> token matrix, a fresh tokenizer and a warm one) and the
tlp network alone (untrained weights: the speed does not depend on them): one network at 1 and 2
threads, and the default number of networks (three) at 2 threads.

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
    print(
        f"SUMMARY tlp scoring ({default_members} networks, the default), features + model: {text_path:,.0f}/s from "
        f"stored trace text ({one_net:,.0f}/s with one network), {live_path:,.0f}/s from a live schedule (trace_json "
        f"first); goal 20,000/s; the C++ trace serialisation alone is "
        f"{1e6 / per_s['TraceAsJSON, C++ only']:.0f} us of the 50 us a candidate may take"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
