"""Benchmark (not a test): measured candidates per second of `autosearch collect` vs plain
MetaSchedule (`tune_tir`, stock LocalBuilder, random cost model) on the same workloads and trial
count, side by side in one run; then the peak memory of a longer collection.

    .venv/bin/python bench/collect_throughput.py --trials 32 --memory-schedules 2000

Both sides use the same evaluator settings (number=1, repeat=3, min_repeat_ms=10). Each side runs
in its own fresh process, so both pay the one-time TVM start-up (tensor intrinsics import) once.
The stock builder gets a 600 s build timeout: with its default 30 s, every build of a batch
times out on a loaded 2-core machine (the per-worker tensor-intrinsics import alone exceeds it),
and the comparison would count failures as measurements.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap

WORKLOADS = ["batch_matmul/1x128x128x128", "conv2d_nhwc/1x56x56x64/k1s1p0/64", "softmax/256x256"]

_OURS = """
import json, sys, time, resource
from autosearch.collect import collect
from autosearch.backends.tvm.measure import EvaluatorSettings
from autosearch.backends.tvm.target import host_target
from autosearch.store import Store
from autosearch.workloads import resolve_workloads
wls, n, db = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3]
t = time.perf_counter()
with Store(db) as s:
    out = collect(resolve_workloads(wls), s, host_target(), per_workload=n, batch_size=16,
                  evaluator=EvaluatorSettings(number=1, repeat=3, min_repeat_ms=10), progress=False)
peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"measured": out.measured, "ok": out.ok, "seconds": time.perf_counter() - t, "peak_mb": peak / 1024}))
"""

_STOCK = """
import json, sys, time, tempfile
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, LocalRunner
from autosearch.backends.tvm.target import host_target
from autosearch.workloads import resolve_workloads
wls, n = sys.argv[1].split(","), int(sys.argv[2])
target = host_target()
t = time.perf_counter(); measured = 0; ok = 0
for wl in resolve_workloads(wls):
    with tempfile.TemporaryDirectory() as wd:
        db = ms.tune_tir(wl.mod(), target, wd, max_trials_global=n, num_trials_per_iter=16,
                         builder=ms.builder.LocalBuilder(max_workers=2, timeout_sec=600),
                         runner=LocalRunner(evaluator_config=EvaluatorConfig(number=1, repeat=3, min_repeat_ms=10)),
                         cost_model="random", num_tuning_cores=2)
        recs = db.get_all_tuning_records()
        measured += len(recs); ok += sum(1 for r in recs if r.run_secs and float(r.run_secs[0]) < 1e9)
print(json.dumps({"measured": measured, "ok": ok, "seconds": time.perf_counter() - t}))
"""


def _run(code: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark side failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=32, help="schedules per workload, both sides")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument(
        "--memory-schedules", type=int, default=0, help="also collect this many schedules and report peak RSS"
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours = _run(_OURS, a.workloads, str(a.trials), f"{tmp}/ours.db")
        stock = _run(_STOCK, a.workloads, str(a.trials))
        rows = [("autosearch collect", ours), ("MetaSchedule tune_tir (stock builder, random model)", stock)]
        print(f"{'side':<55} {'measured':>9} {'ok':>5} {'seconds':>9} {'cand/s':>8}")
        for name, r in rows:
            print(
                f"{name:<55} {r['measured']:>9} {r['ok']:>5} {r['seconds']:>9.1f} {r['measured'] / r['seconds']:>8.2f}"
            )
        ratio = (ours["measured"] / ours["seconds"]) / (stock["measured"] / stock["seconds"])
        print(f"summary: autosearch collect is {ratio:.2f}x MetaSchedule's measured candidates/s (target >= 3x)")
        if a.memory_schedules:
            n_wl = len(a.workloads.split(","))
            per = -(-a.memory_schedules // n_wl)
            mem = _run(_OURS, a.workloads, str(per), f"{tmp}/mem.db")
            print(f"memory: {mem['measured']} schedules collected, peak RSS {mem['peak_mb']:.0f} MB (target < 2048 MB)")


if __name__ == "__main__":
    main()
