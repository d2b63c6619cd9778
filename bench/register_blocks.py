"""A run's best schedules of its matmul tasks against their register blocks, weights plain and
layout-free, timed cold side by side in one process.

Why: `networks.register_blocks` measures a task's register blocks beside its first round, and the
graph passes now mark fused tasks' weights layout-free (`RewriteLayout` packs them per schedule).
This bench shows, on the tasks of a stored network run, what each of the two does to the same
schedules: the run's fastest design-space schedule (`extra.form` unset), replayed and
post-processed with the weights plain and layout-free, and the task's register blocks both ways.

    python bench/register_blocks.py --db STORE --tasks fused_matmul221_add311,fused_matmul211_add341

Prints a table (GFLOP/s by the task's FLOP count, cold: the inputs but the first flushed from the
caches before each call, as the rounds time) and `SUMMARY`: summed over the tasks, the seconds of
the plain best against the fastest of the other three.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="a tune-model run's store (SQLite; not .xz)")
    ap.add_argument("--tasks", required=True, help="comma-separated task names (without 'net/')")
    ap.add_argument("--repeat", type=int, default=30, help="cold calls timed per schedule (median)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)

    import tvm
    import tvm.script
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace

    from autosearch.backends.tvm.build import fast_build
    from autosearch.backends.tvm.space import replay_postprocessed
    from autosearch.networks.register_blocks import register_blocks, simd_registers
    from autosearch.networks.spatial import built_args, cold_seconds, register_lanes

    con = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
    print("| task | plain best | plain blocks | layout-free best | layout-free blocks |")
    print("|---|---|---|---|---|")
    plain_s = other_s = 0.0
    for task in args.tasks.split(","):
        row = con.execute("select id, ir, flops from workloads where name=?", (f"net/{task}",)).fetchone()
        if row is None:
            sys.exit(f"register_blocks: no task {task!r} in {args.db}")
        wid, ir, flops = row
        best = con.execute(
            "select target, schedule from measurements where workload_id=? and status='ok' and "
            "json_extract(extra, '$.form') is null order by median limit 1",
            (wid,),
        ).fetchone()
        if best is None:
            sys.exit(f"register_blocks: {task} has no measured design-space schedule")
        target = tvm.target.Target(json.loads(best[0]))
        insts, decisions = json.loads(best[1])
        prefix = [insts[: next(i for i, ins in enumerate(insts) if ins[0] == "EnterPostproc")], decisions]
        mod = tvm.script.from_source(ir)
        func = mod["main"]
        weights = [i for i, p in enumerate(func.params) if p.name.startswith("param_")]
        cells: list[str] = []
        seconds: list[float] = []
        for m in (mod, tvm.IRModule({"main": func.with_attr("layout_free_buffers", weights)})):
            post = ms.TuneContext(mod=m, target=target, space_generator="post-order-apply").space_generator.postprocs
            picked = replay_postprocessed(m, post, lambda s, p=prefix: Trace.apply_json_to_schedule(p, s))
            blocks = register_blocks(m, target, register_lanes(target), simd_registers(target))
            for group in ([picked] if picked is not None else [], blocks):
                times = []
                for sch in group:
                    lib = fast_build(sch.mod, target, None)
                    times.append(cold_seconds(lib, lib.entry_name, built_args(sch.mod), args.repeat))
                seconds.append(min(times) if times else float("inf"))
                cells.append(" / ".join(f"{flops / t / 1e9:.0f}" for t in times) or "-")
        plain_s += seconds[0]
        other_s += min(seconds[1:])
        print(f"| {task} | " + " | ".join(cells) + " |", flush=True)
    print(f"SUMMARY plain best / fastest of blocks and layout-free weights, summed seconds: {plain_s / other_s:.2f}x")


if __name__ == "__main__":
    main()
