"""Measurement through TVM's RPC tracker: a tracker and a server on 127.0.0.1 only."""

from __future__ import annotations

import pytest


def _free_port() -> int:
    """A port nobody listens on now (the OS picks it), so parallel runs never collide."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def local_tracker():
    from tvm.rpc.server import Server
    from tvm.rpc.tracker import Tracker

    tp, sp = _free_port(), _free_port()
    tracker = Tracker(host="127.0.0.1", port=tp, port_end=tp + 1, silent=True)
    server = Server(
        host="127.0.0.1",
        port=sp,
        port_end=sp + 1,
        tracker_addr=(tracker.host, tracker.port),
        key="autosearch-test",
        silent=True,
    )
    yield tracker.host, tracker.port, "autosearch-test"
    server.terminate()
    tracker.terminate()


# slow: a TVM RPC tracker and server on free loopback ports (~25 s)
@pytest.mark.slow
def test_collect_through_rpc_tracker(local_tracker, host, tmp_path):
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.collect import collect
    from autosearch.store import Store
    from autosearch.workloads import resolve_workloads

    with Store(tmp_path / "rpc.db") as s:
        out = collect(
            resolve_workloads("softmax/256x256"),
            s,
            host,
            per_workload=3,
            rpc=local_tracker,
            evaluator=EvaluatorSettings(repeat=2, min_repeat_ms=1),
            progress=False,
        )
        assert out.measured == 3
        rows = list(s.measurements())
        assert all(r.status == "ok" and len(r.latencies) == 2 for r in rows), [r.error[:200] for r in rows]
