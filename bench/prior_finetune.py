"""Does more device data make the shipped prior rank a CPU it never saw better? (issues 11 and 12)

The prior was trained on one AMD Zen 4 (AVX-512); on a Zen 3 (AVX2) it led the search to schedules
with Zen 4's wide channel tiles (bench/README, "`--explore auto` on the Zen 3"). This fine-tunes
the shipped prior, as `tune` fine-tunes it (every member, `update()`: a tenth of the learning rate),
on the training families of other stores, and evaluates every variant on the held-out families
(DEP, CAP, NRM, SFM) of each store: the Zen 3 store, the Zen 4 store, and the device store.
Variants: all device configurations + Zen 4; the AVX2 configuration (`mcpu=haswell`) + Zen 4;
and, as the most a device-specific prior could give, the Zen 3's own training families.

    python bench/prior_finetune.py --epochs 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HELD_OUT = {"DEP", "CAP", "NRM", "SFM"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zen3", default="data/reference_znver3.db.xz", help="the store of the CPU the prior never saw")
    ap.add_argument("--zen4", default="data/reference_two_threads.db.xz", help="the prior's own training store")
    ap.add_argument("--devices", default="data/devices.db.xz", help="the device-configuration store")
    ap.add_argument("--epochs", type=int, default=3, help="fine-tuning epochs per member")
    ap.add_argument("--json", default="", help="write the table here")
    args = ap.parse_args(argv)

    from autosearch.backends.tvm.target import host_target
    from autosearch.models import load_model
    from autosearch.search.model_spec import pretrained_dir
    from autosearch.training.dataset import Dataset, load_dataset, resolve_db
    from autosearch.training.trainer import evaluate

    def split(ds: Dataset) -> tuple[Dataset, Dataset]:
        tr = [i for i, g in enumerate(ds.groups) if g.family not in HELD_OUT]
        return ds.subset(tr), ds.subset([i for i, g in enumerate(ds.groups) if g.family in HELD_OUT])

    z3tr, z3ho = split(load_dataset(resolve_db(args.zen3)))
    z4tr, z4ho = split(load_dataset(resolve_db(args.zen4)))
    devtr, devho = split(load_dataset(resolve_db(args.devices)))
    avx2 = [i for i, g in enumerate(devtr.groups) if '"mcpu":"haswell"' in g.target.replace(" ", "")]
    print(f"target {host_target()}; load average {os.getloadavg()[0]:.2f}")
    tests = {"Zen 3 held-out": z3ho, "Zen 4 held-out": z4ho, "devices held-out": devho}
    variants: dict[str, Dataset | None] = {
        "shipped prior": None,
        "+ all device configs + Zen 4": Dataset.concat([devtr, z4tr]),
        "+ AVX2 config + Zen 4": Dataset.concat([devtr.subset(avx2), z4tr]),
        "+ Zen 3's own training families": z3tr,
    }
    table: list[dict[str, Any]] = []
    for name, data in variants.items():
        model: Any = load_model(pretrained_dir())  # an mlp ensemble: update_epochs is its own
        t0 = time.perf_counter()
        if data is not None:
            model.update_epochs = args.epochs
            model.update(data)
        row: dict[str, Any] = {"variant": name, "n_train": data.n_candidates if data else 0}
        row["fit_s"] = time.perf_counter() - t0
        for label, test in tests.items():
            m = evaluate(model, test).mean
            row[label] = {k: float(m[k]) for k in ("top1", "top5", "pairwise")}
        table.append(row)
        print(f"{name}: done in {row['fit_s']:.0f} s", flush=True)

    print("\n| variant | records | " + " | ".join(f"{t} top-1 / top-5" for t in tests) + " |")
    print("|---|---|" + "---|" * len(tests))
    for r in table:
        cells = " | ".join(f"{r[t]['top1']:.3f} / {r[t]['top5']:.3f}" for t in tests)
        print(f"| {r['variant']} | {r['n_train']} | {cells} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "target": str(host_target()), "table": table}, f, indent=1)
    base, best = table[0]["Zen 3 held-out"]["top1"], max(r["Zen 3 held-out"]["top1"] for r in table[1:])
    print(f"\nSUMMARY Zen 3 held-out top-1, best fine-tuned / shipped prior: {best / max(base, 1e-12):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
