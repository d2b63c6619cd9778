"""ONNX Runtime's own time per node of a zoo model, to set beside our tasks' time in the network
(`bench/network.py --json`: each task's `network_s` over its weight).

    python bench/ort_profile.py --model resnet50

The model is exported as `bench/network.py` exports it (`runtimes.export_onnx`) and run by the
CPU provider with `bench/network.py`'s settings (every graph optimisation, `--threads` intra-op
threads, one inter-op thread, sequential) and `enable_profiling`; after `--warmup` runs, each
node's median over `--runs` runs. Prints the time per operator type, then the costliest nodes
with their input shapes, and one line: the nodes' summed medians.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="a function of examples/zoo.py (an image model)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--top", type=int, default=40, help="nodes listed, costliest first")
    args = parser.parse_args()

    import numpy as np
    import onnxruntime as ort
    import zoo  # type: ignore[import-not-found]

    from autosearch.networks.runtimes import export_onnx

    net = getattr(zoo, args.model)().eval()
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        export_onnx(net, [x], path, ["x"])
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(tmp) / "profile")
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        feeds = {sess.get_inputs()[0].name: x}
        for _ in range(args.warmup + args.runs):
            sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())

    calls: dict[str, list[tuple[float, str, str]]] = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            shapes = json.dumps(e["args"].get("input_type_shape"))
            calls[e["name"]].append((float(e["dur"]), e["args"].get("op_name", "?"), shapes))
    rows = sorted(
        ((statistics.median(d for d, _, _ in c[-args.runs :]), name, c[0][1], c[0][2]) for name, c in calls.items()),
        reverse=True,
    )
    by_op: collections.Counter[str] = collections.Counter()
    for us, _, op, _ in rows:
        by_op[op] += us
    print(f"## {args.model}: ONNX Runtime {ort.__version__}, {args.threads} threads, median of {args.runs} runs")
    print("| operator | us |\n|---|---|")
    for op, us in by_op.most_common():
        print(f"| {op} | {us:.0f} |")
    print("| us | operator | node | inputs |\n|---|---|---|---|")
    for us, name, op, shapes in rows[: args.top]:
        print(f"| {us:.0f} | {op} | {name.removesuffix('_kernel_time')} | {shapes} |")
    print(f"NODES {args.model}: {sum(r[0] for r in rows) / 1e3:.2f} ms summed over {len(rows)} nodes")


if __name__ == "__main__":
    main()
