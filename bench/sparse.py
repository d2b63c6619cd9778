"""Sparse co-search benchmark: cost models chosen by validation, then search vs. the baselines a user has.

Held-out data is never trained on: whole generator families (`--holdout-families`, default
community and blockdiag) plus 20% of the other families' matrices by seed. One run:

1. model quality: WACONet, AutoSparseNet (matrix embedding as a token / joined after layer 1),
   AutoSparseNet_WACONet (per operator) and AutoSparseNet_Full (all operators in one model),
   trained on the collected store (`--seeds`, `--epochs`); per operator the variant with the best
   *validation* top-1 is the one searched with (and written to `<model-dir>/selected.json`, which
   `autosearch sparse tune` loads by default); its held-out top-1 / top-5 are the reported ones;
2. BestFormat: the best fixed configuration of the whole space (any format, serial or parallel):
   candidates ranked by the store's training groups, then measured on `--bestformat-matrices`
   fresh matrices of the *training* families in the test matrices' size range; the best-ranked
   one that applies is used on each test matrix. It is not seeded into the search;
3. search on `--search-matrices` fresh matrices per operator from the held-out families only
   (unseen plan seed 99), rows log-uniform in `--search-rows` (default 10k..1M), density
   log-uniform in `--density` (default 1e-6..1e-2, capped at `--max-nnz` nonzeros), plus any
   `--mtx` files: the cost model ranks candidates, at most `--trials` configurations are measured
   (eps-greedy, online update; a random search with the same budget unless `--no-random`), the 3
   fastest are re-timed (no new configuration), and the result is timed beside oneMKL
   (inspector-executor, mv/mm hint + mkl_sparse_optimize), torch.sparse, scipy, BestFormat and
   the default CSR kernel by one harness (`autosearch.sparse.measure.time_callable`: 300 ms
   settle, 3 warm-up calls, 5 repeats of >= 10 ms each, outputs preallocated, every library on
   the same `--threads`; the fastest repeat of 2 interleaved rounds). Format conversion / MKL's
   inspector are timed apart, with the break-even number of runs.

The headline per operator: the geomean over held-out matrices of (fastest of oneMKL, torch.sparse,
scipy, BestFormat) / ours, against WACO's 1.43x SpMV, 1.18x SpMM, 1.14x SDDMM.

    python bench/sparse.py                          # the full run (about 15-20 minutes on 2 cores)
    python bench/sparse.py --seeds 0 --epochs 2 --search-matrices 1 --trials 4 --search-rows 2000 4000 \
        --bestformat-matrices 1 --noise-groups 0 --no-random --model-dir '' --out /tmp/s.json   # correctness only

Prints the tables and one SUMMARY line; writes bench/results/sparse.json and the plots.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

from autosearch.sparse import mkl
from autosearch.sparse.baselines import (
    BASELINES,
    HEADLINE,
    LIBRARY,
    SIDE_TIMING,
    bestformat_by_op,
    bestformat_candidates,
    break_even_runs,
    confirm_best,
    contenders_for,
    fixed_for,
    geomean,
    rank_fixed_configs,
    side_by_side,
    speedup_over_best,
)
from autosearch.sparse.matrices import FAMILIES, MatrixSpec, generate, load_matrix, load_mtx
from autosearch.sparse.measure import MatrixBench, Timing, set_threads, threads
from autosearch.sparse.models import SELECTED, model_dir_name, save_model
from autosearch.sparse.plots import plot_all
from autosearch.sparse.records import load_groups, sparse_target
from autosearch.sparse.search import tune
from autosearch.sparse.space import OPS
from autosearch.sparse.train import evaluate, fit, split_groups
from autosearch.store.db import Store
from autosearch.training.dataset import resolve_db

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {  # name -> (kind, hyper)
    "WACONet": ("WACONet", {}),
    "AutoSparseNet[token]": ("AutoSparseNet", {"placement": "token"}),
    "AutoSparseNet[concat]": ("AutoSparseNet", {"placement": "concat"}),
    "AutoSparseNet_WACONet": ("AutoSparseNet_WACONet", {}),
}
WACO = {"spmv": 1.43, "spmm": 1.18, "sddmm": 1.14}  # WACO's geomean over the best of MKL / TACO / BestFormat
DENSE = 32  # N of SpMM, D of SDDMM (the store was collected at 32)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _valid_carve(train: list, seed: int) -> tuple[list, list]:
    """1/8 of the training matrices (by matrix) as validation: what every selection is made on."""
    rng = np.random.default_rng(seed + 100)
    mats = sorted({g.matrix_hash for g in train})
    val = set(rng.permutation(mats)[: max(1, len(mats) // 8)].tolist())
    return [g for g in train if g.matrix_hash not in val], [g for g in train if g.matrix_hash in val]


def model_quality(
    train: list,
    test: list,
    ops: tuple[str, ...],
    seeds: list[int],
    epochs: int,
    model_dir: Path | None,
    cache: Path,
    holdout: tuple[str, ...],
) -> tuple[dict, dict]:
    """Per op and variant: per-seed runs, mean/std top-1/top-5; also the models of seed seeds[0]."""
    out: dict[str, dict] = {op: {} for op in ops}
    keep: dict[tuple[str, str], object] = {}
    jobs = [(op, name) for op in ops for name in VARIANTS] + [("all", "AutoSparseNet_Full")]
    for op, name in jobs:
        kind, hyper = VARIANTS.get(name, ("AutoSparseNet_Full", {"placement": "token"}))
        tr = [g for g in train if op == "all" or g.op == op]
        runs: dict[str, list] = {o: [] for o in (ops if op == "all" else (op,))}
        for seed in seeds:
            fit_on, val = _valid_carve(tr, seed)
            t0 = time.perf_counter()
            res = fit(kind, fit_on, val, epochs=epochs, seed=seed, cache_dir=cache, hyper=hyper)
            secs = time.perf_counter() - t0
            for o in runs:
                te = [g for g in test if g.op == o]
                m = evaluate(res.model, te, cache) if te else {"top1": math.nan, "top5": math.nan}
                vt = [g for g in val if g.op == o]
                vm = evaluate(res.model, vt, cache) if vt else {"top1": math.nan}
                runs[o].append(
                    {
                        "seed": seed,
                        "losses": res.losses,
                        "valid_top1": vm["top1"],
                        "seconds": secs,
                        **{k: m[k] for k in ("top1", "top5", "pairwise", "kendall") if k in m},
                    }
                )
            if seed == seeds[0]:
                for o in runs:
                    keep[(o, name)] = res.model
                if model_dir is not None:
                    save_model(
                        res.model,
                        model_dir / model_dir_name(name, op),
                        {
                            "trained_on": op,
                            "variant": name,
                            "epochs": epochs,
                            "seed": seed,
                            "holdout_family": ",".join(holdout),
                            "bestformat": bestformat_by_op(tr),
                        },
                    )
            print(
                f"  trained {name:22s} {op:5s} seed {seed}: {secs:5.1f} s, held-out top-1 "
                + ", ".join(f"{o} {runs[o][-1]['top1']:.3f}" for o in runs),
                flush=True,
            )
        for o, rs in runs.items():
            t1 = [r["top1"] for r in rs]
            out[o][name] = {"runs": rs, "top1": float(np.mean(t1)), "top1_std": float(np.std(t1)),
                            "top5": float(np.mean([r["top5"] for r in rs])),
                            "top5_std": float(np.std([r["top5"] for r in rs])),
                            "valid_top1": float(np.nanmean([r["valid_top1"] for r in rs])), "test_groups": len(
                                [g for g in test if g.op == o])}  # fmt: skip
    return out, keep


def noise_ceiling(test: list, ops: tuple[str, ...], n: int) -> dict[str, float]:
    """Top-1 of a perfect model under this machine's noise: the stored latencies used as the
    prediction, scored against a fresh re-measurement of the same configurations (n groups per op)."""
    from autosearch.sparse.measure import Timing
    from autosearch.training.metrics import top_k_score

    out = {}
    for op in ops:
        vals = []
        pool = [g for g in test if g.op == op]
        for j in np.random.default_rng(1).permutation(len(pool))[:n]:  # random held-out groups, any size
            g = pool[int(j)]
            mb = MatrixBench(op, load_matrix(g.spec, g.matrix_hash), g.dense, seed=g.seed)
            again = [mb.run(c, Timing(repeat=3, min_repeat_ms=3.0), verify=False).median for c in g.configs]
            vals.append(top_k_score([-t for t in g.latencies], again, 1))
        out[op] = float(np.mean(vals)) if vals else math.nan
        print(
            f"  noise ceiling {op}: top-1 of the stored latencies against a re-measurement = {out[op]:.3f}"
            f" ({len(vals)} groups)",
            flush=True,
        )
    return out


def size_range_specs(
    n: int, families: list[str], rows: tuple[int, int], density: tuple[float, float], max_nnz: int, seed: int
) -> list[MatrixSpec]:
    """n fresh matrices, the families in turn: rows log-uniform in `rows`, columns rows x (1, 1, 1/2
    or 2), density log-uniform in `density`, at least one and at most max_nnz / rows per row."""
    rng = np.random.default_rng([seed, 4242])
    out = []
    for i in range(n):
        m = int(math.exp(rng.uniform(math.log(rows[0]), math.log(rows[1]))))
        k = max(64, int(m * float(rng.choice([1.0, 1.0, 0.5, 2.0]))))
        dens = math.exp(rng.uniform(math.log(density[0]), math.log(density[1])))
        r = min(max(dens * k, 1.0), max_nnz / m, k)
        out.append(MatrixSpec(families[i % len(families)], m, k, round(r, 3), seed=seed * 100_000 + i))
    return out


def choose_bestformat(train: list, op: str, specs: list[MatrixSpec], k: int) -> tuple[list[tuple[object, float]], dict]:
    """BestFormat's ranking for `op`: the store's top-k candidates measured on training-family matrices
    of the test size range."""
    cands = bestformat_candidates(train, op, 0 if op == "spmv" else DENSE, k)
    t0 = time.perf_counter()
    benches = [MatrixBench(op, generate(s), DENSE) for s in specs]
    ranking = rank_fixed_configs(benches, cands, Timing(repeat=3, min_repeat_ms=5.0, warmup=2))
    info = {
        "candidates": [c.short() for c in cands],
        "matrices": [s.name for s in specs],
        "ranking": [(c.short(), round(sc, 4)) for c, sc in ranking],  # type: ignore[attr-defined]
        "seconds": time.perf_counter() - t0,
    }
    print(
        f"  BestFormat {op}: {len(cands)} candidates on {len(specs)} training-range matrices -> "
        + ", ".join(f"{c} {sc:.3f}" for c, sc in info["ranking"][:3]),
        flush=True,
    )
    return ranking, info


def search_one(
    op: str, name: str, a, model, bf_ranking: list, trials: int, random: bool, spec_name: str, family: str
) -> dict:
    mb = MatrixBench(op, a, DENSE)
    ms = tune(a, op, DENSE, model=model, trials=trials, seed=0, bench=mb)  # nothing seeded: the model picks
    rs = tune(a, op, DENSE, model=None, trials=trials, seed=0, bench=mb) if random else None
    ours = confirm_best(mb, ms.measured)  # re-times the search's 3 fastest; no new configuration
    bestformat = fixed_for(bf_ranking, mb.a)
    cons, missing = contenders_for(mb, ours, bestformat)
    times = side_by_side(mb, cons)
    prep = {k: c.prepare_s for k, c in cons.items()}
    t_rand = math.inf
    if rs is not None and (rand := confirm_best(mb, rs.measured)) is not None:
        rc, _ = contenders_for(mb, rand, None, default_csr=False, mkl=False)
        t_rand = side_by_side(mb, {"ours": rc["ours"]}, rounds=1)["ours"] if "ours" in rc else math.inf
    ratio, base = speedup_over_best(times)
    per_base = {b: times[b] / times["ours"] for b in BASELINES if b in times and "ours" in times}
    row = {
        "op": op, "matrix": spec_name, "family": family, "model": name, "rows": int(a.shape[0]),
        "cols": int(a.shape[1]), "nnz": int(a.nnz), "density": a.nnz / (a.shape[0] * a.shape[1]),
        "times": times, "prepare_s": prep, "missing": missing, "random_best_time": t_rand,
        "speedup_vs_best_baseline": ratio, "best_baseline": base, "speedup_vs": per_base,
        "break_even_runs": break_even_runs(prep.get("ours", 0.0), times.get("ours", math.inf),
                                           prep.get(base, 0.0), times.get(base, math.inf)) if base else math.nan,
        "ours": ours.short() if ours else None, "ours_json": ours.to_json() if ours else None,
        "bestformat": bestformat.short() if bestformat else None,
        "model_search": {"seconds": ms.seconds, "best_latency": ms.best_latency, "history": ms.history,
                         "breakdown": ms.breakdown, "rejected": ms.rejected, "measured": len(ms.measured)},
        "random_search": {"seconds": rs.seconds, "best_latency": rs.best_latency, "history": rs.history,
                          "breakdown": rs.breakdown} if rs is not None else None,
    }  # fmt: skip
    ms_ = lambda k: f"{times[k] * 1e3:9.3f}" if k in times else f"{'-':>9s}"  # noqa: E731
    print(
        f"  {op:5s} {spec_name[:36]:36s} nnz {a.nnz:>8d} ours{ms_('ours')} mkl{ms_('mkl')} torch{ms_('torch')} "
        f"scipy{ms_('scipy')} bestfmt{ms_('bestformat')} csr{ms_('default_csr')} ms  x{ratio:.2f} over {base}"
        f"  ({row['ours']}; conversion {prep.get('ours', math.nan) * 1e3:.1f} ms vs {base} "
        f"{prep.get(base, math.nan) * 1e3:.1f} ms: break-even after {row['break_even_runs']:.0f} runs)",
        flush=True,
    )
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default=str(ROOT / "data/sparse/sparse_znver5.db.xz"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=40, help="most epochs; each model keeps its best validation epoch")
    ap.add_argument("--ops", default="spmv,spmm,sddmm")
    ap.add_argument("--holdout-families", default="community,blockdiag", help="whole generator families held out")
    ap.add_argument("--search-matrices", type=int, default=4, help="fresh held-out-family matrices per operator")
    ap.add_argument("--search-rows", type=int, nargs=2, default=[10_000, 1_000_000], metavar=("MIN", "MAX"))
    ap.add_argument("--density", type=float, nargs=2, default=[1e-6, 1e-2], metavar=("MIN", "MAX"))
    ap.add_argument("--max-nnz", type=int, default=2_000_000, help="cap on a search matrix's nonzeros")
    ap.add_argument("--mtx", nargs="*", default=[], help="Matrix Market files searched as well (any source)")
    ap.add_argument("--trials", type=int, default=20, help="measured configurations per search (<= 20 for the goal)")
    ap.add_argument("--no-random", action="store_true", help="skip the random search of the same budget")
    ap.add_argument(
        "--bestformat-matrices", type=int, default=3, help="training-family matrices BestFormat is chosen on"
    )
    ap.add_argument("--bestformat-candidates", type=int, default=10)
    ap.add_argument("--noise-groups", type=int, default=2, help="held-out groups per op re-measured for the ceiling")
    ap.add_argument("--threads", type=int, default=0, help="threads for TVM, torch and oneMKL (0: physical cores)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/sparse.json"))
    ap.add_argument(
        "--model-dir", default=str(ROOT / "data/sparse/models"), help="where models and selected.json go ('' = nowhere)"
    )
    a = ap.parse_args(argv)
    if not mkl.available():
        print("oneMKL's libmkl_rt was not found (pip install mkl): it is the main baseline", file=sys.stderr)
        return 2
    if a.threads:
        set_threads(a.threads)
    ops = tuple(o for o in a.ops.split(",") if o in OPS)
    seeds = [int(s) for s in a.seeds.split(",")]
    holdout = tuple(f.strip() for f in a.holdout_families.split(",") if f.strip())
    train_fams = [f for f in FAMILIES if f not in holdout]
    cache = Path.home() / ".cache" / "autosearch" / "sparse-features"
    t_all, load0, target = time.perf_counter(), os.getloadavg()[0], sparse_target()[0]
    with Store(resolve_db(a.db), readonly=True) as store:
        groups = load_groups(store, ops=ops, min_configs=10)
    train, test = split_groups(groups, holdout, 0.2, seed=0)
    n_mat = len({g.matrix_hash for g in groups})
    print(
        f"dataset {a.db}: {len(groups)} groups over {n_mat} matrices, "
        f"{sum(len(g.configs) for g in groups)} measured configurations; train {len(train)} groups, "
        f"held-out {len(test)} groups ({'+'.join(holdout)} families + 20% of the others by seed); "
        f"{threads()} threads; oneMKL {mkl.version()} ({os.environ.get('MKL_THREADING_LAYER', 'INTEL')} threading); "
        f"{target}; load average at start {load0:.2f} (what else runs on the cores shows up in every timing below)",
        flush=True,
    )
    model_dir = Path(a.model_dir) if a.model_dir else None
    quality, models = model_quality(train, test, ops, seeds, a.epochs, model_dir, cache, holdout)
    names = list(VARIANTS) + ["AutoSparseNet_Full"]
    # the model searched with: the variant with the best validation top-1 (never the test score)
    chosen = {op: max(quality[op], key=lambda k: quality[op][k]["valid_top1"]) for op in ops}
    print("\nheld-out top-1 / top-5 (mean over seeds " + ",".join(map(str, seeds)) + "); * = chosen by validation")
    print(f"{'model':24s}" + "".join(f"{op + ' valid':>12s}{op + ' top1':>14s}{op + ' top5':>12s}" for op in ops))
    for n in names:
        print(
            f"{n:24s}"
            + "".join(
                f"{quality[op][n]['valid_top1']:11.3f}{'*' if chosen[op] == n else ' '}"
                f"{quality[op][n]['top1']:8.3f}±{quality[op][n]['top1_std']:.3f}{quality[op][n]['top5']:12.3f}"
                for op in ops
            )
        )
    selected = {
        op: {"variant": chosen[op], "dir": model_dir_name(chosen[op], "all" if chosen[op] == "AutoSparseNet_Full" else op),
             "valid_top1": quality[op][chosen[op]]["valid_top1"], "test_top1": quality[op][chosen[op]]["top1"],
             "test_top5": quality[op][chosen[op]]["top5"], "test_groups": quality[op][chosen[op]]["test_groups"]}
        for op in ops
    }  # fmt: skip
    if model_dir is not None:
        (model_dir / SELECTED).write_text(json.dumps({
            "chosen_by": "mean validation top-1 over seeds (validation: 1/8 of the training matrices)",
            "source": str(Path(a.out).name), "holdout_family": ",".join(holdout), "selected": selected,
        }, indent=1, sort_keys=True) + "\n")  # fmt: skip
    ceiling = noise_ceiling(test, ops, a.noise_groups) if a.noise_groups else {}

    rows_rng, dens = (a.search_rows[0], a.search_rows[1]), (a.density[0], a.density[1])
    print(
        f"\nBestFormat: chosen on {a.bestformat_matrices} matrices of the training families {train_fams}, rows {rows_rng}"
    )
    bf_specs = size_range_specs(a.bestformat_matrices, train_fams, rows_rng, dens, a.max_nnz, seed=98)
    bf = {op: choose_bestformat([g for g in train if g.op == op], op, bf_specs, a.bestformat_candidates) for op in ops}
    targets: list[tuple[str, str, object]] = [
        (s.name, s.family, s) for s in size_range_specs(a.search_matrices, list(holdout), rows_rng, dens, a.max_nnz, seed=99)
    ]  # fmt: skip
    targets += [(f"mtx-{Path(p).stem}", "mtx", p) for p in a.mtx]
    print(
        f"\nsearch: {len(targets)} held-out matrices per operator (families {'+'.join(holdout)}, rows {rows_rng}, "
        f"density {dens}, <= {a.max_nnz} nonzeros{', plus --mtx files' if a.mtx else ''}), <= {a.trials} measured "
        "configurations; times in ms by one harness, same threads:"
    )
    rows = []
    for op in ops:
        for name, fam, src in targets:
            m = load_mtx(src) if isinstance(src, str) else generate(src)  # type: ignore[arg-type]
            rows.append(search_one(op, chosen[op], m, models[(op, chosen[op])], bf[op][0], a.trials,
                                   not a.no_random, name, fam))  # fmt: skip
    geo = {op: geomean([r["speedup_vs_best_baseline"] for r in rows if r["op"] == op]) for op in ops}
    geo_each = {
        op: {b: geomean([r["speedup_vs"].get(b, math.nan) for r in rows if r["op"] == op]) for b in BASELINES}
        for op in ops
    }
    res = {
        "db": a.db, "groups": len(groups), "matrices": n_mat, "train_groups": len(train), "test_groups": len(test),
        "holdout_family": ",".join(holdout), "seeds": seeds, "epochs": a.epochs, "threads": threads(),
        "mkl": {"version": mkl.version(), "library": mkl.library_path(),
                "threading": os.environ.get("MKL_THREADING_LAYER", "INTEL")},
        "harness": f"autosearch.sparse.measure.time_callable, {SIDE_TIMING}, fastest repeat of 2 interleaved rounds",
        "libraries": LIBRARY, "headline_baselines": list(HEADLINE),
        "models": quality, "selected": selected,
        "bestformat": {op: bf[op][1] for op in ops},
        "search": rows, "geomean_speedup": geo, "geomean_speedup_vs": geo_each, "noise_ceiling_top1": ceiling,
        "waco_reported": WACO, "peak_rss_mb": _peak_mb(), "seconds": time.perf_counter() - t_all, "target": target,
        "load_average": {"start": load0, "end": os.getloadavg()[0]},
    }  # fmt: skip
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, default=float))
    figs = plot_all(res, out.parent)
    print("\ngeomean speed-up of the co-searched kernel over the best of " + ", ".join(HEADLINE) + " per matrix:")
    for op in ops:
        each = ", ".join(f"{b} {v:.2f}x" for b, v in geo_each[op].items() if math.isfinite(v))
        print(f"  {op:5s} {geo[op]:.3f}x  (WACO reports {WACO[op]}x; goal: beat it)  per baseline: {each}")
    print(
        f"peak memory {_peak_mb():.0f} MB; {res['seconds']:.0f} s; results {out}; plots "
        + ", ".join(p.name for p in figs)
    )
    print(
        "SUMMARY "
        + " ".join(
            f"{op}: speedup {geo[op]:.2f}x (WACO {WACO[op]}x) top1 {selected[op]['test_top1']:.3f} [{chosen[op]}, by validation];"
            for op in ops
        )
        + f" held-out matrices {len(targets)}/op, families {'+'.join(holdout)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
