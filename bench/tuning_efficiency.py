"""Tuning efficiency: our models vs. TVM's XGBModel vs. a random model, in the loop.

On held-out workloads (never in the pretrained model's training split; checked against the
model's split.json), for each seed, each model tunes each workload with MetaSchedule's
evolutionary search; runs are interleaved (seed, workload, then model) so drift on this shared
machine hits every model alike, and a time-boxed run covers every workload with one seed first. One run per (workload, seed, model) at the largest budget: the
best after the first B trials of that run *is* a B-trial run (search is sequential, same seed,
same round size), so smaller budgets are read off its history.

Prints per workload the best latency of each model at each budget (geometric mean over seeds),
the geometric-mean ratio TVM-XGB / ours at each budget (> 1: ours found faster schedules), the
trials and wall seconds ours needs to reach TVM-XGB's best at the largest budget, and each
workload's tuned speed relative to PyTorch on the same CPU and threads.

A model is a `--model` value, optionally with `@control` for the exploration mode
(`--explore control`) and `~gradient` or `~decision` for the search (`--search`): e.g.
`pretrained+xgb@control`, `pretrained-prefix~decision`; `%POPxITERS` sets that arm's evolutionary
population and genetic iterations (`--population`, `--genetic-iters` set every other arm's), e.g.
`pretrained+xgb%1024x4`; `^K` screens K uniform draws for the first round (`--screen K`), e.g.
`pretrained+xgb@control^512`; `#N` fits the
online model once N results are measured (`--online-warmup N`), e.g. `pretrained+xgb^512#16`, and
`&G` sets how fast the blend weight follows the held-back accuracies (`assemble(online_gain=)`,
1 by default), e.g. `pretrained+xgb^512&2` (quote the list: `&` is a shell operator).

    python bench/tuning_efficiency.py                                  # full: 6 workloads, 64,256, 3 seeds
    python bench/tuning_efficiency.py --budgets 16,64 --seeds 0 --out /tmp/te.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

#: Held-out workloads. DEP, CAP and SFM are held out of the pretrained model's training as whole
#: families; the bert dense, the MobileNet-V2 1x1 convolution and the MobileNet-V2 strided
#: depthwise convolution are shapes never collected into the reference dataset. (norm/1x512x512,
#: used before, has only ~60 distinct schedules: every model measured all of them by 256 trials.)
DEFAULT_WORKLOADS = [
    "depthwise_conv2d_nhwc/1x112x112x32/k3s1p1",
    "conv2d_capsule_nhwijc/1x16x16x4x4x8/k3s2p1/16",
    "mobilenetv2/depthwise_conv2d_nhwc/1x14x14x576/k3s2p1",
    "softmax/512x512",
    "bert/dense/128x768/768",
    "mobilenetv2/conv2d_nhwc/1x56x56x24/k1s1p0/144",
]
MODELS = ["pretrained+xgb", "tvm-xgb", "random", "pretrained+xgb@control"]


def _geo(xs: list[float]) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _best_after(history: list[dict], n: int) -> float | None:
    vals = [h["latency"] for h in history[:n] if h["latency"] is not None]
    return min(vals) if vals else None


def _trials_to_reach(history: list[dict], target: float) -> int | None:
    best = math.inf
    for h in history:
        if h["latency"] is not None:
            best = min(best, h["latency"])
        if best <= target:
            return h["trial"]
    return None


def _seconds_to_reach(history: list[dict], target: float) -> float | None:
    """Wall seconds from the run's start until its best first reached `target` (None if never)."""
    n = _trials_to_reach(history, target)
    if n is None:
        return None
    return next((h.get("t") for h in history if h["trial"] == n), None)


def _spec(model: str) -> tuple[str, str, str, tuple[int, int] | None, int, int, float]:
    """(--model, --explore, --search, (--population, --genetic-iters) or None, --screen,
    --online-warmup, the online blend's gain) of a benchmark model name
    `MODEL[@EXPLORE][~SEARCH][%POPxITERS][^SCREEN][#WARMUP][&GAIN]`, such as
    `pretrained+xgb@control`, `pretrained-prefix~decision`, `pretrained+xgb%1024x4`,
    `pretrained+xgb@control^512` or `pretrained+xgb^512#16&2`. (The arms of options that measured
    no better and were removed, issue 46, are refused: `!N`, `*N`, `^K:S`, `^K/W`.)"""
    if "!" in model or "*" in model or any(c in model.partition("^")[2] for c in ":/"):
        raise SystemExit(f"error: {model!r}: --confirm, --sketch-moves, --rescreen and --screen-spread were removed")
    model, amp, gain = model.partition("&")
    try:
        online_gain = float(gain) if amp else 1.0
    except ValueError:
        online_gain = math.nan
    if not (math.isfinite(online_gain) and online_gain > 0):
        raise SystemExit(f"error: {gain!r} after '&' is not a blend gain > 0 (e.g. 2)")
    model, hash_, warm = model.partition("#")
    if hash_ and not (warm.isdigit() and int(warm) >= 2):
        raise SystemExit(f"error: {warm!r} after '#' is not a number of results >= 2 (e.g. 16)")
    model, _, scr = model.partition("^")
    if scr and not scr.isdigit():
        raise SystemExit(f"error: {scr!r} after '^' is not a number of draws (e.g. 512)")
    model, _, pop = model.partition("%")
    rest, _, search = model.partition("~")
    spec, _, explore = rest.partition("@")
    size = None
    if pop:
        p, _, g = pop.partition("x")
        if not (p.isdigit() and g.isdigit()):
            raise SystemExit(f"error: {pop!r} is not POPxITERS (e.g. 1024x4)")
        size = (int(p), int(g))
    warmup = int(warm) if hash_ else 16
    return (
        spec,
        explore or "none",
        search or "evolutionary",
        size,
        int(scr or 0),
        warmup,
        online_gain,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    ap.add_argument("--budgets", default="64,256")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--models", default=",".join(MODELS), help="ours first; the second is the baseline")
    ap.add_argument("--trials-per-round", type=int, default=16)
    ap.add_argument("--population", type=int, default=256)
    ap.add_argument("--genetic-iters", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--min-repeat-ms", type=int, default=10)
    ap.add_argument(
        "--db", default="bench_tuning.db", help="store the measured candidates here (tuning grows the dataset)"
    )
    ap.add_argument(
        "--out", default=None, help="write every run (history, breakdown) as JSON (for `autosearch report-tuning`)"
    )
    ap.add_argument(
        "--resume", default=None, help="a previous --out JSON (or .json.xz): its runs are kept, not repeated"
    )
    ap.add_argument(
        "--allow-trained", action="store_true", help="do not refuse workloads in the model's training split"
    )
    ap.add_argument("--no-reference", action="store_true", help="skip timing each workload's PyTorch reference")
    ap.add_argument("--report-only", action="store_true", help="print the tables of --resume's runs; measure nothing")
    ap.add_argument(
        "--remeasure",
        type=int,
        default=5,
        metavar="R",
        help="after the runs, measure every arm's best schedule at each budget again, side by side, R rounds "
        "in shuffled order per (workload, seed), and print the tables of those latencies too (0 = off)",
    )
    ap.add_argument(
        "--trials-of",
        action="append",
        metavar="MODEL=N",
        help="run MODEL to N trials instead of the largest budget (e.g. tvm-xgb=256 with --budgets 32,64); "
        "tables read smaller budgets off each run's history",
    )
    args = ap.parse_args(argv)

    from rich.console import Console

    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.backends.tvm.target import host_target
    from autosearch.reports.convergence import load_histories
    from autosearch.search.assemble import assemble
    from autosearch.search.model_spec import PRETRAINED, pretrained_dir
    from autosearch.search.tune import TuneSettings, tune
    from autosearch.store import Store
    from autosearch.workloads.module import resolve_workload_spec

    budgets = sorted(int(b) for b in args.budgets.split(","))
    seeds = [int(s) for s in args.seeds.split(",")]
    models = [m.strip() for m in args.models.split(",")]
    ours, base = models[0], models[1]
    for m in models:  # a bad arm fails now, not after the arms before it have run
        _spec(m)
    if any(b % args.trials_per_round for b in budgets):
        print(f"error: every budget must be a multiple of --trials-per-round {args.trials_per_round}", file=sys.stderr)
        return 2
    wls = [resolve_workload_spec(w.strip()) for w in args.workloads.split(",") if w.strip()]
    prior = _spec(ours)[0].rpartition("+")[0] or _spec(ours)[0]  # pretrained+xgb: the prior's split
    split_file = (pretrained_dir(prior) if prior in PRETRAINED else Path(prior)) / "split.json"
    if split_file.is_file() and not args.allow_trained:
        split = json.loads(split_file.read_text())
        trained = set(split.get("train", []))
        leaked = [w.name for w in wls if w.key in trained]
        if leaked:
            print(f"error: in the model's training split: {', '.join(leaked)}", file=sys.stderr)
            return 2
    target = host_target()
    evaluator = EvaluatorSettings(number=1, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms)
    console = Console(stderr=True)
    runs: list[dict] = []
    if args.resume and Path(args.resume).is_file():
        runs = load_histories([args.resume])  # report-tuning's reader: plain or `.json.xz`
    trials_of = {m: budgets[-1] for m in models}
    for item in args.trials_of or []:
        m, _, n = item.partition("=")
        trials_of[m] = int(n)
    runs = [r for r in runs if len(r["history"]) >= trials_of.get(r["model"], budgets[-1]) or r["model"] not in models]
    done = {(r["workload"], r["seed"], r["model"]) for r in runs}
    if args.report_only:  # the tables of what a (possibly stopped) run measured
        seeds = sorted({r["seed"] for r in runs if r["seed"] in seeds})
        done = {(w.name, sd, m) for w in wls for sd in seeds for m in models}
    t0 = time.time()
    with Store(args.db) as store:
        for seed in seeds:  # seed outermost: a time-boxed run covers every workload once first
            for wl in wls:
                for model in models:
                    if (wl.name, seed, model) in done:
                        continue
                    spec, explore, search, size, screen, warmup, gain = _spec(model)
                    population, genetic_iters = size or (args.population, args.genetic_iters)
                    s = TuneSettings(trials=trials_of[model], trials_per_round=args.trials_per_round, seed=seed)
                    strategy, scorer = assemble(
                        spec,
                        search,
                        explore,
                        seed=seed,
                        online_warmup=warmup,
                        online_gain=gain,
                        population=population,
                        genetic_num_iters=genetic_iters,
                        screen=screen,
                    )
                    best_at: dict[str, str] = {}

                    def keep_best(res: Any, best_at: dict[str, str] = best_at, last: int = trials_of[model]) -> None:
                        for b in budgets:  # the schedule a B-trial run would report (rounds divide B)
                            if res.trials >= min(b, last):
                                best_at.setdefault(str(b), res.best_trace)

                    r = tune(
                        wl,
                        target,
                        strategy,
                        scorer,
                        s,
                        store=store,
                        evaluator=evaluator,
                        baseline=False,
                        reference=False,
                        console=console,
                        progress=True,
                        on_round=keep_best,
                    )
                    runs.append(
                        {
                            "workload": wl.name,
                            "family": wl.family,
                            "model": model,
                            "seed": seed,
                            "history": r.history,
                            "breakdown": r.breakdown,
                            "best_latency": r.best_latency,
                            "wall_s": r.breakdown.get("total_s"),
                            "best_trace_at": {b: best_at.get(b, r.best_trace) for b in map(str, budgets)},
                            "interrupted": r.interrupted,
                        }
                    )
                    console.print(f"[{time.time() - t0:7.0f}s] {wl.name} seed {seed} {model}: best {r.best_latency}")
                    if args.out:  # after every run: a killed benchmark resumes with --resume
                        Path(args.out).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1) + "\n")
                    if r.interrupted:
                        break
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1) + "\n")
    stopped = any(r.get("interrupted") for r in runs)
    if args.remeasure > 0 and not args.report_only and not stopped:
        asked = [r for r in runs if r["model"] in models and r["seed"] in seeds]
        _remeasure(wls, asked, runs, budgets, target, evaluator, args.remeasure, console, args.out, vars(args))

    # -- tables ------------------------------------------------------------------------------
    runs = [r for r in runs if r["seed"] in seeds]  # the tables cover the seeds asked for, no more

    def best(w: str, m: str, b: int) -> float:
        return _geo([_best_after(r["history"], b) or math.nan for r in runs if r["workload"] == w and r["model"] == m])

    names = [w.name for w in wls]
    head = "| workload | family | " + " | ".join(f"{m} @{b}" for b in budgets for m in models) + " |"

    def tables(lat: Any, best_title: str, ratio_title: str) -> None:
        """Per workload `lat(workload, model, budget)` at every budget, then each arm's geomean ratio to ours."""
        print(best_title)
        print(head)
        print("|" + "---|" * (2 + len(budgets) * len(models)))
        for w in wls:
            cells = [f"{lat(w.name, m, b) * 1e6:.1f}" for b in budgets for m in models]
            print(f"| {w.name} | {w.family} | " + " | ".join(cells) + " |")
        print(ratio_title)
        print("| budget | " + " | ".join(f"{m} / {ours}" for m in models[1:]) + " |")
        print("|---|" + "---|" * (len(models) - 1))
        for b in budgets:
            print(
                f"| {b} | "
                + " | ".join(f"{_geo([lat(w, m, b) / lat(w, ours, b) for w in names]):.3f}" for m in models[1:])
                + " |"
            )

    tables(
        best,
        f"\n## Best latency (us, geomean over seeds {args.seeds}) per workload\n",
        f"\n## Geometric-mean ratio {base} / {ours} (> 1: {ours} found faster schedules)\n",
    )

    def again(w: str, m: str, b: int) -> float:
        return _geo(
            [
                (r.get("remeasured_at") or {}).get(str(b)) or math.nan
                for r in runs
                if r["workload"] == w and r["model"] == m
            ]
        )

    remeasured = any(r.get("remeasured_at") for r in runs)
    lacking = sum(1 for r in runs if r["model"] in models and not r.get("remeasured_at"))
    if remeasured and lacking:
        print(
            f"\nnote: {lacking} runs were not re-measured (kept from an older --resume file): the re-measured cells leave them out"
        )
    if remeasured:
        tables(
            again,
            "\n## Re-measured side by side (us, geomean over seeds): each run's best schedule at B trials, "
            "measured again beside the other arms' (median of the rounds)\n",
            f"\n## Geometric-mean ratio {base} / {ours}, re-measured side by side\n",
        )
    top = budgets[-1]
    print(f"\n## Trials and wall seconds {ours} needs to reach {base}'s best at {top} trials\n")
    print(
        "| workload | seed | "
        + f"{base} best @{top} (us) | {base} wall s | {ours} trials to reach it | {ours} s to reach it | {ours} wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    reached = []
    for w in names:
        for seed in seeds:
            rb = [r for r in runs if r["workload"] == w and r["model"] == base and r["seed"] == seed]
            ro = [r for r in runs if r["workload"] == w and r["model"] == ours and r["seed"] == seed]
            if not rb or not ro:
                continue
            tb = _best_after(rb[0]["history"], top)
            n = _trials_to_reach(ro[0]["history"], tb) if tb else None
            secs = _seconds_to_reach(ro[0]["history"], tb) if tb else None
            reached.append(n)
            print(
                f"| {w} | {seed} | {tb * 1e6:.1f} | {rb[0].get('wall_s') or 0:.0f} | {n if n is not None else f'not within {top}'}"
                f" | {f'{secs:.0f}' if secs is not None else '-'} | {ro[0].get('wall_s') or 0:.0f} |"
            )
    if not args.no_reference:
        _print_vs_pytorch(wls, runs, models, top)
    hit = [n for n in reached if n is not None]
    small = [b for b in budgets[:-1] if b <= trials_of[ours]] or budgets[:1]
    ratios = "; ".join(
        f"geomean {base}@{top} / {ours}@{b} = {_geo([best(w, base, top) / best(w, ours, b) for w in names]):.3f}"
        for b in small
    )
    print(
        f"\nSUMMARY {ours} reached {base}@{top} in {len(hit)}/{len(reached)} runs"
        + (f" (median {sorted(hit)[len(hit) // 2]} trials)" if hit else "")
        + f"; {ratios} (goal >= 1.0: {ours} at {small[-1]} matches {base} at {top})"
        + (
            "; re-measured side by side: "
            + "; ".join(
                f"{base}@{top} / {ours}@{b} = {_geo([again(w, base, top) / again(w, ours, b) for w in names]):.3f}"
                for b in small
            )
            if remeasured
            else ""
        )
        + f"; wall {time.time() - t0:.0f} s"
    )
    bd: dict[str, float] = {}
    for r in runs:
        if r["model"] == ours:
            for k, v in (r.get("breakdown") or {}).get("seconds", {}).items():
                bd[k] = bd.get(k, 0.0) + v
    tot = sum(bd.values()) or 1.0
    print(
        f"\n{ours} time breakdown over all its runs: "
        + ", ".join(f"{k} {v:.0f} s ({100 * v / tot:.0f}%)" for k, v in bd.items() if v > 0.5)
    )
    return 0


def _remeasure(
    wls: list,
    runs: list[dict],
    every: list[dict],
    budgets: list[int],
    target: Any,
    evaluator: Any,
    rounds: int,
    console: Any,
    out: str | None,
    args: dict,
) -> None:
    """Measure every arm's best schedule at each budget again, side by side: per (workload,
    seed), all of them in each of `rounds` rounds, in a shuffled order, and keep each one's median
    over the rounds as the run's `remeasured_at`. `runs`: the runs asked for; `every`: all
    runs, written to `out` after each (workload, seed), so a stopped benchmark resumes here too.

    Why: a run's best is the minimum of its noisy measurements, and on a shared machine the same
    softmax schedule measured 423-1,121 us within a minute (bench/README.md). A 256-trial run
    takes the minimum over four times as many draws as a 64-trial run, and its measurements are
    spread over other minutes than the other arm's: the side-by-side medians compare the
    schedules, not the minutes they happened to be measured in. Each round runs in a fresh runner
    process: in one long-lived runner, 6 of 108 bests of the gradient benchmark re-measured 1.3-2.1x
    slower than in their runs in all rounds (BERT dense 543 vs 286 us), and 293-303 us in each of
    eight fresh runners since (bench/HISTORY.md), so a runner's own state must not decide the median."""
    import random

    import numpy as np

    from autosearch.backends.tvm.measure import Measurer
    from autosearch.features.per_store import candidate_from_trace

    by_name = {w.name: w for w in wls}
    pairs = sorted({(r["workload"], r["seed"]) for r in runs if r["workload"] in by_name and r.get("best_trace_at")})
    for name, seed in pairs:
        group = [r for r in runs if r["workload"] == name and r["seed"] == seed and r.get("best_trace_at")]
        if all("remeasured_at" in r for r in group):
            continue  # a resumed benchmark: done before
        traces = sorted({t for r in group for t in r["best_trace_at"].values() if t})
        cands = [candidate_from_trace(by_name[name].mod(), t) for t in traces]
        lats: dict[str, list[float]] = {t: [] for t in traces}
        order = list(range(len(traces)))
        rng = random.Random(f"{name}/{seed}")
        for _ in range(rounds):
            rng.shuffle(order)
            measurer = Measurer(target, evaluator)
            try:
                for i, res in zip(order, measurer.measure([cands[i] for i in order])):
                    if res.status == "ok":
                        lats[traces[i]].append(float(np.median(res.latencies)))
            finally:
                measurer.close()
        med = {t: float(np.median(v)) if v else None for t, v in lats.items()}
        for r in group:
            r["remeasured_at"] = {b: med.get(t) if t else None for b, t in r["best_trace_at"].items()}
            r["remeasured_rounds_at"] = {b: lats.get(t) if t else None for b, t in r["best_trace_at"].items()}
        console.print(f"re-measured {name} seed {seed}: {len(traces)} schedules x {rounds} rounds")
        if out:
            Path(out).write_text(json.dumps({"args": args, "runs": every}, indent=1) + "\n")


def _print_vs_pytorch(wls: list, runs: list[dict], models: list[str], top: int) -> None:
    """Each workload's PyTorch CPU time (tune's reference, same threads) and tuned speed / PyTorch's."""
    from autosearch.reference import reference_latency

    print(f"\n## Tuned kernel speed relative to PyTorch (PyTorch latency / best tuned latency @{top}; > 1: faster)\n")
    print("| workload | PyTorch reference | PyTorch (us) | " + " | ".join(models) + " |")
    print("|---|---|---|" + "---|" * len(models))
    for w in wls:
        ref = reference_latency(w)
        if not ref:
            print(f"| {w.name} | none | - | " + " | ".join("-" for _ in models) + " |")
            continue
        cells = []
        for m in models:
            lat = _geo(
                [
                    _best_after(r["history"], top) or math.nan
                    for r in runs
                    if r["workload"] == w.name and r["model"] == m
                ]
            )
            cells.append(f"{ref['latency'] / lat:.2f}" if math.isfinite(lat) else "-")
        print(
            f"| {w.name} | {ref['name']} ({ref['threads']} thr) | {ref['latency'] * 1e6:.1f} | "
            + " | ".join(cells)
            + " |"
        )


if __name__ == "__main__":
    sys.exit(main())
