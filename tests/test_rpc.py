"""Measurement through TVM's RPC tracker: a tracker and a server on 127.0.0.1 only."""

from __future__ import annotations

import pytest


@pytest.fixture
def local_tracker():
    from tvm.rpc.server import Server
    from tvm.rpc.tracker import Tracker

    tracker = Tracker(host="127.0.0.1", port=9190, port_end=9290, silent=True)
    server = Server(host="127.0.0.1", port=9300, port_end=9400, tracker_addr=(tracker.host, tracker.port),
                    key="autosearch-test", silent=True)
    yield tracker.host, tracker.port, "autosearch-test"
    server.terminate()
    tracker.terminate()


def test_collect_through_rpc_tracker(local_tracker, host, tmp_path):
    from autosearch.backends.tvm.collect import collect
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.store import Store
    from autosearch.workloads import resolve_workloads

    with Store(tmp_path / "rpc.db") as s:
        out = collect(resolve_workloads("softmax/256x256"), s, host, per_workload=3, rpc=local_tracker,
                      evaluator=EvaluatorSettings(repeat=2, min_repeat_ms=1), progress=False)
        assert out.measured == 3
        rows = list(s.measurements())
        assert all(r.status == "ok" and len(r.latencies) == 2 for r in rows), [r.error[:200] for r in rows]
