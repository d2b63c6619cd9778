"""How often `trace-prefix-tokens`' emulated post-processing agrees with what TVM really makes.

Prefix tokens stop at EnterPostproc and carry, on each tiled nest's Reorder, the parallel extent
and the vector extent that MetaSchedule's RewriteParallelVectorizeUnroll will give that nest,
worked out from the decisions (`features.trace_tokens.postproc._Post`). Here stored schedules are replayed
through TVM with their post-processing, and the tiled block's enclosing parallel loop and its
innermost loop (vectorized or not) are read from the resulting TIR and compared, per family.
Schedules with more than one tiled block are skipped (which Reorder is which block is not read).

    python bench/post_emulation.py --db data/reference_two_threads.db.xz --every 13 --limit 400
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sqlite3
import sys

_LOOP = re.compile(r"^(\s*)for .* in T\.(\w+)\((\d+)")


def _tir_extents(script: str, block: str) -> tuple[int, int] | None:
    """(parallel extent, innermost vector extent) around `block` in TIR text; 1 where none."""
    lines = script.splitlines()
    heads = (f'with T.sblock("{block}_update"):', f'with T.sblock("{block}"):')
    at = next((i for h in heads for i, line in enumerate(lines) if line.strip() == h), None)
    if at is None:
        return None
    indent, loops = len(lines[at]) - len(lines[at].lstrip()), []  # innermost first
    for line in reversed(lines[:at]):
        m = _LOOP.match(line)
        if m and len(m.group(1)) < indent:
            loops.append((m.group(2), int(m.group(3))))
            indent = len(m.group(1))
    if not loops:
        return None
    parallel = next((e for kind, e in loops if kind == "parallel"), 1)
    return parallel, loops[0][1] if loops[0][0] == "vectorized" else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="data/reference_two_threads.db.xz", help="store (.db or .db.xz)")
    ap.add_argument("--every", type=int, default=13, help="take measurements whose id is a multiple of this")
    ap.add_argument("--limit", type=int, default=400, help="at most this many measurements")
    args = ap.parse_args(argv)

    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from autosearch.features import trace_tokens as tt
    from autosearch.training.dataset import resolve_db

    con = sqlite3.connect(f"file:{resolve_db(args.db)}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT w.name, w.ir, m.schedule FROM measurements m JOIN workloads w ON w.id=m.workload_id"
        " WHERE m.id % ? = 0 AND m.status='ok' AND w.backend='tvm' ORDER BY m.id LIMIT ?",
        (max(args.every, 1), args.limit),
    ).fetchall()
    col = tt.PREFIX_FEATURE_NAMES.index("post_par_extent")
    reorder = tt.PREFIX_FEATURE_NAMES.index("kind=Reorder")
    tok = tt.TraceTokenizer(postproc=False)
    stats: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    for name, ir, text in rows:
        toks = tok(text, ir)
        toks = toks[toks[:, reorder] == 1]
        insts = json.loads(text)[0]
        names = {x[3][0]: x[2][0] for x in insts if x[0] == "GetSBlock"}
        tiled = [names.get(x[1][0]) for x in insts if x[0] == "Annotate" and x[2] == ["meta_schedule.tiling_structure"]]
        if len(toks) != 1 or len(tiled) != 1 or tiled[0] is None:
            continue
        sch = Schedule(tvm.script.from_source(ir))
        Trace.apply_json_to_schedule(json.loads(text), sch)
        real = _tir_extents(sch.mod.script(), tiled[0])
        if real is None:
            continue
        par = round(2 ** float(toks[0, col])) if toks[0, col] > 0 else 1
        vec = round(2 ** float(toks[0, col + 2]) - 1) if toks[0, col + 2] > 0 else 1
        s = stats[name.split("/")[0]]
        s[0] += 1
        s[1] += par == real[0]
        s[2] += vec == real[1]
    total = [sum(v[i] for v in stats.values()) for i in range(3)]
    if not total[0]:
        print("no schedule with one tiled block in the sample", file=sys.stderr)
        return 1
    print("| family | schedules | parallel extent agrees | vector extent agrees |")
    print("|---|---|---|---|")
    for fam, (n, p, v) in sorted(stats.items()):
        print(f"| {fam} | {n} | {p / n:.2f} | {v / n:.2f} |")
    print(
        f"SUMMARY emulated post-processing vs TVM's TIR over {total[0]} schedules: parallel extent "
        f"{total[1] / total[0]:.3f}, vector extent {total[2] / total[0]:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
