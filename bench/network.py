"""Whole networks: `autosearch tune-model` vs TVM's stock `tune_relax` (XGBModel, gradient task
scheduler) at the same total trials, and both vs PyTorch eager on the same CPU and threads.

Both tune the same prepared Relax module (same tasks), both builds go through `compile_relax`, and
each network's output is checked against PyTorch. Tuning runs one after the other (ours first),
then the three executables (ours, tune_relax's, untuned) are timed interleaved (median of 15 rounds);
PyTorch eager is timed in its own process with the same threads.

    python bench/network.py --network examples/resnet18.py:make_model --input-shape 1,3,224,224 --trials 256
    python bench/network.py --network examples/bert_layer.py:make_model --input-shape 1,128,768 --trials 256

Two or more configurations of ours side by side (each tuned into its own fresh store, all timed in the
same interleaved rounds): `--arm LABEL=MODEL[:SEARCH[:EXPLORE[:fast-math]]]`, repeated; the first arm's store is
`ours.db` (what bench/network_tasks.py reads), the others' `ours-LABEL.db`.

    python bench/network.py --network examples/bert_layer.py:make_model --input-shape 1,128,768 --skip-stock \
        --arm mlp-evo=pretrained:evolutionary:control --arm prefix-decision=pretrained-prefix:decision:auto
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--network", required=True, help="FILE.py:make_model")
    ap.add_argument("--input-shape", action="append", required=True)
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--trials-per-round", type=int, default=16)
    ap.add_argument("--model", default="pretrained+xgb")
    ap.add_argument("--explore", default="control", help="as tune-model's --explore (default control)")
    ap.add_argument("--search", default="evolutionary", help="as tune-model's --search (default evolutionary)")
    ap.add_argument(
        "--arm",
        action="append",
        default=[],
        help="LABEL=MODEL[:SEARCH[:EXPLORE]], repeated: configurations of ours tuned one after the other and "
        "timed interleaved (default: one arm 'autosearch' of --model, --search, --explore)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-stock", action="store_true", help="only ours (no tune_relax run)")
    ap.add_argument(
        "--stock-db",
        default=None,
        help="instead of tuning with tune_relax again, build its network from an earlier run's work "
        "directory (the 'stock' folder this script leaves under /tmp/bench-network-*); it is still "
        "timed interleaved with ours; its tuning time is not re-measured",
    )
    ap.add_argument(
        "--stock-build-timeout",
        type=float,
        default=120.0,
        help="tune_relax's LocalBuilder timeout (TVM's 30 s default: on 2 busy cores a fresh build worker's "
        "one-time TVM import alone exceeds it, and the killed worker pays it again, so most builds fail)",
    )
    ap.add_argument(
        "--timing-rounds",
        type=int,
        default=15,
        help="interleaved timing rounds of the built networks (median reported, with the 25-75th percentiles)",
    )
    ap.add_argument(
        "--fast-math",
        action="store_true",
        help="as tune-model's --fast-math, for every system (ours, tune_relax and the untuned build); an arm "
        "ending in :fast-math takes it alone",
    )
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    from autosearch.backends.tvm.target import use_physical_cores

    use_physical_cores()  # ours, tune_relax and their workers: kernels on every core, not TVM's half

    import numpy as np
    import torch
    import tvm
    from rich.console import Console
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.relax_integration import compile_relax

    from autosearch.backends.tvm.target import describe_target, host_target
    from autosearch.search.model_spec import make_cost_model
    from autosearch.search.network import (
        import_network,
        import_torch_model,
        parse_shapes,
        prepared_module,
        time_vm,
        torch_latency_isolated,
        tune_network,
    )
    from autosearch.search.tune import TuneSettings
    from autosearch.store import Store

    console = Console(stderr=True)
    target = host_target()
    shapes = parse_shapes(args.input_shape)
    work = Path(tempfile.mkdtemp(prefix="bench-network-"))
    rows: dict[str, dict] = {}

    arms = [parse_arm(a, args.fast_math) for a in args.arm] or [
        ("autosearch", args.model, args.search, args.explore, args.fast_math)
    ]
    if len({a[0] for a in arms}) < len(arms):
        raise SystemExit(f"--arm: labels must differ: {[a[0] for a in arms]}")
    ours: dict[str, Any] = {}
    for i, (label, model, search, explore, fast) in enumerate(arms):
        settings = TuneSettings(
            trials=args.trials,
            trials_per_round=args.trials_per_round,
            population=256,
            seed=args.seed,
            search=search,
        )
        t0 = time.perf_counter()
        # A fresh store each: no warm start from earlier runs or from another arm.
        with Store(work / ("ours.db" if i == 0 else f"ours-{label}.db")) as store:
            r = tune_network(
                args.network,
                shapes,
                target,
                lambda m=model, e=explore, s_=search: make_cost_model(
                    m, seed=args.seed, explore=e, target=target, warn=False, search=s_
                ),
                settings,
                store=store,
                console=console,
                warm_start=False,
                fast_math=fast,
            )
        ours[label] = r
        rows[label] = {
            "trials": r.trials,
            "tune_s": time.perf_counter() - t0,
            "correct": r.correct,
            "tasks": len(r.tasks),
            "model": model,
            "search": search,
            "explore": explore,
            "fast_math": fast,
        }

    net, inputs = import_torch_model(args.network, shapes)
    mod, params, tasks, _ = import_network(args.network, net, inputs, target, fast_math=args.fast_math)
    with torch.no_grad():
        expected = net(*inputs)
    expected_np = (expected[0] if isinstance(expected, (tuple, list)) else expected).numpy()
    dev = tvm.cpu()
    targs = [tvm.runtime.tensor(x.numpy(), dev) for x in inputs]
    exes = {label: r.executable for label, r in ours.items()}
    if args.stock_db:
        stock = Path(args.stock_db)
        if not (stock / "database_tuning_record.json").is_file():
            raise SystemExit(f"--stock-db {stock}: no database_tuning_record.json there")
        db = ms.database.JSONDatabase(work_dir=str(stock), allow_missing=False)
        exes["tvm tune_relax"] = compile_relax(db, mod, target, params)
        n_stock = sum(1 for _ in db.get_all_tuning_records())
        rows["tvm tune_relax"] = {"trials": n_stock, "tune_s": None, "tasks": len(tasks), "from": str(stock)}
    elif not args.skip_stock:
        t0 = time.perf_counter()
        db = ms.relax_integration.tune_relax(
            prepared_module(mod, params),
            {},
            target,
            str(work / "stock"),
            max_trials_global=args.trials,
            num_trials_per_iter=args.trials_per_round,
            seed=args.seed,
            builder=ms.builder.LocalBuilder(timeout_sec=args.stock_build_timeout),
        )
        n_stock = sum(1 for _ in db.get_all_tuning_records())
        exes["tvm tune_relax"] = compile_relax(db, mod, target, params)
        rows["tvm tune_relax"] = {"trials": n_stock, "tune_s": time.perf_counter() - t0, "tasks": len(tasks)}
    exes["untuned"] = compile_relax(ms.database.MemoryDatabase(), mod, target, params)
    for name, ex in exes.items():
        vm = relax.VirtualMachine(ex, dev)
        out = vm["main"](*targs)
        while isinstance(out, (list, tuple)) or (hasattr(out, "__len__") and not hasattr(out, "numpy")):
            out = out[0]
        rows.setdefault(name, {})["correct"] = bool(np.allclose(out.numpy(), expected_np, rtol=1e-4, atol=1e-4))
        rows[name]["vm"] = vm
    lat: dict[str, list[float]] = {k: [] for k in rows if "vm" in rows[k]}
    for _ in range(max(1, args.timing_rounds)):  # interleaved
        for k in lat:
            lat[k].append(time_vm(rows[k]["vm"], dev, targs))
    for k, v in lat.items():
        rows[k]["latency"] = float(np.median(v))
        rows[k]["latency_iqr"] = [float(np.percentile(v, 25)), float(np.percentile(v, 75))]
        del rows[k]["vm"]
    torch_lat = torch_latency_isolated(args.network, shapes)
    rows["PyTorch eager"] = {"latency": torch_lat, "trials": 0, "correct": True}

    info = describe_target(target)
    print(f"\n## {args.network} {args.input_shape} on {info.get('host_cpu')} ({info.get('physical_cores')} cores)\n")
    print("| system | trials | tuning s | end-to-end (ms) | 25-75th pct (ms) | PyTorch / this | output ok |")
    print("|---|---|---|---|---|---|---|")
    for k, r in rows.items():
        l_ = r.get("latency")
        print(
            f"| {k} | {r.get('trials', '-')} | {_secs(r.get('tune_s'))} | {l_ * 1e3:.3f} | {_iqr(r.get('latency_iqr'))} | "
            f"{(torch_lat / l_) if torch_lat and l_ else float('nan'):.2f} | {r.get('correct')} |"
        )
    ref = rows.get("tvm tune_relax", {}).get("latency")
    first = arms[0][0]
    for label, *_ in arms:
        mine = rows[label]["latency"]
        summary = f"SUMMARY {args.network}: {label} {mine * 1e3:.3f} ms"
        if ref:
            summary += f", tvm tune_relax {ref * 1e3:.3f} ms -> tune_relax / {label} = {ref / mine:.3f}"
        if label != first:
            summary += f"; {first} / {label} = {rows[first]['latency'] / mine:.3f}"
        if torch_lat:
            summary += f"; PyTorch / {label} = {torch_lat / mine:.3f}"
        print(("\n" if label == first else "") + summary + f" (equal budget {args.trials} trials)")
    if len(arms) > 1:
        print_task_table(ours, [a[0] for a in arms])
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"args": vars(args), "rows": rows, "ours": {k: r.summary() for k, r in ours.items()}},
                indent=1,
                default=str,
            )
        )
    return 0


def _task_latency(task: dict[str, Any]) -> float | None:
    """What the build runs for a task: its best tuned schedule or TVM's default, whichever measured faster."""
    got = [v for v in (task.get("best_latency_s"), task.get("untuned_latency_s")) if v is not None]
    return min(got) if got else None


def print_task_table(ours: dict[str, Any], labels: list[str]) -> None:
    """Per task, each arm's trials and built latency; then the weighted sum over the tasks every arm
    measured (end-to-end times move from run to run; these per-task bests are steadier)."""
    by_arm = {label: {t["name"]: t for t in ours[label].tasks} for label in labels}
    names = list(by_arm[labels[0]])
    print("\n| task | weight | " + " | ".join(f"{label} trials | {label} (us)" for label in labels) + " |")
    print("|---|---|" + "---|---|" * len(labels))
    sums = dict.fromkeys(labels, 0.0)
    for name in names:
        tasks = [by_arm[label].get(name, {}) for label in labels]
        lats = [_task_latency(t) for t in tasks]
        weight = int(tasks[0].get("weight", 1))
        cells = [f"{t.get('trials', 0)} | {'-' if v is None else f'{v * 1e6:.1f}'}" for t, v in zip(tasks, lats)]
        print(f"| {name} | {weight} | " + " | ".join(cells) + " |")
        if all(v is not None for v in lats):
            for label, v in zip(labels, lats):
                sums[label] += weight * (v or 0.0)
    first = labels[0]
    line = ", ".join(f"{label} {sums[label] * 1e3:.3f} ms" for label in labels)
    ratios = ", ".join(f"{first} / {label} = {sums[first] / sums[label]:.3f}" for label in labels[1:] if sums[label])
    print(f"\nSUMMARY weighted sum over tasks every arm measured: {line} -> {ratios}")


def parse_arm(text: str, fast_math: bool = False) -> tuple[str, str, str, str, bool]:
    """`LABEL=MODEL[:SEARCH[:EXPLORE[:fast-math]]]` -> (label, model, search, explore, fast math);
    search defaults to evolutionary and explore to control, tune-model's settings before the
    decision search; fast math to `fast_math` (the `--fast-math` flag)."""
    label, eq, rest = text.partition("=")
    parts = rest.split(":") if eq else []
    fast = fast_math
    if len(parts) == 4 and parts[3] == "fast-math":
        fast = True
        parts = parts[:3]
    if not label or not parts or not parts[0] or len(parts) > 3:
        raise SystemExit(f"--arm {text!r}: expected LABEL=MODEL[:SEARCH[:EXPLORE[:fast-math]]]")
    model, search, explore = (parts + ["evolutionary", "control"][len(parts) - 1 :])[:3]
    return label, model, search, explore, fast


def _iqr(q: list[float] | None) -> str:
    return "-" if not q else f"{q[0] * 1e3:.2f}-{q[1] * 1e3:.2f}"


def _secs(s: float | None) -> str:
    return "-" if s is None else f"{s:.0f}"


if __name__ == "__main__":
    sys.exit(main())
