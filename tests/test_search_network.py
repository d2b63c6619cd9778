"""`autosearch tune-model`: the task scheduler, argument checks, and (slow) a tiny network end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autosearch.cli import main
from autosearch.errors import InputError
from autosearch.search.network import parse_shapes
from autosearch.search.scheduler import TaskScheduler, task_kind

NET = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 32)

    def forward(self, x):
        return torch.relu(self.fc(x))

def make_model():
    torch.manual_seed(0)
    return Net()

def not_a_module():
    return 42
"""


def test_scheduler_tries_every_task_then_follows_the_gradient() -> None:
    s = TaskScheduler([1.0, 1.0, 4.0], eps=0.0)
    first = [s.pick() for _ in range(1)]
    assert first == [2]  # untried tasks first, heaviest first
    s.record(2, 16, 5e-4)
    assert s.pick() in (0, 1)
    s.record(0, 16, 5e-4)
    s.record(1, 16, 1e-3)
    # same best and trials everywhere now; task 1 got there by improving, task 0 and 2 were flat,
    # and task 2 runs 4x as often as task 0
    s.record(1, 16, 5e-4)
    s.record(0, 16, 5e-4)
    s.record(2, 16, 5e-4)
    g = [s.gradient(i) for i in range(3)]
    assert g[1] < g[0] and g[2] < g[0]  # the improving task and the heavy task beat the flat light one
    assert s.pick() == min(range(3), key=lambda i: g[i])
    s.record(0, 16, None, done=True)
    s.record(1, 16, 2.5e-4, done=True)
    s.record(2, 16, 5e-4, done=True)
    assert s.pick() is None


def test_scheduler_prefers_a_task_that_has_no_working_schedule_yet() -> None:
    s = TaskScheduler([1.0, 1.0], eps=0.0)
    s.record(0, 16, 1e-3)
    s.record(1, 16, None)  # every candidate failed
    assert s.pick() == 1


def test_scheduler_gives_rounds_to_a_task_far_slower_per_flop_than_its_siblings() -> None:
    """Ansor's similar-task term: `conv2d8` (flat, 4x slower per FLOP than `conv2d1`) beats a
    flat task of another kind with a larger latency, which wins when kinds are not compared."""
    names = ["net/conv2d1", "net/conv2d8", "net/fused_matmul_add4"]
    assert [task_kind(n) for n in names] == ["conv2d", "conv2d", "fused_matmul_add"]
    history = [(0, 1.0e-3), (1, 4.0e-3), (2, 5.0e-3)]  # all flat for three rounds of 8

    def run(s: TaskScheduler) -> int | None:
        for _ in range(3):
            for i, best in history:
                s.record(i, 8, best)
        return s.pick()

    plain = TaskScheduler([1.0, 1.0, 1.0], eps=0.0)
    assert run(plain) == 2  # by latency alone the matmul has most to gain
    similar = TaskScheduler([1.0, 1.0, 1.0], flops=[1e9, 1e9, 1e9], kinds=[task_kind(n) for n in names], eps=0.0)
    assert run(similar) == 1  # 2 x 1e9 / (1e9 / 1e-3) = 2 ms is within conv2d8's reach
    with pytest.raises(ValueError, match="3 weights but 2 FLOP counts"):
        TaskScheduler([1.0, 1.0, 1.0], flops=[1e9, 1e9])


def test_parse_shapes() -> None:
    assert parse_shapes(["1,3,224,224", "4x64"]) == [(1, 3, 224, 224), (4, 64)]
    with pytest.raises(InputError, match="integers"):
        parse_shapes(["1,a"])
    with pytest.raises(InputError, match="positive"):
        parse_shapes(["0,3"])


def _err(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:")
    return lines[0]


def test_bad_model_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "net.py"
    f.write_text(NET)
    db = str(tmp_path / "x.db")
    assert "does not exist" in _err(
        capsys, ["tune-model", str(tmp_path / "nope.py:make_model"), "--input-shape", "4,64", "--db", db]
    )
    assert "not a torch.nn.Module" in _err(
        capsys, ["tune-model", f"{f}:not_a_module", "--input-shape", "4,64", "--db", db]
    )
    assert "no attribute" in _err(capsys, ["tune-model", f"{f}:missing", "--input-shape", "4,64", "--db", db])
    assert "--search must be one of" in _err(
        capsys, ["tune-model", f"{f}:make_model", "--input-shape", "4,64", "--db", db, "--search", "beam"]
    )


def test_decision_search_with_a_model_it_cannot_use_fails_before_the_import(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--search decision` with the PerStoreFeature prior (tune-model's default model) is refused
    before the network is imported and its tasks extracted (seconds to minutes for a real network)."""
    f = tmp_path / "net.py"
    f.write_text(NET)

    def imported(*a: object, **k: object) -> None:
        raise AssertionError("the network was imported before the model was checked")

    monkeypatch.setattr("autosearch.search.network.tune_network", imported)
    line = _err(
        capsys,
        [
            "tune-model",
            f"{f}:make_model",
            "--input-shape",
            "4,64",
            "--db",
            str(tmp_path / "x.db"),
            "--search",
            "decision",
        ],
    )
    assert "it needs a trained model that reads trace-prefix-tokens" in line


@pytest.mark.slow
def test_tiny_network_end_to_end(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "net.py"
    f.write_text(NET)
    try:
        main(
            [
                "tune-model",
                f"{f}:make_model",
                "--input-shape",
                "4,64",
                "--model",
                "pretrained",
                "--trials",
                "16",
                "--trials-per-round",
                "8",
                "--population",
                "16",
                "--db",
                str(tmp_path / "n.db"),
                "--json",
            ]
        )
    except SystemExit as exc:
        assert not exc.code
    out = capsys.readouterr().out
    s = json.loads(out[out.index("{") :])
    assert s["output_matches"] and s["trials_measured"] == 16
    assert s["tuned_latency_s"] > 0 and s["untuned_latency_s"] > 0
    tb = s["time_breakdown"]  # sections of the interleaved task runs add up to the tuning's wall time
    assert 0 <= tb["other"] <= tb["tune_total"]
    inside = sum(v for k, v in tb.items() if k not in ("import", "tune_total", "build_and_time"))
    assert inside == pytest.approx(tb["tune_total"], rel=1e-6)


def test_pytorch_network_reference_on_the_target_device(tmp_path: Path) -> None:
    import torch

    from autosearch.search.network import torch_latency_isolated

    (tmp_path / "net.py").write_text(NET)
    spec = f"{tmp_path / 'net.py'}:make_model"
    cpu = torch_latency_isolated(spec, [(4, 64)])
    assert cpu is not None and cpu > 0
    if not torch.cuda.is_available():  # a GPU network is never compared with PyTorch's CPU time
        assert torch_latency_isolated(spec, [(4, 64)], device="cuda") is None
    with pytest.raises(ValueError, match="cpu' or 'cuda"):
        torch_latency_isolated(spec, [(4, 64)], device="rocm")


def test_fast_math_removes_the_exact_erf_exp_and_tanh_and_keeps_the_values() -> None:
    """`--fast-math` rewrites GELU and tanh-GELU (which TVM's own FastMathTransform misses) and
    softmax: no exact `erf`, `exp` or `tanh` call is left in the lowered functions, and the values
    stay within 1e-5."""
    import numpy as np
    import tvm
    from tvm import relax

    from autosearch.search.network import fast_math_module

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            soft = bb.emit(relax.op.nn.softmax(bb.emit(relax.op.nn.gelu(x)), axis=-1))
            out = bb.emit_output(bb.emit(relax.op.add(soft, bb.emit(relax.op.nn.gelu_tanh(x)))))
        bb.emit_func_output(out)
    exact = bb.get()

    def lowered(mod: tvm.IRModule) -> str:
        return relax.transform.LegalizeOps()(mod).script()

    calls = ("T.erf(", "T.exp(", "T.tanh(")
    before = lowered(exact)
    assert all(c in before for c in calls)  # what the rewrite must remove
    fast = fast_math_module(exact)
    after = lowered(fast)
    assert not any(c in after for c in calls)

    data = np.random.default_rng(0).uniform(-6, 6, (8, 64)).astype("float32")

    def run(mod: tvm.IRModule) -> np.ndarray:
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(data)).numpy()

    np.testing.assert_allclose(run(fast), run(exact), rtol=1e-5, atol=1e-6)
