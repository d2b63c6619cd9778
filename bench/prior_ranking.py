"""Which prior picks a network task's zero-trial schedule: the prefix prior's first pick against
the feature prior's (`pretrained`) pick among the prefix prior's shortlist, the same pick among
the schedules whose vectors fill whole SIMD registers (`networks.prior.PriorRanker`'s rule), and
the best of the shortlist (an oracle that measures them all), each task's picks measured side by
side; the table sums weight x latency over the network's tasks.

    python bench/prior_ranking.py --model resnet50 --shortlist 32
    python bench/prior_ranking.py --model mobilenet_v2 --db data/runs/shortlists_znver3.db   # keep them

With `--db` every task's 32 schedules are timed as tune-model times a network's tasks (caches
flushed) and stored with their features: data on the one choice the zero-trial pass makes, which
the shipped priors learn from (data/README.md).

The network comes from examples/zoo.py (as bench/network.py); `networks.prior.PriorRanker` is the
rule this measured.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", help="a model of examples/zoo.py")
    ap.add_argument("--input", default="x:float32:1,3,224,224")
    ap.add_argument("--shortlist", type=int, default=32)
    ap.add_argument("--tasks", nargs="*", default=[], help="only tasks whose name holds one of these strings")
    ap.add_argument(
        "--db",
        default="",
        help="also store every measured shortlist here, timed as tune-model times a network's tasks "
        "(caches flushed), with its features: data on the choice the prior pass makes",
    )
    args = ap.parse_args(argv)

    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from autosearch.backends.tvm.build import pool_builder
    from autosearch.backends.tvm.measure import shared_measurer
    from autosearch.backends.tvm.target import describe_target, host_target, use_physical_cores
    from autosearch.errors import WorkloadError
    from autosearch.networks.graph import import_network, load_source
    from autosearch.networks.inputs import example_arrays, parse_inputs
    from autosearch.networks.prior import PriorRanker
    from autosearch.networks.tune import network_evaluator
    from autosearch.search.decision_search import DecisionSearch
    from autosearch.search.strategies import DecisionSettings, RandomDraws, design_space
    from autosearch.search.tune import TuneSettings
    from autosearch.store import Store

    use_physical_cores()
    target = host_target()
    spec = f"{ROOT / 'examples' / 'zoo.py'}:{args.model}"
    specs = parse_inputs([args.input])
    graph = import_network(spec, load_source(spec), specs, example_arrays(specs, 0), target)
    ranker = PriorRanker(target)
    evaluator = network_evaluator(target) if args.db else None
    measurer, builder = shared_measurer(target, evaluator), pool_builder()
    store = Store(args.db) if args.db else None
    arms = ("prefix first", "feature prior's pick", "whole registers first", "best of shortlist")
    total = dict.fromkeys(arms, 0.0)
    print(f"## {args.model}: {len(graph.tasks)} tasks on {describe_target(target)}, shortlist {args.shortlist}\n")
    print("| task | weight | " + " | ".join(f"{a} (ms)" for a in arms) + " |")
    print("|---|---|" + "---|" * len(arms))
    for task, wl in zip(graph.tasks, graph.workloads):
        if args.tasks and not any(t in wl.name for t in args.tasks):
            continue
        settings = TuneSettings(trials=1, trials_per_round=1, seed=0, fixed_spaces=True, eps_greedy=0.0)
        try:
            ctx, spaces = design_space(wl, target, settings, None)
            draws = RandomDraws(ctx, spaces, 0)
            search = DecisionSearch(ctx, spaces, draws, ranker.shortlister, settings, DecisionSettings())
            picks = search.propose(args.shortlist)
        except WorkloadError:
            continue  # nothing to decide: every rule builds its one schedule
        if len(picks) < 2:
            continue
        cands = [MeasureCandidate(p.sch, ArgInfo.from_entry_func(p.sch.mod, remove_preproc=True)) for p in picks]
        scores = np.asarray(ranker.orderer.score(ranker.orderer.features(ctx, cands)))
        pick = {
            "prefix first": 0,
            "feature prior's pick": int(np.argmax(scores)),
            "whole registers first": int(ranker.rank(picks, scores)[0]),
        }
        results = measurer.run_built(cands, builder.build(cands, target))
        if store is not None:
            _store(store, wl, ctx, picks, cands, results, target)
        lat = np.array([np.median(r.latencies) if r.status == "ok" and r.latencies else np.inf for r in results])
        row = {**{a: float(lat[i]) for a, i in pick.items()}, "best of shortlist": float(lat.min())}
        w = int(task.weight)
        for a in arms:
            total[a] += w * row[a]
        print(f"| {wl.name} | {w} | " + " | ".join(f"{row[a] * 1e3:.3f}" for a in arms) + " |", flush=True)
    print("| **sum of weight x latency** | | " + " | ".join(f"**{total[a] * 1e3:.2f}**" for a in arms) + " |")
    ratio = total["prefix first"] / total["feature prior's pick"]
    whole = total["feature prior's pick"] / total["whole registers first"]
    print(
        f"\nSUMMARY {args.model}: prefix first / feature prior's pick = {ratio:.3f}; "
        f"feature prior's pick / whole registers first = {whole:.3f}; "
        f"best of shortlist {total['prefix first'] / total['best of shortlist']:.3f}"
    )
    return 0


def _store(store: Any, wl: Any, ctx: Any, picks: list[Any], cands: list[Any], results: list[Any], target: Any) -> None:
    """One task's measured shortlist into `store`, with PerStoreFeature rows (source `prior-shortlist`)."""
    from autosearch.backends.tvm.space import trace_json
    from autosearch.backends.tvm.target import canonical_target, device_fingerprint
    from autosearch.features.per_store import EXTRACTOR, extract_features
    from autosearch.store import MeasurementRecord, WorkloadRecord

    store.add_workload(WorkloadRecord.from_workload(wl))
    tgt, device = canonical_target(target), device_fingerprint(target)
    texts = [trace_json(p.sch) for p in picks]
    records = [
        MeasurementRecord(
            workload_key=wl.key,
            target=tgt,
            device=device,
            schedule=text,
            status=r.status,
            latencies=r.latencies,
            error=r.error,
            source="prior-shortlist",
        )
        for text, r in zip(texts, results)
    ]
    store.add_measurements(records, extract_features(ctx, cands), EXTRACTOR)


if __name__ == "__main__":
    sys.exit(main())
