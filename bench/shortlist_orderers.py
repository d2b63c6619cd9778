"""How well each model orders a network's zero-trial shortlists, offline: on a store of measured
shortlists (`bench/prior_ranking.py --db`), the sum over tasks of weight x the latency of the
schedule each model ranks first, beside the best of each shortlist and the prefix prior's own
first pick (the store's first record of a task).

    python bench/shortlist_orderers.py data/runs/shortlists_resnet18_znver3.db.xz pretrained src/autosearch/pretrained/order

Each model is scored by `autosearch eval` (its per-task top-1: best / picked latency).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", help="a store of measured shortlists (.db or .db.xz)")
    ap.add_argument("models", nargs="+", help="model directories or shipped prior names")
    args = ap.parse_args(argv)

    from autosearch.training.dataset import resolve_db

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
    cli = str(Path(sys.executable).with_name("autosearch"))
    for model in args.models:
        out = subprocess.run(
            [cli, "eval", "--model", model, "--db", str(db), "--workloads", "network", "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        top1 = {g["workload"]: g["top1"] for g in json.loads(out)["per_group"] if g["workload"] in tasks}
        picked = sum(tasks[n]["w"] * tasks[n]["best"] / max(v, 1e-9) for n, v in top1.items())
        print(
            f"{model:50s} picked {picked * 1e3:7.2f} ms  mean top-1 {sum(top1.values()) / len(top1):.3f}  ({len(top1)} tasks)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
