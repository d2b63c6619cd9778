"""Held-out ranking on tensorized workloads (issue 72, item 3): how well the shipped priors rank
the measured schedules of int8 (`vpdpbusd`) and bf16 (`vdpbf16ps`) tasks, and how much the
records of other networks' tensorized tasks add for a network none of them came from.

Each store is one `tune-model --precision int8|bf16` run (data/runs/*_int8_*.db.xz,
*_bf16_*.db.xz); its network is the file name before `_int8`/`_bf16`. A group is one task's
measured schedules on one target; a group counts when its program is tensorized (a weight in the
dot-product packing: `backends.tvm.lowp.script_precision`) and it has >= --min-group successful
schedules. For every network held out, per precision:

- random: the top-k of a random order (the mean of --draws orders), the floor;
- the shipped `pretrained` (loop-nest features) and `pretrained-prefix` (decision tokens), as
  shipped: neither was trained on a tensorized record;
- the same priors fine-tuned (`CostModel.update`, what a run's pooled prior does with the tasks it
  measured) on every other network's tensorized groups of that precision: leave-one-network-out.

Beside them, the same stores' fp32 groups (the tasks the precision left float32) ranked by the
shipped priors: the figure to compare with.

    python bench/tensorized_ranking.py --json bench/results/tensorized_ranking_znver4.json
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PRIORS = ("pretrained", "pretrained-prefix")
METRICS = ("top1", "top5")
_NETWORK = re.compile(r"^(?P<net>.+?)_(?P<precision>int8|bf16)_")


def _stores(paths: Sequence[str]) -> list[tuple[str, str, str]]:
    """(path, network, precision) of each store whose name says which."""
    out = []
    for p in paths:
        m = _NETWORK.match(Path(p).name)
        if m is None:
            raise SystemExit(f"{p}: the name does not say its network and precision (NET_int8_... or NET_bf16_...)")
        out.append((p, m["net"], m["precision"]))
    return out


def _precisions(path: str) -> dict[str, str]:
    """workload key -> the precision its program computes in."""
    from autosearch.backends.tvm.lowp import script_precision

    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return {key: script_precision(ir).name for key, ir in conn.execute("select key, ir from workloads")}


def _mcpu(target: str) -> str:
    """The CPU a stored target names (its `mcpu`), or the target itself."""
    try:
        return str(json.loads(target).get("mcpu") or target)
    except (ValueError, AttributeError):
        return target


def _random(lat: np.ndarray, draws: int, rng: np.random.Generator) -> dict[str, float]:
    from autosearch.training.metrics import top_k_score

    return {
        f"top{k}": float(np.mean([top_k_score(rng.random(len(lat)), lat, k) for _ in range(draws)])) for k in (1, 5)
    }


#: Candidates a model scored NaN or infinite, by model name: such a score ranks nowhere.
NONFINITE: dict[str, int] = {}


def _scores(model: Any, ds: Any, groups: Sequence[int], name: str) -> list[dict[str, float]]:
    from autosearch.training.metrics import group_metrics

    out = []
    for gi in groups:
        g = ds.groups[gi]
        scores = np.asarray(model.predict(ds.group_batch(gi)), dtype=np.float64)
        bad = ~np.isfinite(scores)
        NONFINITE[name] = NONFINITE.get(name, 0) + int(bad.sum())
        if bad.any():  # ranked last (all alike where none is finite)
            scores = np.where(bad, scores[~bad].min() - 1.0 if not bad.all() else 0.0, scores)
        m = group_metrics(scores, ds.latencies[g.start : g.stop])
        out.append({k: float(m[k]) for k in METRICS})
    return out


def _mean(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.nanmean([r[k] for r in rows])) if rows else float("nan") for k in METRICS}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--db",
        nargs="*",
        default=sorted(str(p) for p in (ROOT / "data" / "runs").glob("*_int8_*.db.xz"))
        + sorted(str(p) for p in (ROOT / "data" / "runs").glob("*_bf16_*.db.xz")),
        help="tune-model stores named NET_int8_... or NET_bf16_... (default: data/runs' int8 and bf16 stores)",
    )
    ap.add_argument("--min-group", type=int, default=8, help="successful schedules a group needs")
    ap.add_argument("--draws", type=int, default=200, help="random orders for the floor")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="", help="write every figure here")
    args = ap.parse_args(argv)

    from autosearch.cli.models import load_model_data
    from autosearch.models import load_model
    from autosearch.search.model_spec import pretrained_dir
    from autosearch.training.dataset import Dataset, resolve_db

    stores = _stores(args.db)
    rng = np.random.default_rng(args.seed)
    shipped = {prior: load_model(pretrained_dir(prior)) for prior in PRIORS}  # read only: scored, never updated
    # per prior: store -> its dataset; and per store: precision -> the groups that count
    data: dict[str, dict[str, Any]] = {p: {} for p in PRIORS}
    groups: dict[str, dict[str, list[int]]] = {}
    for path, _net, _precision in stores:
        resolved = resolve_db(path)
        kinds = _precisions(resolved)
        for prior, m in shipped.items():
            data[prior][path] = load_model_data(path, m.extractor, bool(getattr(m, "device", False)), readonly=True)
        ds = data[PRIORS[0]][path]
        by: dict[str, list[int]] = {}
        for gi, g in enumerate(ds.groups):
            lat = ds.latencies[g.start : g.stop]
            if int(np.sum(np.isfinite(lat) & (lat > 0))) >= args.min_group:
                by.setdefault(kinds.get(g.workload_key, "fp32"), []).append(gi)
        groups[path] = by
        # both priors read the same groups: their datasets must list them alike
        keys = [[(g.workload_key, g.target) for g in data[p][path].groups] for p in PRIORS]
        if keys[0] != keys[1]:
            raise SystemExit(f"{path}: the two priors' datasets list different groups")

    def latencies(of: Sequence[tuple[str, str, str]], precision: str) -> list[np.ndarray]:
        """Each counted group's latencies, of the stores `of`, in `precision`."""
        return [
            data[PRIORS[0]][p].latencies[g.start : g.stop]
            for p, _, _ in of
            for g in (data[PRIORS[0]][p].groups[gi] for gi in groups[p].get(precision, []))
        ]

    def held_out_rows(net: str, precision: str) -> dict[str, Any]:
        mine = [s for s in stores if s[1] == net and s[2] == precision]
        others = [s for s in stores if s[1] != net and s[2] == precision]
        row: dict[str, Any] = {"network": net, "precision": precision}
        lat_groups = latencies(mine, precision)
        row["groups"] = len(lat_groups)
        row["schedules"] = int(sum(len(x) for x in lat_groups))
        row["random"] = _mean([_random(lat, args.draws, rng) for lat in lat_groups])
        for prior in PRIORS:
            row[prior] = _mean(
                [
                    r
                    for p, _, _ in mine
                    for r in _scores(shipped[prior], data[prior][p], groups[p].get(precision, []), prior)
                ]
            )
            train = [data[prior][p].subset(groups[p][precision]) for p, _, _ in others if groups[p].get(precision)]
            row[f"{prior} fine-tuned"] = None
            if train:
                tuned = load_model(pretrained_dir(prior))
                tuned.update(Dataset.concat(train))
                row[f"{prior} fine-tuned"] = _mean(
                    [
                        r
                        for p, _, _ in mine
                        for r in _scores(tuned, data[prior][p], groups[p].get(precision, []), f"{prior} fine-tuned")
                    ]
                )
                row["fine-tuned on"] = sum(d.n_groups for d in train)
        return row

    rows = []
    for net, precision in dict.fromkeys((n, pr) for _, n, pr in stores):
        rows.append(held_out_rows(net, precision))
    fp32: dict[str, Any] = {"groups": 0}
    fp32["random"] = _mean([_random(lat, args.draws, rng) for lat in latencies(stores, "fp32")])
    for prior in PRIORS:
        per = [
            r for p, _, _ in stores for r in _scores(shipped[prior], data[prior][p], groups[p].get("fp32", []), prior)
        ]
        fp32[prior] = _mean(per)
        fp32["groups"] = len(per)

    def cell(x: dict[str, float] | None) -> str:
        return "-" if x is None else f"{x['top1']:.3f} / {x['top5']:.3f}"

    cpus = sorted({_mcpu(g.target) for d in data[PRIORS[0]].values() for g in d.groups})
    print(f"# Held-out ranking on tensorized tasks, top-1 / top-5 (measured on {', '.join(cpus)})")
    heads = ["random", *PRIORS, *(f"{p} fine-tuned" for p in PRIORS)]
    print("| network | precision | groups (schedules) | " + " | ".join(heads) + " |")
    print("|---|---|---|" + "---|" * len(heads))
    for r in rows:
        print(
            f"| {r['network']} | {r['precision']} | {r['groups']} ({r['schedules']}) | "
            + " | ".join(cell(r[h]) for h in heads)
            + " |"
        )
    means = {}
    for precision in dict.fromkeys(r["precision"] for r in rows):
        mine = [r for r in rows if r["precision"] == precision and r["groups"]]
        means[precision] = {
            h: {k: float(np.mean([r[h][k] for r in mine if r[h] is not None])) for k in METRICS}
            for h in heads
            if any(r[h] is not None for r in mine)
        }
        print(
            f"| mean over networks | {precision} | {sum(r['groups'] for r in mine)} | "
            + " | ".join(cell(means[precision].get(h)) for h in heads)
            + " |"
        )
    print(
        f"| the same stores' fp32 tasks | fp32 | {fp32['groups']} | {cell(fp32['random'])} | "
        + " | ".join(cell(fp32[p]) for p in PRIORS)
        + " | - | - |"
    )
    print("non-finite scores (ranked last): " + (", ".join(f"{k} {v}" for k, v in NONFINITE.items() if v) or "none"))
    for precision, m in means.items():
        best = max((h for h in heads if h != "random"), key=lambda h: m[h]["top1"] if h in m else -1.0)
        print(
            f"HEADLINE {precision}: held-out networks' tensorized tasks top-1 {m[best]['top1']:.3f} ({best}); "
            f"the shipped prefix prior {m['pretrained-prefix']['top1']:.3f}, random {m['random']['top1']:.3f}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "measured_on": cpus,
                    "rows": rows,
                    "means": means,
                    "fp32": fp32,
                    "nonfinite": NONFINITE,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
