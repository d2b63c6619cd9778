"""Benchmark: Adams2019 with Halide's stock weights vs. weights retrained on this machine.

1. Sample `--train-pipelines` random pipelines (one autotune-loop batch each), a `--valid-frac`
   share of them (whole pipelines) kept apart for model selection. With `--rounds R` this is
   Halide's autotune loop: the pipelines are sampled in R rounds, and after each round the weights
   are retrained on everything so far and sample the next round, so later samples come from the
   schedules the retrained weights choose (their own mistakes) and not only from stock's.
2. Label quality: the spread of the interleaved rounds of every training sample, and a second,
   independent measurement of the same schedules of `--remeasure` training pipelines (how often
   two measurements agree on which of two schedules is faster = the ceiling for any model).
3. Fine-tune from the stock weights (our PyTorch trainer, Halide's loss, one pipeline per ADAM
   step): calibrate the prediction scale first (ordering-neutral), low learning rate, and keep
   the epoch whose ordering of the validation pipelines is best; the stock weights compete as
   epoch 0 and win ties, so a retrain that does not help keeps the stock weights.
4. On `--heldout` other random pipelines (never sampled for training or validation): schedule
   each with both weight sets (beam search, `--beam-size`) and benchmark the two schedules
   interleaved in one worker; report the geometric mean runtime of each and the ratio.
5. Ordering accuracy of the weight sets on a batch of samples of every held-out pipeline.

Not a test: it takes many minutes. The command in bench/README.md ("## Halide retrain").

`--trainer-speed` measures only the trainers, side by side: Halide's `adams2019_retrain_cost_model`
and ours (`Adams2019Trainer`) on the same samples (pipelines with >= 8 schedules, as Halide's tool
keeps), the same epochs, learning rate, starting weights (stock) and thread count (HL_NUM_THREADS
for Halide's tool, torch threads for ours), `--speed-repeats` runs each, interleaved; median
seconds, samples/s (schedules x epochs / s) and the first/last epoch loss. Ours is timed twice: the
`fit` call in a warm process (what the autotune loop pays per batch) and a fresh process doing the
imports and the fit (what one `autosearch halide retrain --batches 0` pays; Halide's tool is a
fresh process every time). Samples: `--samples DIR[,DIR...]` (e.g. an autotune run's
`samples/` folders) or `--train-pipelines` random pipelines sampled into `--out-dir`.

    .venv/bin/python bench/halide_retrain.py --trainer-speed --samples /tmp/halide_apps/harris/samples \
        --epochs 50 --threads 1 --speed-repeats 5
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

_OURS_FRESH = """
import sys, time, json
t0 = time.perf_counter()
from autosearch.backends.halide.sample_io import load_from_dir
from autosearch.backends.halide.weights import Weights
from autosearch.models.adams2019 import Adams2019Trainer, group_samples
cfg = json.loads(sys.argv[1])
groups = group_samples([s for d in cfg["dirs"] for s in load_from_dir(d)], min_schedules=8)
t1 = time.perf_counter()
res = Adams2019Trainer(cfg["lr"], cfg["epochs"], num_cores=32, threads=cfg["threads"]).fit(Weights.baseline(), groups)
t2 = time.perf_counter()
print(json.dumps({"total_s": t2 - t0, "fit_s": t2 - t1}))
"""


def trainer_speed(dirs: list[Path], epochs: int, lr: float, threads: int, repeats: int, torch_threads: int = 1) -> dict:
    """Halide's retrain tool (HL_NUM_THREADS=threads) vs our trainer (`torch_threads`; 1 is what the
    autotune loop uses), same samples / epochs / rate / start, interleaved."""
    import json

    import torch

    from autosearch.backends.halide.sample_io import load_from_dir
    from autosearch.backends.halide.toolchain import tool_path
    from autosearch.backends.halide.weights import Weights
    from autosearch.models.adams2019 import Adams2019Trainer, group_samples

    samples = [s for d in dirs for s in load_from_dir(d)]
    groups = group_samples(samples, min_schedules=8)  # Halide's tool skips pipelines with < 8 schedules
    if not groups:
        raise SystemExit(f"no pipeline with >= 8 distinct schedules in {', '.join(map(str, dirs))}")
    n = sum(g.size for g in groups)
    files = [str(s.path) for s in samples]
    out: dict = {
        "schedules": n,
        "pipelines": len(groups),
        "files": len(files),
        "epochs": epochs,
        "threads": threads,
        "torch_threads": torch_threads,
    }
    halide_s, warm_s, fresh_s = [], [], []
    halide_losses: list[float] = []
    ours_losses: list[float] = []
    trainer = Adams2019Trainer(lr, epochs, num_cores=32, threads=torch_threads)
    Adams2019Trainer(lr, 1, num_cores=32, threads=torch_threads).fit(Weights.baseline(), groups[:1])  # warm-up
    env = dict(os.environ, HL_NUM_THREADS=str(threads))
    cfg = json.dumps({"dirs": [str(d) for d in dirs], "lr": lr, "epochs": epochs, "threads": torch_threads})
    with tempfile.TemporaryDirectory() as tmp:
        init = Path(tmp) / "init.weights"
        Weights.baseline().save(init)
        for _ in range(repeats):
            t = time.perf_counter()
            proc = subprocess.run(
                [
                    str(tool_path("adams2019_retrain_cost_model")),
                    f"--epochs={epochs}",
                    f"--rates={lr}",
                    f"--initial_weights={init}",
                    f"--weights_out={Path(tmp) / 'out.weights'}",
                    "--num_cores=32",
                    f"--best_benchmark={Path(tmp) / 'b.txt'}",
                    f"--best_schedule={Path(tmp) / 'b.h'}",
                ],
                input="\n".join(files) + "\n",
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            halide_s.append(time.perf_counter() - t)
            if proc.returncode:
                raise SystemExit(f"adams2019_retrain_cost_model failed ({proc.returncode}): {proc.stdout[-300:]}")
            halide_losses = [float(x) for x in re.findall(r"Loss: ([0-9.eE+-]+)", proc.stdout)]
            saved = torch.get_num_threads()
            t = time.perf_counter()
            res = trainer.fit(Weights.baseline(), groups)
            warm_s.append(time.perf_counter() - t)
            assert torch.get_num_threads() == saved
            ours_losses = res.losses
            fresh = subprocess.run([sys.executable, "-c", _OURS_FRESH, cfg], capture_output=True, text=True, check=True)
            fresh_s.append(json.loads(fresh.stdout.strip().splitlines()[-1])["total_s"])
    med = {k: statistics.median(v) for k, v in (("halide", halide_s), ("warm", warm_s), ("fresh", fresh_s))}
    out.update(
        halide_s=halide_s,
        ours_warm_s=warm_s,
        ours_fresh_process_s=fresh_s,
        halide_samples_per_s=n * epochs / med["halide"],
        ours_samples_per_s=n * epochs / med["warm"],
        ours_fresh_samples_per_s=n * epochs / med["fresh"],
        halide_first_loss=halide_losses[0] if halide_losses else None,
        halide_last_loss=halide_losses[-1] if halide_losses else None,
        ours_first_loss=ours_losses[0],
        ours_last_loss=ours_losses[-1],
    )
    return out


def print_trainer_speed(sp: dict) -> None:
    print()
    print(
        f"trainers on {sp['schedules']} schedules of {sp['pipelines']} pipelines, {sp['epochs']} epochs, "
        f"Halide's tool on {sp['threads']} thread(s), ours on {sp['torch_threads']}, "
        f"median of {len(sp['halide_s'])} interleaved runs"
    )
    print("| trainer | median s | samples/s | first-epoch loss | last-epoch loss |")
    print("|---|---|---|---|---|")
    hl_last = sp["halide_last_loss"]
    rows = [
        ("Halide adams2019_retrain_cost_model (process)", "halide_s", "halide_samples_per_s", "halide"),
        ("ours, Adams2019Trainer.fit (warm process)", "ours_warm_s", "ours_samples_per_s", "ours"),
        ("ours, fresh process (imports + load + fit)", "ours_fresh_process_s", "ours_fresh_samples_per_s", "ours"),
    ]
    for label, times, rate, who in rows:
        print(
            f"| {label} | {statistics.median(sp[times]):.3f} | {sp[rate]:.0f} | "
            f"{sp[f'{who}_first_loss']:.4g} | {sp[f'{who}_last_loss']:.4g} |"
        )
    ratio = sp["ours_samples_per_s"] / sp["halide_samples_per_s"]
    loss_ok = hl_last is None or sp["ours_last_loss"] <= hl_last * 1.0001
    print(
        f"SUMMARY trainer samples/s ours/halide = {ratio:.2f} (fresh process: "
        f"{sp['ours_fresh_samples_per_s'] / sp['halide_samples_per_s']:.2f}); last-epoch loss ours {sp['ours_last_loss']:.4g} "
        f"vs halide {hl_last if hl_last is None else f'{hl_last:.4g}'}; goal >= 1.0 at equal or lower loss: "
        f"{'met' if ratio >= 1.0 and loss_ok else 'not met'}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-pipelines", type=int, default=40, help="sampled pipelines, validation share included")
    ap.add_argument("--rounds", type=int, default=1, help="sample-retrain rounds (Halide's autotune loop)")
    ap.add_argument(
        "--valid-frac", type=float, default=0.25, help="share of sampled pipelines used for model selection"
    )
    ap.add_argument("--batch-size", type=int, default=5)
    ap.add_argument("--heldout", type=int, default=10)
    ap.add_argument(
        "--heldout-samples", type=int, default=4, help="schedules per held-out pipeline for ordering accuracy"
    )
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--lr", type=float, default=0.0001, help="Halide's autotune loop uses 1e-4")
    ap.add_argument("--select", choices=["best_valid", "last"], default="best_valid")
    ap.add_argument(
        "--min-improvement", type=float, default=0.02, help="validation pairwise margin over stock to keep an epoch"
    )
    ap.add_argument("--no-calibrate", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="1: on a shared machine 2-thread timings are erratic")
    ap.add_argument(
        "--beam-size", type=int, default=8, help="held-out comparison schedules (Halide uses 32; 8 fits the time)"
    )
    ap.add_argument("--sample-beam-size", type=int, default=8, help="sample 0 of every sampled batch")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds per sample")
    ap.add_argument("--compare-repeats", type=int, default=7, help="interleaved rounds, held-out comparison")
    ap.add_argument("--min-time", type=float, default=0.05, help="seconds one measurement (round) lasts at least")
    ap.add_argument("--mean-timing", action="store_true", help="mean of a round's iterations instead of the fastest")
    ap.add_argument("--remeasure", type=int, default=3, help="training pipelines measured twice (label check)")
    ap.add_argument("--sizes", default="512,768,1024", help="random pipeline input sizes (x and y)")
    ap.add_argument("--channels", default="3,4,8", help="random pipeline input channel counts")
    ap.add_argument("--max-elems", type=int, default=1 << 21)
    ap.add_argument("--max-stages", type=int, default=5)
    ap.add_argument(
        "--gate-ratio",
        type=float,
        default=0.97,
        help="keep the selected weights only if their beam-search schedules of the validation pipelines are "
        "at most this fraction of stock's runtime (geomean); 0 disables the gate",
    )
    ap.add_argument(
        "--reuse-samples",
        default="",
        help="take train/, remeasure/ and samples.db from an earlier --out-dir "
        "(same pipeline options) instead of sampling again",
    )
    ap.add_argument("--out-dir", default="bench_halide_out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trainer-speed", action="store_true", help="only time Halide's retrain tool against ours")
    ap.add_argument("--samples", default="", help="--trainer-speed: sample folders (comma-separated) to train on")
    ap.add_argument("--speed-repeats", type=int, default=5, help="--trainer-speed: interleaved runs of each trainer")
    ap.add_argument(
        "--torch-threads", type=int, default=1, help="--trainer-speed: our trainer's threads (the loop's: 1)"
    )
    args = ap.parse_args()
    if args.trainer_speed:
        run_trainer_speed(args)
        return

    from autosearch.backends.halide.autoschedule import autoschedule_and_benchmark
    from autosearch.backends.halide.pipelines import resolve_pipeline
    from autosearch.backends.halide.sample_io import load_from_dir
    from autosearch.backends.halide.weights import Weights
    from autosearch.halide.autosampler import sample_batch
    from autosearch.models.adams2019 import Adams2019Trainer, evaluate, group_samples
    from autosearch.store.db import Store
    from autosearch.training.metrics import pairwise_accuracy

    t_start = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - t_start:6.0f}s] {msg}", flush=True)

    out = Path(args.out_dir)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rp = {
        "max_stages": args.max_stages,
        "sizes": [int(v) for v in args.sizes.split(",")],
        "channels": [int(v) for v in args.channels.split(",")],
        "max_elems": args.max_elems,
    }
    timing = {"min_time_s": args.min_time, "per_iter_min": not args.mean_timing}

    def spec(seed: int):
        return resolve_pipeline("random", {**rp, "seed": seed})

    train_seeds = [1000 + args.seed * 100000 + i for i in range(args.train_pipelines)]
    held_seeds = [5000 + args.seed * 100000 + i for i in range(args.heldout)]
    assert not set(train_seeds) & set(held_seeds)
    if args.rounds < 1 or args.rounds > args.train_pipelines:
        ap.error(f"--rounds must be between 1 and --train-pipelines, got {args.rounds}")
    # every k-th pipeline validates, so each round has its share of validation pipelines
    k = max(2, round(1 / args.valid_frac)) if args.select == "best_valid" and args.valid_frac > 0 else 0
    valid_seeds = set(train_seeds[k - 1 :: k]) if k else set()

    # 1. training (and validation) samples with the stock weights; every round kept in a store
    batch_of: dict[int, int] = {}
    if args.reuse_samples:
        src = Path(args.reuse_samples)
        for sub in ("train", "remeasure"):
            if (src / sub).is_dir():
                shutil.copytree(src / sub, out / sub)
        shutil.copyfile(src / "samples.db", out / "samples.db")
        log(f"reusing the training/validation samples and re-measurements of {src}")
    db = Store(out / "samples.db")
    stock = Weights.baseline()
    stock_path = stock.save(out / "stock.weights")
    trainer = Adams2019Trainer(
        learning_rate=args.lr,
        epochs=args.epochs,
        num_cores=args.threads,
        seed=args.seed,
        calibrate=not args.no_calibrate,
        select=args.select,
        min_improvement=args.min_improvement,
    )
    valid_pids = {spec(s).pipeline_id() for s in valid_seeds}

    def split_samples() -> tuple[list, list, list]:
        samples = load_from_dir(out / "train")
        return (
            samples,
            group_samples([x for x in samples if x.pipeline_id not in valid_pids], min_schedules=2),
            group_samples([x for x in samples if x.pipeline_id in valid_pids], min_schedules=2),
        )

    def gm(xs: list[float]) -> float:
        return math.exp(float(np.mean(np.log(xs)))) if xs else float("nan")

    sampling_path = stock_path  # the weights that sample the current round
    rounds = [list(c) for c in np.array_split(np.array(train_seeds), args.rounds)] if not args.reuse_samples else []
    for r, chunk in enumerate(rounds):
        if r:
            _, train, valid = split_samples()
            if not (valid or args.select == "last"):
                log(f"round {r + 1}/{len(rounds)}: no validation pipeline sampled yet, so the same weights sample it")
            elif train:
                res = trainer.fit(stock, train, valid=valid or None)
                sampling_path = res.weights.save(out / f"round{r}.weights")
                log(
                    f"round {r + 1}/{len(rounds)} samples with weights retrained on {res.schedules} schedules "
                    f"({'= stock: no epoch beat it on validation' if res.weights == stock else f'epoch {res.best_epoch}'})"
                )
        beam_gap = []
        for s in chunk:
            s = int(s)
            rep = sample_batch(
                spec(s),
                out / "train",
                batch_size=args.batch_size,
                threads=args.threads,
                repeats=args.repeats,
                beam_size=args.sample_beam_size,
                name=f"rand{s}",
                store=db,
                weights_path=sampling_path,
                **timing,
            )
            batch_of[s] = rep.batch_id
            if rep.beam_ms and rep.best_ms:
                beam_gap.append(rep.beam_ms / rep.best_ms)
            log(
                f"{'valid' if s in valid_seeds else 'train'} pipeline {len(batch_of)}/{len(train_seeds)} seed {s}: {rep.ok} ok, "
                f"{rep.failed} failed, best {rep.best_ms if rep.best_ms is not None else float('nan'):.4g} ms"
            )
        log(
            f"round {r + 1}: beam-search sample / best of its batch, geomean {gm(beam_gap):.3f} over {len(beam_gap)} pipelines"
        )
    samples, train, valid = split_samples()

    # 2. label quality: round spread, and an independent second measurement of a few batches
    spreads = [
        float(np.median(r.latencies) / min(r.latencies) - 1)
        for r in db.measurements(status="ok")
        if len(r.latencies) > 1
    ]
    db.close()
    agree_pairs = total_pairs = 0
    ratio_dev = []
    for s in train_seeds[: args.remeasure] if not args.reuse_samples else []:
        sample_batch(
            spec(s),
            out / "remeasure",
            batch_size=args.batch_size,
            batch_id=batch_of[s],
            threads=args.threads,
            repeats=args.repeats,
            beam_size=args.sample_beam_size,
            name=f"rand{s}",
            **timing,
        )
    if args.remeasure:
        first = {x.schedule_id: x for x in samples}
        by_pid: dict[int, list[tuple[float, float]]] = {}
        for x in load_from_dir(out / "remeasure"):
            y = first.get(x.schedule_id)
            if (
                y is not None
                and y.pipeline_id == x.pipeline_id
                and np.array_equal(y.schedule_features, x.schedule_features)
            ):
                by_pid.setdefault(x.pipeline_id, []).append((y.runtime_ms, x.runtime_ms))
                ratio_dev.append(abs(math.log(x.runtime_ms / y.runtime_ms)))
        for pairs in by_pid.values():
            a, b = np.array(pairs).T
            n = len(a) * (len(a) - 1) // 2
            if n:
                acc = pairwise_accuracy(-b, a)  # does measurement 2 order the pairs as measurement 1 does?
                agree_pairs += acc * n
                total_pairs += n
        log(f"re-measured {len(ratio_dev)} schedules of {len(by_pid)} pipelines")

    # 3. fine-tune from the stock weights
    result = trainer.fit(stock, train, valid=valid or None)
    retrained = result.weights
    last = result.last_weights
    wpath = retrained.save(out / "retrained.weights")
    kept_stock = retrained == stock
    sel = ""
    if result.valid_scores:
        sel = (
            f"; validation pairwise: stock {result.valid_scores[0]:.3f}, best {max(result.valid_scores):.3f} "
            f"at epoch {result.best_epoch}{' (= stock weights kept)' if kept_stock else ''}"
        )
    log(
        f"trained on {result.schedules} schedules of {result.groups} pipelines (validation: {sum(b.size for b in valid)} "
        f"of {len(valid)}); calibration x{result.calibration:.3g}; loss {result.losses[0]:.4g} -> {result.losses[-1]:.4g}{sel}"
    )

    def compare(seed: int, a_path: Path, b_path: Path) -> tuple:
        p = {"parallelism": args.threads, "beam_size": args.beam_size}
        res = autoschedule_and_benchmark(
            spec(seed),
            [{**p, "weights_path": str(a_path)}, {**p, "weights_path": str(b_path)}],
            threads=args.threads,
            repeats=args.compare_repeats,
            **timing,
        )
        return seed, res[0], res[1]

    # 3b. the gate: the ordering proxy chose an epoch; does it make faster schedules of the
    # validation pipelines (never held-out ones) than stock? If not, keep the stock weights.
    gate_rows, selected = [], retrained
    if args.gate_ratio > 0 and not kept_stock and valid_seeds:
        for s in sorted(valid_seeds):
            gate_rows.append(compare(s, stock_path, wpath))
            _, a, b = gate_rows[-1]
            log(f"gate, validation seed {s}: stock {a.runtime_s * 1e3:.4g} ms, selected {b.runtime_s * 1e3:.4g} ms")
        g_ratio = gm([b.runtime_s / a.runtime_s for _, a, b in gate_rows if a.status == b.status == "ok"])
        if not g_ratio <= args.gate_ratio:
            retrained, kept_stock = stock, True
            wpath = retrained.save(out / "retrained.weights")
        log(
            f"gate: selected/stock on validation pipelines = {g_ratio:.3f} (need <= {args.gate_ratio}): "
            f"{'kept the selected epoch' if not kept_stock else 'kept the stock weights'}"
        )

    # 4. held-out pipelines: stock vs retrained schedules, interleaved in one worker
    rows = []
    for s in held_seeds:
        rows.append(compare(s, stock_path, wpath))
        _, a, b = rows[-1]
        log(
            f"held-out seed {s}: stock {a.runtime_s * 1e3:.4g} ms, retrained {b.runtime_s * 1e3:.4g} ms"
            f"{' (same schedule)' if a.featurization == b.featurization else ''}"
        )

    # 5. ordering accuracy on held-out samples (sampled with stock weights)
    for s in held_seeds:
        sample_batch(
            spec(s),
            out / "heldout",
            batch_size=args.heldout_samples,
            threads=args.threads,
            repeats=args.repeats,
            beam_size=args.sample_beam_size,
            name=f"rand{s}",
            **timing,
        )
    held = group_samples(load_from_dir(out / "heldout"), min_schedules=2)
    sets = {"stock": stock, "retrained (kept)": retrained, "best validation epoch": selected, "last epoch": last}
    m = {
        k: (
            evaluate(w, held, args.threads),
            evaluate(w, train, args.threads),
            evaluate(w, valid, args.threads) if valid else None,
        )
        for k, w in sets.items()
    }

    print()
    print("| held-out pipeline | stages | stock (ms) | retrained (ms) | retrained / stock |")
    print("|---|---|---|---|---|")
    ratios, stock_ms, new_ms = [], [], []
    for s, a, b in rows:
        stages = len(a.featurization) // (4 * 326) if a.featurization else 0
        same = " (same schedule)" if a.featurization == b.featurization else ""
        if a.status == "ok" and b.status == "ok":
            ratios.append(b.runtime_s / a.runtime_s)
            stock_ms.append(a.runtime_s * 1e3)
            new_ms.append(b.runtime_s * 1e3)
            print(
                f"| random seed {s}{same} | {stages} | {a.runtime_s * 1e3:.4g} | {b.runtime_s * 1e3:.4g} | {ratios[-1]:.3f} |"
            )
        else:
            print(f"| random seed {s} | {stages} | {a.status} | {b.status} | - |")

    print(f"| **geometric mean** | | {gm(stock_ms):.4g} | {gm(new_ms):.4g} | **{gm(ratios):.3f}** |")
    print()
    print("| ordering accuracy | " + " | ".join(f"{k} weights" for k in sets) + " |")
    print("|---|" + "---|" * len(sets))
    for key, label in (
        ("pairwise", "pairwise, held-out"),
        ("top1", "top-1, held-out"),
        ("halide_rate", "Halide 'Rate', held-out"),
    ):
        print(f"| {label} | " + " | ".join(f"{m[k][0][key]:.3f}" for k in sets) + " |")
    print("| pairwise, training pipelines | " + " | ".join(f"{m[k][1]['pairwise']:.3f}" for k in sets) + " |")
    if valid:
        print("| pairwise, validation pipelines | " + " | ".join(f"{m[k][2]['pairwise']:.3f}" for k in sets) + " |")
    print()
    print(
        f"label quality: median round spread (median/min - 1) {np.median(spreads) * 100:.1f}% over {len(spreads)} samples"
        + (
            f"; re-measured {len(ratio_dev)} schedules: median |log(t2/t1)| {np.median(ratio_dev) * 100:.1f}%, "
            f"max {np.max(ratio_dev) * 100:.1f}%, pairwise agreement of the two measurements {agree_pairs / total_pairs:.3f}"
            if ratio_dev and total_pairs
            else ""
        )
    )
    print(
        f"held-out pipelines: {len(ratios)}/{len(rows)} compared; held-out samples: {sum(b.size for b in held)} "
        f"in {len(held)} groups; training: {result.schedules} schedules in {result.groups} groups; validation: "
        f"{sum(b.size for b in valid)} in {len(valid)}; selection kept {'the stock weights' if kept_stock else f'epoch {result.best_epoch}'}"
        f"{f' (gate on {len(gate_rows)} validation pipelines)' if gate_rows else ''}; "
        f"{time.time() - t_start:.0f} s total"
    )
    g = gm(ratios)
    print(
        f"SUMMARY retrained/stock geomean runtime ratio = {g:.3f} ({(1 / g - 1) * 100:+.1f}% speed) "
        f"over {len(ratios)} held-out random pipelines; goal <= 0.909 (10% faster): {'met' if g <= 1 / 1.1 else 'not met'}"
    )


def run_trainer_speed(args: argparse.Namespace) -> None:
    """`--trainer-speed`: sample random pipelines unless --samples names folders, then time both."""
    import json

    if args.samples:
        dirs = [Path(d) for d in args.samples.split(",") if d]
    else:
        from autosearch.backends.halide.pipelines import resolve_pipeline
        from autosearch.halide.autosampler import sample_batch

        out = Path(args.out_dir)
        dirs = [out / "speed_samples"]
        if not dirs[0].is_dir():
            rp = {"max_stages": args.max_stages, "sizes": [int(v) for v in args.sizes.split(",")]}
            rp.update(channels=[int(v) for v in args.channels.split(",")], max_elems=args.max_elems)
            for i in range(args.train_pipelines):
                spec = resolve_pipeline("random", {**rp, "seed": 1000 + args.seed * 100000 + i})
                sample_batch(spec, dirs[0], batch_size=args.batch_size, threads=args.threads, repeats=1, beam_size=1)
    sp = trainer_speed(dirs, args.epochs, args.lr, args.threads, args.speed_repeats, args.torch_threads)
    print_trainer_speed(sp)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.out_dir) / "trainer_speed.json").write_text(json.dumps(sp, indent=1) + "\n")


if __name__ == "__main__":
    main()
