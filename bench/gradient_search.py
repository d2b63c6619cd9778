"""Gradient search on the shipped prior (issue 48) vs the decision search, TVM-XGB and the knob-MLP
gradient search, each run as `autosearch tune` runs it (`search.tune.TuneRun`).

Arms, one run per (seed, workload, arm) to the largest budget, interleaved (seed, workload, then
arm) so drift on a shared machine hits every arm alike; a smaller budget B is read off the run's
history (the search is sequential with the same seed and round size, so its first B trials *are* a
B-trial run):
- `prior-gradient`: `--model pretrained-prefix --search gradient` (Adam on the prior's score of
  relaxed decision vectors, `PriorGradientSource`), prior fine-tuned online;
- `decision`: `--model pretrained-prefix --search decision` (tune's default on a CPU);
- `tvm-xgb`: `--model tvm-xgb --search evolutionary` (MetaSchedule's default);
- `knob-gradient`: `--search gradient` with a model it cannot differentiate (`--model random`), so
  the gradient search runs its own knob-feature MLP (`GradientSource`, the search before issue 48).
`--explore none` for every arm. Each run records per round: the best so far, the seconds spent in
the strategy's `propose` (search: scoring, evolution or descent, replays), in its `notify` and
the model update (learning), and the wall time since the run started. After the runs, every
arm's best schedule at each budget is measured again side by side (`tuning_efficiency._remeasure`:
R shuffled rounds per (workload, seed), the median kept), since a run's best is the minimum of
noisy draws.

Prints per workload the best latency per arm and budget (geomean over seeds), raw and re-measured,
each arm's geomean ratio to `prior-gradient`, search and wall seconds, and the issue's goals:
prior-gradient level with or ahead of the decision search at 64 trials (re-measured geomean) with
at most a third of its search seconds, and ahead of the knob-MLP gradient search on every workload
at 64 trials. One SUMMARY line; every run (history with times, strategy class) goes to --out.

    python bench/gradient_search.py --out bench/results/gradient_prior.json     # 6 workloads x 3 seeds, 32/64/256
    python bench/gradient_search.py --workloads softmax/512x512 --seeds 0 --budgets 16 --remeasure 1 --out /tmp/g.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tuning_efficiency import DEFAULT_WORKLOADS, _best_after, _geo, _remeasure

#: arm -> (--model, --search, the strategy class that must run it, less its Source/Strategy suffix)
ARMS: dict[str, tuple[str, str, str]] = {
    "prior-gradient": ("pretrained-prefix", "gradient", "PriorGradient"),
    "decision": ("pretrained-prefix", "decision", "Decision"),
    "tvm-xgb": ("tvm-xgb", "evolutionary", "Evolutionary"),
    "knob-gradient": ("random", "gradient", "Gradient"),
}


def _ran(strategy: Any) -> str:
    """The strategy class's name less its suffix (`PriorGradientSource` -> `PriorGradient`)."""
    name = type(strategy).__name__
    for suffix in ("Source", "Strategy"):
        name = name.removesuffix(suffix)
    return name


def _strategy(run: Any) -> Any:
    """The run's search strategy object (`TuneRun.source`, or `.strategy` once renamed)."""
    return getattr(run, "strategy", None) or run.source


def _timed(obj: Any, name: str, acc: dict[str, float], key: str) -> None:
    """Wrap `obj.name` so that its wall seconds add up in `acc[key]` (this instance only)."""
    fn = getattr(obj, name)

    def wrapped(*args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            acc[key] += time.perf_counter() - t0

    setattr(obj, name, wrapped)


def run_one(wl: Any, arm: str, seed: int, args: Any, target: Any, evaluator: Any, store: Any, console: Any) -> dict:
    """One tuning run of `arm` to `args.trials` trials; its per-round record."""
    from autosearch.search.assemble import assemble
    from autosearch.search.tune import TuneRun, TuneSettings

    spec, search, want = ARMS[arm]
    settings = TuneSettings(trials=args.trials, trials_per_round=args.trials_per_round, seed=seed)
    t0 = time.perf_counter()
    strategy, scorer = assemble(spec, search, "none", seed=seed, target=target, warn=False)
    run = TuneRun(wl, target, strategy, scorer, settings, store=store, evaluator=evaluator, console=console)
    if args.score_threads:  # what tune gives the scorer (every physical core), overridden
        scorer.attach(run.timer.section, args.score_threads)
    strat = _strategy(run)
    acc = {"search_s": 0.0, "notify_s": 0.0}
    _timed(strat, "propose", acc, "search_s")
    _timed(strat, "notify", acc, "notify_s")
    rounds: list[dict[str, Any]] = []
    interrupted = False
    try:
        while run.step():
            res = run.result
            rounds.append(
                {
                    "trials": res.trials,
                    "best": res.best_latency,
                    "best_trace": res.best_trace,
                    "search_s": round(acc["search_s"], 3),
                    "learn_s": round(acc["notify_s"] + run.timer.seconds.get("update", 0.0), 3),
                    "wall_s": round(time.perf_counter() - t0, 3),
                }
            )
    except KeyboardInterrupt:
        interrupted = True
    result = run.finish(baseline=False, reference=False)
    return {
        "workload": wl.name,
        "family": wl.family,
        "arm": arm,
        "model": arm,  # tuning_efficiency's readers key runs by "model"
        "seed": seed,
        "strategy": _ran(strat),
        "expected_strategy": want,
        "history": result.history,
        "rounds": rounds,
        "breakdown": result.breakdown,
        "best_latency": result.best_latency,
        "wall_s": round(time.perf_counter() - t0, 3),
        "best_trace_at": {str(b): _at(rounds, b, "best_trace") for b in args.budget_list},
        "interrupted": interrupted or result.interrupted,
    }


def _at(rounds: list[dict[str, Any]], budget: int, key: str) -> Any:
    """`key` of the first round that reached `budget` trials (the last round if none did)."""
    hit = next((r for r in rounds if r["trials"] >= budget), rounds[-1] if rounds else None)
    return None if hit is None else hit[key]


def report(runs: list[dict[str, Any]], wls: list[str], arms: list[str], budgets: list[int], seeds: list[int]) -> str:
    """The tables and the SUMMARY line (markdown)."""
    out: list[str] = []
    base = arms[0]
    by = {(r["workload"], r["arm"], r["seed"]): r for r in runs}

    def cell(w: str, a: str, b: int, what: str) -> float:
        vals = []
        for s in seeds:
            r = by.get((w, a, s))
            if r is None:
                continue
            if what == "best":
                vals.append(_best_after(r["history"], b) or math.nan)
            elif what == "again":
                vals.append((r.get("remeasured_at") or {}).get(str(b)) or math.nan)
            else:  # seconds: arithmetic mean over seeds
                v = _at(r["rounds"], b, what)
                vals.append(math.nan if v is None else float(v))
        if what in ("best", "again"):
            return _geo(vals)
        ok = [v for v in vals if math.isfinite(v)]
        return sum(ok) / len(ok) if ok else math.nan

    odd = [r for r in runs if r["strategy"] != r["expected_strategy"]]
    if odd:
        out.append("note: these runs fell back to another strategy: ")
        out += [f"- {r['workload']} seed {r['seed']} {r['arm']}: ran {r['strategy']}" for r in odd]
    remeasured = any(r.get("remeasured_at") for r in runs)
    kinds = [("best", "Best latency (us, geomean over seeds)")]
    if remeasured:
        kinds.append(("again", "Re-measured side by side (us, geomean over seeds; median of the rounds)"))
    head = "| workload | " + " | ".join(f"{a} @{b}" for b in budgets for a in arms) + " |"
    rule = "|---|" + "---|" * (len(budgets) * len(arms))
    for what, title in kinds:
        out += [f"\n## {title}\n", head, rule]
        for w in wls:
            out.append(
                f"| {w} | " + " | ".join(f"{cell(w, a, b, what) * 1e6:.1f}" for b in budgets for a in arms) + " |"
            )
        out += [f"\n## Geomean ratio arm / {base} ({what}; > 1: {base} found faster schedules)\n"]
        out += [
            "| budget | " + " | ".join(f"{a} / {base}" for a in arms[1:]) + " |",
            "|---|" + "---|" * (len(arms) - 1),
        ]
        for b in budgets:
            ratios = [_geo([cell(w, a, b, what) / cell(w, base, b, what) for w in wls]) for a in arms[1:]]
            out.append(f"| {b} | " + " | ".join(f"{x:.3f}" for x in ratios) + " |")
    for key, title in (("search_s", "Search seconds (the strategy's propose)"), ("wall_s", "Total wall seconds")):
        out += [f"\n## {title} per run (mean over seeds)\n", head, rule]
        for w in wls:
            out.append(f"| {w} | " + " | ".join(f"{cell(w, a, b, key):.1f}" for b in budgets for a in arms) + " |")
    # the goals, at 64 trials (or the budget closest to it)
    b = min(budgets, key=lambda x: abs(x - 64))
    what = "again" if remeasured else "best"
    summary = [f"SUMMARY at {b} trials ({'re-measured' if remeasured else 'raw'} bests)"]
    if "decision" in arms:
        ratio = _geo([cell(w, "decision", b, what) / cell(w, base, b, what) for w in wls])
        share = sum(cell(w, base, b, "search_s") for w in wls) / max(
            sum(cell(w, "decision", b, "search_s") for w in wls), 1e-9
        )
        summary.append(
            f"decision / {base} = {ratio:.3f} (goal >= 1), search seconds {share:.2f}x the decision search's (goal <= 0.33)"
        )
    if "knob-gradient" in arms:
        ahead = [w for w in wls if cell(w, "knob-gradient", b, what) > cell(w, base, b, what)]
        summary.append(f"ahead of knob-gradient on {len(ahead)}/{len(wls)} workloads (goal {len(wls)}/{len(wls)})")
    if "tvm-xgb" in arms:
        summary.append(
            f"tvm-xgb / {base} = {_geo([cell(w, 'tvm-xgb', b, what) / cell(w, base, b, what) for w in wls]):.3f}"
        )
    out.append("\n" + "; ".join(summary))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    ap.add_argument("--budgets", default="32,64,256")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"the first is the one compared with ({', '.join(ARMS)})")
    ap.add_argument("--trials-per-round", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--min-repeat-ms", type=int, default=10)
    ap.add_argument(
        "--score-threads",
        type=int,
        default=0,
        help="torch threads the model scores on, every arm (0: as tune, every physical core); 1 on a "
        "shared machine, where a two-thread pool stalls on a busy core",
    )
    ap.add_argument("--remeasure", type=int, default=5, metavar="R", help="side-by-side rounds of the bests (0: off)")
    ap.add_argument("--db", default="bench_gradient.db", help="store the measured candidates here")
    ap.add_argument("--out", default=None, help="every run as JSON, written after each run (with --resume, kept)")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --out; run the rest")
    ap.add_argument(
        "--allow-trained", action="store_true", help="do not refuse workloads in the prior's training split"
    )
    args = ap.parse_args(argv)

    from rich.console import Console

    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.backends.tvm.target import host_target
    from autosearch.search.model_spec import pretrained_dir
    from autosearch.store import Store
    from autosearch.workloads.module import resolve_workload_spec

    budgets = sorted({int(b) for b in args.budgets.split(",")})
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        print(f"error: unknown arm(s) {', '.join(bad) or '(none)'}; choose from {', '.join(ARMS)}", file=sys.stderr)
        return 2
    if any(b <= 0 or b % args.trials_per_round for b in budgets):
        print(
            f"error: every budget must be a positive multiple of --trials-per-round {args.trials_per_round}",
            file=sys.stderr,
        )
        return 2
    args.trials, args.budget_list = budgets[-1], budgets
    wls = [resolve_workload_spec(w.strip()) for w in args.workloads.split(",") if w.strip()]
    split = pretrained_dir("pretrained-prefix") / "split.json"
    if split.is_file() and not args.allow_trained:
        trained = set(json.loads(split.read_text()).get("train", []))
        leaked = [w.name for w in wls if w.key in trained]
        if leaked:
            print(f"error: in the prefix prior's training split: {', '.join(leaked)}", file=sys.stderr)
            return 2
    runs: list[dict[str, Any]] = []
    if args.resume and args.out and Path(args.out).is_file():
        runs = [r for r in json.loads(Path(args.out).read_text())["runs"] if not r.get("interrupted")]
    done = {(r["workload"], r["seed"], r["arm"]) for r in runs}
    target = host_target()
    evaluator = EvaluatorSettings(number=1, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms)
    console = Console(stderr=True)

    def save() -> None:
        if args.out:
            Path(args.out).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1) + "\n")

    t0 = time.time()
    stopped = False
    with Store(args.db) as store:
        for seed in seeds:  # seed outermost: a stopped benchmark has covered every workload once
            for wl in wls:
                for arm in arms:
                    if stopped or (wl.name, seed, arm) in done:
                        continue
                    r = run_one(wl, arm, seed, args, target, evaluator, store, console)
                    runs.append(r)
                    save()
                    console.print(
                        f"[{time.time() - t0:7.0f}s] {wl.name} seed {seed} {arm} ({r['strategy']}): "
                        f"best {r['best_latency']}, search {_at(r['rounds'], args.trials, 'search_s')} s, "
                        f"wall {r['wall_s']:.0f} s"
                    )
                    stopped = r["interrupted"]
    asked = [r for r in runs if r["arm"] in arms and r["seed"] in seeds]
    if args.remeasure > 0 and not stopped:
        _remeasure(wls, asked, runs, budgets, target, evaluator, args.remeasure, console, args.out, vars(args))
    save()
    print(report(asked, [w.name for w in wls], arms, budgets, seeds))
    print(f"wall {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
