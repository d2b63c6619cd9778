"""How well each model orders a network's zero-trial shortlists, offline: on a store of measured
shortlists (`bench/prior_ranking.py --db`), the sum over tasks of weight x the latency of the
schedule each model ranks first, beside the best of each shortlist and the prefix prior's own
first pick (the store's first record of a task).

    python bench/shortlist_orderers.py data/runs/shortlists_resnet18_znver3.db.xz pretrained src/autosearch/pretrained/order

Each model scores every schedule of a task from its stored features; beside its first pick, the
best of its first 1 + `networks.prior.RUNNERS_UP` (the schedules the zero-trial pass times).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", help="a store of measured shortlists (.db or .db.xz)")
    ap.add_argument("models", nargs="+", help="model directories or shipped prior names")
    args = ap.parse_args(argv)

    from autosearch.models import load_model
    from autosearch.networks.prior import RUNNERS_UP
    from autosearch.search.model_spec import pretrained_dir
    from autosearch.training.dataset import load_dataset, resolve_db

    db = resolve_db(args.store)
    tasks: dict[str, dict[str, float]] = {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        for name, params, wid in con.execute("SELECT name, params, id FROM workloads"):
            rows = con.execute("SELECT median FROM measurements WHERE workload_id=? ORDER BY id", (wid,)).fetchall()
            ok = [r[0] for r in rows if r[0]]
            if len(rows) > 1 and ok:
                first = rows[0][0] or float("inf")
                tasks[name] = {"w": json.loads(params).get("weight", 1), "best": min(ok), "first": first}
    best = sum(t["w"] * t["best"] for t in tasks.values())
    first = sum(t["w"] * t["first"] for t in tasks.values())
    print(
        f"{len(tasks)} tasks; best of each shortlist {best * 1e3:.2f} ms; prefix prior's first pick {first * 1e3:.2f} ms"
    )
    timed = 1 + RUNNERS_UP  # the pick and its runners-up: what the zero-trial pass times
    for name in args.models:
        model = load_model(Path(name) if Path(name).is_dir() else pretrained_dir(name))
        data = load_dataset(db, extractor=model.extractor)
        picked = [0.0, 0.0]
        top1: list[float] = []
        for g, group in enumerate(data.groups):
            if group.name not in tasks:
                continue
            lat = data.latencies[group.start : group.stop]
            order = np.argsort(-np.asarray(model.predict(data.group_batch(g))))
            w = tasks[group.name]["w"]
            picked[0] += w * lat[order[0]]
            picked[1] += w * lat[order[:timed]].min()
            top1.append(lat.min() / lat[order[0]])
        print(
            f"{name:50s} picked {picked[0] * 1e3:7.2f} ms  best of its first {timed} {picked[1] * 1e3:7.2f} ms  "
            f"mean top-1 {np.mean(top1):.3f}  ({len(top1)} tasks)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
