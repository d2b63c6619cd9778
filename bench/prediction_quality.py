"""Prediction quality on held-out workloads: our cost models vs. TVM's XGBModel and MLPModel.

Every model trains on the same training workloads and is scored on the same held-out workloads,
one workload at a time. Our MLPs and LightGBM early-stop on 15% of the training workloads, then
refit on all of them for the chosen number of epochs / rounds; our XGBoost models train a fixed
200 rounds on all of them; TVM's MLPModel picks its own 20% for model selection and TVM's
XGBModel stops on training RMSE, as they do inside TVM.

    python bench/prediction_quality.py                       # data/reference.db.xz, its README split
    python bench/prediction_quality.py --max-groups 12 --epochs 10   # a quick run

Every model trains once per training seed (`--seeds`, default 0,1,2) and the table shows the
means: one table (top-1 with its spread over seeds, top-5, TLP's weighted top-1/top-5, pairwise
accuracy, Kendall tau, train time, predictions/s), the ratio of our best top-1 to TVM-XGB's, and
the peak memory.

`tlp` and `tlp+device` read `trace-tokens:v1` (computed from the stored traces if the store lacks
them); `tlp+device` also gets each target's device descriptor; `tlp-prefix` is `tlp` on
`trace-prefix-tokens:v2` (no post-processing instructions: what decision-space scoring reads). Splits (`--split`):
- `families` (default): the held-out families of data/README.md (DEP, CAP, NRM, SFM);
- `device`: train on every target but `--holdout-target` (default: the one with fewest records),
  test on that target's records; `--finetune N` first updates each model on N measured schedules
  per workload of the new target (split b').
`--throughput N` adds scoring speed side by side: features + model for N stored candidates,
trace tokens + tlp vs PerStoreFeature (replayed, then extracted) + mlp.

    python bench/prediction_quality.py --models tlp,tlp+device,mlp-lambdarank   # split (a)
    python bench/prediction_quality.py --db multi.db --split device --finetune 50 --models tlp+device
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import sys
import time
from pathlib import Path

import numpy as np

from autosearch.features.trace_tokens import EXTRACTOR as TRACE_TOKENS
from autosearch.features.trace_tokens import PREFIX_EXTRACTOR as PREFIX_TOKENS
from autosearch.models import make_model
from autosearch.training.dataset import load_dataset, resolve_db
from autosearch.training.splits import Split, apply_split, join_training, split_workloads
from autosearch.training.trainer import evaluate, fit_refit, valid_carve_out

ROOT = Path(__file__).resolve().parent.parent
ALL = (
    "xgb",
    "xgb-rank",
    "lgbm-rank",
    "mlp-mse",
    "mlp-pairwise",
    "mlp-lambdarank",
    "mlp-lambdarank-x5",
    "tvm-xgb",
    "tvm-mlp",
    "tlp",
    "tlp-prefix",
    "tlp-mixed",
    "tlp+device",
)
PUBLISHED = "TenSet XGB 0.83/0.90, TenSet MLP 0.87/0.95, TLP 0.92/0.97 (top-1/top-5, other CPUs)"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _default_db() -> str:
    for p in (ROOT / "data/reference.db.xz", ROOT / "data/reference.db"):
        if p.exists():
            return str(p)
    return str(ROOT / "data/reference.db.xz")


def _readme_holdout(readme: Path) -> list[str]:
    """The fixed held-out families of data/README.md (its `--holdout A,B,...` example)."""
    if not readme.exists():
        return []
    m = re.search(r"--holdout[ =]([A-Za-z0-9_./,:-]+)", readme.read_text())
    return [x for x in m.group(1).split(",") if x] if m else []


def _make(name: str, args: argparse.Namespace, seed: int):  # type: ignore[no-untyped-def]
    t = args.threads
    if name == "xgb":
        return make_model("xgb", nthread=t, seed=seed)
    if name == "xgb-rank":
        return make_model("xgb", objective="rank", nthread=t, seed=seed)
    if name == "lgbm-rank":
        return make_model("lgbm-rank", nthread=t, seed=seed)
    if name.startswith("mlp-"):
        loss, _, members = name[4:].partition("-x")
        return make_model(
            "mlp", loss=loss, epochs=args.epochs, patience=args.patience, seed=seed, members=int(members or 1)
        )
    if name == "tvm-xgb":
        return make_model("tvm-xgb", nthread=t)
    if name == "tvm-mlp":
        return make_model("tvm-mlp", epochs=args.tvm_epochs or args.epochs, seed=seed)
    extra = dict(p.split("=", 1) for p in args.tlp_param or [])
    if name in ("tlp", "tlp+device", "tlp-prefix"):
        return make_model(
            "tlp", epochs=args.tlp_epochs, patience=args.patience, seed=seed, device=name == "tlp+device", **extra
        )
    if name == "tlp-mixed":  # TLP's own scheme: one LambdaRank list over all workloads of a batch, gains 2**label - 1
        return make_model(
            "tlp",
            epochs=args.tlp_epochs,
            patience=args.patience,
            seed=seed,
            **{"mixed": True, "gain_scale": 1.0, "groups_per_batch": 16, **extra},
        )
    raise SystemExit(f"unknown model {name}")


_METRICS = ("top1", "top5", "wtop1", "wtop5", "pairwise", "kendall", "rmse")


def weighted_topk(scores: list[np.ndarray], data, k: int) -> float:  # type: ignore[no-untyped-def]
    """TLP's top-k: sum of the groups' best latencies / sum of the best latency among each group's
    k best-predicted (tlp_eval.py with every task weight 1), so slow workloads weigh more."""
    best, picked = 0.0, 0.0
    for g, sc in zip(data.groups, scores):
        lat = data.latencies[g.start : g.stop]
        ok = np.isfinite(lat)
        if not ok.any():
            continue
        top = np.argsort(-np.where(np.isfinite(sc), sc, -np.inf), kind="stable")[:k]
        chosen = lat[top][np.isfinite(lat[top])]
        best += float(lat[ok].min())
        picked += float(chosen.min()) if chosen.size else float(lat[ok].max())
    return best / picked if picked > 0 else float("nan")


def _datasets(args: argparse.Namespace, names: list[str], db_path: str | None = None) -> dict[str, object]:
    """The dataset each model family reads: PerStoreFeature, trace tokens, trace tokens + device."""
    from autosearch.features.trace_tokens import ensure_features

    db = resolve_db(db_path or args.db)
    out: dict[str, object] = {}
    if any(not n.startswith("tlp") for n in names):
        out["per-store"] = load_dataset(db, max_groups=args.max_groups)
    if any(n.startswith("tlp") for n in names):
        t = time.perf_counter()
        n_new = ensure_features(db, TRACE_TOKENS)
        if n_new:
            print(f"computed trace tokens of {n_new} records in {time.perf_counter() - t:.1f} s")
        out["tokens"] = load_dataset(db, extractor=TRACE_TOKENS, max_groups=args.max_groups)
    if "tlp-prefix" in names:
        ensure_features(db, PREFIX_TOKENS)
        out["prefix-tokens"] = load_dataset(db, extractor=PREFIX_TOKENS, max_groups=args.max_groups)
    if "tlp+device" in names:
        from autosearch.features.device import target_descriptors, with_device
        from autosearch.store.db import Store

        tok = out["tokens"]
        with Store(db) as store:
            desc = target_descriptors(store, [g.target for g in tok.groups], profile_missing=True)  # type: ignore[attr-defined]
        out["tokens+device"] = with_device(tok, desc)
        for t_, d in desc.items():
            print(
                f"device of {t_}: {json.dumps({k: d.get(k) for k in ('cores', 'isa_level', 'mem_bandwidth_gbs', 'peak_gflops')})}"
            )
    return out


def _data_key(name: str) -> str:
    special = {"tlp+device": "tokens+device", "tlp-prefix": "prefix-tokens"}
    return special.get(name, "tokens" if name.startswith("tlp") else "per-store")


def _within(ds, n: int, seed: int):  # type: ignore[no-untyped-def]
    """(first n candidates of every group, the rest), drawn at random per group: split b' fine-tuning."""
    from autosearch.training.dataset import Dataset

    rng = np.random.default_rng(seed)
    ft, rest = [], []
    names = {g.workload_key: (g.name, g.family) for g in ds.groups}
    for g in ds.groups:
        idx = g.start + rng.permutation(g.size)
        for part, sel in ((ft, idx[:n]), (rest, idx[n:])):
            if len(sel):
                mats = [ds.rows[ds.offsets[c] : ds.offsets[c + 1]] for c in sel]
                lats = [float(x) if np.isfinite(x) else None for x in ds.latencies[sel]]
                part.append((g.workload_key, g.target, mats, lats))
    return (Dataset.from_groups(ft, ds.extractor, names), Dataset.from_groups(rest, ds.extractor, names))


def _device_split(ds, target: str | None, finetune: int, seed: int):  # type: ignore[no-untyped-def]
    """(train, finetune or None, test, held-out target) for split (b)/(b')."""
    counts: dict[str, int] = {}
    for g in ds.groups:
        counts[g.target] = counts.get(g.target, 0) + g.size
    if len(counts) < 2:
        raise SystemExit(f"--split device needs records of at least 2 targets; {args_db_hint(ds)} has {len(counts)}")
    held = target or min(counts, key=lambda t: (counts[t], t))
    if held not in counts:
        raise SystemExit(f"--holdout-target {held!r} is not among the stored targets: {', '.join(counts)}")
    train = ds.subset([i for i, g in enumerate(ds.groups) if g.target != held])
    test = ds.subset([i for i, g in enumerate(ds.groups) if g.target == held])
    if finetune <= 0:
        return train, None, test, held
    ft, rest = _within(test, finetune, seed)
    return train, ft, rest, held


def _other_targets(train, extras: list, held: str) -> tuple:  # type: ignore[no-untyped-def]
    """`train` joined with the groups of `extras` (other stores) not on the held-out target."""
    from autosearch.training.dataset import Dataset

    parts = [e.subset([i for i, g in enumerate(e.groups) if g.target != held]) for e in extras]
    return Dataset.concat([train, *parts]), sum(p.n_groups for p in parts)


def args_db_hint(ds) -> str:  # type: ignore[no-untyped-def]
    return f"the dataset ({ds.n_groups} groups)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default=_default_db(), help="store (.db or .db.xz); default data/reference.db.xz")
    ap.add_argument(
        "--split",
        choices=("families", "device"),
        default="families",
        help="families: held-out workload families (a); device: held-out target (b, b' with --finetune)",
    )
    ap.add_argument(
        "--train-db",
        action="append",
        default=[],
        metavar="DB",
        help="also train on this store's groups (repeatable); never on a held-out family, name or "
        "workload (--split families) or on the held-out target (--split device), never tested on",
    )
    ap.add_argument(
        "--split-file", type=Path, help="split.json to use (default: data/README.md's held-out list, else --fraction)"
    )
    ap.add_argument("--holdout-target", default=None, help="--split device: the target (JSON as stored) held out")
    ap.add_argument(
        "--finetune",
        type=int,
        default=0,
        help="--split device: schedules per workload of the held-out "
        "target given to each model's update() before testing on the rest (split b')",
    )
    ap.add_argument(
        "--tlp-epochs", type=int, default=120, help="epochs of the tlp models (no early stopping by default)"
    )
    ap.add_argument(
        "--tlp-param", action="append", metavar="KEY=VALUE", help="a tlp hyper-parameter (as `train -p`), repeatable"
    )
    ap.add_argument(
        "--throughput",
        type=int,
        default=0,
        metavar="N",
        help="also measure scoring speed on N stored "
        "candidates: trace tokens + tlp vs PerStoreFeature + mlp, side by side",
    )
    ap.add_argument("--holdout", default="", help="comma-separated held-out families / names (overrides the README)")
    ap.add_argument("--fraction", type=float, default=0.2, help="held-out fraction of workloads if no list is given")
    ap.add_argument(
        "--seed", type=int, default=0, help="seed of the split (with --fraction) and the early-stopping carve-out"
    )
    ap.add_argument(
        "--seeds",
        default="0,1,2",
        help="training seeds: every model trains once per seed, the table shows "
        "the mean (one seed moves an MLP's held-out top-1 by +-0.1 on unseen families)",
    )
    ap.add_argument("--max-groups", type=int, default=None, help="use only the first N groups (quick run)")
    ap.add_argument("--epochs", type=int, default=40, help="epochs of our MLPs (and TVM's MLP unless --tvm-epochs)")
    ap.add_argument("--patience", type=int, default=10, help="early-stopping patience of our MLPs (epochs)")
    ap.add_argument(
        "--no-refit",
        action="store_true",
        help="ours: keep the early-stopped model instead of "
        "refitting on all training workloads for the chosen number of epochs/rounds",
    )
    ap.add_argument("--tvm-epochs", type=int, default=None, help="epochs of TVM's MLPModel (TVM default 50)")
    ap.add_argument("--models", default=",".join(ALL), help=f"subset of {','.join(ALL)}")
    ap.add_argument("--threads", type=int, default=None, help="threads for XGBoost/LightGBM (default: all cores)")
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument(
        "--memory-check",
        type=int,
        metavar="N",
        help="instead: write a synthetic store of N records, "
        "load it and train xgb + mlp on it, and print the peak memory",
    )
    args = ap.parse_args(argv)
    if args.memory_check:
        return memory_check(args.memory_check, args)

    names_req = [m.strip() for m in args.models.split(",") if m.strip()]
    t0 = time.perf_counter()
    data = _datasets(args, names_req)
    load_s = time.perf_counter() - t0
    rss_after_load = _peak_rss_mb()
    ds = next(iter(data.values()))
    splits: dict[str, tuple] = {}
    extra = [_datasets(args, names_req, x) for x in args.train_db]
    n_extra = 0
    if args.split == "device":
        for key, d in data.items():
            tr_, ft_, te_, held = _device_split(d, args.holdout_target, args.finetune, args.seed)
            if extra:
                tr_, n_extra = _other_targets(tr_, [e[key] for e in extra], held)
            splits[key] = (tr_, ft_, te_, held)
        how = f"held-out target {splits[next(iter(splits))][3]}" + (
            f", {args.finetune} per workload to fine-tune" if args.finetune else ""
        )
    else:
        if args.split_file:
            split = Split.load(args.split_file)
            how = f"split file {args.split_file}"
        else:
            names = [x for x in args.holdout.split(",") if x] or _readme_holdout(ROOT / "data/README.md")
            present = {x for g in ds.groups for x in (g.name, g.family, g.workload_key)}  # type: ignore[attr-defined]
            names = [n for n in names if n in present]  # --max-groups may have dropped some
            if names:
                split, how = split_workloads(ds, holdout=names), f"held-out list ({len(names)} names)"  # type: ignore[arg-type]
            else:
                split, how = (
                    split_workloads(ds, fraction=args.fraction, seed=args.seed),
                    f"seeded fraction {args.fraction}",
                )  # type: ignore[arg-type]
        for key, d in data.items():
            tr_, te_ = apply_split(d, split)  # type: ignore[arg-type]
            n_main = tr_.n_groups
            _, tr_ = join_training(split, tr_, [e[key] for e in extra])  # type: ignore[arg-type]
            n_extra = tr_.n_groups - n_main
            splits[key] = (tr_, None, te_, None)
    if extra:
        how += f"; + {n_extra} training groups from {', '.join(args.train_db)}"
    train, _, test, _ = splits[next(iter(splits))]
    fit_set, valid = valid_carve_out(train, 0.15, args.seed)
    print(f"{ds} from {args.db} (loaded in {load_s:.1f} s)")
    print(
        f"split: {how}; train {train.n_groups} groups / {train.n_candidates} candidates"
        f" (ours: {fit_set.n_groups} fit + {valid.n_groups if valid else 0} early-stopping), "
        f"held out {test.n_groups} groups / {test.n_candidates} candidates"
    )

    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    rows = []
    for name in names_req:
        train, ft, test, _ = splits[_data_key(name)]
        runs = []
        for seed in seeds:
            model = _make(name, args, seed)
            t = time.perf_counter()
            if name.startswith(("tvm-", "xgb")):
                # TVM does its own model selection (or none); our XGBoost models, like TVM's, train a
                # fixed number of rounds on every training group (early stopping on a few validation
                # workloads picked noisy round counts in cross-validation on an early data snapshot).
                report = model.fit(train)
            elif args.no_refit:
                fs, va = valid_carve_out(train, 0.15, args.seed)
                report = model.fit(fs, va)
            else:  # early-stop on the carve-out, then train on every training workload that long
                report = fit_refit(model, train, 0.15, args.seed)
            if ft is not None:
                model.update(ft)
            train_s = time.perf_counter() - t
            res = evaluate(model, test, keep_scores=True)
            runs.append(
                {
                    "seed": seed,
                    **{k: res.mean[k] for k in _METRICS if k in res.mean},
                    "wtop1": weighted_topk(res.scores, test, 1),
                    "wtop5": weighted_topk(res.scores, test, 5),
                    "train_s": train_s,
                    "pred_per_s": res.candidates_per_s,
                    "best_epoch": report.best_epoch,
                    "workloads": [
                        {"workload": g["workload"], "top1": g["top1"], "top5": g["top5"]} for g in res.per_group
                    ],
                }
            )
            print(
                f"  {name:17s} seed {seed}: top-1 {runs[-1]['top1']:.3f} top-5 {runs[-1]['top5']:.3f}"
                f" (TLP-weighted {runs[-1]['wtop1']:.3f} / {runs[-1]['wtop5']:.3f}) ({train_s:.1f} s)",
                flush=True,
            )
        row = {
            "model": name,
            **{k: float(np.mean([r[k] for r in runs])) for k in (*_METRICS, "train_s", "pred_per_s")},
            "top1_sd": float(np.std([r["top1"] for r in runs])),
            "runs": runs,
        }
        rows.append(row)

    print(f"\nmeans over training seeds {args.seeds} (top-1 +- its standard deviation over seeds)\n")
    hdr = (
        f"| {'model':17s} | top-1 (+- sd)   | top-5 | TLP top-1 | TLP top-5 | pairwise | Kendall tau | train s |"
        " predictions/s |"
    )
    print(hdr)
    print("|" + "|".join("-" * (len(c)) for c in hdr.split("|")[1:-1]) + "|")
    for r in rows:
        print(
            f"| {r['model']:17s} | {r['top1']:.3f} (+-{r['top1_sd']:.3f}) | {r['top5']:.3f} | {r['wtop1']:9.3f} |"
            f" {r['wtop5']:9.3f} | {r['pairwise']:8.3f} |"
            f" {r['kendall']:11.3f} | {r['train_s']:7.1f} | {r['pred_per_s']:13,.0f} |"
        )
    ours = [r for r in rows if not r["model"].startswith("tvm-")]
    tvm = {r["model"]: r for r in rows if r["model"].startswith("tvm-")}
    if ours and "tvm-xgb" in tvm:
        best = max(ours, key=lambda r: (r["top1"], r["top5"]))
        ratio = best["top1"] / tvm["tvm-xgb"]["top1"] if tvm["tvm-xgb"]["top1"] > 0 else float("inf")
        print(
            f"\nour best top-1 ({best['model']}) {best['top1']:.3f} / TVM-XGB top-1 {tvm['tvm-xgb']['top1']:.3f} = {ratio:.3f}x"
        )
        winners = [
            r["model"] for r in ours if all(r["top1"] > t["top1"] and r["top5"] > t["top5"] for t in tvm.values())
        ]
        print(f"ours that beat every TVM model on both top-1 and top-5: {', '.join(winners) if winners else 'none'}")
    if args.throughput:
        throughput = scoring_throughput(args, data, rows, args.throughput)
    else:
        throughput = None
    peak = _peak_rss_mb()
    print(f"peak memory (max RSS): {peak:,.0f} MB (after loading {ds.n_candidates} records: {rss_after_load:,.0f} MB)")  # type: ignore[attr-defined]
    print(f"published reference points: {PUBLISHED}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "db": args.db,
                    "split": how,
                    "rows": rows,
                    "peak_rss_mb": peak,
                    "n_records": ds.n_candidates,
                    "argv": sys.argv[1:],  # type: ignore[attr-defined]
                    "throughput": throughput,
                },
                indent=1,
                default=float,
            )
        )
    return 0


def _sample_records(db: str, n: int) -> list[tuple[object, str]]:
    """About n stored TVM records spread evenly over the store: (workload row, trace JSON)."""
    from autosearch.store.db import Store

    with Store(db, readonly=True) as st:
        wls = {w.id: w for w in st.workloads(backend="tvm")}
        recs = [(wls[m.workload_id], m.schedule) for m in st.measurements() if m.workload_id in wls]
    step = max(1, len(recs) // n)
    return recs[::step][:n]


def scoring_throughput(args: argparse.Namespace, data: dict[str, object], rows: list[dict], n: int) -> dict[str, float]:
    """Candidates/s from a candidate to its score, side by side: trace tokens + tlp vs PerStoreFeature + mlp.

    Both models are scored one workload at a time (as search does) with torch's default threads
    (this machine's cores). The PerStoreFeature path starts from replayed schedules (what tuning
    holds) and times extraction + scoring; the tlp path starts from the stored trace JSON, and is
    also shown with the cost of writing a replayed schedule's trace as JSON (`trace_json`).
    """
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.space import trace_json
    from autosearch.backends.tvm.target import parse_target
    from autosearch.features.per_store import candidate_from_trace, extract_features
    from autosearch.features.trace_tokens import TraceTokenizer
    from autosearch.models.base import FeatureBatch

    db = resolve_db(args.db)
    recs = _sample_records(db, n)
    by_wl: dict[str, tuple[object, list[str]]] = {}
    for w, tr in recs:
        by_wl.setdefault(w.key, (w, []))[1].append(tr)  # type: ignore[attr-defined]
    out: dict[str, float] = {"candidates": float(len(recs))}
    if "tokens" in data:
        tlp = make_model("tlp", epochs=1, seed=0)
        tlp.fit(data["tokens"])  # weights do not change the speed
        tok = TraceTokenizer()
        for label in ("cold", "warm"):  # cold: a fresh tokenizer (no sketch cached yet), warm: second pass
            t = time.perf_counter()
            for w, traces in by_wl.values():
                mats = [tok(x, w.ir, w.flops) for x in traces]  # type: ignore[attr-defined]
                tlp.predict(FeatureBatch.from_list(mats))
            out[f"tlp_{label}_per_s"] = len(recs) / (time.perf_counter() - t)
    m = min(len(recs), max(50, n // 10))
    sub = _sample_records(db, m)
    target = parse_target(_first_target(db))
    mlp = make_model("mlp", epochs=1, seed=0)
    mlp.fit(data["per-store"]) if "per-store" in data else mlp.fit(load_dataset(db, max_groups=4))
    groups: dict[str, tuple[object, object, list[object]]] = {}
    for w, tr in sub:
        if w.key not in groups:  # type: ignore[attr-defined]
            mod = tvm.script.from_source(w.ir)  # type: ignore[attr-defined]
            groups[w.key] = (mod, ms.TuneContext(mod=mod, target=target), [])  # type: ignore[attr-defined]
        groups[w.key][2].append(candidate_from_trace(groups[w.key][0], tr))  # type: ignore[attr-defined]
    for _, ctx, cands in groups.values():  # warm-up: the first extraction of a context pays one-off costs
        extract_features(ctx, cands[:1])
    t = time.perf_counter()
    for _, ctx, cands in groups.values():
        mlp.predict(FeatureBatch.from_list(extract_features(ctx, cands)))
    out["per_store_mlp_per_s"] = len(sub) / (time.perf_counter() - t)
    t = time.perf_counter()
    for _, _, cands in groups.values():
        for c in cands:
            trace_json(c.sch)
    out["trace_json_per_s"] = len(sub) / (time.perf_counter() - t)
    if "tlp_warm_per_s" in out:
        both = 1.0 / (1.0 / out["tlp_warm_per_s"] + 1.0 / out["trace_json_per_s"])
        out["tlp_with_trace_json_per_s"] = both
    print(
        f"\nscoring throughput (features + model, candidates/s, torch threads {__import__('torch').get_num_threads()}):"
    )
    for k, v in out.items():
        print(f"  {k:28s} {v:12,.0f}")
    if "tlp_warm_per_s" in out:
        print(
            f"SUMMARY scoring: tlp (warm) / PerStoreFeature+mlp = {out['tlp_warm_per_s'] / out['per_store_mlp_per_s']:.1f}x"
        )
    return out


def _first_target(db: str) -> str:
    from autosearch.store.db import Store

    with Store(db, readonly=True) as st:
        return st.targets()[0]


def memory_check(n_records: int, args: argparse.Namespace) -> int:
    """Peak RSS for loading and training on `n_records` records (synthetic, PerStoreFeature-shaped)."""
    import tempfile

    from autosearch.models.base import DEFAULT_EXTRACTOR
    from autosearch.store.db import MeasurementRecord, Store, WorkloadRecord

    rng = np.random.default_rng(0)
    per_group = 500
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "big.db"
        t = time.perf_counter()
        with Store(db) as st:
            for g in range(int(np.ceil(n_records / per_group))):
                key = f"synthetic{g}"
                st.add_workload(WorkloadRecord(key, key, "SYN", "tvm", {}, ""))
                k = 1 + g % 4  # stores per candidate, as in real programs
                recs, feats = [], []
                for c in range(min(per_group, n_records - g * per_group)):
                    lat = float(rng.uniform(1e-4, 1e-3))
                    recs.append(MeasurementRecord(key, "llvm", "dev", f"{g}-{c}", "ok", [lat]))
                    feats.append(rng.random((k, 164), dtype=np.float32))
                st.add_measurements(recs, feats, DEFAULT_EXTRACTOR)
        print(
            f"wrote {n_records} synthetic records in {time.perf_counter() - t:.0f} s; peak so far {_peak_rss_mb():,.0f} MB"
        )
        t = time.perf_counter()
        ds = load_dataset(db)
        print(
            f"loaded {ds} ({ds.rows.nbytes / 2**20:,.0f} MB of rows) in {time.perf_counter() - t:.0f} s;"
            f" peak {_peak_rss_mb():,.0f} MB"
        )
        fit, valid = valid_carve_out(ds, 0.1, 0)
        for name, model in (
            ("xgb", make_model("xgb", n_rounds=20, nthread=args.threads)),
            ("mlp", make_model("mlp", epochs=1)),
        ):
            t = time.perf_counter()
            model.fit(fit, valid)
            print(f"trained {name} in {time.perf_counter() - t:.0f} s; peak {_peak_rss_mb():,.0f} MB")
    peak = _peak_rss_mb()
    print(f"peak memory (max RSS) for {n_records} records: {peak:,.0f} MB ({'under' if peak < 4096 else 'OVER'} 4 GB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
