"""Does what one task of a network teaches the prior carry to the network's other tasks?

Leave-one-task-out over the stores of `tune-model` runs (every record from one CPU): for each
task, the shipped prefix prior is fine-tuned the way a network run's pooled prior is
(`search.pooled`: `CostModel.update`, a few epochs at a tenth of the learning rate) on every
*other* task's records, and ranks the held-out task's records; beside it, the shipped prefix prior
and the shipped feature prior (`pretrained`, which orders the zero-trial pass's shortlist) as they
ship. Offline: nothing is timed, so the figure does not move with the machine's load. The stores
hold each task's first rounds, the prior's own top picks: the hardest place to rank.

    python bench/network_transfer.py data/runs/mobilenet_v2_10min_after_znver3.db.xz
    python bench/network_transfer.py A.db.xz,B.db.xz --epochs 3,10 --json out.json

Prints a table (top-1 per held-out task) and `RESULT mean top-1 pooled / shipped prefix prior`.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

PREFIX = ("trace-prefix-tokens", "v2")
FEATURE = ("per-store-feature", "tvm-0.27")


def load(dbs: list[str], extractor: tuple[str, str]) -> Any:
    from autosearch.cli.models import load_model_data
    from autosearch.training.dataset import Dataset

    return Dataset.concat([load_model_data(db, extractor, readonly=True) for db in dbs])


def top1(model: Any, ds: Any) -> float:
    from autosearch.training.trainer import quick_metrics

    return float(quick_metrics(model.predict(ds.batch()), ds)["top1"])


def main(argv: list[str] | None = None) -> int:
    import torch

    from autosearch.hostinfo import cpu_model_name
    from autosearch.models.registry import load_model
    from autosearch.search.model_spec import pretrained_dir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stores", help="comma-separated stores of tune-model runs on one CPU (.db or .db.xz)")
    ap.add_argument("--epochs", default="3", help="update epochs to try, comma-separated (the pool uses 3)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    dbs = args.stores.split(",")
    epochs = [int(e) for e in args.epochs.split(",")]
    prefix, feature = load(dbs, PREFIX), load(dbs, FEATURE)
    shipped = load_model(pretrained_dir("pretrained-prefix"))
    orderer = load_model(pretrained_dir("pretrained"))
    keys = sorted({g.workload_key for g in prefix.groups})
    cols = ["feature prior", "prefix prior", *(f"pooled, {e} epochs" for e in epochs)]
    print(f"{len(keys)} tasks, {prefix.n_candidates} records, CPU {cpu_model_name()}", file=sys.stderr)
    print("| held-out task | records | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 2) + "|")
    rows: list[dict[str, Any]] = []
    for key in keys:
        held = [i for i, g in enumerate(prefix.groups) if g.workload_key == key]
        rest = [i for i, g in enumerate(prefix.groups) if g.workload_key != key]
        test, train = prefix.subset(held), prefix.subset(rest)
        f_held = [i for i, g in enumerate(feature.groups) if g.workload_key == key]
        scores = {"feature prior": top1(orderer, feature.subset(f_held)), "prefix prior": top1(shipped, test)}
        for e in epochs:
            pooled = copy.deepcopy(shipped)
            pooled.update_epochs = e
            pooled.update(train)
            scores[f"pooled, {e} epochs"] = top1(pooled, test)
        name = prefix.groups[held[0]].name
        rows.append({"task": name, "records": test.n_candidates, **scores})
        print(f"| {name} | {test.n_candidates} | " + " | ".join(f"{scores[c]:.3f}" for c in cols) + " |", flush=True)
    means = {c: float(np.mean([r[c] for r in rows])) for c in cols}
    print("| mean | | " + " | ".join(f"{means[c]:.3f}" for c in cols) + " |")
    first = f"pooled, {epochs[0]} epochs"
    print(
        f"RESULT mean top-1 over {len(rows)} held-out tasks: pooled ({epochs[0]} epochs) {means[first]:.3f}, "
        f"shipped prefix prior {means['prefix prior']:.3f}, feature prior {means['feature prior']:.3f}; "
        f"pooled / prefix = {means[first] / max(means['prefix prior'], 1e-9):.2f}"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"stores": dbs, "cpu": cpu_model_name(), "rows": rows, "means": means}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
