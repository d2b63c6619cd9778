"""A run's best schedules of its bf16 / int8 convolutions against their channel-block register
blocks (`networks.register_blocks.channel_block_decisions`), timed side by side as the rounds time.

Why: a tensorized convolution's design space tiles its kernel calls with inner tiles of up to 56
sums; `register_blocks` now measures a block of 2 output-channel blocks x a row of pixels beside a
task's first round. This bench shows, on the packed convolutions of a stored network run, what that
form does against the run's fastest design-space schedule (`extra.form` unset): each task's best
and its blocks (one a sketch) measured in `--rounds` fresh runner processes (MetaSchedule's local
runner, the operator's inputs flushed from the caches before each run, as `tune-model` times its
tasks), the median of the rounds. The kernels link LLVM IR, so they are timed in runner processes,
not loaded here.

    python bench/channel_blocks.py --db STORE [--tasks fused_conv2d_NCHWc_bf1610_add10_add11_relu81,...]

Prints a table (GFLOP/s by the task's FLOP count) and `SUMMARY`: summed over the tasks, each
weighted by its calls in the network, the seconds of the bests against their fastest blocks.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="a tune-model --precision bf16|int8 run's store (SQLite; not .xz)")
    ap.add_argument(
        "--tasks", default="", help="comma-separated task names (without 'net/'); default: every packed convolution"
    )
    ap.add_argument("--rounds", type=int, default=4, help="fresh runner processes, each timing every schedule once")
    args = ap.parse_args()

    import numpy as np
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.script import from_source

    from autosearch.backends.tvm.lowp import register_dot_kernels
    from autosearch.backends.tvm.measure import Measurer
    from autosearch.backends.tvm.space import replayed
    from autosearch.backends.tvm.target import host_cpu, host_target
    from autosearch.networks.register_blocks import packed_conv_steps, register_blocks, simd_registers
    from autosearch.networks.spatial import register_lanes
    from autosearch.networks.tune import network_evaluator

    register_dot_kernels()
    target = host_target()
    evaluator = network_evaluator(target)
    con = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
    rows = con.execute("select id, name, ir, flops, params from workloads order by flops desc").fetchall()
    wanted = {f"net/{t}" for t in args.tasks.split(",") if t}
    tasks = [r for r in rows if (r[1] in wanted if wanted else r[3])]
    if wanted and len(tasks) != len(wanted):
        sys.exit(f"channel_blocks: not in {args.db}: {', '.join(sorted(wanted - {r[1] for r in tasks}))}")
    print(f"# {args.db} on {host_cpu()}, {args.rounds} rounds, inputs flushed")
    print(
        "| task | calls | best in its run (us) | best side by side (us) | fastest block (us) | GFLOP/s best / block |"
    )
    print("|---|---|---|---|---|---|")
    best_s = block_s = 0.0
    timed = 0
    for wid, name, ir, flops, params in tasks:
        mod = from_source(ir)
        if not packed_conv_steps(mod):
            if wanted:
                sys.exit(f"channel_blocks: {name} is no packed convolution")
            continue
        row = con.execute(
            "select schedule, median from measurements where workload_id=? and status='ok' and "
            "json_extract(extra, '$.form') is null order by median limit 1",
            (wid,),
        ).fetchone()
        if row is None:
            continue
        best = replayed(mod, row[0])
        blocks = register_blocks(mod, target, register_lanes(target), simd_registers(target))
        scheds = [best, *blocks]
        cands = [MeasureCandidate(s, ArgInfo.from_entry_func(s.mod, remove_preproc=True)) for s in scheds]
        lats: list[list[float]] = [[] for _ in scheds]
        for _ in range(args.rounds):
            measurer = Measurer(target, evaluator)
            try:
                for k, res in enumerate(measurer.measure(cands)):
                    if res.status == "ok":
                        lats[k].append(float(np.median(res.latencies)))
            finally:
                measurer.close()
        med = [float(np.median(v)) if v else float("inf") for v in lats]
        calls = int(json.loads(params).get("weight", 1))
        timed += 1
        fastest = min(med[1:], default=float("inf"))
        best_s += calls * med[0]
        block_s += calls * min(med[0], fastest)
        print(
            f"| {name[4:]} | {calls} | {row[1] * 1e6:.1f} | {med[0] * 1e6:.1f} | {fastest * 1e6:.1f} "
            f"| {flops / med[0] / 1e9:.0f} / {flops / fastest / 1e9:.0f} |",
            flush=True,
        )
    print(
        f"SUMMARY {timed} tasks, weighted by calls: bests {best_s * 1e3:.2f} ms, with the blocks where faster "
        f"{block_s * 1e3:.2f} ms ({best_s / block_s:.2f}x)"
    )


if __name__ == "__main__":
    main()
