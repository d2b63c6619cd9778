"""Measurement through TVM's RPC tracker: a tracker and a server on 127.0.0.1 only."""

from __future__ import annotations

import pytest


def _free_port() -> int:
    """A port nobody listens on now (the OS picks it), so parallel runs never collide."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _farm(n: int, key: str):
    """A tracker and `n` servers with one key on free loopback ports, each a TVM pool worker that
    starts without torch, as ours do (`lean_workers`: seconds saved a process)."""
    from tvm.rpc.server import Server
    from tvm.rpc.tracker import Tracker

    from autosearch.backends.tvm.worker import lean_workers

    lean_workers()

    tp = _free_port()
    tracker = Tracker(host="127.0.0.1", port=tp, port_end=tp + 1, silent=True)
    servers = []
    for _ in range(n):
        sp = _free_port()
        addr = (tracker.host, tracker.port)
        servers.append(Server(host="127.0.0.1", port=sp, port_end=sp + 1, tracker_addr=addr, key=key, silent=True))
    yield tracker.host, tracker.port, key
    for s in servers:
        s.terminate()
    tracker.terminate()


@pytest.fixture
def local_tracker():
    yield from _farm(1, "autosearch-test")


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


@pytest.fixture
def two_servers():
    """A small farm: two servers of one key."""
    yield from _farm(2, "farm")


def test_rpc_devices_counts_the_trackers_servers_and_refuses_a_missing_key(two_servers):
    import time

    from autosearch.backends.tvm.measure import rpc_devices
    from autosearch.errors import TargetError

    host, port, key = two_servers
    for _ in range(50):  # the servers register with the tracker within a second or so
        try:
            if rpc_devices(host, port, key) == 2:
                break
        except TargetError:
            pass
        time.sleep(0.1)
    assert rpc_devices(host, port, key) == 2
    with pytest.raises(TargetError, match="no server with key 'gpu'"):
        rpc_devices(host, port, "gpu")
    with pytest.raises(TargetError, match="cannot reach the RPC tracker"):
        rpc_devices("127.0.0.1", _free_port(), key)


# slow: two RPC servers, an operator and a tiny network tuned through them (~40 s)
@pytest.mark.slow
def test_tune_and_tune_model_measure_through_a_tracker_with_two_servers(two_servers, tmp_path, capsys):
    import json
    import time

    from autosearch.cli import main

    host, port, key = two_servers
    time.sleep(1.5)
    rpc = ["--rpc-tracker", f"{host}:{port}", "--rpc-key", key]
    db = str(tmp_path / "r.db")
    try:
        main(["tune", "softmax/256x256", "--trials", "8", "--trials-per-round", "8", "--db", db, "--json", *rpc])
    except SystemExit as exc:
        assert not exc.code
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{") :])["trials_ok"] == 8
    (tmp_path / "net.py").write_text(
        "import torch\ndef make_model():\n    torch.manual_seed(0)\n    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU())\n"
    )
    try:
        main(
            ["tune-model", f"{tmp_path / 'net.py'}:make_model", "--input-shape", "4,64", "--trials", "8"]
            + ["--trials-per-round", "8", "--db", db, "--json", *rpc]
        )
    except SystemExit as exc:
        assert not exc.code
    out = capsys.readouterr().out
    s = json.loads(out[out.index("{") :])
    assert s["output_matches"] and s["trials_measured"] == 8
    from autosearch.backends.tvm.measure import _SHARED  # the runs went to the tracker's two servers

    remote = [m for k, m in _SHARED.items() if k[2] == (host, port, key)]
    assert remote and all(type(m.runner).__name__ == "RPCRunner" for m in remote)
    assert all(m.devices == 2 for m in remote)
