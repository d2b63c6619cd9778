"""Benchmark: Adams2019 with Halide's stock weights vs. weights retrained on this machine.

1. Sample `--train-pipelines` random pipelines (one autotune-loop batch each, stock weights).
2. Retrain from the stock weights on those samples (our PyTorch trainer, Halide's loss).
3. On `--heldout` other random pipelines (never sampled for training): schedule each with both
   weight sets (beam search, `--beam-size`) and benchmark the two schedules interleaved in one
   worker; report the geometric mean runtime of each and the ratio.
4. Ordering accuracy of both weight sets on a batch of held-out samples per held-out pipeline.

Not a test: it takes minutes. Example (the command in bench/README.md):
    python bench/halide_retrain.py --train-pipelines 12 --batch-size 12 --heldout 10 --threads 2
"""

from __future__ import annotations

import argparse
import math
import shutil
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-pipelines", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=12)
    ap.add_argument("--heldout", type=int, default=10)
    ap.add_argument("--heldout-samples", type=int, default=8, help="schedules per held-out pipeline for ordering accuracy")
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.0001, help="Halide's autotune loop uses 1e-4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--max-stages", type=int, default=6)
    ap.add_argument("--out-dir", default="bench_halide_out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from autosearch.backends.halide.autosampler import sample_batch
    from autosearch.backends.halide.autoschedule import autoschedule_and_benchmark
    from autosearch.backends.halide.pipelines import resolve_pipeline
    from autosearch.backends.halide.sample_io import load_from_dir
    from autosearch.backends.halide.train import Adams2019Trainer, evaluate, group_samples
    from autosearch.backends.halide.weights import Weights

    t_start = time.time()
    out = Path(args.out_dir)
    shutil.rmtree(out, ignore_errors=True)
    rp = {"max_stages": args.max_stages, "sizes": [96, 128, 192, 256], "max_elems": 1 << 19}

    def spec(seed: int):
        return resolve_pipeline("random", {**rp, "seed": seed})

    train_seeds = [1000 + args.seed * 100000 + i for i in range(args.train_pipelines)]
    held_seeds = [5000 + args.seed * 100000 + i for i in range(args.heldout)]
    assert not set(train_seeds) & set(held_seeds)

    # 1. training samples with the stock weights
    for i, s in enumerate(train_seeds):
        rep = sample_batch(spec(s), out / "train", batch_size=args.batch_size, threads=args.threads,
                           repeats=args.repeats, beam_size=args.beam_size, name=f"rand{s}")
        print(f"[{time.time() - t_start:6.0f}s] train pipeline {i + 1}/{len(train_seeds)} seed {s}: {rep.ok} ok, {rep.failed} failed", flush=True)
    skipped: list[str] = []
    train = group_samples(load_from_dir(out / "train", skipped=skipped), min_schedules=2)

    # 2. retrain from the stock weights
    stock = Weights.baseline()
    trainer = Adams2019Trainer(learning_rate=args.lr, epochs=args.epochs, num_cores=args.threads, seed=args.seed)
    result = trainer.fit(stock, train)
    retrained = result.weights
    wpath = retrained.save(out / "retrained.weights")
    stock_path = stock.save(out / "stock.weights")
    print(f"[{time.time() - t_start:6.0f}s] retrained on {result.schedules} schedules of {result.groups} pipelines; "
          f"loss {result.losses[0]:.4g} -> {result.losses[-1]:.4g}", flush=True)

    # 3. held-out pipelines: stock vs retrained schedules, interleaved in one worker
    rows = []
    for s in held_seeds:
        p = {"parallelism": args.threads, "beam_size": args.beam_size}
        res = autoschedule_and_benchmark(spec(s), [{**p, "weights_path": str(stock_path)}, {**p, "weights_path": str(wpath)}],
                                         threads=args.threads, repeats=args.repeats)
        rows.append((s, res[0], res[1]))
        print(f"[{time.time() - t_start:6.0f}s] held-out seed {s}: stock {res[0].runtime_s * 1e3:.4g} ms, "
              f"retrained {res[1].runtime_s * 1e3:.4g} ms", flush=True)

    # 4. ordering accuracy on held-out samples (sampled with stock weights)
    for s in held_seeds:
        sample_batch(spec(s), out / "heldout", batch_size=args.heldout_samples, threads=args.threads,
                     repeats=args.repeats, beam_size=args.beam_size, name=f"rand{s}")
    held = group_samples(load_from_dir(out / "heldout"), min_schedules=2)
    m_stock = evaluate(stock, held, args.threads)
    m_new = evaluate(retrained, held, args.threads)
    m_stock_tr = evaluate(stock, train, args.threads)
    m_new_tr = evaluate(retrained, train, args.threads)

    print()
    print("| held-out pipeline | stages | stock (ms) | retrained (ms) | retrained / stock |")
    print("|---|---|---|---|---|")
    ratios, stock_ms, new_ms = [], [], []
    for s, a, b in rows:
        stages = len(a.featurization) // (4 * 326) if a.featurization else 0
        if a.status == "ok" and b.status == "ok":
            ratios.append(b.runtime_s / a.runtime_s)
            stock_ms.append(a.runtime_s * 1e3)
            new_ms.append(b.runtime_s * 1e3)
            print(f"| random seed {s} | {stages} | {a.runtime_s * 1e3:.4g} | {b.runtime_s * 1e3:.4g} | {ratios[-1]:.3f} |")
        else:
            print(f"| random seed {s} | {stages} | {a.status} | {b.status} | - |")

    def gm(xs: list[float]) -> float:
        return math.exp(float(np.mean(np.log(xs)))) if xs else float("nan")

    print(f"| **geometric mean** | | {gm(stock_ms):.4g} | {gm(new_ms):.4g} | **{gm(ratios):.3f}** |")
    print()
    print("| ordering accuracy | stock weights | retrained weights |")
    print("|---|---|---|")
    for k, label in (("pairwise", "pairwise, held-out"), ("top1", "top-1, held-out"), ("halide_rate", "Halide 'Rate', held-out")):
        print(f"| {label} | {m_stock[k]:.3f} | {m_new[k]:.3f} |")
    print(f"| pairwise, training samples | {m_stock_tr['pairwise']:.3f} | {m_new_tr['pairwise']:.3f} |")
    print()
    print(f"held-out pipelines: {len(ratios)}/{len(rows)} compared; held-out samples: {sum(b.size for b in held)} "
          f"in {len(held)} groups; training: {result.schedules} schedules in {result.groups} groups; "
          f"{time.time() - t_start:.0f} s total")
    g = gm(ratios)
    print(f"SUMMARY retrained/stock geomean runtime ratio = {g:.3f} ({(1 / g - 1) * 100:+.1f}% speed) "
          f"over {len(ratios)} held-out random pipelines; goal <= 0.909 (10% faster): {'met' if g <= 1 / 1.1 else 'not met'}")


if __name__ == "__main__":
    main()
