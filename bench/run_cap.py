"""What the run cap saves: stored schedules that hung past the runner's timeout, replayed twice.

A tuning run's picks can hang (a softmax schedule whose run takes minutes); each one used to wait
out the runner's 30 s timeout. `TuneSettings.run_cap` cuts a run at 10x the run's median run wall
time (at least 5 s) once 8 runs succeeded. This replays schedules a store recorded as runner
timeouts, side by side in one process: once under the fixed timeout, once under the cap computed
from 8 of the same workload's ok schedules, and prints the wall time of each pass.

    python bench/run_cap.py --db data/reference.db.xz --workload softmax/2048x2048 --hung 4
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="data/reference.db.xz", help="a store (.db or .db.xz) with runner timeouts")
    ap.add_argument("--workload", default="softmax/2048x2048", help="workload whose hung schedules are replayed")
    ap.add_argument("--hung", type=int, default=4, help="hung schedules replayed (each costs the timeout)")
    ap.add_argument("--cap", type=float, default=10.0, help="the cap factor (TuneSettings.run_cap)")
    args = ap.parse_args(argv)

    import numpy as np
    import tvm

    from autosearch.backends.tvm.build import pool_builder
    from autosearch.backends.tvm.measure import EvaluatorSettings, Measurer, adaptive_run_timeout
    from autosearch.backends.tvm.target import host_target
    from autosearch.features.per_store import candidate_from_trace
    from autosearch.store import Store
    from autosearch.training.dataset import resolve_db

    with Store(resolve_db(args.db), readonly=True) as st:
        wl = next((w for w in st.workloads() if w.name == args.workload), None)
        if wl is None:
            print(f"error: {args.workload} is not in {args.db}", file=sys.stderr)
            return 2
        rows = list(st.measurements(workload_key=wl.key))
    hung = [r.schedule for r in rows if r.status == "timeout" and "LocalRunner" in r.error][: args.hung]
    ok = [r.schedule for r in rows if r.status == "ok"][:8]
    if not hung or len(ok) < 8:
        print(f"error: {args.workload} has {len(hung)} runner timeouts and {len(ok)} ok records (need 1 and 8)")
        return 2
    target = host_target()
    print(f"target {target}; load average at start {os.getloadavg()[0]:.2f}")
    mod = tvm.script.from_source(wl.ir)  # type: ignore[attr-defined]
    m = Measurer(target, EvaluatorSettings(number=1, repeat=3, min_repeat_ms=10))
    builder = pool_builder()
    try:
        cands = [candidate_from_trace(mod, t) for t in ok]
        res = m.run_built(cands, builder.build(cands, target))
        secs = [r.seconds for r in res if r.status == "ok"]
        cap = adaptive_run_timeout(secs, m.run_timeout, args.cap)
        lat = float(np.median([np.median(r.latencies) for r in res if r.status == "ok"]))
        print(
            f"{len(secs)} ok runs, median run wall {np.median(secs):.3f} s -> cap {cap:.1f} s; their median latency {lat * 1e3:.2f} ms"
        )
        table = []
        for label, limit in (("fixed timeout", None), ("run cap", cap)):
            cands = [candidate_from_trace(mod, t) for t in hung]
            built = builder.build(cands, target)
            t0 = time.perf_counter()
            out = m.run_built(cands, built, timeout=limit)
            wall = time.perf_counter() - t0
            stats = [f"{r.status} ({np.median(r.latencies) / lat:.0f}x)" if r.latencies else r.status for r in out]
            table.append((label, limit or m.run_timeout, wall, stats, [r.seconds for r in out]))
    finally:
        m.close()
    print("\n| pass | limit s | wall s | statuses (latency / the ok runs' median) | per run s |\n|---|---|---|---|---|")
    for label, limit, wall, stats, per in table:
        print(f"| {label} | {limit:.1f} | {wall:.1f} | {', '.join(stats)} | {', '.join(f'{x:.1f}' for x in per)} |")
    (_, _, w_fixed, s_fixed, _), (_, _, w_cap, s_cap, _) = table
    print(
        f"\nSUMMARY run cap on {len(hung)} hung {args.workload} schedules: wall fixed timeout / cap = "
        f"{w_fixed / w_cap:.2f}x ({w_fixed:.0f} s vs {w_cap:.0f} s); "
        f"timeouts {sum(x == 'timeout' for x in s_fixed)} vs {sum(x == 'timeout' for x in s_cap)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
