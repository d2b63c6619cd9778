"""How many measurements `data/` holds for each CPU: the count issue 71 asks data/README.md to state.

Reads every committed store (`*.db.xz`) read-only from a temporary decompressed copy and groups
its measurements by the CPU of the target they ran on (`mcpu`, or the target's own name when it
has none) and by status; the sparse co-search's stores (`data/sparse/`) are counted apart, since
their records are sparse kernels' formats and schedules, not TVM tensor programs. A record's CPU
is its target's: a store made on one machine holds that machine's targets (data/README.md says
which machine each came from).

    python data/count_records.py            # a Markdown table, and the totals
    python data/count_records.py --json
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import sqlite3
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent


def cpu_of(target_json: str) -> str:
    """The CPU a target names: its `mcpu`, else its kind (a target without `mcpu` is the generic one)."""
    try:
        target = json.loads(target_json)
    except json.JSONDecodeError:
        return "unreadable target"
    if not isinstance(target, dict):
        return "unreadable target"
    return str(target.get("mcpu") or target.get("kind") or "unknown")


def count_store(path: Path) -> Counter[tuple[str, bool]]:
    """(CPU, ok) -> records of one compressed store; an empty Counter if it holds no measurements."""
    counts: Counter[tuple[str, bool]] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.db"
        with lzma.open(path) as src, open(db, "wb") as dst:
            shutil.copyfileobj(src, dst)
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT target, status = 'ok', COUNT(*) FROM measurements GROUP BY target, status")
            for target, ok, n in rows:
                counts[(cpu_of(target), bool(ok))] += int(n)
        except sqlite3.DatabaseError:  # a store of another kind (no measurements table)
            pass
        finally:
            con.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    stores = sorted(HERE.rglob("*.db.xz"))
    per_cpu: dict[str, Counter[str]] = {}
    for path in stores:
        counts = count_store(path)
        sparse = "sparse" in path.relative_to(HERE).parts
        for (cpu, ok), n in counts.items():
            c = per_cpu.setdefault(cpu, Counter())
            c["records"] += n
            c["ok"] += n if ok else 0
            c["sparse"] += n if sparse else 0
        for cpu in {cpu for cpu, _ in counts}:
            per_cpu[cpu]["stores"] += 1
    if args.json:
        print(json.dumps({cpu: dict(c) for cpu, c in sorted(per_cpu.items())}, indent=1))
        return 0
    print("| CPU (`mcpu`) | stores | records | ok | of them sparse kernels |")
    print("|---|---|---|---|---|")
    for cpu, c in sorted(per_cpu.items(), key=lambda kv: -kv[1]["records"]):
        print(f"| `{cpu}` | {c['stores']} | {c['records']:,} | {c['ok']:,} | {c['sparse']:,} |")
    total = sum(c["records"] for c in per_cpu.values())
    sparse = sum(c["sparse"] for c in per_cpu.values())
    print(f"\nTOTAL {total:,} records ({total - sparse:,} tensor programs, {sparse:,} sparse kernels)")
    print(f"over {len(per_cpu)} CPU targets in {len(stores)} stores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
