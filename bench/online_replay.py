"""Offline replay of a tuning run's in-run model: fitted on n measured schedules of one workload,
how well does it pick the best of the others? (issue 12: is our online model weaker than TVM's?)

For every workload group of a store with at least n + 20 records, and every repeat, n records are
drawn at random (what a search has measured), each scorer is fitted on them alone, and it ranks
the group's other successful records; top-1 / top-5 / pairwise accuracy (DESIGN.md definitions)
are averaged over groups and repeats. The draws are seeded by group and repeat, so every scorer
sees the same draws. Scorers:
- a model kind fitted from scratch on the n (`xgb`, our pack-sum XGBoost with the defaults the
  search's online model uses; `tvm-xgb`, MetaSchedule's XGBModel trained as its `update()` trains it;
  `lgbm-rank`, `mlp`);
- `prior`: the shipped pretrained model, not fitted at all;
- `blend`: prior and `xgb` z-scored and averaged (what `--model pretrained+xgb` starts from).
Random records are not what a search measures (its picks cluster where its model points), so this
isolates the model from the search.

    python bench/online_replay.py --db data/reference.db.xz --n 16,32,64,128 --reps 2
    python bench/online_replay.py --db data/reference_znver3.db.xz --n 16,32,48 --reps 3 \
        --scorers prior,xgb,blend --families DEP,CAP,NRM,SFM
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
import warnings
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FRESH = ("xgb", "tvm-xgb", "lgbm-rank", "mlp")


def _fit(kind: str, train: Any, seed: int) -> Any:
    from autosearch.models import make_model

    kw: dict[str, Any] = {"nthread": 1} if kind in ("xgb", "tvm-xgb") else {}  # as the search fits it
    model = make_model(kind, seed=seed, **kw)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(train)
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="data/reference.db.xz", help="a store (.db or .db.xz) with TVM records")
    ap.add_argument("--n", default="16,32,64", help="measured schedules per fit (comma-separated)")
    ap.add_argument("--reps", type=int, default=2, help="random draws per group and n")
    ap.add_argument("--scorers", default="xgb,tvm-xgb", help=f"comma-separated: {', '.join(FRESH)}, prior, blend")
    ap.add_argument("--families", default="", help="only groups of these families (comma-separated)")
    ap.add_argument("--json", default="", help="write the table here")
    args = ap.parse_args(argv)

    from autosearch.backends.tvm.target import host_target
    from autosearch.errors import InputError
    from autosearch.search.explore import zscore
    from autosearch.training.dataset import Dataset, load_dataset, resolve_db
    from autosearch.training.metrics import pairwise_accuracy, top_k_score

    ns = [int(x) for x in args.n.split(",") if x]
    scorers = [s for s in args.scorers.split(",") if s]
    unknown = set(scorers) - {*FRESH, "prior", "blend"}
    if unknown or not ns or min(ns) < 4 or args.reps < 1:
        raise InputError(f"bad arguments: scorers {sorted(unknown)}, n {ns} (>= 4 each), reps {args.reps} (>= 1)")
    prior = None
    if {"prior", "blend"} & set(scorers):
        from autosearch.models import load_model
        from autosearch.search.model_spec import pretrained_dir

        prior = load_model(pretrained_dir())
    ds = load_dataset(resolve_db(args.db))
    fams = {f for f in args.families.split(",") if f}
    groups = [i for i, g in enumerate(ds.groups) if not fams or g.family in fams]
    print(f"target {host_target()}; {ds}; {len(groups)} groups; load average {os.getloadavg()[0]:.2f}")

    table: list[dict[str, Any]] = []
    for n in ns:
        acc: dict[str, dict[str, list[float]]] = {
            s: {"top1": [], "top5": [], "pairwise": [], "fit_s": []} for s in scorers
        }
        for gi in groups:
            g = ds.groups[gi]
            if g.stop - g.start < n + 20:
                continue
            for rep in range(args.reps):
                idx = np.random.default_rng(1000 * gi + rep).permutation(np.arange(g.start, g.stop))
                tr, te = np.sort(idx[:n]), idx[n:]
                te = te[np.isfinite(ds.latencies[te])]
                lats = [float(x) if np.isfinite(x) else None for x in ds.latencies[tr]]
                mats = [ds.rows[ds.offsets[i] : ds.offsets[i + 1]] for i in tr]
                train = Dataset.from_groups([(g.workload_key, g.target, mats, lats)])
                test, lat = ds.batch(te), ds.latencies[te]
                scores: dict[str, np.ndarray] = {}
                for s in scorers:
                    t0 = time.perf_counter()
                    if s in FRESH:
                        scores[s] = np.asarray(_fit(s, train, rep).predict(test), dtype=np.float64)
                        acc[s]["fit_s"].append(time.perf_counter() - t0)
                    elif s == "prior":
                        assert prior is not None
                        scores[s] = np.asarray(prior.predict(test), dtype=np.float64)
                for s in scorers:
                    if s == "blend":
                        assert prior is not None
                        online = scores.get("xgb")
                        if online is None:
                            online = np.asarray(_fit("xgb", train, rep).predict(test), dtype=np.float64)
                        p = scores.get("prior")
                        if p is None:
                            p = np.asarray(prior.predict(test), dtype=np.float64)
                        scores[s] = 0.5 * zscore(p) + 0.5 * zscore(online)
                    acc[s]["top1"].append(top_k_score(scores[s], lat, 1))
                    acc[s]["top5"].append(top_k_score(scores[s], lat, 5))
                    acc[s]["pairwise"].append(pairwise_accuracy(scores[s], lat))
        for s in scorers:
            a = acc[s]
            if not a["top1"]:
                continue
            row = {"scorer": s, "n": n, "fits": len(a["top1"])}
            row.update({k: float(np.nanmean(v)) for k, v in a.items() if v})
            table.append(row)

    print("\n| scorer | n | top-1 | top-5 | pairwise | fit ms | fits |\n|---|---|---|---|---|---|---|")
    for r in table:
        fit = f"{1000 * r['fit_s']:.0f}" if "fit_s" in r else "-"
        print(
            f"| {r['scorer']} | {r['n']} | {r['top1']:.3f} | {r['top5']:.3f} | {r['pairwise']:.3f} | {fit} | {r['fits']} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "target": str(host_target()), "table": table}, f, indent=1)
    a_name, b_name = scorers[0], scorers[1] if len(scorers) > 1 else scorers[0]
    top_a = [r["top1"] for r in table if r["scorer"] == a_name]
    top_b = [r["top1"] for r in table if r["scorer"] == b_name]
    if top_a and top_b and len(top_a) == len(top_b):
        ratio = float(np.mean(top_a) / max(float(np.mean(top_b)), 1e-12))
        print(f"\nSUMMARY top-1 {a_name} / {b_name}, mean over n = {','.join(map(str, ns))}: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
