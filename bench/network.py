"""Whole models against what a user runs today: `autosearch tune-model` at 0 trials (the prior
alone) and at a few budgets in minutes, TVM's stock `tune_relax` at the trials ours used in its
longest budget, PyTorch eager and `torch.compile` (inductor), all on the same CPU and threads.

Every system's output is checked against PyTorch relative to the output's scale
(`autosearch.networks.check`). Ours runs into a fresh store per arm (no arm warm-starts another),
one arm after the other; then every TVM build is timed interleaved (median of --timing-rounds);
PyTorch eager and torch.compile are timed in a fresh process each (`run_isolated`) with the same
threads (the faster of all cores and one thread for eager, as `tune-model` reports it).

    python bench/network.py --models resnet50,mobilenet_v2,bert_base,vit_base,convnext_tiny --minutes 0,10,30
    python bench/network.py --models resnet18 --minutes 0,2 --skip-stock          # a quick look
    python bench/network.py --models resnet50 --minutes 0 --layouts blocked,imported --skip-stock

Models come from examples/zoo.py (transformers architectures from a config, no download) with
their inputs in ZOO below; `--network FILE.py:FUNC --input ...` benchmarks any other model.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ZOO = {
    "resnet50": ["x:float32:1,3,224,224"],
    "resnet18": ["x:float32:1,3,224,224"],
    "mobilenet_v2": ["x:float32:1,3,224,224"],
    "convnext_tiny": ["x:float32:1,3,224,224"],
    "efficientnet_b0": ["x:float32:1,3,224,224"],
    "vit_base": ["x:float32:1,3,224,224"],
    "bert_base": ["input_ids:int64:1,128:0..30522"],
    "gpt2_small": ["input_ids:int64:1,128:0..50257"],
}


def _warm(target: Any) -> Any:
    """Tasks timed as `tune` times one operator: repeated runs, caches warm."""
    from autosearch.backends.tvm.measure import TUNE_EVALUATOR

    return TUNE_EVALUATOR


def _cold(target: Any) -> Any:
    from autosearch.networks.tune import network_evaluator

    return network_evaluator(target)


EVALUATORS = {"cold": _cold, "warm": _warm}


def torch_baselines(spec: str, specs: list[Any], seed: int) -> dict[str, Any]:
    """PyTorch eager and torch.compile (inductor) latency, each in a fresh process
    (`networks.timing.torch_timing`), and torch.compile's compile seconds."""
    from autosearch.networks.timing import torch_timing

    out: dict[str, Any] = {}
    for mode in ("eager", "compile"):
        try:
            out[mode] = torch_timing(spec, specs, seed=seed, compiled=mode == "compile")
        except Exception as exc:  # a model inductor cannot compile: say so, keep the rest
            out[mode] = {"latency": None, "error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    return out


def stock_tune_relax(
    graph: Any, target: Any, trials: int, work: Path, seed: int, per_round: int
) -> tuple[Any, int, float]:
    """TVM's own `tune_relax` (XGBModel, gradient task scheduler) on the same prepared module; its
    build goes through the same `build_network` as ours."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.networks.graph import build_network

    t0 = time.perf_counter()
    db = ms.relax_integration.tune_relax(
        graph.mod,
        {},
        target,
        str(work),
        max_trials_global=max(trials, 1),
        num_trials_per_iter=per_round,
        seed=seed,
        builder=ms.builder.LocalBuilder(timeout_sec=120.0),
    )
    seconds = time.perf_counter() - t0
    n = sum(1 for _ in db.get_all_tuning_records())
    return build_network(graph, db, target), n, seconds


def bench_model(name: str, spec: str, inputs: list[str], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import numpy as np
    import tvm
    from rich.console import Console
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.check import compare_outputs, flatten_outputs
    from autosearch.networks.graph import build_network, import_network, load_source
    from autosearch.networks.inputs import example_arrays, parse_inputs
    from autosearch.networks.tune import network_explore, reference_outputs, time_vm, tune_network
    from autosearch.search.assemble import choose_strategy
    from autosearch.search.model_spec import make_scorer
    from autosearch.search.tune import TuneSettings
    from autosearch.store import Store

    console = Console(stderr=True)
    target = host_target()
    specs = parse_inputs(inputs)
    rows: dict[str, dict[str, Any]] = {}
    exes: dict[str, Any] = {}
    arms = [(m, *arm, lay) for m in args.minutes for arm in (args.arms if m else args.arms[:1]) for lay in args.layouts]
    for minutes, model, search, timing, layout in arms:
        label = f"ours {minutes:g} min" if minutes else "ours prior only"
        if len(args.arms) > 1 and minutes:
            label += f" ({model}, {search}, {timing})"
        if len(args.layouts) > 1:
            label += f" [{layout}]"
        t0 = time.perf_counter()
        scorer = make_scorer(model, seed=args.seed, target=target)
        strategy = choose_strategy(scorer, search, network_explore(search), target=target, warn=False)
        with Store(work / f"{name}-{minutes:g}-{search}-{timing}-{layout}.db") as store:
            r = tune_network(
                spec,
                specs,
                target,
                strategy,
                lambda model=model: make_scorer(model, seed=args.seed, target=target),
                TuneSettings(trials_per_round=args.trials_per_round, seed=args.seed),
                trials=0 if not minutes else None,
                minutes=minutes or None,
                store=store,
                evaluator=EVALUATORS[timing](target),
                console=console,
                seed=args.seed,
                time_torch=False,
                blocked=layout == "blocked",
            )
        exes[label] = r.executable
        rows[label] = {"trials": r.trials, "tune_s": time.perf_counter() - t0, "summary": r.summary()}
    net = load_source(spec)
    arrays = example_arrays(specs, args.seed)
    expected = reference_outputs(net, arrays)
    graph = import_network(spec, net, specs, arrays, target, fast_math=True)  # the graph ours tunes by default
    longest = max(args.minutes)
    if not args.skip_stock and longest:
        trials = next(r["trials"] for k, r in rows.items() if k.startswith(f"ours {longest:g} min"))
        ex, n, secs = stock_tune_relax(graph, target, trials, work / f"{name}-stock", args.seed, args.trials_per_round)
        exes["tvm tune_relax"] = ex
        rows["tvm tune_relax"] = {"trials": n, "tune_s": secs}
    if args.untuned:
        exes["tvm untuned"] = build_network(graph, ms.database.MemoryDatabase(), target)
        rows["tvm untuned"] = {"trials": 0, "tune_s": None}
    dev = tvm.cpu()
    targs = [tvm.runtime.tensor(a, dev) for a in arrays]
    vms = {k: relax.VirtualMachine(ex, dev) for k, ex in exes.items()}
    for k, vm in vms.items():
        rows[k]["check"] = compare_outputs(flatten_outputs(vm["main"](*targs)), expected).describe()
        rows[k]["ok"] = rows[k]["check"].endswith("-> ok")
    lat: dict[str, list[float]] = {k: [] for k in vms}
    for _ in range(max(1, args.timing_rounds)):  # interleaved
        for k, vm in vms.items():
            lat[k].append(time_vm(vm, dev, targs, repeat=1 if k == "tvm untuned" else 3))
    for k, v in lat.items():
        rows[k]["latency"] = float(np.median(v))
    tb = torch_baselines(spec, specs, args.seed)
    rows["PyTorch eager"] = {"latency": tb["eager"].get("latency"), "trials": 0, "ok": True}
    rows["torch.compile"] = {
        "latency": tb["compile"].get("latency"),
        "tune_s": tb["compile"].get("compile_s"),
        "trials": 0,
        "ok": True,
        "error": tb["compile"].get("error"),
    }
    return {"model": name, "spec": spec, "inputs": inputs, "tasks": len(graph.tasks), "rows": rows}


def print_model(res: dict[str, Any], cpu: str, cores: int) -> None:
    rows = res["rows"]
    eager = rows["PyTorch eager"]["latency"]
    comp = rows["torch.compile"]["latency"]
    print(f"\n## {res['model']} ({res['tasks']} tasks) {' '.join(res['inputs'])} on {cpu} ({cores} cores)\n")
    print("| system | trials | tuning s | end-to-end (ms) | eager / this | compile / this | output ok |")
    print("|---|---|---|---|---|---|---|")
    for k, r in rows.items():
        v = r.get("latency")
        ms_ = f"{v * 1e3:.2f}" if v else "-"
        ratio_e = f"{eager / v:.2f}" if v and eager else "-"
        ratio_c = f"{comp / v:.2f}" if v and comp else "-"
        ts = r.get("tune_s")
        print(
            f"| {k} | {r.get('trials', '-')} | {'-' if ts is None else f'{ts:.0f}'} | {ms_} | {ratio_e} | {ratio_c} | {r.get('ok')} |"
        )
    ours = [k for k in rows if k.startswith("ours")]
    parts = [f"{k}: {eager / rows[k]['latency']:.2f}x eager" for k in ours if eager and rows[k].get("latency")]
    stock = rows.get("tvm tune_relax", {}).get("latency")
    if stock and ours:
        parts.append(f"tune_relax / {ours[-1]} = {stock / rows[ours[-1]]['latency']:.2f}")
    if comp and ours and rows[ours[-1]].get("latency"):
        parts.append(f"compile / {ours[-1]} = {comp / rows[ours[-1]]['latency']:.2f}")
    print(f"\nSUMMARY {res['model']}: " + "; ".join(parts))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--models", default="resnet50,mobilenet_v2,bert_base,vit_base,gpt2_small", help=f"of {', '.join(ZOO)}"
    )
    ap.add_argument("--network", default=None, help="FILE.py:FUNC or FILE.onnx instead of --models (with --input)")
    ap.add_argument("--input", action="append", default=[], help="as tune-model's --input, with --network")
    ap.add_argument("--minutes", default="0,10,30", help="ours' budgets in minutes; 0 = the prior alone")
    ap.add_argument(
        "--arms",
        default="pretrained-prefix:decision",
        help="ours' MODEL:SEARCH[:TIMING] arms (tune-model's --model and --search; TIMING: how tasks are "
        "timed, cold = weights flushed from the caches before each run, tune-model's default on a CPU, or "
        "warm = repeated runs, the default before), comma-separated; each runs every budget but 0 (the "
        "prior alone is the same for all)",
    )
    ap.add_argument(
        "--layouts",
        default="blocked",
        help="convolution layouts of ours, comma-separated: blocked (NCHW16c with AVX-512, tune-model's "
        "default on a CPU) and/or imported (as the model has them); each runs every arm and budget",
    )
    ap.add_argument("--trials-per-round", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-stock", action="store_true", help="no tune_relax arm")
    ap.add_argument("--untuned", action="store_true", help="also time TVM's untuned build (slow: seconds a call)")
    ap.add_argument("--timing-rounds", type=int, default=7)
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    args.minutes = [float(m) for m in args.minutes.split(",") if m.strip()]
    args.layouts = [x for x in args.layouts.split(",") if x.strip()]
    if not args.layouts or set(args.layouts) - {"blocked", "imported"}:
        ap.error("--layouts takes blocked and/or imported")
    args.arms = [tuple((a + ":cold" if a.count(":") == 1 else a).split(":")) for a in args.arms.split(",") if a.strip()]
    if not args.arms or any(len(a) != 3 or a[2] not in EVALUATORS for a in args.arms):
        ap.error("--arms takes MODEL:SEARCH[:TIMING] with TIMING cold or warm, e.g. pretrained-prefix:decision")
    from autosearch.backends.tvm.target import describe_target, host_target, use_physical_cores

    use_physical_cores()
    info = describe_target(host_target())
    cpu, cores = str(info.get("host_cpu")), int(info.get("physical_cores") or 0)
    work = Path(tempfile.mkdtemp(prefix="bench-network-"))
    todo = (
        [("custom", args.network, args.input)]
        if args.network
        else [(m, f"{ROOT / 'examples' / 'zoo.py'}:{m}", ZOO[m]) for m in args.models.split(",")]
    )
    results = []
    for name, spec, inputs in todo:
        res = bench_model(name, spec, inputs, args, work)
        results.append(res)
        print_model(res, cpu, cores)
        sys.stdout.flush()
        if args.json:
            Path(args.json).write_text(
                json.dumps({"args": vars(args), "cpu": cpu, "cores": cores, "results": results}, indent=1, default=str)
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
