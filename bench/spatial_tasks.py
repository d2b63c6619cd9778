"""Tasks with no reduction: the prior's design-space pick against the timed loop nest of
`networks.spatial` (serial and parallel forms) and TVM's unscheduled loops, each built and timed
warm by one `time_evaluator` in one process.

    python bench/spatial_tasks.py --model densenet121 --every 4

Prints a table (microseconds a call) and one line: the summed design-space picks over the summed
chosen forms, over the same tasks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="densenet121", help="a function of examples/zoo.py (an image model)")
    parser.add_argument("--every", type=int, default=4, help="time every Nth task of this kind")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import zoo  # type: ignore[import-not-found]
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from autosearch.backends.tvm.space import replayed
    from autosearch.backends.tvm.target import host_cpu, host_target
    from autosearch.hostinfo import cpu_model_name as cpu_name
    from autosearch.networks.graph import import_network
    from autosearch.networks.inputs import example_arrays, parse_inputs
    from autosearch.networks.prior import PriorRanker, ranked_schedule
    from autosearch.networks.spatial import spatial_forms, warm_seconds

    target = host_target()
    specs = parse_inputs(shapes=["1,3,224,224"])
    graph = import_network(args.model, getattr(zoo, args.model)().eval(), specs, example_arrays(specs), target)
    ranker = PriorRanker(target)
    lanes = max(1, ranker.simd_bits // 32)
    rows = []
    print(f"{args.model} on {cpu_name()} ({host_cpu()}), 2 threads, microseconds a call (warm)")
    print("| task | output | design-space pick | unscheduled | serial form | parallel form | chosen |")
    print("|---|---|---|---|---|---|---|")
    tasks = [w for w in graph.workloads if spatial_forms(w.mod(), lanes)]
    for w in tasks[:: max(1, args.every)]:
        forms = spatial_forms(w.mod(), lanes)
        times = [warm_seconds(f.mod, target) * 1e6 for f in forms]
        trace = ranked_schedule(w, target, ranker)
        sch = replayed(w.mod(), trace) if trace is not None else Schedule(w.mod())
        pick, plain = warm_seconds(sch.mod, target) * 1e6, warm_seconds(w.mod(), target) * 1e6
        serial, parallel = times[0], times[1] if len(times) > 1 else float("nan")
        chosen = min(times)
        out = "x".join(str(int(d)) for d in ArgInfo.from_prim_func(w.mod()["main"])[-1].shape)
        rows.append({"task": w.name, "pick": pick, "unscheduled": plain, "serial": serial, "parallel": parallel})
        print(
            f"| {w.name} | {out} | {pick:.1f} | {plain:.1f} | {serial:.1f} | {parallel:.1f} | {chosen:.1f} |",
            flush=True,
        )
    picks = sum(r["pick"] for r in rows)
    chosen_sum = sum(min(r["serial"], r["parallel"]) if r["parallel"] == r["parallel"] else r["serial"] for r in rows)
    print(f"RATIO design-space picks / timed forms over {len(rows)} of {len(tasks)} tasks: {picks / chosen_sum:.2f}")
    if args.json:
        args.json.write_text(
            json.dumps({"model": args.model, "cpu": cpu_name(), "mcpu": host_cpu(), "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
