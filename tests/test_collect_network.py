"""`autosearch collect --network`: a model's tune-model tasks measured under tune-model's workload
keys (so the records join tune-model's groups), resumed by a rerun, and its bad input refused in
one line before anything is imported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import error_line, host_runs, run_cli

#: Two layers: a convolution whose 16 channels take the blocked layout (a `conv2d_NCHWc` task, the
#: kind no registry workload is) and a dense; between them the layout transforms and a reshape.
NET = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16 * 8 * 8, 8)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))

def make_net():
    torch.manual_seed(0)
    return Net()
"""
INPUT = "x:float32:1,16,8,8"
FAST = ["--repeats", "1", "--min-repeat-ms", "1", "--batch-size", "2"]


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path, str]:
    """The command line, its store and its stderr, after one collection of 2 schedules a task."""
    work = tmp_path_factory.mktemp("collect_network")
    (work / "net.py").write_text(NET)
    db = work / "net.db"
    argv = ["collect", "--network", f"{work / 'net.py'}:make_net", "--input", INPUT, "-n", "2", *FAST]
    argv += ["--db", str(db)]
    proc = run_cli(*argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return argv, db, proc.stderr + proc.stdout


def _tune_model_workloads(spec: str, precision: str = "fp32") -> list[Any]:
    """The task workloads `tune-model --precision` would tune and store (its import, with its defaults)."""
    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.graph import import_network, load_source
    from autosearch.networks.inputs import example_arrays, parse_inputs
    from autosearch.networks.options import NetworkTuneOptions

    specs, opts = parse_inputs([INPUT]), NetworkTuneOptions()
    graph = import_network(
        spec, load_source(spec), specs, example_arrays(specs), host_target(), fast_math=opts.fast_math,
        blocked=opts.blocked, precision=precision,
    )  # fmt: skip
    return list(graph.workloads)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.export's, in the import here
def test_records_land_under_tune_models_workload_keys(collected: tuple[list[str], Path, str]) -> None:
    from autosearch.backends.tvm.target import canonical_target, host_target
    from autosearch.store import Store

    argv, db, text = collected
    expected = {wl.key: wl.name for wl in _tune_model_workloads(argv[2])}
    tgt = canonical_target(host_target())
    with Store(db, readonly=True) as s:
        measured = {w.key: w.name for w in s.workloads() if s.count(w.key, tgt)}
        assert measured and set(measured) <= set(expected)
        assert all(measured[k] == expected[k] and measured[k].startswith("net/") for k in measured)
        # the blocked 3x3 convolution, by Winograd: its batched product (the linear layer's matmul has a bias)
        assert any(name == "net/matmul1" for name in measured.values()), measured
        # two schedules a task, but Winograd's output transform (one block a tile: its design space
        # holds one schedule)
        assert all(s.count(k, tgt) == (1 if "winograd_output" in measured[k] else 2) for k in measured)
        records = list(s.measurements(target=tgt))
        assert records and all(r.source == "random" for r in records)
    skipped = len(expected) - len(measured)  # every other task had nothing to decide, counted in one line
    if skipped:
        assert f"{skipped} task{'s' if skipped != 1 else ''} with nothing to decide" in text
    assert "caches flushed" in text  # tune-model's network timing, its repeats shortened here


def test_a_rerun_resumes_and_adds_nothing_when_topped_up(collected: tuple[list[str], Path, str]) -> None:
    from autosearch.store import Store

    argv, db, _ = collected
    with Store(db, readonly=True) as s:
        before = len(list(s.measurements()))
    proc = run_cli(*argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done: 0 measured" in proc.stdout
    with Store(db, readonly=True) as s:
        assert len(list(s.measurements())) == before


def test_network_with_workloads_and_bad_inputs_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(NET)
    net, db = f"{tmp_path / 'net.py'}:make_net", str(tmp_path / "x.db")
    both = run_cli("collect", "--network", net, "--input", INPUT, "-w", "softmax/256x256", "--db", db)
    assert "not both" in error_line(both)
    assert "--workloads" in error_line(run_cli("collect", "--db", db))
    assert "NAME:DTYPE:SHAPE" in error_line(run_cli("collect", "--network", net, "--input", "x:float32", "--db", db))
    assert "dtype" in error_line(run_cli("collect", "--network", net, "--input", "x:float99:1,16,8,8", "--db", db))
    assert "--network" in error_line(run_cli("collect", "-w", "softmax/256x256", "--input", INPUT, "--db", db))
    assert "does not exist" in error_line(run_cli("collect", "--network", str(tmp_path / "no.onnx"), "--db", db))
    assert "--network" in error_line(run_cli("collect", "-w", "softmax/256x256", "--precision", "int8", "--db", db))
    assert "unknown precision 'int4'" in error_line(
        run_cli("collect", "--network", net, "--precision", "int4", "--db", db)
    )
    assert not Path(db).exists()  # refused before the store was opened


@pytest.mark.skipif(not host_runs("int8"), reason="this CPU, as LLVM names it, has no AVX512_VNNI")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_int8_collects_tune_models_int8_tasks_from_their_tensorized_space(tmp_path: Path) -> None:
    """--precision int8: the convolution is `tune-model --precision int8`'s VNNI task, stored under
    that build's key, and every schedule drawn for it calls the VNNI kernel (the tensorized design
    space, as tune-model searches it)."""
    from autosearch.backends.tvm.lowp import INT8_INTRIN
    from autosearch.store import Store

    (tmp_path / "net.py").write_text(NET)
    spec, db = f"{tmp_path / 'net.py'}:make_net", tmp_path / "int8.db"
    proc = run_cli(
        "collect", "--network", spec, "--input", INPUT, "--precision", "int8", "-n", "2", *FAST, "--db", str(db)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = {wl.key: wl.name for wl in _tune_model_workloads(spec, "int8")}
    with Store(db, readonly=True) as s:
        records = list(s.measurements())
        int8 = [r for r in records if "conv2d_NCHWc_int8" in expected.get(r.workload_key, "")]
        assert {r.workload_key for r in records} <= set(expected)
        assert len(int8) == 2 and all(INT8_INTRIN in r.schedule and r.status == "ok" for r in int8), int8
