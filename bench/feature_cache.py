"""What the feature cache saves in a tuning run, measured on the exact calls of real runs.

MetaSchedule's evolutionary search scores many schedules more than once (survivors of a genetic
iteration, the measured best that seed each round, the picks before they are measured), and
PerStoreFeature lowers every one. `search.featurize.FeatureCache` extracts each distinct scheduled
module once per run; its scores are the same, so the search is unchanged.

Two runs of the same seed diverge as soon as a measured latency differs, and then build and
measure other schedules: their wall times differ by more than the cache saves (measured: 21 vs 35 s
for the same softmax seed). So each (workload, seed) is tuned once with the cache, every featurizer
call of the run is recorded (the candidates and their TuneContext), and afterwards the same calls
are replayed through PerStoreFeature without a cache and through a fresh cache, side by side
(order alternating between workloads). Prints per run the calls, candidates, hit rate, both
extraction times and the time saved as a share of the run's wall time; then a one-line SUMMARY.

    python bench/feature_cache.py                                   # 6 workloads, 64 trials, seed 0
    python bench/feature_cache.py --workloads softmax/512x512 --trials 32 --out /tmp/fc.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from tuning_efficiency import DEFAULT_WORKLOADS


def _geo(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    ap.add_argument("--model", default="pretrained+xgb")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--out", default=None, help="write every run as JSON")
    args = ap.parse_args(argv)

    from rich.console import Console

    from autosearch.backends.tvm.target import canonical_target, host_target
    from autosearch.search.adapter import ModelAdapter
    from autosearch.search.assemble import assemble
    from autosearch.search.featurize import FeatureCache
    from autosearch.search.tune import TuneSettings, tune
    from autosearch.workloads.module import resolve_workload_spec

    class _Recording(FeatureCache):
        """A FeatureCache that keeps every call (its TuneContext and candidates) for the replay."""

        def __init__(self, base: Any) -> None:
            super().__init__(base)
            self.calls: list[tuple[Any, list[Any]]] = []

        def __call__(self, context: Any, candidates: Any) -> Any:
            self.calls.append((context, list(candidates)))
            return super().__call__(context, candidates)

    console = Console(stderr=True)
    target = host_target()
    wls = [resolve_workload_spec(w.strip()) for w in args.workloads.split(",") if w.strip()]
    seeds = [int(s) for s in args.seeds.split(",")]
    runs: list[dict] = []
    load0 = os.getloadavg()
    # a process's first run pays one-time set-up (TVM's lazy imports, the first design space): untimed
    tune(
        wls[0],
        target,
        *assemble(args.model, "evolutionary", "none", seed=0),
        TuneSettings(trials=16, seed=0),
        baseline=False,
        reference=False,
        console=console,
        progress=False,
    )
    for seed in seeds:
        for i, wl in enumerate(wls):
            strategy, scorer = assemble(args.model, "evolutionary", "none", seed=seed)
            cache = scorer.featurize if isinstance(scorer, ModelAdapter) else None
            if not isinstance(scorer, ModelAdapter) or not isinstance(cache, FeatureCache):
                raise SystemExit(f"--model {args.model} does not extract PerStoreFeature through the cache")
            cache = _Recording(cache.base)
            calls = cache.calls
            scorer.featurize = cache  # the run's own calls (scoring, learning, the store's rows)
            t0 = time.perf_counter()
            r = tune(
                wl,
                target,
                strategy,
                scorer,
                TuneSettings(trials=args.trials, seed=seed),
                baseline=False,
                reference=False,
                console=console,
                progress=True,
            )
            wall = time.perf_counter() - t0
            secs: dict[str, float] = {}
            arms = ["none", "cache"] if (i + seed) % 2 == 0 else ["cache", "none"]
            for arm in arms:
                replay = cache.base if arm == "none" else FeatureCache(cache.base)
                t1 = time.perf_counter()
                for context, cands in calls:
                    replay(context, cands)
                secs[arm] = time.perf_counter() - t1
            n = sum(len(c) for _, c in calls)
            runs.append(
                {
                    "workload": wl.name,
                    "seed": seed,
                    "calls": len(calls),
                    "candidates": n,
                    "hit_rate": cache.hit_rate,
                    "extract_s_no_cache": secs["none"],
                    "extract_s_cache": secs["cache"],
                    "run_wall_s": wall,
                    "run_features_s": float(r.breakdown.get("seconds", {}).get("features", float("nan"))),
                    "best_us": (r.best_latency or float("nan")) * 1e6,
                }
            )
            console.print(
                f"{wl.name} seed {seed}: {n} candidates, no cache {secs['none']:.1f} s, cache {secs['cache']:.1f} s"
            )
    print(f"target {canonical_target(target)}; load average {load0[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    print(
        "| workload | seed | featurizer calls | candidates | hit rate | extraction s, no cache | extraction s, cache "
        "| saved, % of the run's wall |"
    )
    print("|---|---|---|---|---|---|---|---|")
    ratio, saved = [], []
    for x in runs:
        ratio.append(x["extract_s_no_cache"] / x["extract_s_cache"])
        saved.append(
            100.0
            * (x["extract_s_no_cache"] - x["extract_s_cache"])
            / (x["run_wall_s"] + x["extract_s_no_cache"] - x["extract_s_cache"])
        )
        print(
            f"| {x['workload']} | {x['seed']} | {x['calls']} | {x['candidates']} | {x['hit_rate']:.2f} "
            f"| {x['extract_s_no_cache']:.1f} | {x['extract_s_cache']:.1f} | {saved[-1]:.1f} |"
        )
    print(
        f"SUMMARY feature cache on the calls of {len(runs)} runs of {args.trials} trials: extraction without / with "
        f"= {_geo(ratio):.2f}x (geo-mean); {sum(saved) / len(saved):.1f}% of an uncached run's wall time saved (mean)"
    )
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "target": canonical_target(target), "runs": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
