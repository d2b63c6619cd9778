"""Gradient search (Felix-style, autosearch.search.gradient) vs evolutionary search with the same
cost model vs TVM's XGBModel in MetaSchedule's evolutionary search.

Three methods per (seed, workload), interleaved so drift on a shared machine hits all alike:
- `gradient`: GradientSearch (Adam on relaxed knobs, rounding, top-k, eps-greedy that widens
  once rounds stop improving) with the gradient MLP pretrained on the reference dataset's
  training split, fine-tuned online;
- `gradient-fixed` (ablation, not run by default): the same with a fixed 5% random share and
  half the descents always from the measured best (`stall_patience=0`, the search before widening);
- `evo-same`: MetaSchedule EvolutionarySearch ranking with that same pretrained MLP (a copy),
  fine-tuned online the same way (search/gradient/ms_model.py);
- `tvm-xgb`: MetaSchedule EvolutionarySearch with its default XGBModel (from scratch).
Every method measures with one Measurer (same builder pool, same evaluator). One run per
(seed, workload, method) at the largest budget; smaller budgets are read off its history.
Wall time is split into search (propose + model update) and total (search + build + run).

Prints per workload the best latency at each budget, the trials and seconds each method needs
to reach TVM-XGB's best at the largest budget, and one SUMMARY line; writes every run (history
with times) as JSON and a convergence plot (best latency vs total seconds).

    python bench/gradient_search.py                                   # 6 workloads, 32,64,256, 3 seeds
    nice -n 10 python bench/gradient_search.py --workloads norm/1x512x512 --budgets 32,64 --seeds 0
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

#: The tuning benchmark's held-out workloads (bench/tuning_efficiency.py DEFAULT_WORKLOADS).
DEFAULT_WORKLOADS = [
    "depthwise_conv2d_nhwc/1x112x112x32/k3s1p1",
    "conv2d_capsule_nhwijc/1x16x16x4x4x8/k3s2p1/16",
    "mobilenetv2/depthwise_conv2d_nhwc/1x14x14x576/k3s2p1",  # the tuning benchmark's six (norm: 60 schedules in all)
    "softmax/512x512",
    "bert/dense/128x768/768",
    "mobilenetv2/conv2d_nhwc/1x56x56x24/k1s1p0/144",
]
METHODS = ["gradient", "evo-same", "tvm-xgb"]


def _context(mod: Any, target: Any, seed: int, strategy: Any) -> tuple[Any, list[Any]]:
    import os

    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=strategy,
        task_name="bench",
        rand_state=seed,
        num_threads=max(1, os.cpu_count() or 1),
    )
    return ctx, list(ctx.generate_design_space())


def _lat(r: Any) -> float | None:
    import numpy as np

    return float(np.median(r.latencies)) if r.status == "ok" else None


def run_one(
    method: str, wl: Any, target: Any, seed: int, trials: int, per_round: int, measurer: Any, model_dir: str
) -> dict[str, Any]:
    """One tuning run; history rows carry the latency and the cumulative search / total seconds."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from autosearch.search.gradient.data import sketch_set
    from autosearch.search.gradient.model import GradientCostModel
    from autosearch.search.gradient.ms_model import gradient_ms_cost_model
    from autosearch.search.gradient.optimize import GradientSearch

    mod = wl.mod()
    t_start = time.perf_counter()
    search_s = 0.0
    t0 = time.perf_counter()
    gradient = method in ("gradient", "gradient-fixed")
    if gradient:
        ctx, spaces = _context(mod, target, seed, "replay-trace")
        gs = GradientSearch(
            ctx,
            spaces,
            model=GradientCostModel.load(model_dir),
            seed=seed,
            eps_greedy=0.05,
            stall_patience=0 if method == "gradient-fixed" else 2,
        )
        note = "; ".join(gs.sset.skipped)
    else:
        strategy = ms.search_strategy.EvolutionarySearch(
            population_size=256, init_measured_ratio=0.2, init_min_unmeasured=50, genetic_num_iters=3, eps_greedy=0.05
        )
        ctx, spaces = _context(mod, target, seed, strategy)
        if method == "evo-same":
            sset = sketch_set(mod, spaces, seed=seed)
            cm = gradient_ms_cost_model(GradientCostModel.load(model_dir), sset)
            note = "; ".join(sset.skipped)
        else:
            import os

            cm = ms.cost_model.CostModel.create("xgb", num_tuning_cores=os.cpu_count() or 1)
            note = ""
        db = ms.database.MemoryDatabase()
        ms_wl = db.commit_workload(mod)
        ctx.pre_tuning(
            max_trials=trials, num_trials_per_iter=per_round, design_spaces=spaces, database=db, cost_model=cm
        )
    setup_s = time.perf_counter() - t0
    history: list[dict[str, Any]] = []
    best = math.inf
    while len(history) < trials:
        t0 = time.perf_counter()
        if gradient:
            cands = gs.propose(min(per_round, trials - len(history)))
        else:
            cands = list(ctx.generate_measure_candidates() or [])[: trials - len(history)]
        search_s += time.perf_counter() - t0
        if not cands:
            break
        measured = measurer.measure(cands)
        lats = [_lat(r) for r in measured]
        t0 = time.perf_counter()
        if gradient:
            gs.observe(cands, lats)
        else:
            rr = [
                RunnerResult(
                    r.latencies if r.status == "ok" else None, None if r.status == "ok" else (r.error or r.status)
                )
                for r in measured
            ]
            ctx.notify_runner_results(cands, rr)
            for c, r in zip(cands, measured):
                if r.status == "ok":
                    db.commit_tuning_record(
                        ms.database.TuningRecord(c.sch.trace, ms_wl, r.latencies, target, c.args_info)
                    )
            cm.update(ctx, cands, rr)
        search_s += time.perf_counter() - t0
        total = time.perf_counter() - t_start
        for lat in lats:
            if lat is not None:
                best = min(best, lat)
            history.append(
                {
                    "trial": len(history) + 1,
                    "latency": lat,
                    "best": best if math.isfinite(best) else None,
                    "search_s": round(search_s, 3),
                    "total_s": round(total, 3),
                }
            )
    if not gradient:
        ctx.post_tuning()
    return {
        "method": method,
        "workload": wl.name,
        "seed": seed,
        "history": history,
        "setup_s": round(setup_s, 2),
        "note": note,
        **({"eps_per_round": [round(e, 4) for e in gs.eps_history]} if gradient else {}),
    }


def _reach(history: list[dict[str, Any]], target: float) -> dict[str, Any] | None:
    for h in history:
        if h["best"] is not None and h["best"] <= target * (1 + 1e-9):
            return h
    return None


def _geo(xs: list[float]) -> float:
    xs = [x for x in xs if x and math.isfinite(x) and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def report(runs: list[dict[str, Any]], budgets: list[int], methods: list[str]) -> str:
    """The tables and the SUMMARY line."""
    by = {(r["workload"], r["seed"], r["method"]): r for r in runs}
    wls = list(dict.fromkeys(r["workload"] for r in runs))
    seeds = sorted({r["seed"] for r in runs})
    top = max(budgets)
    lines = ["best latency (us, geo-mean over seeds) at each budget"]
    lines.append(f"{'workload':48s} " + " ".join(f"{m}@{b}".rjust(16) for b in budgets for m in methods))
    for w in wls:
        cells = []
        for b in budgets:
            for m in methods:
                vals = [
                    min([h["latency"] for h in by[(w, s, m)]["history"][:b] if h["latency"] is not None] or [math.nan])
                    for s in seeds
                    if (w, s, m) in by
                ]
                cells.append(f"{_geo(vals) * 1e6:16.1f}")
        lines.append(f"{w[:48]:48s} " + " ".join(cells))
    lines.append(f"\nto reach tvm-xgb@{top}'s best: trials / search s / total s (median over seeds; '-' = not reached)")
    reach: dict[str, dict[str, list[dict[str, Any] | None]]] = {}
    for w in wls:
        row = []
        reach[w] = {m: [] for m in methods}
        for s in seeds:
            base = by.get((w, s, "tvm-xgb"))
            if base is None:
                continue
            okb = [h["latency"] for h in base["history"][:top] if h["latency"] is not None]
            if not okb:
                continue
            target = min(okb)
            for m in methods:
                if (w, s, m) in by:
                    reach[w][m].append(_reach(by[(w, s, m)]["history"][:top], target))
        for m in methods:
            hs = [h for h in reach[w][m] if h is not None]
            if len(hs) * 2 > len(reach[w][m]) and hs:
                hs.sort(key=lambda h: h["total_s"])
                mid = hs[len(hs) // 2]
                row.append(f"{m}: {mid['trial']} / {mid['search_s']:.0f} / {mid['total_s']:.0f}")
            else:
                row.append(f"{m}: -")
        lines.append(f"  {w[:46]:46s} " + " | ".join(row))
    lines.append("")
    for g in [m for m in ("gradient", "gradient-fixed") if m in methods]:
        wins, counted = _goal_count(reach, g)
        ratio = _geo(_best_ratios(by, wls, seeds, top, "evo-same", g))
        lines.append(
            f"SUMMARY {g} reached tvm-xgb@{top}'s best in fewer trials and less total time than evo-same on "
            f"{wins}/{counted} workloads; best-latency ratio evo-same/{g} at {top} (geo-mean, >1 = {g} faster) "
            f"= {ratio:.3f}"
        )
    if "gradient" in methods and "gradient-fixed" in methods:
        ratio = _geo(_best_ratios(by, wls, seeds, top, "gradient-fixed", "gradient"))
        lines.append(f"SUMMARY widening on stalls: best-latency ratio gradient-fixed/gradient at {top} = {ratio:.3f}")
    return "\n".join(lines)


def _goal_count(reach: dict[str, dict[str, list[dict[str, Any] | None]]], g: str) -> tuple[int, int]:
    """(workloads where `g` reached the target in fewer trials and less total time than evo-same, counted)."""
    wins = counted = 0
    for per_method in reach.values():
        gr, er = per_method.get(g, []), per_method.get("evo-same", [])
        if gr and er:
            counted += 1
            gt = sorted((h["trial"], h["total_s"]) if h else (math.inf, math.inf) for h in gr)[len(gr) // 2]
            et = sorted((h["trial"], h["total_s"]) if h else (math.inf, math.inf) for h in er)[len(er) // 2]
            wins += gt[0] < et[0] and gt[1] < et[1]
    return wins, counted


def _best_ratios(by: dict[Any, Any], wls: list[str], seeds: list[int], top: int, num: str, den: str) -> list[float]:
    """Per (workload, seed): best latency of `num` / best latency of `den` within `top` trials."""
    out: list[float] = []
    for w in wls:
        for s in seeds:
            if (w, s, num) in by and (w, s, den) in by:
                a = [float(h["latency"]) for h in by[(w, s, num)]["history"][:top] if h["latency"] is not None]
                b = [float(h["latency"]) for h in by[(w, s, den)]["history"][:top] if h["latency"] is not None]
                if a and b:
                    out.append(min(a) / min(b))
    return out


def plot(runs: list[dict[str, Any]], path: str) -> None:
    """Best latency vs total seconds, one panel per workload, one line per (method, seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wls = list(dict.fromkeys(r["workload"] for r in runs))
    fig, axes = plt.subplots(1, len(wls), figsize=(5 * len(wls), 3.6), squeeze=False)
    colors = {"gradient": "tab:red", "gradient-fixed": "tab:orange", "evo-same": "tab:blue", "tvm-xgb": "tab:gray"}
    for ax, w in zip(axes[0], wls):
        for r in runs:
            if r["workload"] != w:
                continue
            pts = [(h["total_s"], h["best"] * 1e6) for h in r["history"] if h["best"] is not None]
            if pts:
                ax.step(
                    *zip(*pts),
                    where="post",
                    color=colors.get(r["method"], "k"),
                    alpha=0.8,
                    label=f"{r['method']} s{r['seed']}",
                )
        ax.set_title(w[:40], fontsize=8)
        ax.set_xlabel("seconds (search + build + run)")
        ax.set_ylabel("best latency (us, log)")
        ax.set_yscale("log")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    ap.add_argument("--budgets", default="32,64,256")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--trials-per-round", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--min-repeat-ms", type=int, default=10)
    ap.add_argument("--model", default=None, help="gradient model directory (default: the package's pretrained one)")
    ap.add_argument("--out", default="bench/results/gradient_search.json")
    ap.add_argument("--plot", default="bench/results/gradient_convergence.png")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --out")
    args = ap.parse_args(argv)

    from autosearch.backends.tvm.intrinsics import register_tensor_intrinsics
    from autosearch.backends.tvm.measure import EvaluatorSettings, Measurer
    from autosearch.backends.tvm.target import host_target
    from autosearch.search.gradient.optimize import PRETRAINED
    from autosearch.workloads import get_workload

    budgets = sorted(int(b) for b in args.budgets.split(","))
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    model_dir = args.model or str(PRETRAINED)
    target = host_target()
    register_tensor_intrinsics(target)
    measurer = Measurer(target, EvaluatorSettings(number=1, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms))
    out = Path(args.out)
    runs: list[dict[str, Any]] = json.loads(out.read_text())["runs"] if args.resume and out.exists() else []
    done = {(r["workload"], r["seed"], r["method"]) for r in runs}
    for seed in seeds:
        for name in args.workloads.split(","):
            wl = get_workload(name)
            for m in methods:
                if (name, seed, m) in done:
                    continue
                t = time.time()
                r = run_one(m, wl, target, seed, max(budgets), args.trials_per_round, measurer, model_dir)
                best = r["history"][-1]["best"] if r["history"] else None
                print(
                    f"{name} seed {seed} {m}: best {best} after {len(r['history'])} trials, "
                    f"{time.time() - t:.0f} s {r['note']}",
                    file=sys.stderr,
                    flush=True,
                )
                runs.append(r)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps({"budgets": budgets, "runs": runs}, indent=0) + "\n")
    print(report(runs, budgets, methods))
    if args.plot:
        plot(runs, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
