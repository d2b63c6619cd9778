"""Does a change keep the tuning loop's behaviour? Two code versions, fed identical measurements.

A tuning A/B of two versions of the code cannot say this: from the first noisy timing on, the two
runs see different latencies, fit different models and propose different schedules, so their
bests differ by the seed-to-seed spread even when the code does the same thing. Here every
candidate is still built for real, but its measured latencies are replaced by a deterministic
function of its schedule (a hash of its TIR); both versions then see the same numbers for the same
schedules, and a refactor that keeps behaviour proposes the same schedules, in the same order,
round after round. The measured schedule hashes of each run are compared.

    python bench/replay_equivalence.py --before /work/before --workloads softmax/512x512 --trials 64
    python bench/replay_equivalence.py --before /work/before --seeds 0,1        # the six tuning workloads

`--before DIR` is a checkout of the other version (`git worktree add DIR REV`); this checkout is the
other side. Each side runs `autosearch tune` (its defaults: the decision search on the shipped
prefix prior) in its own process with PYTHONPATH at its `src/`, both at once.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = (
    "depthwise_conv2d_nhwc/1x112x112x32/k3s1p1,conv2d_capsule_nhwijc/1x16x16x4x4x8/k3s2p1/16,"
    "mobilenetv2/depthwise_conv2d_nhwc/1x14x14x576/k3s2p1,softmax/512x512,bert/dense/128x768/768,"
    "mobilenetv2/conv2d_nhwc/1x56x56x24/k1s1p0/144"
)

#: Run in each side's process: real builds, latencies a hash of the schedule, then `autosearch tune`.
_REPLAY = """
import dataclasses, hashlib, sys
from autosearch.backends.tvm import measure

_run = measure.Measurer.run_built

def run_built(self, candidates, built, timeout=None):
    out = []
    for c, r in zip(candidates, _run(self, candidates, built, timeout)):
        h = int(hashlib.sha256(str(c.sch.mod).encode()).hexdigest()[:8], 16)
        lat = 1e-4 * (1.0 + (h % 10007) / 10007.0)
        out.append(dataclasses.replace(r, status="ok", latencies=[lat] * 3, error=""))
    return out

measure.Measurer.run_built = run_built
from autosearch.cli import main
sys.exit(main(["tune", *sys.argv[1:]]))
"""


def _hashes(db: Path) -> list[str]:
    with sqlite3.connect(db) as con:
        return [h for (h,) in con.execute("SELECT schedule_hash FROM measurements ORDER BY id")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="a checkout of the other version of the code")
    ap.add_argument("--workloads", default=WORKLOADS)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--trials", type=int, default=64)
    args = ap.parse_args(argv)
    sides = {"before": Path(args.before).resolve(), "this": ROOT}
    if not (sides["before"] / "src" / "autosearch").is_dir():
        ap.error(f"--before {args.before}: no src/autosearch there")
    same = 0
    runs = [(w, int(s)) for s in args.seeds.split(",") for w in args.workloads.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for workload, seed in runs:
            procs, dbs = {}, {}
            for side, root in sides.items():
                dbs[side] = Path(tmp) / f"{side}-{len(dbs)}-{seed}-{abs(hash(workload))}.db"
                cmd = [sys.executable, "-c", _REPLAY, workload, "--trials", str(args.trials), "--seed", str(seed)]
                cmd += ["--db", str(dbs[side]), "--out", str(Path(tmp) / f"out-{side}-{seed}-{abs(hash(workload))}")]
                env = {**os.environ, "PYTHONPATH": str(root / "src")}
                procs[side] = subprocess.Popen(
                    cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                )
            for side, p in procs.items():
                _, err = p.communicate()
                if p.returncode:
                    print(f"{workload} seed {seed}: {side} exited {p.returncode}: {err.decode()[-400:]}")
                    return 1
            a, b = _hashes(dbs["before"]), _hashes(dbs["this"])
            same += a == b
            print(f"{workload} seed {seed}: {len(a)} / {len(b)} schedules, {'SAME' if a == b else 'DIFFERENT'}")
            sys.stdout.flush()
    print(f"RESULT {same} of {len(runs)} runs proposed the same schedules in the same order")
    return 0 if same == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
