"""Per task: the best latency `tune-model` measured vs the best stock `tune_relax` measured.

`bench/network.py` leaves its work directory under /tmp/bench-network-* (our store `ours.db` and
tune_relax's `stock/` folder). End-to-end times move from run to run on a shared machine; the
per-task bests say which kernels differ and by how much.

    python bench/network_tasks.py /tmp/bench-network-XXXX
    python bench/network_tasks.py /tmp/bench-network-XXXX --stock /tmp/bench-network-YYYY/stock  # after --stock-db
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path


def stock_tasks(stock: Path) -> dict[str, tuple[int, int, float]]:
    """name -> (weight, trials, best latency s), from tune_relax's last task-scheduler table."""
    log = stock / "logs" / "tvm.s_tir.meta_schedule.logging.task_scheduler.log"
    if not log.is_file():
        raise SystemExit(f"{log}: not found (is {stock.parent} a bench/network.py work directory?)")
    text = log.read_text()
    start = text.rfind(" ID |")
    if start < 0:
        raise SystemExit(f"{log}: no task table (did tune_relax finish?)")
    out: dict[str, tuple[int, int, float]] = {}
    for line in text[start:].splitlines()[2:]:
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 9 and parts[0].isdigit():
            out[parts[1]] = (int(parts[3]), int(parts[7]), float(parts[5]) * 1e-6)
    return out


def our_tasks(db: Path) -> dict[str, tuple[int, float | None]]:
    """name -> (trials, best latency s) from our store."""
    if not db.is_file():
        raise SystemExit(f"{db}: not found")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        rows = con.execute(
            "SELECT w.name, COUNT(*), MIN(m.median) FROM measurements m JOIN workloads w ON w.id = m.workload_id "
            "GROUP BY w.name"
        ).fetchall()
    return {name.split("/", 1)[-1]: (int(n), best) for name, n, best in rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--stock", type=Path, default=None, help="tune_relax's folder (default WORKDIR/stock)")
    args = ap.parse_args(argv)
    stock, ours = stock_tasks(args.stock or args.workdir / "stock"), our_tasks(args.workdir / "ours.db")
    print(
        "| task | weight | ours trials | ours best (us) | tune_relax trials | tune_relax best (us) | ours / tune_relax |"
    )
    print("|---|---|---|---|---|---|---|")
    both_o = both_s = 0.0
    for name, (weight, n_s, best_s) in stock.items():
        n_o, best_o = ours.get(name, (0, None))
        ratio = f"{best_o / best_s:.2f}" if best_o and best_s else "-"
        shown = f"{best_o * 1e6:.1f}" if best_o else "-"
        print(f"| {name} | {weight} | {n_o} | {shown} | {n_s} | {best_s * 1e6:.1f} | {ratio} |")
        if best_o:
            both_o, both_s = both_o + weight * best_o, both_s + weight * best_s
    print(
        f"\nSUMMARY weighted sum over tasks both measured: ours {both_o * 1e3:.2f} ms, "
        f"tune_relax {both_s * 1e3:.2f} ms -> tune_relax / ours = {both_s / both_o if both_o else float('nan'):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
