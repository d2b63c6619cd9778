"""Whole models against what a user runs today: `autosearch tune-model` at 0 trials (the prior
alone) and at a few budgets in minutes, TVM's stock `tune_relax` at the trials ours used in its
longest budget, PyTorch eager, `torch.compile` (inductor), ONNX Runtime and OpenVINO (f32 forced,
and its default precision reported beside), all on the same CPU and threads.

Ours runs into a fresh store per arm (no arm warm-starts another), one arm after the other. Then
every arm, ours included, is timed by one harness (`autosearch.networks.runtimes`) in a fresh
process (the tuning process's thread pools would slow PyTorch beside them): a Python loop of calls
of at least --min-round-s a round, --timing-rounds rounds with the arms interleaved, the median,
every runtime on --threads threads; the harness runs in --timing-processes fresh processes and an
arm's figure is the median of theirs (on this VM the same build ran 42 ms in one process and 72 in
the next, OpenVINO alike: where a process's memory lands decides that, not the runtime); each
output is checked against PyTorch relative to its scale (`autosearch.networks.check`). The headline is `best fp32 runtime / ours`: the fastest of eager,
torch.compile, ONNX Runtime and OpenVINO f32 whose output checked ok, over each build of ours; an
arm that cannot run (an operator the ONNX exporter lacks) is its one-line reason in the table.

    python bench/network.py --models resnet50,mobilenet_v2,bert_base,vit_base,convnext_tiny --minutes 0,10,30
    python bench/network.py --models resnet18 --minutes 0,2 --skip-stock          # a quick look
    python bench/network.py --models bert_base --minutes 0 --skip-stock --skip-compile --skip-runtimes
    python bench/network.py --models resnet50 --minutes 0 --layouts blocked,imported --skip-stock
    python bench/network.py --models mobilenet_v2 --minutes 10 --build "before=tuned/mbv2-old"   # an A/B

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

import numpy as np

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
    "llama_small": ["input_ids:int64:1,128:0..32000"],
    "mistral_small": ["input_ids:int64:1,128:0..32000"],
    "qwen2_small": ["input_ids:int64:1,128:0..32000"],
    "roberta_base": ["input_ids:int64:1,128:0..50265"],
    "swin_tiny": ["x:float32:1,3,224,224"],
    "regnet_y": ["x:float32:1,3,224,224"],
    "mobilenet_v1": ["x:float32:1,3,224,224"],
    "shufflenet_v2": ["x:float32:1,3,224,224"],
    "densenet121": ["x:float32:1,3,224,224"],
}


def _warm(target: Any) -> Any:
    """Tasks timed as `tune` times one operator: repeated runs, caches warm."""
    from autosearch.backends.tvm.measure import TUNE_EVALUATOR

    return TUNE_EVALUATOR


def _cold(target: Any) -> Any:
    from autosearch.networks.tune import network_evaluator

    return network_evaluator(target)


EVALUATORS = {"cold": _cold, "warm": _warm}


def time_every_arm(
    name: str, spec: str, specs: list[Any], exes: dict[str, Any], rows: dict[str, dict[str, Any]], args: Any, work: Path
) -> None:
    """Every arm timed by one harness (`networks.runtimes.compare_runtimes_isolated`): PyTorch eager,
    torch.compile, ONNX Runtime, OpenVINO f32 and OpenVINO at its default precision (unless
    skipped), and every TVM build in `exes` (exported to `work`), in one fresh process on the same
    threads, interleaved round by round, each output checked against PyTorch; `rows` gains each
    arm's latency, check and setup seconds (a failed arm: its one-line reason)."""
    from autosearch.backends.tvm.target import host_target, runtime_threads
    from autosearch.networks.runtimes import EAGER, compare_runtimes_isolated

    libs = {}
    for i, (label, ex) in enumerate(exes.items()):
        if isinstance(ex, (str, Path)):  # a library built elsewhere (--build)
            libs[label] = str(ex)
            continue
        path = work / f"{name}-arm{i}.so"
        ex.export_library(str(path))
        libs[label] = str(path)
    threads = args.threads or runtime_threads(host_target())
    runs = [
        compare_runtimes_isolated(
            spec,
            specs,
            threads=threads,
            work=work,
            seed=args.seed,
            tvm_libraries=libs,
            compile_arm=not args.skip_compile,
            runtimes=not args.skip_runtimes,
            int8_runtime=args.precision == "int8",
            rounds=max(1, args.timing_rounds),
            min_round_s=args.min_round_s,
            tvm_precisions={
                label: build_precision(label, lib, rows[label], args.precision) for label, lib in libs.items()
            },
            inputs=args.check_input,
            calibration=args.calibration,
        )
        for _ in range(max(1, args.timing_processes))
    ]
    arms = runs[0]
    for label, arm in arms.items():  # the median over the processes; each process's figure kept
        per_process = [r.get(label, {}).get("latency") for r in runs]
        if all(per_process):
            arm["latency"], arm["per_process"] = float(np.median(per_process)), per_process
    print(
        "TIMING per process (ms): "
        + "; ".join(
            f"{label} " + " / ".join(f"{x * 1e3:.2f}" for x in arm["per_process"])
            for label, arm in arms.items()
            if arm.get("per_process")
        ),
        flush=True,
    )
    for label in exes:  # ours and TVM's: the latency and the check of the timing process
        arm = arms.get(label) or arms.get("timing process") or {}
        rows[label].update(
            latency=arm.get("latency"),
            check=arm.get("check") or arm.get("error"),
            ok=arm.get("ok"),
            relative_err=arm.get("relative_err"),
        )
        rows[label]["per_process"] = arm.get("per_process")
        rows[label]["threads"] = threads
    for label, arm in arms.items():
        if label in exes:
            continue
        rows[label] = {
            "latency": arm.get("latency"),
            "trials": 0,
            "tune_s": arm.get("setup_s") if label != EAGER else None,
            "ok": arm.get("ok"),
            "check": arm.get("check"),
            "relative_err": arm.get("relative_err"),
            "error": arm.get("error"),
            "precision": arm.get("precision"),
            "exporter": arm.get("exporter"),
            "threads": threads,
            "per_process": arm.get("per_process"),
            "baseline": label != "timing process",
        }


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
    from rich.console import Console
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.lowp import get_precision, precision_target
    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.graph import build_network, import_network, load_source
    from autosearch.networks.inputs import example_arrays, parse_inputs
    from autosearch.networks.options import NetworkBudget, NetworkTuneOptions
    from autosearch.networks.tune import tune_network
    from autosearch.search.assemble import assemble_network
    from autosearch.search.tune import TuneSettings
    from autosearch.store import Store

    console = Console(stderr=True)
    # as tune-model compiles --precision without a --target: a VM whose CPU LLVM names an older
    # model than its flags gets the instructions they list (bf16 on AMX tiles where it has them)
    target = precision_target(get_precision(args.precision), host_target(), native=True)
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
        strategy, scorers = assemble_network(model, search, target=target, seed=args.seed)  # as tune-model does
        with Store(work / f"{name}-{minutes:g}-{search}-{timing}-{layout}.db") as store:
            r = tune_network(
                spec,
                specs,
                target,
                strategy,
                scorers,
                TuneSettings(trials_per_round=args.trials_per_round, seed=args.seed),
                budget=NetworkBudget(trials=0 if not minutes else None, minutes=minutes or None),
                options=NetworkTuneOptions(
                    seed=args.seed,
                    time_torch=False,
                    blocked=layout == "blocked",
                    precision=args.precision,
                    check_input=tuple(args.check_input),
                    calibration=tuple(args.calibration),
                ),
                store=store,
                evaluator=EVALUATORS[timing](target),
                console=console,
            )
        exes[label] = r.executable
        rows[label] = {"trials": r.trials, "tune_s": time.perf_counter() - t0, "summary": r.summary()}
    net = load_source(spec)
    arrays = example_arrays(specs, args.seed)
    graph = import_network(spec, net, specs, arrays, target, fast_math=True)  # the graph ours tunes by default
    longest = max(args.minutes, default=0)  # none: only the --build arms of ours
    if not args.skip_stock and longest:
        trials = next(r["trials"] for k, r in rows.items() if k.startswith(f"ours {longest:g} min"))
        ex, n, secs = stock_tune_relax(graph, target, trials, work / f"{name}-stock", args.seed, args.trials_per_round)
        exes["tvm tune_relax"] = ex
        rows["tvm tune_relax"] = {"trials": n, "tune_s": secs}
    for label, folder in args.build:
        exes[label] = str(Path(folder) / "model.so")
        rows[label] = {"trials": "-", "tune_s": None, "built_elsewhere": True}
    if args.untuned:
        exes["tvm untuned"] = build_network(graph, ms.database.MemoryDatabase(), target)
        rows["tvm untuned"] = {"trials": 0, "tune_s": None}
    time_every_arm(name, spec, specs, exes, rows, args, work)
    return {"model": name, "spec": spec, "inputs": inputs, "tasks": len(graph.tasks), "rows": rows}


def build_precision(label: str, library: str, row: dict, precision: str) -> str:
    """The precision a TVM arm is checked at: this run's for ours tuned here, fp32 for TVM's own
    builds (of the fp32 graph); for a `--build` arm the one its `model.json` records (a bf16 build
    checked at fp32's 1e-3 showed as wrong), this run's where the folder has none."""
    if label.startswith("ours"):
        return precision
    if not row.get("built_elsewhere"):
        return "fp32"
    from autosearch.networks.artifact import MANIFEST

    manifest = Path(library).with_name(MANIFEST)
    try:
        return str(json.loads(manifest.read_text())["summary"].get("precision", "fp32"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return precision


def machine_gemm_rate(threads: int | None) -> float | None:
    """The machine's best 2048^3 SGEMM GFLOP/s of torch.mm, ONNX Runtime and OpenVINO f32
    (bench/gemm_rate.py), on the threads every arm gets: the ceiling of a dense layer here."""
    sys.path.insert(0, str(ROOT / "bench"))
    from autosearch.backends.tvm.target import host_target, runtime_threads
    from autosearch.networks.runtimes import set_threads
    from gemm_rate import rates

    n = threads or runtime_threads(host_target())
    set_threads(n)
    r = rates(2048, 2048, 2048, n, rounds=5, min_round_s=0.3)
    if not r["gflops"]:
        return None
    arm, best = max(r["gflops"].items(), key=lambda kv: kv[1])
    print(
        f"GEMM 2048^3 SGEMM on {n} threads: "
        + ", ".join(f"{a} {g:.0f}" for a, g in r["gflops"].items())
        + f" GFLOP/s (best: {arm})"
    )
    return float(best)


def _ms(v: Any) -> str:
    return f"{v * 1e3:.2f}" if v else "-"


def _system(label: str, r: dict[str, Any]) -> str:
    """A row's name: OpenVINO's default arm with the precision it compiled for."""
    from autosearch.networks.runtimes import OPENVINO_DEFAULT

    return f"{label} ({r['precision']})" if label == OPENVINO_DEFAULT and r.get("precision") else label


def _is_ours(label: str, row: dict[str, Any]) -> bool:
    """Whether an arm is a build of ours: tuned in this run ("ours ...") or given by `--build`."""
    return label.startswith("ours") or bool(row.get("built_elsewhere"))


def headline(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`best fp32 runtime / ours` for each of ours' builds: the fastest float32 baseline (eager,
    torch.compile, ONNX Runtime, OpenVINO f32; its output checked ok) over ours' latency, all from
    the one interleaved harness (a `--build` arm is one of ours). OpenVINO's default precision is
    never the baseline."""
    from autosearch.networks.runtimes import best_fp32_baseline

    best = best_fp32_baseline(rows)
    ours = {k: r["latency"] for k, r in rows.items() if _is_ours(k, r) and r.get("latency") and r.get("ok")}
    return {
        "best": best[0] if best else None,
        "best_latency": best[1] if best else None,
        "ratios": {k: best[1] / v for k, v in ours.items()} if best else {},
    }


def print_model(res: dict[str, Any], cpu: str, cores: int) -> None:
    rows = res["rows"]
    eager = rows.get("PyTorch eager", {}).get("latency")
    comp = rows.get("torch.compile", {}).get("latency")
    head = res.get("headline") or headline(rows)
    best = head["best_latency"]
    threads = next((r["threads"] for r in rows.values() if r.get("threads")), None)
    print(
        f"\n## {res['model']} ({res['tasks']} tasks) {' '.join(res['inputs'])} on {cpu} ({cores} cores, "
        f"{threads} threads every arm)\n"
    )
    print(
        "| system | trials | tuning / setup s | end-to-end (ms) | best fp32 / this | eager / this | compile / this | output ok |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for k, r in rows.items():
        v = r.get("latency")
        ratio_b = f"{best / v:.2f}" if v and best else "-"
        ratio_e = f"{eager / v:.2f}" if v and eager else "-"
        ratio_c = f"{comp / v:.2f}" if v and comp else "-"
        ts = r.get("tune_s")
        ok = r.get("ok") if not r.get("error") else f"- ({r['error']})"
        print(
            f"| {_system(k, r)} | {r.get('trials', '-')} | {'-' if ts is None else f'{ts:.0f}'} | {_ms(v)} | {ratio_b} | {ratio_e} | {ratio_c} | {ok} |"
        )
    ours = [k for k in rows if k.startswith("ours")]
    parts = [f"{k}: {eager / rows[k]['latency']:.2f}x eager" for k in ours if eager and rows[k].get("latency")]
    stock = rows.get("tvm tune_relax", {}).get("latency")
    if stock and ours and rows[ours[-1]].get("latency"):
        parts.append(f"tune_relax / {ours[-1]} = {stock / rows[ours[-1]]['latency']:.2f}")
    if comp and ours and rows[ours[-1]].get("latency"):
        parts.append(f"compile / {ours[-1]} = {comp / rows[ours[-1]]['latency']:.2f}")
    print(f"\nSUMMARY {res['model']}: " + "; ".join(parts))
    for k in ours:
        print_time_spent(k, rows[k].get("summary") or {}, res.get("gemm_gflops"))
    if head["best"]:
        ratios = ", ".join(f"{k} {x:.2f}" for k, x in head["ratios"].items()) or "no build of ours checked ok"
        print(f"HEADLINE {res['model']}: best fp32 runtime ({head['best']}, {_ms(best)} ms) / ours: {ratios}")
    else:
        print(f"HEADLINE {res['model']}: no fp32 baseline ran with its output checked ok")
    for k in (k for k in rows if rows[k].get("built_elsewhere") and rows[k].get("latency")):
        parts = [f"{k} / {o} = {rows[k]['latency'] / rows[o]['latency']:.2f}" for o in ours if rows[o].get("latency")]
        if parts:
            print(f"BUILDS {res['model']}: " + "; ".join(parts))
    from autosearch.networks.runtimes import ONNXRUNTIME_INT8, OPENVINO_DEFAULT

    q = rows.get(ONNXRUNTIME_INT8, {})
    if q.get("latency"):
        parts = [
            f"{k} {q['latency'] / rows[k]['latency']:.2f} (error {rows[k].get('relative_err') or 0:.1e} "
            f"vs ONNX Runtime's {q.get('relative_err') or 0:.1e})"
            for k in ours
            if rows[k].get("latency")
        ]
        print(f"INT8 {res['model']}: ONNX Runtime int8 ({_ms(q['latency'])} ms) / ours: {', '.join(parts) or '-'}")
    ov = rows.get(OPENVINO_DEFAULT, {})
    if ov.get("latency"):
        # a low precision's goal is OpenVINO's speed at an error no larger than OpenVINO's: a
        # random-weight convnet misses the bf16 tolerance in both (ResNet-50: 0.25 and 0.28)
        ov_err = ov.get("relative_err")
        parts = []
        for k in ours:
            v, err = rows[k].get("latency"), rows[k].get("relative_err")
            if v and err is not None and ov_err is not None:
                verdict = "ok" if rows[k].get("ok") else "no larger than OpenVINO's" if err <= ov_err else "LARGER"
                parts.append(f"{k} {ov['latency'] / v:.2f} (error {err:.1e} vs OpenVINO's {ov_err:.1e}: {verdict})")
        print(
            f"DEFAULT-PRECISION {res['model']}: OpenVINO default ({ov.get('precision')}, {_ms(ov['latency'])} ms) "
            f"/ ours: {', '.join(parts) or 'no build of ours with a compared output'}"
        )


def dense_rate(summary: dict[str, Any]) -> tuple[float, float] | None:
    """(GFLOP/s, seconds) of the matmul tasks of one build of ours in a run of the whole network
    (each task's FLOPs x calls over its `network_s`; a bf16 build's packed dense layers count),
    or None without matmul tasks."""
    dense = [
        t
        for t in summary.get("tasks", [])
        if ("matmul" in t["name"] or "dense_packed" in t["name"]) and t.get("flops") and t.get("network_s")
    ]
    if not dense:
        return None
    secs = sum(t["network_s"] for t in dense)
    return sum(t["flops"] * t["weight"] for t in dense) / secs / 1e9, secs


def print_time_spent(label: str, summary: dict[str, Any], gemm_gflops: float | None) -> None:
    """Where a build of ours spends a run (its five costliest tasks, `network_s`), and its matmul
    tasks' rate beside the machine's best SGEMM rate (`gemm_gflops`, measured in this run)."""
    tasks = sorted(summary.get("tasks", []), key=lambda t: -(t.get("network_s") or 0.0))
    total = sum(t.get("network_s") or 0.0 for t in tasks) + (summary.get("outside_tasks_s") or 0.0)
    if not total:
        return
    top = ", ".join(
        f"{t['name'][4:]} {t['network_s'] * 1e3:.2f} ms ({t['built_with']})" for t in tasks[:5] if t.get("network_s")
    )
    print(f"TIME {label}: {top}; outside the tasks {(summary.get('outside_tasks_s') or 0.0) * 1e3:.2f} ms")
    rate = dense_rate(summary)
    if rate:
        precision = summary.get("precision") or "fp32"
        share = f", {rate[0] / gemm_gflops:.0%} of the machine's best SGEMM ({gemm_gflops:.0f})" if gemm_gflops else ""
        if precision != "fp32":  # the SGEMM rate is an fp32 ceiling
            share = f" in {precision}" + (
                f" ({rate[0] / gemm_gflops:.2f}x the fp32 SGEMM ceiling)" if gemm_gflops else ""
            )
        print(f"DENSE {label}: matmul tasks {rate[0]:.0f} GFLOP/s in the network ({rate[1] * 1e3:.2f} ms){share}")


def print_summary(results: list[dict[str, Any]]) -> None:
    """One row a model: every baseline's and every build of ours' milliseconds, the best fp32
    runtime and `best fp32 / ours` for each build; then the geometric mean of each over the models
    that have it."""
    from autosearch.networks.runtimes import (
        EAGER,
        ONNXRUNTIME,
        OPENVINO_DEFAULT,
        OPENVINO_F32,
        TORCH_COMPILE,
    )

    baselines = [EAGER, TORCH_COMPILE, ONNXRUNTIME, OPENVINO_F32, OPENVINO_DEFAULT]
    ours = list(dict.fromkeys(k for res in results for k, r in res["rows"].items() if _is_ours(k, r)))
    cols = [*baselines, *ours]
    print("\n## Summary: milliseconds a call, every arm in one interleaved harness\n")
    print(
        "| model | "
        + " | ".join(cols)
        + " | best fp32 runtime | "
        + " | ".join(f"best fp32 / {k}" for k in ours)
        + " |"
    )
    print("|---|" + "---|" * (len(cols) + 1 + len(ours)))
    ratios: dict[str, list[float]] = {k: [] for k in ours}
    for res in results:
        rows, head = res["rows"], res.get("headline") or headline(res["rows"])
        cells = []
        for k in cols:
            r = rows.get(k, {})
            cell = (
                _ms(r.get("latency"))
                if r.get("ok")
                else "-"
                if not r.get("latency")
                else f"{_ms(r['latency'])} (wrong)"
            )
            if k == OPENVINO_DEFAULT and r.get("precision"):
                cell += f" ({r['precision']})"
            cells.append(cell)
        best = f"{head['best']} {_ms(head['best_latency'])}" if head["best"] else "-"
        for k, x in head["ratios"].items():
            ratios[k].append(x)
        rs = [f"{head['ratios'][k]:.2f}" if k in head["ratios"] else "-" for k in ours]
        print(f"| {res['model']} | " + " | ".join(cells) + f" | {best} | " + " | ".join(rs) + " |")
    for k, xs in ratios.items():
        if xs:
            geo = float(np.exp(np.mean(np.log(xs))))
            print(f"HEADLINE geomean best fp32 runtime / {k}: {geo:.2f} over {len(xs)} model(s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--models", default="resnet50,mobilenet_v2,bert_base,vit_base,gpt2_small", help=f"of {', '.join(ZOO)}"
    )
    ap.add_argument("--network", default=None, help="FILE.py:FUNC or FILE.onnx instead of --models (with --input)")
    ap.add_argument("--input", action="append", default=[], help="as tune-model's --input, with --network")
    ap.add_argument(
        "--minutes",
        default="0,10,30",
        help="ours' budgets in minutes; 0 = the prior alone; empty: only the --build arms",
    )
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
    ap.add_argument("--timing-rounds", type=int, default=7, help="rounds of the interleaved harness (median)")
    ap.add_argument(
        "--timing-processes",
        type=int,
        default=3,
        help="fresh timing processes, each running the whole harness; an arm's figure is their median "
        "(on this VM one process's memory ran DenseNet-121 1.6x slower than another's, every runtime alike)",
    )
    ap.add_argument(
        "--min-round-s", type=float, default=0.3, help="each arm's shortest round in the harness, in seconds"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads of every arm (PyTorch, ONNX Runtime, OpenVINO, TVM's runtime); default: TVM's, the physical cores",
    )
    ap.add_argument("--skip-runtimes", action="store_true", help="no ONNX Runtime and OpenVINO arms")
    ap.add_argument("--skip-compile", action="store_true", help="no torch.compile arm (inductor compiles for minutes)")
    ap.add_argument(
        "--build",
        action="append",
        default=[],
        help="LABEL=DIR: also time the library a `tune-model --out DIR` run exported (e.g. by another version "
        "of the code, for an A/B in this one harness); repeatable",
    )
    ap.add_argument(
        "--precision",
        default="fp32",
        choices=("fp32", "bf16", "int8"),
        help="ours' dense layers and convolutions (tune-model --precision); with bf16 the headline is OpenVINO's default "
        "precision (bf16 on a CPU with AVX512_BF16 or AMX) / ours; each --build arm (e.g. ours in fp32) / ours is "
        "printed too (int8's goal: our own fp32 build / ours int8)",
    )
    ap.add_argument(
        "--calibration",
        action="append",
        default=[],
        help="with --precision int8: tune-model's --calibration (FILE.npy or NAME=FILE.npy, N samples), also "
        "ONNX Runtime int8's calibration set; default: the random example inputs",
    )
    ap.add_argument(
        "--check-input",
        action="append",
        default=[],
        help="FILE.npy or NAME=FILE.npy: every arm, ours' tune-model check too, runs, is checked and timed on "
        "its first sample (data held out of --calibration); default: the random example inputs",
    )
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.calibration and args.precision != "int8":
        ap.error("--calibration calibrates --precision int8")
    args.build = [tuple(b.split("=", 1)) for b in args.build]
    if any(len(b) != 2 or not (Path(b[1]) / "model.so").is_file() for b in args.build):
        ap.error("--build takes LABEL=DIR, DIR a folder with the model.so a tune-model --out wrote")
    if args.threads is not None and args.threads < 1:
        ap.error("--threads takes a whole number >= 1")
    if not args.min_round_s > 0:
        ap.error("--min-round-s takes seconds > 0")
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
    gemm = machine_gemm_rate(args.threads)
    results = []
    for name, spec, inputs in todo:
        res = bench_model(name, spec, inputs, args, work)
        res["gemm_gflops"] = gemm
        res["headline"] = headline(res["rows"])
        results.append(res)
        print_model(res, cpu, cores)
        sys.stdout.flush()
        if args.json:
            Path(args.json).write_text(
                json.dumps({"args": vars(args), "cpu": cpu, "cores": cores, "results": results}, indent=1, default=str)
            )
    print_summary(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
