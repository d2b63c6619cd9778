"""Tasks whose reductions run along rows (softmax, LayerNorm, RMSNorm): the prior's design-space
pick against the forms of `networks.row_reductions` (the partial results in separate nests or in
one row loop, each serial and parallel) and TVM's unscheduled loops, each built and timed with its
inputs cold (as the prior pass and the rounds time them) by one `time_evaluator` in one process.

    python bench/row_reductions.py --model vit_base
    python bench/row_reductions.py --model llama_small --input input_ids:int64:1,128:0..32000

Prints a table (microseconds a call) and one line: the summed design-space picks over the summed
fastest forms, each task weighted by its calls in the network.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_base", help="a function of examples/zoo.py")
    parser.add_argument("--input", default="x:float32:1,3,224,224", help="NAME:DTYPE:SHAPE[:LOW..HIGH]")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import zoo  # type: ignore[import-not-found]
    from tvm.s_tir import Schedule

    from autosearch.backends.tvm.build import fast_build
    from autosearch.backends.tvm.space import replayed
    from autosearch.backends.tvm.target import host_cpu, host_target, runtime_threads, use_physical_cores
    from autosearch.hostinfo import cpu_model_name as cpu_name
    from autosearch.networks.graph import import_network, quiet_import
    from autosearch.networks.inputs import example_arrays, parse_inputs
    from autosearch.networks.prior import PriorRanker, ranked_schedule
    from autosearch.networks.row_reductions import row_reduction_forms
    from autosearch.networks.spatial import built_args, cold_seconds

    use_physical_cores()  # as tune-model runs its kernels: TVM's own default is half the logical CPUs

    def cold_us(mod: object) -> float:  # built and timed as `register_blocks.timed_pick` does
        lib = fast_build(mod, target, None)
        return cold_seconds(lib, lib.entry_name, built_args(mod)) * 1e6

    target = host_target()
    specs = parse_inputs([args.input])
    with quiet_import():
        graph = import_network(
            args.model, getattr(zoo, args.model)().eval(), specs, example_arrays(specs), target, fast_math=True
        )
    ranker = PriorRanker(target)
    lanes = max(1, ranker.simd_bits // 32)
    rows = []
    print(
        f"{args.model} on {cpu_name()} ({host_cpu()}), {runtime_threads(target)} threads, microseconds a call (inputs cold)"
    )
    print(
        "| task | calls | design-space pick | unscheduled | separate | separate, parallel | one row loop | one row loop, parallel |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for task, w in zip(graph.tasks, graph.workloads):
        forms = row_reduction_forms(w.mod(), lanes)
        if not forms:
            continue
        times = [cold_us(f.mod) for f in forms]
        trace = ranked_schedule(w, target, ranker)
        sch = replayed(w.mod(), trace) if trace is not None else Schedule(w.mod())
        pick, plain = cold_us(sch.mod), cold_us(w.mod())
        rows.append({"task": w.name, "calls": task.weight, "pick": pick, "unscheduled": plain, "forms": times})
        cells = " | ".join(f"{t:.1f}" for t in times + [float("nan")] * (4 - len(times)))
        print(f"| {w.name} | {task.weight} | {pick:.1f} | {plain:.1f} | {cells} |", flush=True)
    picks = sum(r["calls"] * r["pick"] for r in rows)
    best = sum(r["calls"] * min(r["forms"]) for r in rows)
    if rows:
        print(f"RATIO design-space picks / fastest forms over {len(rows)} tasks, weighted by calls: {picks / best:.2f}")
    if args.json:
        args.json.write_text(
            json.dumps({"model": args.model, "cpu": cpu_name(), "mcpu": host_cpu(), "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
