"""Pretrain the gradient cost model on a store (e.g. data/reference.db.xz), on chosen workloads.

    python -m autosearch.search.gradient.pretrain --db data/reference.db.xz --out DIR \
        [--split src/autosearch/pretrained/model/split.json]   # train keys only: held-out stays out

Why a split file: the tuning benchmark's workloads must stay unseen, exactly as for the shipped
pretrained model, so the same split.json decides which workloads the prior may read.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from autosearch.errors import InputError
from autosearch.search.gradient.data import groups_from_store
from autosearch.search.gradient.model import GradientCostModel

__all__ = ["main", "pretrain"]


def pretrain(
    db: str, out: str, *, keys: set[str] | None = None, epochs: int = 40, seed: int = 0, log: bool = True
) -> GradientCostModel:
    """Fit a fresh model on every matched record of `db` (workload keys in `keys`, if given); save it to `out`."""
    t0 = time.time()
    groups = groups_from_store(db, keep=(lambda r: r.key in keys) if keys else None, log=print if log else None)
    if not groups:
        raise InputError(f"no record of {db} matched a design space")
    t1 = time.time()
    model = GradientCostModel(epochs=epochs, seed=seed)
    losses = model.fit(groups)
    model.save(out)
    info = {
        "db": str(db),
        "groups": len(groups),
        "records": sum(len(g.latencies) for g in groups),
        "extract_seconds": round(t1 - t0, 1),
        "train_seconds": round(time.time() - t1, 1),
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
    (Path(out) / "train_report.json").write_text(json.dumps(info, indent=1) + "\n")
    if log:
        print(json.dumps(info))
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="data/reference.db.xz")
    ap.add_argument("--out", required=True)
    ap.add_argument("--split", default=None, help="a split.json: train on its 'train' keys only")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    keys = set(json.loads(Path(args.split).read_text())["train"]) if args.split else None
    pretrain(args.db, args.out, keys=keys, epochs=args.epochs, seed=args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
