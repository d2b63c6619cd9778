"""Whole networks (`autosearch tune-model`, `autosearch run`): inputs, the output check, the task
scheduler, the prior-only build, the exported artifact in a fresh process, ONNX and int inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autosearch.cli import main
from autosearch.errors import InputError
from autosearch.networks import load_artifact
from autosearch.networks.check import compare_outputs
from autosearch.networks.inputs import InputSpec, example_arrays, parse_inputs
from autosearch.networks.options import NetworkBudget, NetworkTuneOptions
from autosearch.search.scheduler import TaskScheduler, task_kind
from conftest import TOKEN_INPUT, TOKEN_NET

#: conftest's token-embedding models (`make_tokens`, `not_a_module`) and a linear layer with a ReLU
#: (`make_model`).
NET = (
    TOKEN_NET
    + """
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 32)

    def forward(self, x):
        return torch.relu(self.fc(x))

def make_model():
    torch.manual_seed(0)
    return Net()
"""
)


def test_inputs_are_parsed_and_checked_before_anything_is_imported() -> None:
    specs = parse_inputs(["input_ids:int64:1,128:0..30522", "mask:int64:1x128"])
    assert specs[0] == InputSpec("input_ids", "int64", (1, 128), 0, 30522)
    assert specs[1].shape == (1, 128) and (specs[1].low, specs[1].high) == (0, 100)
    assert parse_inputs(shapes=["1,3,224,224"]) == [InputSpec("input0", "float32", (1, 3, 224, 224))]
    ids, mask = example_arrays(specs)
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < 30522 and ids.max() >= 100
    assert mask.max() < 100
    for bad, message in [
        (["x:float32:1,a"], "integers separated by commas"),
        (["x:float32:0,3"], "positive dimensions"),
        (["x:complex64:1,3"], "not one of"),
        (["x:float32"], "NAME:DTYPE:SHAPE"),
        (["x:int64:4:9..3"], "is empty"),
        (["x:float32:1000000000,16"], "more than"),
        (["x:float32:1", "x:float32:2"], "repeat"),
        ([], "give the model's inputs"),
    ]:
        with pytest.raises(InputError, match=message):
            parse_inputs(bad)
    with pytest.raises(InputError, match="expected shape 4x64, got 4x63"):
        InputSpec("x", "float32", (4, 64)).check_array(np.zeros((4, 63), "float32"))
    with pytest.raises(InputError, match="expected dtype int64, got float32"):
        InputSpec("ids", "int64", (4,)).check_array(np.zeros(4, "float32"))
    with pytest.raises(InputError, match="range 0..60 reaches outside the 50 rows"):
        InputSpec("ids", "int64", (4,), 0, 60).indexing(50)
    assert InputSpec.from_json(InputSpec("ids", "int64", (4,), 0, 50).indexing(50).to_json()).index_high == 50


def test_output_check_is_relative_to_the_outputs_scale() -> None:
    """A network with default BatchNorm statistics outputs ~1e-10: the old `allclose(1e-4, 1e-4)`
    passed any output; the scale-aware check fails a wrong one and passes a right one."""
    rng = np.random.default_rng(0)
    expected = [rng.normal(size=(4, 10)) * 1e-10]
    wrong = [rng.normal(size=(4, 10)) * 1e-10]
    assert np.allclose(wrong[0], expected[0], rtol=1e-4, atol=1e-4)  # what the old check said
    assert not compare_outputs(wrong, expected).ok
    assert compare_outputs([expected[0] * (1 + 1e-6)], expected).ok
    big = [rng.normal(size=(3,)) * 1e4]
    assert compare_outputs([big[0] + 1.0], big).ok  # 1e-4 of the scale
    assert not compare_outputs([big[0] + 100.0], big).ok
    assert not compare_outputs([np.zeros((2, 2))], [np.zeros((3, 2))]).ok
    assert not compare_outputs([np.array([np.nan, 1.0])], [np.array([2.0, 1.0])]).ok
    assert not compare_outputs([np.ones(2)], [np.ones(2), np.ones(2)]).ok


def test_an_output_near_the_subnormal_range_is_flagged_in_the_check() -> None:
    """Transformers' EfficientNet at its own initialisation outputs ~1e-30: the check passes (the
    answer is right) but says the model's activations shrank; a 1e-10 output is not flagged."""
    tiny = [np.full((2, 3), 7e-31)]
    assert compare_outputs(tiny, tiny).ok
    assert "subnormal" in compare_outputs(tiny, tiny).describe()
    small = [np.full((2, 3), 1e-10)]
    assert "subnormal" not in compare_outputs(small, small).describe()


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


def test_a_closed_task_is_never_picked_again_and_its_best_stands() -> None:
    """`close`: a deadline that cannot hold a task's next round takes it out; the others go on."""
    s = TaskScheduler([1.0, 4.0], eps=0.0)
    s.record(1, 16, 5e-4)
    s.record(0, 16, 1e-3)
    s.close(1)
    assert s.pick() == 0 and s.tasks[1].best == [5e-4]
    s.close(0)
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


def test_scheduler_weighs_a_similar_tasks_gap_against_whole_rounds_not_single_trials() -> None:
    """ResNet-50 at 10 minutes: a light convolution far below its siblings' FLOP/s took 272 of 767
    trials (17 rounds) while heavier tasks had one round, because its gap to the siblings' rate (a
    whole latency) was set against the others' per-trial gains. Per round, the heavy task wins."""
    names = ["net/fused_conv2d161_add_relu", "net/fused_conv2d181_add_relu", "net/fused_conv2d101_add_relu"]
    s = TaskScheduler([5.0, 1.0, 1.0], flops=[231e6] * 3, kinds=[task_kind(n) for n in names], eps=0.0)
    s.record(0, 16, 1.0e-3)  # heavy task: one round
    s.record(2, 16, 0.77e-3)  # the sibling that sets the reachable rate (300 GFLOP/s)
    for best in (4.0e-3, 3.0e-3, 2.5e-3, 2.2e-3):  # the light task improving over four rounds
        s.record(1, 16, best)
    assert s.gradient(0) < s.gradient(1)
    assert s.pick() == 0


def test_scheduler_lets_a_siblings_rate_lapse_for_a_task_that_stopped_gaining() -> None:
    """ResNet-50 at 30 minutes: the 3x3 convolution on 7x7 images stayed below its 14x14 sibling's
    FLOP/s, gained nothing after its 19th round and took 3,104 of 4,848 trials. Once it has had
    `window` rounds without a 1% gain its sibling's rate no longer counts, and a task with fewer
    rounds gets the next one; a real gain brings the term back."""
    names = ["net/fused_conv2d181_add_relu", "net/fused_conv2d101_add_relu", "net/fused_conv2d201_add"]
    s = TaskScheduler([1.0, 3.0, 1.0], flops=[231e6, 231e6, 206e6], kinds=[task_kind(n) for n in names], eps=0.0)
    for _ in range(4):
        s.record(1, 16, 0.3e-3)  # 770 GFLOP/s: the reach for task 0 is 2 x 231e6 / 770e9 = 0.6 ms
    s.record(2, 16, 2.0e-3)
    s.record(2, 16, 1.96e-3)
    s.record(0, 16, 1.49e-3)
    assert s.pick() == 0  # still has its sibling's rate to chase
    for best in (1.38e-3, 1.375e-3, 1.372e-3, 1.37e-3):  # flat after one gain
        s.record(0, 16, best)
    assert s._stalled(s.tasks[0]) and s.pick() == 2
    s.record(0, 16, 1.20e-3)  # a real gain: the sibling's rate counts again
    assert not s._stalled(s.tasks[0])
    assert s.gradient(0) == pytest.approx(0.2 * (1.20e-3 - 1.375e-3) / 3 + 0.8 * (0.6e-3 - 1.20e-3))


def test_scheduler_compares_rates_only_within_a_flop_band() -> None:
    """Ansor's similarity tag: the same operator and FLOPs within a factor 1.618; a 7x7 stem
    convolution is not held to the FLOP/s of a convolution with 10x its arithmetic."""
    names = ["net/conv2d1", "net/conv2d2"]
    s = TaskScheduler([1.0, 1.0], flops=[1e9, 1e8], kinds=[task_kind(n) for n in names], eps=0.0)
    s.record(0, 16, 1.0e-3)  # 1000 GFLOP/s
    s.record(1, 16, 1.0e-3)  # 100 GFLOP/s: not similar, so no reach term
    assert s._similar_best_rate(1) is None
    t = TaskScheduler([1.0, 1.0], flops=[1e9, 1.1e9], kinds=[task_kind(n) for n in names], eps=0.0)
    t.record(0, 16, 1.0e-3)
    t.record(1, 16, 1.0e-3)
    assert t._similar_best_rate(1) == pytest.approx(1.1e12)  # the better of the two


def _err(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    return lines[0]


def test_bad_model_files_and_inputs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "net.py"
    f.write_text(NET)
    db = str(tmp_path / "x.db")
    tm = ["tune-model", "--db", db]
    assert "does not exist" in _err(capsys, [*tm, str(tmp_path / "nope.py:make_model"), "--input-shape", "4,64"])
    assert "does not exist" in _err(capsys, [*tm, str(tmp_path / "nope.onnx"), "--input-shape", "4,64"])
    assert "not a torch.nn.Module" in _err(capsys, [*tm, f"{f}:not_a_module", "--input-shape", "4,64"])
    assert "no attribute" in _err(capsys, [*tm, f"{f}:missing", "--input-shape", "4,64"])
    # a shape the model cannot take: one line from the import, not a traceback
    assert "cannot run on the given inputs" in _err(
        capsys, [*tm, f"{f}:make_model", "--input-shape", "4,63", "--trials", "0"]
    )
    assert "more than" in _err(capsys, [*tm, f"{f}:make_model", "--input-shape", "1000000000,16"])
    (tmp_path / "bad.onnx").write_bytes(b"not an onnx file")
    assert "cannot read" in _err(capsys, [*tm, str(tmp_path / "bad.onnx"), "--input", "x:float32:4,64"])
    assert "not a tune-model artifact" in _err(capsys, ["run", str(tmp_path)])


def _tune_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    try:
        main(argv)
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err[-2000:]
    out = capsys.readouterr().out
    return json.loads(out[out.index("{") :])


# integration: a tune-model run with its PyTorch timing, exported, run in two fresh processes (~15 s)
@pytest.mark.integration
def test_prior_only_build_keeps_fast_math_and_exports_an_artifact_a_fresh_process_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`--trials 0` is a real compile from the prior's schedules alone; the summary says each task's
    seconds in a run of the built network; the exported library, loaded in a fresh process without
    PyTorch through the Python API, computes what PyTorch computes; `run` times it."""
    (tmp_path / "net.py").write_text(NET)
    art = tmp_path / "art"
    s = _tune_json(
        capsys,
        ["tune-model", f"{tmp_path / 'net.py'}:make_model", "--input", "x:float32:4,64", "--trials", "0"]
        + ["--db", str(tmp_path / "n.db"), "--out", str(art), "--json"],
    )
    assert s["output_matches"] and s["trials_measured"] == 0 and s["tuned_latency_s"] > 0
    assert s["relative_err"] < 1e-3 and s["output_scale"] > 0
    assert s["pytorch_latency_s"] > 0  # PyTorch timed beside it, in its own process
    assert s["fast_math"] and not s["fast_math_fell_back"]  # fast math is the default and kept here
    assert {t["built_with"] for t in s["tasks"]} == {"prior"}  # no task left to TVM's unscheduled loops
    assert all(t["network_s"] > 0 for t in s["tasks"]) and s["outside_tasks_s"] >= 0
    # the per-call timing adds microseconds: the parts add up to about the network's time
    parts = sum(t["network_s"] for t in s["tasks"]) + s["outside_tasks_s"]
    assert 0.3 * s["tuned_latency_s"] < parts < 3 * s["tuned_latency_s"] + 1e-3, (parts, s["tuned_latency_s"])
    # the fresh process has no PyTorch at all (a deployed artifact needs TVM's runtime and NumPy):
    # PyTorch's output is computed here
    import torch

    from autosearch.networks.graph import load_source

    x = np.random.default_rng(1).random((4, 64), dtype=np.float32)
    want = load_source(f"{tmp_path / 'net.py'}:make_model")(torch.from_numpy(x)).detach().numpy()
    np.save(tmp_path / "check_x.npy", x)
    np.save(tmp_path / "check_want.npy", want)
    code = f"""
import sys, numpy as np
sys.modules["torch"] = None  # `import torch` fails: the artifact must load and run without it
from autosearch.networks import load_artifact
m = load_artifact({str(art)!r})
x, want = np.load({str(tmp_path / "check_x.npy")!r}), np.load({str(tmp_path / "check_want.npy")!r})
(got,) = m(x)
assert got.shape == want.shape and np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want)), (got, want)
try:
    m(x[:, :63])
except Exception as exc:
    print(type(exc).__name__, exc)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Scope Loaded" not in p.stderr  # TVM's per-function load trace is kept off the screen
    assert "InputError input x: expected shape 4x64, got 4x63" in p.stdout
    np.save(tmp_path / "x.npy", np.ones((4, 64), np.float32))
    r = _tune_json(capsys, ["run", str(art), "--input", f"x={tmp_path / 'x.npy'}", "--json"])
    assert r["outputs"] == [{"shape": [4, 32], "dtype": "float32"}] and r["latency_s"] > 0
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object))  # data never runs as code
    assert "cannot read" in _err(capsys, ["run", str(art), "--input", f"x={tmp_path / 'obj.npy'}"])


def test_an_onnx_file_builds_and_matches_onnxs_reference(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A model given as an ONNX file builds and matches the reference (ONNX Runtime, else ONNX's
    reference evaluator); an input name the file does not take is one line."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).normal(size=(32, 16)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 16])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    s = _tune_json(
        capsys,
        ["tune-model", str(tmp_path / "m.onnx"), "--input", "x:float32:8,32", "--trials", "0"]
        + ["--db", str(tmp_path / "n.db"), "--json"],
    )
    assert s["output_matches"] and s["pytorch_latency_s"] is None
    assert "takes inputs x" in _err(
        capsys, ["tune-model", str(tmp_path / "m.onnx"), "--input", "y:float32:8,32", "--db", str(tmp_path / "n.db")]
    )


def test_an_onnx_models_reference_output_is_onnx_runtimes_where_the_reference_evaluator_errs() -> None:
    """ONNX's reference evaluator computes an opset-12 BatchNormalization ~0.07 away from the
    operator's inference formula (it did on PP-OCRv4's detector: 0.55 of its output's scale); the
    reference `tune-model` checks against is ONNX Runtime's where it is installed, the formula's."""
    pytest.importorskip("onnxruntime", reason="the [bench] extra (onnxruntime) is not installed")
    from onnx import TensorProto, helper, numpy_helper

    from autosearch.networks.tune import reference_outputs

    rng = np.random.default_rng(0)
    p = {k: rng.random(4).astype(np.float32) + (0.5 if k in "sv" else 0.0) for k in "sbmv"}
    graph = helper.make_graph(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-5)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 3])],
        [numpy_helper.from_array(v, k) for k, v in p.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    x = rng.random((1, 4, 3, 3)).astype(np.float32)
    c = {k: v.reshape(1, -1, 1, 1) for k, v in p.items()}
    formula = (x - c["m"]) / np.sqrt(c["v"] + 1e-5) * c["s"] + c["b"]
    (y,) = reference_outputs(model, [x])
    np.testing.assert_allclose(y, formula, atol=1e-6)


# integration: three tune-model runs with measured rounds (~50 s)
@pytest.mark.integration
@pytest.mark.usefixtures("no_pytorch_timing")
def test_measured_rounds_build_past_a_refused_fastest_a_rerun_builds_from_the_store_and_ctrl_c_exits_at_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One task, in three runs of one command (a tune-model run costs 15-30 s here, so one test).

    - Measured rounds time the task after a cache flush, one run a repeat: in a network each
      layer's weights arrive cold (a GPU target keeps repeated runs, flushing being CPU-only). The
      fastest schedule is refused by the output check (here: the first one each check sees): the
      task is built with the next measured one, fastest first, not with TVM's default
      (MobileNetV2's padded-output convolutions: 64x slower untuned).
    - `--trials 0` (as after a run killed before it reached the task) builds the task from the
      store, not from the prior, past a refused schedule too.
    - Ctrl-C as a round is stored: exit 130 within seconds, unbuilt (checking, building and timing
      took 18-51 s on a BERT layer), the round in the store, and a message that says how to go on."""
    import os
    import signal
    import time

    import autosearch.backends.tvm.measure as measure
    import autosearch.networks.prior as prior
    import autosearch.networks.verify as verify
    from autosearch.backends.tvm.target import parse_target
    from autosearch.networks.tune import network_evaluator
    from autosearch.store import Store

    used: list[Any] = []
    real_measurer = measure.shared_measurer

    def spy(target: Any, evaluator: Any, *a: Any, **k: Any) -> Any:
        used.append(evaluator)
        return real_measurer(target, evaluator, *a, **k)

    real = verify.schedule_matches
    asked: dict[str, list[str]] = {}
    real_prior, in_prior = prior.prior_schedule, []

    def passing(*a: Any, **k: Any) -> Any:
        in_prior.append(True)
        try:
            return real_prior(*a, **k)
        finally:
            in_prior.pop()

    def first_refused(wl: Any, trace: str, *a: Any, **k: Any) -> bool:
        if in_prior:  # the prior pass's own check of its pick, before any round
            return real(wl, trace, *a, **k)
        asked.setdefault(wl.name, []).append(trace)
        return len(asked[wl.name]) > 1 and real(wl, trace, *a, **k)

    monkeypatch.setattr(prior, "prior_schedule", passing)
    monkeypatch.setattr(measure, "shared_measurer", spy)
    monkeypatch.setattr(verify, "schedule_matches", first_refused)
    (tmp_path / "net.py").write_text(NET)
    db = tmp_path / "n.db"
    argv = ["tune-model", f"{tmp_path / 'net.py'}:make_model", "--input-shape", "64,64", "--db", str(db), "--json"]
    s = _tune_json(capsys, [*argv, "--trials", "8", "--trials-per-round", "8"])
    (task,) = [t for t in s["tasks"] if t["trials"]]
    with Store(db, readonly=True) as st:  # the task's 8 (the prior's pick first), the register blocks beside them
        forms = sum(1 for r in st.measurements() if r.extra.get("form") == "register-block")
        assert sum(1 for r in st.measurements() if r.extra.get("form") == "prior") == 1
    assert s["output_matches"] and s["trials_measured"] == 8 + forms and "tune" in s["time_breakdown"]
    assert task["built_with"] == "tuned" and task["best_latency_s"] > 0
    assert task["refused"] == "1 faster tuned schedule(s) compute a different result"
    tried = asked[task["name"]]
    assert len(tried) == 2 and tried[0] != tried[1]
    assert used and all(e.enable_cpu_cache_flush and e.number == 1 and e.min_repeat_ms == 0 for e in used)
    assert not network_evaluator(parse_target("cuda-h100")).enable_cpu_cache_flush

    asked.clear()
    again = _tune_json(capsys, [*argv, "--trials", "0"])
    (same,) = [t for t in again["tasks"] if t["name"] == task["name"]]
    assert same["built_with"] == "tuned (earlier run)" and again["output_matches"]
    rebuilt = asked[task["name"]]
    assert len(rebuilt) == 2 and rebuilt[0] != rebuilt[1]

    real_add = Store.add_measurements
    sent: list[float] = []

    def ctrl_c_as_a_round_is_stored(self: Any, *a: Any, **k: Any) -> Any:
        out = real_add(self, *a, **k)
        if not sent:  # a real SIGINT, as a terminal sends it
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)
        return out

    monkeypatch.setattr(Store, "add_measurements", ctrl_c_as_a_round_is_stored)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # what `main` installs its own over
    try:
        with pytest.raises(SystemExit) as stopped:
            main([*argv, "--trials", "400", "--trials-per-round", "8"])
    finally:
        signal.signal(signal.SIGINT, old)
        monkeypatch.setattr(Store, "add_measurements", real_add)
    took = time.monotonic() - sent[0]
    out, text = capsys.readouterr()
    assert stopped.value.code == 130, text[-2000:]
    assert took < 5, f"exited {took:.1f} s after Ctrl-C"
    s = json.loads(out[out.index("{") :])
    assert s["interrupted"] and s["tuned_latency_s"] is None and s["output_matches"] is False
    assert f"interrupted: every schedule measured so far is in {db}" in text, text[-2000:]
    with Store(db, readonly=True) as st:
        assert len(list(st.measurements())) >= 16  # the first run's 8 and the interrupted round's


SHUFFLE_NET = """
import torch

class Net(torch.nn.Module):
    def forward(self, x):
        return x.transpose(1, 2) * 2.0 + 1.0

def make_model():
    return Net()
"""


def test_a_layout_move_has_its_spatial_loop_nests_measured_beside_its_first_round(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A task with no reduction (a transpose with its arithmetic) gets, beside its first round, the
    serial and parallel loop nests of `networks.spatial` and its tiled form (its two innermost
    axes are whole registers) measured by the same runner as trials of that task, stored as such
    (`extra.form`; the one the prior picked was measured first, as "prior", and is not measured
    again), and the faster of everything measured is built."""
    from autosearch.backends.tvm.target import host_target
    from autosearch.search.registers import simd_bits
    from autosearch.store import Store

    if simd_bits(host_target()) <= 0:
        pytest.skip("no SIMD registers known on this CPU")
    (tmp_path / "net.py").write_text(SHUFFLE_NET)
    db = tmp_path / "n.db"
    argv = ["tune-model", f"{tmp_path / 'net.py'}:make_model", "--input-shape", "1,64,64", "--db", str(db), "--json"]
    s = _tune_json(capsys, [*argv, "--trials", "4", "--trials-per-round", "4"])
    (task,) = s["tasks"]
    with Store(db, readonly=True) as st:
        rows = list(st.measurements())
    forms = [r for r in rows if r.extra.get("form") == "spatial"]
    seeded = [r for r in rows if r.extra.get("form") == "prior"]  # the prior's pick, measured first
    # serial, parallel and tiled, less the one the prior picked (measured once: no trace twice)
    assert len(seeded) == 1 and 2 <= len(forms) <= 3 and all(r.status == "ok" for r in forms + seeded)
    assert len({r.schedule for r in rows}) == len(rows)
    assert s["trials_measured"] == len(rows) == task["trials"]
    best = min((r for r in rows if r.status == "ok"), key=lambda r: r.median)
    assert task["best_latency_s"] == pytest.approx(best.median)
    assert s["output_matches"]


LINEAR_NET = """
import torch

def make_model():
    torch.manual_seed(0)
    return torch.nn.Linear(64, 64)
"""


# integration: a tune-model run with its prior pass and a measured round (~22 s)
@pytest.mark.integration
def test_a_matmul_has_its_register_blocks_measured_beside_its_first_round(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A task with a tiled reduction (a linear layer's matmul and bias, 28 rows) gets, beside its
    first round, the register-blocked schedules of `networks.register_blocks`, measured by the same
    runner as trials of that task and stored as such (`extra.form`); the fastest is built."""
    from autosearch.backends.tvm.target import host_target
    from autosearch.search.registers import simd_bits
    from autosearch.store import Store

    if simd_bits(host_target()) <= 0:
        pytest.skip("no SIMD registers known on this CPU")
    (tmp_path / "net.py").write_text(LINEAR_NET)
    db = tmp_path / "n.db"
    argv = ["tune-model", f"{tmp_path / 'net.py'}:make_model", "--input-shape", "1,28,64", "--db", str(db), "--json"]
    s = _tune_json(capsys, [*argv, "--trials", "4", "--trials-per-round", "4"])
    (task,) = [t for t in s["tasks"] if "matmul" in t["name"]]
    with Store(db, readonly=True) as st:
        rows = list(st.measurements())
    blocks = [r for r in rows if r.extra.get("form") == "register-block"]
    assert blocks and all(r.status == "ok" for r in blocks)
    assert not any(r.extra.get("form") == "spatial" for r in rows)
    assert s["trials_measured"] == len(rows) == task["trials"]
    best = min((r for r in rows if r.status == "ok"), key=lambda r: r.median)
    assert task["best_latency_s"] == pytest.approx(best.median)
    assert s["output_matches"]


# integration: a tune-model run with a measured round and an export (~20 s)
@pytest.mark.integration
@pytest.mark.usefixtures("no_pytorch_timing")
def test_integer_token_inputs_and_a_prior_pass_over_every_task_before_the_rounds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Token ids as int64 (a transformer's input) build and match PyTorch. The prior passes every
    task once, before the rounds; a budget that reaches one task builds that task from its
    measured round (which measured the prior's pick first) and every other from the prior."""
    import autosearch.networks.prior as prior

    seen: list[str] = []
    real = prior.prior_schedule

    def counted(wl: Any, *a: Any, **k: Any) -> Any:
        seen.append(wl.name)
        return real(wl, *a, **k)

    monkeypatch.setattr(prior, "prior_schedule", counted)
    (tmp_path / "net.py").write_text(NET)
    argv = ["tune-model", f"{tmp_path / 'net.py'}:make_tokens", "--input", TOKEN_INPUT]
    s = _tune_json(
        capsys,
        [*argv, "--db", str(tmp_path / "n.db"), "--trials", "4", "--trials-per-round", "4"]
        + ["--out", str(tmp_path / "art"), "--json"],
    )
    tuned = [t["name"] for t in s["tasks"] if t["trials"]]
    rest = [t["name"] for t in s["tasks"] if not t["trials"]]
    assert len(tuned) == 1 and rest and s["output_matches"]
    assert sorted(seen) == sorted(t["name"] for t in s["tasks"])
    assert {t["built_with"] for t in s["tasks"] if t["name"] in rest} == {"prior"}
    assert s["inputs"][0]["dtype"] == "int64"
    # the ids index a 50-row embedding: the library refuses an id past it (TVM's take would read
    # out of bounds where PyTorch raises IndexError), and takes the ones inside
    assert s["inputs"][0]["index_high"] == 50
    m = load_artifact(tmp_path / "art")
    ids = np.arange(24, dtype=np.int64).reshape(2, 12)
    assert m(ids)[0].shape == (2, 12, 4)
    with pytest.raises(InputError, match=r"input ids: values must lie in \[0, 50\) .* got 27\.\.50"):
        m(ids + 27)
    with pytest.raises(InputError, match="got -1..22"):
        m(ids - 1)


# integration: a budget-bound tune-model run (36 s and more)
@pytest.mark.integration
@pytest.mark.usefixtures("no_pytorch_timing")
def test_under_a_budget_the_prior_passes_every_task_first_and_a_tasks_rounds_start_from_its_pick(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tune-model --budget-minutes`: the prior pass first, over every task, then the rounds; a
    task's first measurement is the prior's pick (stored as the form "prior"), so the faster of it
    and the search's is built; every task is built from a round or the prior, none untuned."""
    import sqlite3

    import autosearch.networks.prior_pass as pp

    # the whole 36 s for the import, the pass and the rounds
    monkeypatch.setattr(pp, "END_SECONDS", 0.0)
    monkeypatch.setattr(pp, "END_SECONDS_PER_TASK", 0.0)
    monkeypatch.setattr(pp, "END_SECONDS_PER_TUNED_TASK", 0.0)
    (tmp_path / "net.py").write_text(NET)
    argv = ["tune-model", f"{tmp_path / 'net.py'}:make_tokens", "--input", TOKEN_INPUT]
    s = _tune_json(capsys, [*argv, "--db", str(tmp_path / "n.db"), "--budget-minutes", "0.6", "--json"])
    assert s["trials_measured"] > 0 and s["output_matches"] and s["time_breakdown"]["prior"] > 0
    assert {t["built_with"] for t in s["tasks"]} <= {"prior", "tuned", "untuned (measured faster)"}
    with sqlite3.connect(tmp_path / "n.db") as db:
        rows = db.execute("SELECT workload_id, json_extract(extra, '$.form') FROM measurements ORDER BY id").fetchall()
    first: dict[int, str | None] = {}
    for workload, form in rows:
        first.setdefault(workload, form)
    seeded = {w for w, form in rows if form == "prior"}
    assert seeded and all(first[w] == "prior" for w in seeded)


def _vectorized(width: int, dtype: str = "float32") -> Any:
    """An elementwise kernel over 48 elements whose inner loop of `width` lanes is vectorized."""
    import tvm
    from tvm import te
    from tvm.s_tir import Schedule

    a = te.placeholder((48,), name="A", dtype=dtype)
    b = te.compute((48,), lambda i: a[i] + a[i], name="B")
    sch = Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.vectorize(sch.split(i, [None, width])[1])
    return sch


def test_whole_register_vectors_flags_a_vector_with_a_part_register_tail() -> None:
    """24 floats (768 bits) are one AVX-512 register and a half, which LLVM builds lane by lane;
    16 and 48 fill whole ones; on AVX2 (256 bits) 24 floats are three registers; a vector shorter
    than one register (12 or 3 floats) is widened, not split; an unvectorized kernel passes."""
    from autosearch.search.registers import whole_register_vectors

    assert not whole_register_vectors(_vectorized(24), 512)
    assert whole_register_vectors(_vectorized(16), 512) and whole_register_vectors(_vectorized(48), 512)
    assert whole_register_vectors(_vectorized(24), 256)
    assert whole_register_vectors(_vectorized(12), 512) and whole_register_vectors(_vectorized(3), 512)
    assert not whole_register_vectors(_vectorized(24, "float16"), 256)  # 384 bits: one and a half
    assert whole_register_vectors(_vectorized(24, "float16"), 128)  # three 128-bit registers
    assert whole_register_vectors(_vectorized(24), 0)  # a target without SIMD width: no rule


def _prior_only(capsys: pytest.CaptureFixture[str], tmp_path: Path, module: str, inp: str) -> dict[str, Any]:
    """`tune-model MODULE:make_model --input INP --trials 0 --json`'s summary (a store in tmp_path)."""
    argv = ["tune-model", f"{tmp_path / module}:make_model", "--input", inp, "--trials", "0"]
    return _tune_json(capsys, [*argv, "--db", str(tmp_path / "n.db"), "--json"])


@pytest.mark.usefixtures("no_pytorch_timing")
def test_fast_math_falls_back_to_exact_when_the_output_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`fast_exp` clamps its input at -88.4 (the smallest normal float's exponent), so exp(x - 100),
    a subnormal that PyTorch computes, comes out ~1e5 times too large: the check fails and the
    network is rebuilt with the exact exp, which matches."""
    (tmp_path / "under.py").write_text(
        "import torch\n"
        "class Under(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.exp(x - 100.0) * 1e38\n"
        "def make_model():\n"
        "    return Under()\n"
    )
    s = _prior_only(capsys, tmp_path, "under.py", "x:float32:4,8")
    assert s["output_matches"] and not s["fast_math"] and s["fast_math_fell_back"]
    # a model the approximations do not move: the prior-only build's test asserts it keeps them


@pytest.mark.parametrize(
    ("activation", "fast_math", "approximated"),
    [("Sigmoid", True, True), ("ReLU", True, False), ("Sigmoid", False, False)],
)
def test_the_graph_says_whether_fast_math_approximated_anything(
    activation: str, fast_math: bool, approximated: bool
) -> None:
    """A model with no function fast math approximates (a ReLU network: every int8 convnet) is
    built exactly with it on, so a failed check is not worth the exact rebuild (`_build_stage`)."""
    import torch

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.graph import import_network
    from autosearch.networks.inputs import InputSpec

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), getattr(torch.nn, activation)()).eval()
    x = np.random.default_rng(0).random((4, 8), dtype=np.float32)
    spec = [InputSpec("x", "float32", x.shape)]
    graph = import_network("m", net, spec, [x], host_target(), fast_math=fast_math)
    assert graph.approximated is approximated


@pytest.mark.usefixtures("no_pytorch_timing")
def test_a_prime_row_count_is_padded_for_the_tiles_and_the_output_still_matches(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """ViT's 197 tokens: MetaSchedule tiles a loop only by its extent's divisors, so the rows are
    padded to the next multiple of 8 where that adds at most 1/16 of the work, and sliced back."""
    from autosearch.networks.graph import padded_rows

    assert [padded_rows(m) for m in (197, 131, 128, 37, 50, 100, 8)] == [200, 136, 128, 37, 50, 100, 8]
    assert [padded_rows(m, 16) for m in (197, 131, 128, 100, 8)] == [208, 131, 128, 100, 8]  # AMX's 16-row tiles
    (tmp_path / "rows.py").write_text(
        "import torch\n"
        "def make_model():\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()\n"
    )
    s = _prior_only(capsys, tmp_path, "rows.py", "x:float32:131,8")
    assert s["output_matches"]
    assert any("matmul" in t["name"] and "strided_slice" in t["name"] for t in s["tasks"]), s["tasks"]


@pytest.mark.usefixtures("no_pytorch_timing")
def test_attention_scores_over_a_ragged_token_count_are_padded_to_whole_registers_and_still_match(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """190 tokens: the scores' columns (the keys, an activation: a right operand that is no
    constant) are padded with zeros to whole registers and sliced back; a constant weight of 190
    columns is not padded, and the output still matches."""
    import importlib.util

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.graph import import_network, padded_columns
    from autosearch.networks.inputs import InputSpec

    assert [padded_columns(n, 16) for n in (197, 190, 100, 37, 208, 577)] == [208, 192, 100, 37, 208, 592]
    assert [padded_columns(n, 8) for n in (197, 190, 20)] == [200, 192, 20]
    (tmp_path / "attention.py").write_text(
        "import torch\n"
        "class Attention(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.q, self.k, self.out = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 190)\n"
        "    def forward(self, x):\n"
        "        scores = self.q(x) @ self.k(x).transpose(-1, -2)\n"
        "        return self.out(torch.softmax(scores, dim=-1) @ x)\n"
        "def make_model():\n"
        "    torch.manual_seed(0)\n"
        "    return Attention().eval()\n"
    )
    s = _prior_only(capsys, tmp_path, "attention.py", "x:float32:1,190,8")
    assert s["output_matches"], s
    spec = importlib.util.spec_from_file_location("attention", tmp_path / "attention.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the model file this test wrote, as tune-model loads it
    x = np.random.default_rng(0).random((1, 190, 8), dtype=np.float32)
    graph = import_network("m", module.make_model(), [InputSpec("x", "float32", x.shape)], [x], host_target())
    shapes = [tuple(int(d) for d in p.shape) for w in graph.workloads for p in w.mod()["main"].params]
    assert (1, 8, 192) in shapes, shapes  # the keys, transposed and padded
    assert (8, 190) in shapes and (8, 192) not in shapes, shapes  # the constant weight as it was


@pytest.mark.usefixtures("no_pytorch_timing")
def test_a_decoders_empty_key_value_cache_concatenation_imports_and_matches(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """transformers' decoders (GPT-2, Llama) start their key/value cache as a tensor of shape (0,)
    and `torch.cat` it with the 4-D keys, which torch allows and Relax's concat refused ("Concat
    expects all input tensors to have same ndim"). Here the same pattern in a few lines."""
    (tmp_path / "cache.py").write_text(
        "import torch\n"
        "class Cached(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.k = torch.nn.Linear(8, 8)\n"
        "        self.register_buffer('cache', torch.tensor([]), persistent=False)\n"
        "    def forward(self, x):\n"
        "        keys = self.k(x).view(1, 4, 2, 4).transpose(1, 2)\n"
        "        keys = torch.cat([self.cache, keys], dim=-2)\n"
        "        return keys.transpose(1, 2).reshape(4, 8) * 2.0\n"
        "def make_model():\n"
        "    torch.manual_seed(0)\n"
        "    return Cached().eval()\n"
    )
    s = _prior_only(capsys, tmp_path, "cache.py", "x:float32:4,8")
    assert s["output_matches"], s


@pytest.mark.usefixtures("no_pytorch_timing")
def test_a_cube_and_a_square_are_built_as_products_and_still_match(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """GPT-2's GELU computes `x ** 3`: built as products (as PyTorch's CPU kernel does), not a
    `pow` call per element; other exponents keep `power`."""
    (tmp_path / "cube.py").write_text(
        "import torch\n"
        "class Cube(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return 0.044715 * torch.pow(x, 3.0) + x ** 2 - x ** 2.5\n"
        "def make_model():\n"
        "    return Cube()\n"
    )
    s = _prior_only(capsys, tmp_path, "cube.py", "x:float32:4,64")
    assert s["output_matches"], s
    names = " ".join(t["name"] for t in s["tasks"])
    assert names.count("power") == 1, names  # x ** 2.5 only


@pytest.mark.usefixtures("no_pytorch_timing")
def test_a_gelu_between_a_4d_linears_reshapes_fuses_into_the_matmul_and_still_matches(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """ConvNeXt's MLP: a `Linear` on an NHWC map is exported as reshape -> addmm -> reshape, so the
    GELU between two such layers sat between reshapes and was a task of its own; moved before the
    reshape (`graph.activations_before_reshapes`) it fuses into the first matmul with its bias,
    and the output still matches."""
    (tmp_path / "mlp.py").write_text(
        "import torch\n"
        "class Mlp(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.up, self.down = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)\n"
        "    def forward(self, x):\n"
        "        return self.down(torch.nn.functional.gelu(self.up(x)))\n"
        "def make_model():\n"
        "    torch.manual_seed(0)\n"
        "    return Mlp()\n"
    )
    s = _prior_only(capsys, tmp_path, "mlp.py", "x:float32:1,4,8,16")
    assert s["output_matches"], s
    names = [t["name"] for t in s["tasks"]]
    assert any("matmul" in n and "gelu" in n for n in names), names
    assert not any("gelu" in n and "matmul" not in n for n in names), names


@pytest.mark.usefixtures("no_pytorch_timing")
def test_a_pool_whose_window_covers_the_image_is_built_as_a_mean_and_still_matches(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """EfficientNet's pooler (transformers): `AvgPool2d(1280, ceil_mode=True)` on a 7x7 image is a
    mean over the image; a pool with windows smaller than the image stays a pool."""
    (tmp_path / "pools.py").write_text(
        "import torch\n"
        "class Pools(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.whole = torch.nn.AvgPool2d(1280, ceil_mode=True)\n"
        "        self.part = torch.nn.AvgPool2d(3, stride=2)\n"
        "    def forward(self, x):\n"
        "        return self.whole(x) + self.part(x).sum(dim=(2, 3), keepdim=True)\n"
        "def make_model():\n"
        "    return Pools()\n"
    )
    s = _prior_only(capsys, tmp_path, "pools.py", "x:float32:1,24,7,7")
    assert s["output_matches"], s
    names = " ".join(t["name"] for t in s["tasks"])
    assert names.count("avg_pool2d") == 1 and "mean" in names, names


def test_pytorch_network_reference_on_the_target_device(tmp_path: Path) -> None:
    import torch

    from autosearch.networks.tune import torch_latency_isolated

    (tmp_path / "net.py").write_text(NET)
    spec = f"{tmp_path / 'net.py'}:make_model"
    x = [InputSpec("x", "float32", (4, 64))]
    cpu = torch_latency_isolated(spec, x)
    assert cpu is not None and cpu > 0
    if not torch.cuda.is_available():  # a GPU network is never compared with PyTorch's CPU time
        assert torch_latency_isolated(spec, x, device="cuda") is None
    with pytest.raises(ValueError, match="cpu' or 'cuda"):
        torch_latency_isolated(spec, x, device="rocm")


def test_fast_math_removes_the_exact_erf_exp_tanh_and_sigmoid_and_keeps_the_values() -> None:
    """`--fast-math` rewrites GELU, tanh-GELU, sigmoid and SiLU (which TVM's own FastMathTransform
    misses) and softmax: no exact `erf`, `exp`, `tanh` or `sigmoid` call is left in the lowered
    functions, and the values stay within 1e-5."""
    import numpy as np
    import tvm
    from tvm import relax

    from autosearch.networks.graph import fast_math_module

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            soft = bb.emit(relax.op.nn.softmax(bb.emit(relax.op.nn.gelu(x)), axis=-1))
            gates = bb.emit(relax.op.add(bb.emit(relax.op.sigmoid(x)), bb.emit(relax.op.nn.silu(x))))
            both = bb.emit(relax.op.add(soft, bb.emit(relax.op.nn.gelu_tanh(x))))
            out = bb.emit_output(bb.emit(relax.op.add(both, gates)))
        bb.emit_func_output(out)
    exact = bb.get()

    def lowered(mod: tvm.IRModule) -> str:
        return relax.transform.LegalizeOps()(mod).script()

    calls = ("T.erf(", "T.exp(", "T.tanh(", "T.sigmoid(")
    before = lowered(exact)
    assert all(c in before for c in calls)  # what the rewrite must remove
    fast = fast_math_module(exact)
    after = lowered(fast)
    assert not any(c in after for c in calls)

    data = np.random.default_rng(0).uniform(-6, 6, (8, 64)).astype("float32")
    data[0, :4] = (-100.0, 100.0, -88.0, 88.0)  # past fast_exp's clamp both ways

    def run(mod: tvm.IRModule) -> np.ndarray:
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(data)).numpy()

    np.testing.assert_allclose(run(fast), run(exact), rtol=1e-5, atol=1e-6)


class PadNet:
    """A 1x1 convolution + bias + ReLU6 whose output is zero-padded for a strided depthwise
    convolution: MobileNetV2's block, where TVM compiled some schedules of the fused
    `conv2d_add_clip_pad` task wrongly (tests/data/miscompiled_pad_schedule.json holds one)."""

    @staticmethod
    def make(channels: int) -> object:
        import torch

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.a = torch.nn.Conv2d(16, channels, 1)
                self.b = torch.nn.Conv2d(channels, channels, 3, stride=2, groups=channels)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.b(torch.nn.functional.pad(torch.clamp(self.a(x), 0, 6), (0, 1, 0, 1)))

        torch.manual_seed(0)
        return Net().eval()


def test_a_schedule_that_computes_something_else_is_never_built() -> None:
    """`verify.schedule_matches` refuses a schedule TVM compiles wrongly (found in MobileNetV2: its
    network was off by 28%) and accepts a right one of the same task."""
    from autosearch.backends.tvm.target import host_target
    from autosearch.networks.graph import import_network
    from autosearch.networks.verify import schedule_matches
    from autosearch.search.scheduler import task_kind

    case = json.loads((Path(__file__).parent / "data" / "miscompiled_pad_schedule.json").read_text())
    x = np.random.default_rng(0).random((1, 16, case["size"], case["size"]), dtype=np.float32)
    target = host_target()
    net, specs = PadNet.make(case["channels"]), [InputSpec("x", "float32", x.shape)]
    graph = import_network("pad", net, specs, [x], target, blocked=False)  # the layout the case was found in
    (task,) = [w for w in graph.workloads if task_kind(w.name) == task_kind(case["task"])]  # Relax renumbers
    assert schedule_matches(task, json.dumps(case["right"]), target)
    assert not schedule_matches(task, json.dumps(case["wrong"]), target)


class BlockNet:
    """A 3-channel stem (NCHW in, blocked out), a convolution of 16 -> 32 channels (whole blocks of 4, 8 or
    16 lanes: blocked), a depthwise one (blocked too) and a residual add."""

    @staticmethod
    def make() -> object:
        import torch

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
                self.conv = torch.nn.Conv2d(16, 32, 3, padding=1)
                self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                y = torch.relu(self.conv(torch.relu(self.stem(x))))
                return self.dw(y) + y

        torch.manual_seed(0)
        return Net().eval()


def test_convolutions_with_whole_channel_blocks_are_built_blocked_and_match_pytorch() -> None:
    """`layouts.blocked_convolutions`: the 16 -> 32 convolution (3x3: by Winograd, its output
    transform writing the block) and the depthwise one go to NCHW{b}c (b: the register's float32
    lanes; their outputs blocked), the 3-channel stem reads
    NCHW and writes NCHW{b}c, the network built untuned from it computes PyTorch's output as the
    unblocked one does, and without SIMD registers (a GPU) nothing changes."""
    from tvm import relax
    from tvm.s_tir.meta_schedule.database import MemoryDatabase

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks import graph as graph_mod
    from autosearch.networks import tune as nt
    from autosearch.networks.check import flatten_outputs
    from autosearch.networks.layouts import blocked_convolutions
    from autosearch.search.registers import simd_bits

    target = host_target()
    lanes = simd_bits(target) // 32
    x = np.random.default_rng(0).random((1, 3, 12, 12), dtype=np.float32)
    specs, net = [InputSpec("x", "float32", x.shape)], BlockNet.make()
    expected = nt.reference_outputs(net, [x])
    blocked = graph_mod.import_network("blocks", net, specs, [x], target)
    plain = graph_mod.import_network("blocks", net, specs, [x], target, blocked=False)
    (conv,) = [w for w in blocked.workloads if "winograd_output" in w.name]  # 3x3, one group: by Winograd
    (depthwise,) = [w for w in blocked.workloads if "depthwise_conv2d_NCHWc" in w.name]
    (stem,) = [w for w in blocked.workloads if "conv2d_NCHW_NCHWc" in w.name]
    assert "T.Buffer((T.int64(1), T.int64(3), T.int64(12), T.int64(12))" in stem.mod()["main"].script()
    out = f"T.Buffer((T.int64(1), T.int64({32 // lanes}), T.int64(12), T.int64(12), T.int64({lanes}))"
    assert out in conv.mod()["main"].script()  # the blocked output
    assert out in depthwise.mod()["main"].script()
    assert not any("NCHWc" in w.name for w in plain.workloads)
    dev, args = nt._on_device(target, [x])
    for graph in (blocked, plain):
        built = graph_mod.build_network(graph, MemoryDatabase(), target)
        assert compare_outputs(flatten_outputs(relax.VirtualMachine(built, dev)["main"](*args)), expected).ok
    assert blocked_convolutions(plain.mod, 0) is plain.mod  # no SIMD registers known (a GPU): as is


class HalfBlockNet:
    """Channel counts that whole registers do not divide but half registers do (24 and 40 on
    AVX-512; 12 and 20 on AVX2), beside ones they do: a stem into `half` channels, a convolution
    from `half` to `full` channels and back, a depthwise one on `half` channels, a residual add."""

    @staticmethod
    def make(lanes: int) -> object:
        import torch

        half, full, odd = lanes * 3 // 2, lanes * 2, lanes * 5 // 2

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.stem = torch.nn.Conv2d(3, half, 3, padding=1)
                self.up = torch.nn.Conv2d(half, full, 1)
                self.down = torch.nn.Conv2d(full, half, 3, padding=1)
                self.dw = torch.nn.Conv2d(half, half, 3, padding=1, groups=half)
                self.out = torch.nn.Conv2d(half, odd, 1)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                y = torch.relu(self.stem(x))
                z = self.down(torch.relu(self.up(y))) + y
                return self.out(self.dw(z))

        torch.manual_seed(0)
        return Net().eval()


def _half_register_network(name: str, make: Any) -> tuple[Any, list[str], int]:
    """`make(lanes)` (a net of 3-channel 10x10 input) imported for this host, blocked: (its graph,
    the kernels its main calls, the host's float32 lanes), after checking that the graph built
    untuned computes PyTorch's output; skipped where a register holds under 8 float32 lanes (no
    half block of 4 or more)."""
    import re

    from tvm import relax
    from tvm.s_tir.meta_schedule.database import MemoryDatabase

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks import graph as graph_mod
    from autosearch.networks import tune as nt
    from autosearch.networks.check import flatten_outputs
    from autosearch.search.registers import simd_bits

    target = host_target()
    lanes = simd_bits(target) // 32
    if lanes < 8:
        pytest.skip(f"this host's registers hold {lanes} float32 lanes: no half block of 4 or more")
    x = np.random.default_rng(0).random((1, 3, 10, 10), dtype=np.float32)
    specs, net = [InputSpec("x", "float32", x.shape)], make(lanes)
    expected = nt.reference_outputs(net, [x])
    graph = graph_mod.import_network(name, net, specs, [x], target)
    built = graph_mod.build_network(graph, MemoryDatabase(), target)
    dev, args = nt._on_device(target, [x])
    assert compare_outputs(flatten_outputs(relax.VirtualMachine(built, dev)["main"](*args)), expected).ok
    return graph, re.findall(r"call_tir\((\w+)", graph.mod["main"].script()), lanes


def test_channels_half_a_register_divides_are_blocked_by_half_registers_without_conversions() -> None:
    """`layouts.channel_block`: a tensor whose channels a register's lanes do not divide but half
    of them do is blocked by half a register, and each convolution reads its input's block and
    writes its output's, so the network changes layout only at its output (before, each such
    convolution stayed NCHW with a conversion on either side); built untuned it computes PyTorch's
    output."""
    from autosearch.networks.layouts import channel_block

    assert [channel_block(c, 16) for c in (32, 24, 40, 116, 3)] == [16, 8, 8, 0, 0]
    assert [channel_block(c, 8) for c in (16, 12, 116, 6)] == [8, 4, 4, 0]
    assert channel_block(6, 4) == 0  # a block of 2 lanes is no vector worth the layout
    graph, calls, lanes = _half_register_network("half", HalfBlockNet.make)
    assert len([c for c in calls if "layout_transform" in c]) <= 1, calls  # the output's
    assert sum("depthwise_conv2d_NCHWc" in c for c in calls) == 1, calls
    direct = sum("conv2d_NCHWc" in c and "depthwise" not in c for c in calls)
    assert direct + sum("winograd_output" in c for c in calls) == 3, calls  # 3x3 ones by Winograd
    half = f"T.int64({lanes * 3 // 2 // (lanes // 2)}), T.int64(10), T.int64(10), T.int64({lanes // 2}))"
    assert any(half in w.mod()["main"].script() for w in graph.workloads if "depthwise" in w.name)


class NarrowGroupNet:
    """RegNetY-400MF's block at a register's scale: 3 x `lanes` channels (48 on AVX-512: a whole
    register divides them) in groups of half a register (8), a residual add around a 1x1, a
    grouped 3x3 and a 1x1 convolution."""

    @staticmethod
    def make(lanes: int) -> object:
        import torch

        width, group = 3 * lanes, lanes // 2

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.stem = torch.nn.Conv2d(3, width, 3, padding=1)
                self.a = torch.nn.Conv2d(width, width, 1)
                self.grouped = torch.nn.Conv2d(width, width, 3, padding=1, groups=width // group)
                self.c = torch.nn.Conv2d(width, width, 1)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                y = torch.relu(self.stem(x))
                return self.c(torch.relu(self.grouped(torch.relu(self.a(y))))) + y

        torch.manual_seed(0)
        return Net().eval()


def test_a_grouped_convolution_in_half_register_groups_narrows_its_tensors_blocks_and_the_rest_stays_blocked() -> None:
    """`layouts.narrowed_blocks`: groups of 8 channels on 48-channel tensors (a whole register of
    16 divides 48, so each tensor was NCHW16c) cannot read 16-channel blocks, and TVM cannot
    convert NCHW16c into NCHW8c: the whole network had fallen back to NCHW. Every 48-channel
    tensor now takes the group's block, the network is blocked with no conversion but at its
    output, and built untuned it computes PyTorch's output."""
    graph, calls, lanes = _half_register_network("narrow", NarrowGroupNet.make)
    assert any("group_conv2d_NCHWc" in c for c in calls), calls
    assert len([c for c in calls if "layout_transform" in c]) <= 1, calls  # the output's
    (grouped,) = [w for w in graph.workloads if "group_conv2d_NCHWc" in w.name]
    half = f"T.int64({6}), T.int64(10), T.int64(10), T.int64({lanes // 2}))"  # 3 x lanes channels in half blocks
    assert half in grouped.mod()["main"].script()


class OddChannelNet:
    """ShuffleNetV2's unit at a register's scale: a stem of 4 x `lanes` - 4 channels (60 on
    AVX-512) split in two halves of 2 x `lanes` - 2 (30: neither 16 nor 8 divides them), a 1x1,
    a depthwise 3x3 divided by a constant, a squeeze-excitation gate and a 1x1 on one half, the
    halves concatenated and shuffled, and a 1x1 head to 8 channels."""

    @staticmethod
    def make(lanes: int) -> object:
        import torch

        odd = 2 * lanes - 2

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.stem = torch.nn.Conv2d(3, 2 * odd, 3, padding=1)
                self.a = torch.nn.Conv2d(odd, odd, 1)
                self.dw = torch.nn.Conv2d(odd, odd, 3, padding=1, groups=odd)
                self.c = torch.nn.Conv2d(odd, odd, 1)
                self.head = torch.nn.Conv2d(2 * odd, 8, 1)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                left, right = torch.relu(self.stem(x)).chunk(2, dim=1)
                y = self.dw(torch.relu(self.a(right))) / 2.0
                y = torch.relu(self.c(y * torch.sigmoid(y.mean((2, 3), keepdim=True))))
                z = torch.cat([left, y], 1)
                n, c, h, w = z.shape
                return self.head(z.reshape(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w))

        torch.manual_seed(0)
        return Net().eval()


def test_channels_no_register_block_divides_are_padded_with_zero_weights_so_every_convolution_is_blocked() -> None:
    """`channel_padding`: 30 and 60 channels on AVX-512 (2 x 15: no block of 16 or 8) left each
    convolution but the head NCHW, vectorized over a 10-wide image. Padded to 32 and 64 with zero
    weights, every convolution is blocked (only the RGB stem reads NCHW), the padding rides
    through the bias, ReLU, the division, the squeeze-excitation gate and the depthwise
    convolution, the split half is padded before its 1x1, the concatenation reads the real
    channels, and built untuned the network computes PyTorch's output."""
    from autosearch.networks.channel_padding import padded_count, whole_register_count

    assert [padded_count(c, 16) for c in (58, 116, 232, 48, 3, 12, 20)] == [64, 128, 232, 48, 3, 12, 24]
    assert [padded_count(c, 8) for c in (58, 12, 6)] == [64, 12, 6]
    # int8's policy: half blocks padded to whole registers too (its kernel writes whole ones only)
    assert [whole_register_count(c, 16) for c in (232, 40, 24, 58, 48, 3)] == [240, 48, 24, 64, 48, 3]
    graph, calls, lanes = _half_register_network("odd", OddChannelNet.make)
    convolutions = [c for c in calls if "conv2d" in c]
    assert [c for c in convolutions if "NCHWc" not in c] == [], calls
    assert sum("conv2d_NCHW_NCHWc" in c for c in convolutions) == 1, calls  # the stem alone reads NCHW
    assert sum("depthwise_conv2d_NCHWc" in c for c in convolutions) == 1, calls
    padded = -(-(2 * lanes - 2) // lanes) * lanes
    script = "".join(w.mod()["main"].script() for w in graph.workloads if "depthwise" in w.name)
    assert f"T.int64({padded // lanes}), T.int64(10), T.int64(10), T.int64({lanes}))" in script


class TFPaddedBlockNet:
    """MobileNetV2's inverted residual block as transformers writes it (TensorFlow's padding):
    an explicit zero pad before every convolution (of width 0 before a 1x1 one, one row and
    column after before a strided depthwise one), ReLU6 as a clamp, a grouped convolution (two
    groups of 16 channels), a pooled residual, then a depthwise convolution and a mean over the
    image."""

    @staticmethod
    def make() -> object:
        import torch
        from torch.nn import functional as F

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.stem = torch.nn.Conv2d(3, 16, 3, stride=2)
                self.mix = torch.nn.Conv2d(16, 16, 1)
                self.expand = torch.nn.Conv2d(16, 32, 1)
                self.grouped = torch.nn.Conv2d(32, 32, 3, padding=1, groups=2)
                self.dw = torch.nn.Conv2d(32, 32, 3, stride=2, groups=32)
                self.project = torch.nn.Conv2d(32, 16, 1)
                self.dw2 = torch.nn.Conv2d(16, 16, 3, groups=16)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                y = self.mix(torch.clamp(self.stem(F.pad(x, (0, 1, 0, 1))), 0, 6))
                h = self.grouped(torch.clamp(self.expand(F.pad(y, (0, 0, 0, 0))), 0, 6))
                h = torch.clamp(self.dw(F.pad(h, (0, 1, 0, 1))), 0, 6)
                h = self.project(F.pad(h, (0, 0, 0, 0)))
                z = F.max_pool2d(y, 2) + h
                return self.dw2(F.pad(z, (1, 1, 1, 1))).mean(dim=(2, 3))

        torch.manual_seed(0)
        return Net().eval()


def test_clamps_and_explicit_pads_keep_one_blocked_layout_through_the_block() -> None:
    """`layouts.clips_as_bounds` and `layouts.pads_into_convolutions`: from the stem's output on,
    the whole block stays in NCHW{b}c, grouped and depthwise convolutions and pooling included:
    one layout conversion (the mean's output), no pad is a task of its own, ReLU6 fuses into
    its convolution, and the network built untuned computes PyTorch's output."""
    import re

    from tvm import relax
    from tvm.s_tir.meta_schedule.database import MemoryDatabase

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks import graph as graph_mod
    from autosearch.networks import tune as nt
    from autosearch.networks.check import flatten_outputs

    target = host_target()
    x = np.random.default_rng(0).random((1, 3, 33, 33), dtype=np.float32)
    specs, net = [InputSpec("x", "float32", x.shape)], TFPaddedBlockNet.make()
    expected = nt.reference_outputs(net, [x])
    graph = graph_mod.import_network("tfpad", net, specs, [x], target)
    calls = re.findall(r"call_tir\((\w+)", graph.mod["main"].script())
    conversions = [c for c in calls if "layout_transform" in c]
    assert len(conversions) <= 1, calls  # the output's
    assert not [c for c in calls if re.fullmatch(r"pad\d*", c)], calls
    assert sum("depthwise_conv2d_NCHWc" in c for c in calls) == 2, calls
    assert sum("group_conv2d_NCHWc" in c for c in calls) == 1, calls
    assert any("conv2d_NCHWc" in c and "maximum" in c and "minimum" in c for c in calls), calls
    built = graph_mod.build_network(graph, MemoryDatabase(), target)
    dev, args = nt._on_device(target, [x])
    assert compare_outputs(flatten_outputs(relax.VirtualMachine(built, dev)["main"](*args)), expected).ok


def test_a_pad_is_folded_only_where_the_convolution_alone_reads_it_as_zeros() -> None:
    """`layouts.pads_into_convolutions` on its edges: a zero pad read by a convolution and by an
    add is given to the convolution and stays for the add; a crop (negative widths), a pad of
    ones and a clip with an open upper bound are left as they are or written exactly."""
    import tvm
    from tvm import relax

    from autosearch.networks.layouts import clips_as_bounds, pads_into_convolutions

    x = relax.Var("x", relax.TensorType((1, 8, 6, 6), "float32"))
    w = relax.Var("w", relax.TensorType((8, 8, 3, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            padded = bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, 1, 1, 1, 1]))
            conv = bb.emit(relax.op.nn.conv2d(padded, w))  # 6x6 again
            shared = bb.emit(relax.op.add(padded, padded))  # reads the pad too
            cropped = bb.emit(relax.op.nn.conv2d(bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, -1, 0, 0, 0])), w))
            ones = bb.emit(relax.op.nn.conv2d(bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, 1, 1, 1, 1], pad_value=1.0)), w))
            relu = bb.emit(relax.op.clip(x, 0.0, float("inf")))
            out = bb.emit_output(relax.Tuple([conv, shared, cropped, ones, relu]))
        bb.emit_func_output(out)
    mod = clips_as_bounds(pads_into_convolutions(bb.get()))
    text = mod["main"].script()
    convs = [line for line in text.splitlines() if "R.nn.conv2d(" in line]
    assert sum("padding=[1, 1, 1, 1]" in c for c in convs) == 1, convs  # the zero pad, folded
    assert text.count("R.nn.pad(") == 3, text  # kept for the add, the crop, the pad of ones
    assert "R.maximum(x, R.const(0.0" in text and "R.minimum" not in text and "R.clip" not in text
    tvm.ir.assert_structural_equal(mod, relax.transform.Normalize()(mod))  # well-formed


def _layer_norm_nets() -> dict[str, Any]:
    """Two models whose `layer_norm` a blocked layout reaches: a convolution's output pooled and
    normalised (`mean` over the image, then `layer_norm` over the channels), and ConvNeXt's block
    (a depthwise 7x7 convolution, NCHW -> NHWC, LayerNorm over the channels, two dense layers with
    a GELU, NHWC -> NCHW, a residual add)."""
    import torch

    class PooledNorm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.norm = torch.nn.Conv2d(16, 32, 2, stride=2), torch.nn.LayerNorm(32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.norm(self.conv(x).mean((2, 3)))

    class ConvNextBlock(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dw = torch.nn.Conv2d(16, 16, 7, padding=3, groups=16)
            self.norm = torch.nn.LayerNorm(16)
            self.up, self.down = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            return x + self.down(torch.nn.functional.gelu(self.up(y))).permute(0, 3, 1, 2)

    return {"pooled": PooledNorm, "convnext": ConvNextBlock}


def _built_matches_pytorch(graph: Any, net: Any, x: np.ndarray, target: Any) -> bool:
    """`graph` built (TVM's untuned kernels), run on `x` and checked against `net`'s output."""
    from tvm import relax
    from tvm.s_tir.meta_schedule.database import MemoryDatabase

    from autosearch.networks import graph as graph_mod
    from autosearch.networks import tune as nt
    from autosearch.networks.check import flatten_outputs

    dev, args = nt._on_device(target, [x])
    built = graph_mod.build_network(graph, MemoryDatabase(), target)
    got = flatten_outputs(relax.VirtualMachine(built, dev)["main"](*args))
    return compare_outputs(got, nt.reference_outputs(net, [x])).ok


@pytest.mark.parametrize("case", ["pooled", "convnext"])
def test_a_model_whose_layer_norm_the_blocked_layout_reaches_is_blocked_and_matches(case: str) -> None:
    """ConvNeXt's case: TVM's layout inference carries the blocked layout into a `layer_norm` over
    the channels and fails its gamma check, which left the whole model as imported (its depthwise
    convolutions in NCHW); with the layer norms legalized first (`layouts.layer_norms_legalized`)
    the convolutions are blocked, ConvNeXt's layout conversion (a gather, `layouts.legalize_map`)
    fuses with the permute beside it, and the build computes PyTorch's output."""
    import torch

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks import graph as graph_mod
    from autosearch.search.registers import simd_bits

    target = host_target()
    if simd_bits(target) <= 0:
        pytest.skip("no SIMD registers known on this CPU: convolutions stay unblocked")
    torch.manual_seed(0)
    net = _layer_norm_nets()[case]().eval()
    x = np.random.default_rng(0).random((1, 16, 8, 8), dtype=np.float32)
    graph = graph_mod.import_network("ln", net, [InputSpec("x", "float32", x.shape)], [x], target)
    names = [w.name for w in graph.workloads]
    assert any("NCHWc" in n for n in names) and any(n.startswith("net/layer_norm") for n in names), names
    if case == "convnext":  # the conversion back to NCHW is a gather fused with the permute after it
        assert any("layout_transform" in n and "transpose" in n for n in names), names
        assert not any("te_layout_transform" in n for n in names), names
    assert _built_matches_pytorch(graph, net, x, target)


def test_a_prelu_after_a_blocked_convolution_builds_and_matches() -> None:
    """PReLU is `where(x > 0, ...)`: the layout inference carries the comparison into the blocked
    layout and converts the bool back for the flatten after it; TVM legalized that conversion
    with a float padding value and failed (an internal error on import). Done on int8 now
    (`layouts.bool_layouts_as_int8`)."""
    import torch

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks import graph as graph_mod
    from autosearch.search.registers import simd_bits

    target = host_target()
    if simd_bits(target) <= 0:
        pytest.skip("no SIMD registers known on this CPU: convolutions stay unblocked")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.act = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.PReLU(16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.conv(x)).flatten(1)

    torch.manual_seed(0)
    net = Net().eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    graph = graph_mod.import_network("prelu", net, [InputSpec("x", "float32", x.shape)], [x], target)
    assert any("NCHWc" in w.name for w in graph.workloads), [w.name for w in graph.workloads]
    assert _built_matches_pytorch(graph, net, x, target)


def test_a_group_norm_is_a_layer_norm_over_rows_and_its_convolutions_stay_blocked() -> None:
    """A group norm becomes a layer norm over (batch, groups, the group's channels x the image),
    then its per-channel scale and shift (`graph.group_norms_as_layer_norms`): its reductions get
    the row forms (the design-space pick of a group norm ran 20x slower than TVM's unscheduled
    loops) and the convolutions beside it are blocked (the layout inference refused the group
    norm, which left the whole model as imported). The build computes PyTorch's output."""
    import torch

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks import graph as graph_mod
    from autosearch.search.registers import simd_bits

    target = host_target()

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.norm = torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.GroupNorm(8, 32)
            self.wave = torch.nn.GroupNorm(4, 4)  # one channel a group, over a sequence (Wav2Vec2's)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.nn.functional.silu(self.norm(self.conv(x)))
            return self.wave(y.reshape(1, 4, -1)).reshape(y.shape) + y

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():  # a scale and a shift that are not 1 and 0
        for p in (*net.norm.parameters(), *net.wave.parameters()):
            p.uniform_(0.5, 1.5)
    x = np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype(np.float32)
    graph = graph_mod.import_network("gn", net, [InputSpec("x", "float32", x.shape)], [x], target)
    names = [w.name for w in graph.workloads]
    assert not any("group_norm" in n for n in names) and any("layer_norm" in n for n in names), names
    if simd_bits(target) > 0:
        assert any("NCHWc" in n or "winograd" in n for n in names), names
    assert _built_matches_pytorch(graph, net, x, target)


@pytest.mark.parametrize(
    "kernel, stride, padding, extra, rewritten",
    [
        (2, 2, 0, 0, True),
        (4, 2, 1, 0, True),
        (3, 3, 0, 0, True),
        (3, 2, 1, 1, True),
        (3, 1, 1, 0, True),
        (3, 1, 0, 0, True),
        (3, 2, 1, 0, False),
    ],
)
def test_a_transposed_convolution_is_a_convolution_where_it_can_be_and_matches(
    kernel: int, stride: int, padding: int, extra: int, rewritten: bool
) -> None:
    """A transposed convolution that upsamples by its stride exactly (a U-Net's 2x2 stride 2, a
    GAN's 4x4 stride 2 padding 1, a 3x3 stride 2 padding 1 with an output padding of 1) is one
    convolution computing every output phase and a pixel rearrangement, a stride-1 one a
    convolution with the kernel flipped (`graph.transposed_convolutions_as_convolutions`); a 3x3
    stride-2 one without the output padding (an output one short of 2x) stays TVM's. Each
    computes PyTorch's output."""
    import torch

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks import graph as graph_mod

    target = host_target()
    torch.manual_seed(0)
    up = torch.nn.ConvTranspose2d(16, 8, kernel, stride, padding, output_padding=extra)
    net = torch.nn.Sequential(up, torch.nn.ReLU()).eval()
    x = np.random.default_rng(0).standard_normal((1, 16, 6, 5)).astype(np.float32)
    graph = graph_mod.import_network("up", net, [InputSpec("x", "float32", x.shape)], [x], target)
    names = [w.name for w in graph.workloads]
    assert any("conv2d_transpose" in n for n in names) != rewritten, names
    assert _built_matches_pytorch(graph, net, x, target)


def test_a_chained_dense_block_concatenates_once_per_layer_inside_its_batch_norm() -> None:
    """`graph.concatenations_flattened` on a dense block written `cat([x, layer(x)])` layer after
    layer: without it each concatenation is a task of its own (it has two readers, the next
    concatenation and the BatchNorm); with it no concatenation is left a task alone, every one is
    fused into the BatchNorm + ReLU that reads it, and the block built untuned computes PyTorch's
    output."""
    import re

    import torch

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks import graph as graph_mod

    class Layer(torch.nn.Module):
        def __init__(self, cin: int) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(
                torch.nn.BatchNorm2d(cin), torch.nn.ReLU(), torch.nn.Conv2d(cin, 16, 3, padding=1, bias=False)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, self.body(x)], dim=1)

    torch.manual_seed(0)
    net = torch.nn.Sequential(Layer(16), Layer(32), Layer(48), torch.nn.BatchNorm2d(64), torch.nn.ReLU())
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):  # running statistics away from 0 and 1
            m.running_mean.uniform_(-1, 1), m.running_var.uniform_(0.5, 2)
    net, target = net.eval(), host_target()
    x = np.random.default_rng(0).random((1, 16, 8, 8), dtype=np.float32)
    graph = graph_mod.import_network("dense", net, [InputSpec("x", "float32", x.shape)], [x], target)
    calls = re.findall(r"call_tir\((\w+)", graph.mod["main"].script())
    concats = [c for c in calls if "concatenate" in c]
    assert len(concats) == 3 and all("relu" in c for c in concats), calls
    assert _built_matches_pytorch(graph, net, x, target)


def test_only_a_concatenation_on_the_same_axis_is_spliced_into_its_reader() -> None:
    """`graph.concatenations_flattened` on its edges: an inner concatenation on another axis stays,
    one on the same axis is spliced (and kept while something else reads it), three levels deep
    become one flat concatenation, and the module stays well-formed."""
    import tvm
    from tvm import relax

    from autosearch.networks.graph import concatenations_flattened

    a, b, c = (relax.Var(n, relax.TensorType((1, 4, 2, 2), "float32")) for n in "abc")
    bb = relax.BlockBuilder()
    with bb.function("main", [a, b, c]):
        with bb.dataflow():
            inner = bb.emit(relax.op.concat([a, b], axis=1))
            deep = bb.emit(relax.op.concat([bb.emit(relax.op.concat([inner, c], axis=1)), a], axis=1))
            wide = [bb.emit(relax.op.concat(pair, axis=2)) for pair in ([a, b], [c, c])]
            other_axis = bb.emit(relax.op.concat(wide, axis=1))
            also_read = bb.emit(relax.op.add(inner, inner))
            out = bb.emit_output(relax.Tuple([deep, other_axis, also_read]))
        bb.emit_func_output(out)
    mod = concatenations_flattened(bb.get())
    text = mod["main"].script()
    assert "R.concat((a, b, c, a), axis=1)" in text, text
    assert "R.concat((a, b), axis=1)" in text  # the add still reads it
    assert "R.concat((a, b), axis=2)" in text and text.count("R.concat(") == 5, text
    tvm.ir.assert_structural_equal(mod, relax.transform.Normalize()(mod))


def test_on_a_gpu_the_faster_of_the_tuned_and_tvms_default_build_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`_keep_the_faster_build` (a GPU target's last step) times both builds for real, interleaved,
    and keeps the faster, its output checked. Run here on the CPU: the prior's build is the fast
    one, TVM's untuned loops the slow one; the second call swaps which of them is called "default"."""
    from tvm.s_tir.meta_schedule.database import MemoryDatabase

    from autosearch.backends.tvm.target import host_target, set_runtime_threads
    from autosearch.networks import graph as graph_mod
    from autosearch.networks import tune as nt
    from autosearch.search.assemble import assemble_network

    (tmp_path / "net.py").write_text(NET)
    spec, specs = f"{tmp_path / 'net.py'}:make_model", parse_inputs(["x:float32:256,64"], [])
    # one thread, in this process too (where the VMs are timed): under `make test` the other
    # worker holds the second core, and a kernel on a two-thread pool then waits for it (seen
    # twice: the prior's build, 24 us alone, timed slower than the untuned loops' 1.3 ms). TVM's
    # pool never grows again, so this worker's later in-process kernels run on one thread too.
    target = host_target(num_cores=1)
    monkeypatch.setenv("TVM_NUM_THREADS", "1")  # what set_runtime_threads writes, restored after the test
    set_runtime_threads(1)
    strategy, scorer = assemble_network("pretrained-prefix", target=target)
    r = nt.tune_network(
        spec,
        specs,
        target,
        strategy,
        scorer,
        budget=NetworkBudget(trials=0),
        options=NetworkTuneOptions(progress=False, time_torch=False),
    )
    assert r.correct and {t["built_with"] for t in r.tasks} == {"prior"}
    arrays = example_arrays(specs, 0)
    expected = nt.reference_outputs(graph_mod.load_source(spec), arrays)
    graph = graph_mod.import_network(spec, graph_mod.load_source(spec), specs, arrays, target)
    dev, args = nt._on_device(target, arrays)
    prior_build = r.executable
    nt._keep_the_faster_build(r, graph, target, dev, args, expected)
    assert not r.kept_default and r.executable is prior_build
    assert r.default_latency is not None and r.tuned_latency is not None and r.default_latency > r.tuned_latency
    # the untuned build as "tuned", the prior's as TVM's "default": the default is kept, checked
    from autosearch.networks import library

    untuned = library.compile_network(graph_mod.build_network(graph, MemoryDatabase(), target), target)
    r.executable, r.check = untuned, None
    monkeypatch.setattr(library, "compile_network", lambda *a, **k: prior_build)
    nt._keep_the_faster_build(r, graph, target, dev, args, expected)
    assert r.kept_default and r.executable is prior_build and r.correct
    assert {t["built_with"] for t in r.tasks} == {"default (the network's default build ran faster)"}
    assert r.tuned_latency == r.default_latency


def test_the_prior_pass_passes_a_task_once_and_on_a_gpu_finds_nothing_in_no_time() -> None:
    """A CPU task gets a prior schedule once (a second `run` is free); a GPU has no prior pass (the
    shipped priors know CPU records): its task is passed with no schedule, at no cost."""
    from autosearch.backends.tvm.target import host_target, parse_target
    from autosearch.networks.prior_pass import PriorPass
    from autosearch.workloads import get_workload

    wl = get_workload("softmax/256x256")
    gpu = PriorPass([wl], parse_target("cuda-h200"), 0)
    gpu.run(0)
    assert gpu.traces == {} and gpu.passed == {0} and gpu.seconds == 0.0
    cpu = PriorPass([wl], host_target(), 0)
    cpu.run(0)
    took = cpu.seconds
    assert cpu.passed == {0} and 0 in cpu.traces and took > 0
    cpu.run(0)
    assert cpu.seconds == took


def test_tasks_outside_the_decision_space_are_one_count_line_not_a_line_each() -> None:
    """`tune-model` on a BERT layer printed one line per reshape/transpose task that the decision
    search cannot read (8 of its 15 lines); they are counted in one line at the end of the rounds,
    and any other fall-back (the gradient search's) still says its own reason."""
    from rich.console import Console

    from autosearch.networks import tune as nt
    from autosearch.search.strategies import EvolutionarySettings, Fallback

    console = Console(record=True, width=200)
    job = nt.NetworkJob("net.py:f", None, EvolutionarySettings(), lambda: None, nt.TuneSettings(), console=console)  # type: ignore[arg-type,return-value]
    tasks = nt._TaskRuns(job, [], nt.NetworkResult(spec="net.py:f", model=""))
    for name in ("net/reshape1", "net/transpose2"):
        tasks._fallback(Fallback(name, "decision", "evolutionary", f"{name}: nothing to decide", counted=True))
    tasks._fallback(Fallback("net/dense", "gradient", "evolutionary", "gradient search cannot relax net/dense"))
    tasks.summary()
    lines = console.export_text().splitlines()
    assert lines == [
        "gradient search cannot relax net/dense",
        "2 tasks outside the decision space were searched by evolutionary search",
    ]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: NetworkBudget(trials=-1), "--trials must be >= 0, got -1"),
        (lambda: NetworkBudget(trials=2.5), "--trials must be a whole number"),
        (lambda: NetworkBudget(minutes=-0.5), "--budget-minutes must be >= 0, got -0.5"),
        (lambda: NetworkBudget(minutes=float("nan")), "--budget-minutes must be a finite number, got nan"),
        (lambda: NetworkBudget(minutes=float("inf")), "--budget-minutes must be a finite number, got inf"),
        (lambda: NetworkTuneOptions(seed=1.5), "--seed must be a whole number"),
    ],
)
def test_network_budget_and_options_refuse_bad_values_in_one_line(make: Any, message: str) -> None:
    """A bad budget fails where it is made, in one line, not deep in the run (networks/options.py)."""
    with pytest.raises(InputError) as exc:
        make()
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def test_network_budget_says_whether_rounds_are_measured() -> None:
    assert not NetworkBudget().measures and not NetworkBudget(trials=0, minutes=5).measures  # the prior alone
    assert NetworkBudget(trials=8).measures and NetworkBudget(minutes=0.5).measures
    assert NetworkBudget(minutes=2).deadline(100.0) == 220.0 and NetworkBudget(trials=8).deadline(100.0) is None


def test_the_zero_trial_pass_orders_with_a_feature_prior_trained_on_avx2_and_avx512_cpus() -> None:
    """`PriorRanker` orders its shortlist with the shipped orderer (MODEL_CARD_order.md), a
    PerStoreFeature model whose training stores came from an AVX2 CPU (Zen 3) and AVX-512 ones
    (AMD Zen 4 and 5, Intel `emeraldrapids` and `rocketlake`),
    not with `pretrained` (Zen 4 only), which ranked the Zen 3's network shortlists near chance."""
    from autosearch.backends.tvm.target import host_target
    from autosearch.features.per_store import FEATURE_WIDTH
    from autosearch.networks.prior import ORDER_MODEL, PriorRanker
    from autosearch.search.model_spec import pretrained_dir

    trained_on = {
        json.loads(t)["mcpu"] for t in json.loads((Path(ORDER_MODEL) / "config.json").read_text())["trained_on"]
    }
    assert {"znver3", "znver4", "emeraldrapids", "rocketlake"} <= trained_on
    ranker = PriorRanker(host_target())
    weights = (Path(ORDER_MODEL) / "model.safetensors").read_bytes()
    assert weights != (pretrained_dir("pretrained") / "model.safetensors").read_bytes()
    assert ranker.orderer.model is not None and ranker.orderer.model.n_features == FEATURE_WIDTH
    assert ranker.orderer.label == Path(ORDER_MODEL).name


BARE_CONV = """
import torch


def make_model():
    torch.manual_seed(0)
    return torch.nn.Conv2d(64, 64, 3, padding=1, stride=2, bias=False).eval()  # strided: no Winograd
"""


# integration: a prior-only build of one convolution (~15 s)
@pytest.mark.integration
def test_a_kernel_whose_weight_layout_was_rewritten_counts_as_its_task_not_outside_the_tasks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A convolution with no epilogue gets a schedule that rewrites its weight's layout, and the
    build renames its kernel `..._prepacked`. That kernel is the task's time: counted outside
    every task, DenseNet-121's 3x3 convolutions showed as 20 of its 42 ms "outside the tasks"
    (a strided one here: a stride-1 3x3 convolution goes to Winograd; 58 MFLOP, so that its
    kernel outweighs the input's and output's layout changes, ~50 us, on any machine)."""
    (tmp_path / "conv.py").write_text(BARE_CONV)
    s = _tune_json(
        capsys,
        ["tune-model", f"{tmp_path / 'conv.py'}:make_model", "--input", "x:float32:1,64,56,56", "--trials", "0"]
        + ["--db", str(tmp_path / "n.db"), "--json"],
    )
    (conv,) = [t for t in s["tasks"] if "conv2d" in t["name"]]
    assert conv["network_s"] > s["outside_tasks_s"], (conv, s["outside_tasks_s"])
