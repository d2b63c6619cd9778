"""Parity of the PyTorch Adams2019 model with Halide's own compiled model and retrain tool.

Same weights, same samples: predictions, loss, gradients and the first ADAM step must match
(a) `cost_model` / `train_cost_model` inside the wheel's plugin and (b) the output of
`adams2019_retrain_cost_model`.
"""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest
import torch

from autosearch.backends.halide.reference import reference_predict, reference_train_step
from autosearch.backends.halide.sample_io import (
    featurization_matrix,
    load_from_dir,
    write_sample,
)
from autosearch.backends.halide.toolchain import tool_path
from autosearch.backends.halide.weights import Weights
from autosearch.models.adams2019 import (
    Adams2019Net,
    Adams2019Trainer,
    adams2019_loss,
    fast_log,
    group_samples,
)

NUM_CORES = 4


@pytest.fixture(scope="module")
def featurizations():
    """Real Adams2019 featurizations of the unsharp pipeline (7 stages), several schedules.

    In-process is safe here: the parameters are known-good."""
    import halide as hl

    from autosearch.backends.halide.pipelines import build_pipeline, resolve_pipeline
    from autosearch.backends.halide.toolchain import load_adams2019

    load_adams2019()
    spec = resolve_pipeline("unsharp", {"width": 128, "height": 96})
    out = []
    for seed in range(6):
        p = build_pipeline(spec).pipeline()
        params = {
            "parallelism": str(NUM_CORES),
            "beam_size": "1",
            "random_dropout": "5",
            "random_dropout_seed": str(seed),
        }
        res = p.apply_autoscheduler(hl.get_host_target(), hl.AutoschedulerParams("Adams2019", params))
        out.append(featurization_matrix(bytes(res.featurization)))
    return np.stack(out)


def _synthetic_group(feats: np.ndarray, n: int = 10, seed: int = 0):
    """n distinct schedules of one pipeline: real featurizations, rescaled to be all distinct."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        f = feats[i % len(feats)].copy()
        f[:, :39] *= rng.uniform(0.5, 2.0, size=(f.shape[0], 39)).astype(np.float32)
        f[:, :39] = np.round(f[:, :39])
        rows.append(f)
    runtimes = rng.uniform(0.5, 3.0, size=n).astype(np.float32)
    return np.stack(rows), runtimes


def test_fast_log_matches_log():
    x = torch.logspace(0, 14, 2000, dtype=torch.float32)
    np.testing.assert_allclose(fast_log(x).numpy(), torch.log(x).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("weights", ["baseline", "random"])
def test_predictions_match_halide(featurizations, weights):
    w = Weights.baseline() if weights == "baseline" else Weights.random(3)
    pf = featurizations[0][:, 39 + 7 :].reshape(-1, 40, 7)
    sf = featurizations[:, :, :39]
    ref = reference_predict(w, pf, sf, NUM_CORES)
    ours = Adams2019Net(NUM_CORES, w)(torch.from_numpy(pf), torch.from_numpy(np.ascontiguousarray(sf))).detach().numpy()
    assert np.all(np.isfinite(ref)) and np.ptp(ref) > 0  # distinct schedules, distinct predictions
    if weights == "baseline":
        assert np.all(ref > 0)  # the stock model predicts positive runtimes
    else:  # random weights must really reach Halide's model (a silent fallback would give stock output)
        assert not np.allclose(ref, reference_predict(Weights.baseline(), pf, sf, NUM_CORES), rtol=1e-3)
    np.testing.assert_allclose(ours, ref, rtol=2e-5)


def _halide_train_step(featurizations):
    """Stock weights, one synthetic pipeline's features and Halide's own training step on them."""
    w = Weights.baseline()
    feats, runtimes = _synthetic_group(featurizations)
    pf = feats[0][:, 39 + 7 :].reshape(-1, 40, 7)
    sf = np.ascontiguousarray(feats[:, :, :39])
    return w, pf, sf, runtimes, reference_train_step(w, pf, sf, runtimes, NUM_CORES, learning_rate=0.001)


def test_loss_gradients_and_adam_step_match_halide(featurizations):
    w, pf, sf, runtimes, ref = _halide_train_step(featurizations)

    net = Adams2019Net(NUM_CORES, w)
    pred, stage2 = net.forward_with_coefficients(torch.from_numpy(pf), torch.from_numpy(sf))
    loss = adams2019_loss(pred, stage2, torch.from_numpy(runtimes))
    loss.backward()
    np.testing.assert_allclose(pred.detach().numpy(), ref.prediction, rtol=2e-5)
    assert loss.item() == pytest.approx(ref.loss, rel=1e-4)
    for name, g in ref.gradients.items():
        ours = getattr(net, name).grad.numpy()
        scale = max(1e-6, float(np.abs(g).max()))
        np.testing.assert_allclose(ours, g, atol=2e-4 * scale, err_msg=name)
    opt = Adams2019Trainer(learning_rate=0.001).make_optimizer(net)
    opt.step()
    new = Weights.from_model(net)
    for name in ref.new_weights.buffers:
        np.testing.assert_allclose(new.buffers[name], ref.new_weights.buffers[name], atol=2e-5, err_msg=name)


def test_fused_gradient_and_adam_step_match_halide(featurizations):
    """fit's hand-written step (`_FusedAdam`, no autograd) against Halide's compiled training step."""
    from autosearch.models.adams2019 import PipelineBatch
    from autosearch.models.adams2019.optim import _FusedAdam, _Ready

    w, pf, sf, runtimes, ref = _halide_train_step(featurizations)
    batch = PipelineBatch(1, torch.from_numpy(pf.copy()), torch.from_numpy(sf), torch.from_numpy(runtimes))
    net = Adams2019Net(NUM_CORES, w)
    fused = _FusedAdam(net, 0.001)
    loss = fused.loss_and_grad(_Ready.of(batch, NUM_CORES))
    assert loss == pytest.approx(ref.loss, rel=1e-4)
    for name, g in ref.gradients.items():
        scale = max(1e-6, float(np.abs(g).max()))
        np.testing.assert_allclose(fused.grad_views[name], g, atol=2e-4 * scale, err_msg=name)
    fused.update()
    new = Weights.from_model(net)  # the network shares the fused step's memory
    for name in ref.new_weights.buffers:
        np.testing.assert_allclose(new.buffers[name], ref.new_weights.buffers[name], atol=2e-5, err_msg=name)


def test_retrain_tool_agrees_with_our_trainer(featurizations, tmp_path):
    """Halide's adams2019_retrain_cost_model, 1 epoch on one pipeline's samples = our one step.

    Halide 21's tool parses --num_cores but never uses it (Flags leaves num_cores = 32), so the
    comparison runs at 32 cores."""
    feats, runtimes = _synthetic_group(featurizations, n=10, seed=1)
    files = []
    for i, (f, r) in enumerate(zip(feats, runtimes)):
        p = tmp_path / "s" / f"p_batch_0001_sample_{i:04d}.sample"
        write_sample(p, f, float(r), 77, 10000 + i)
        p.with_suffix("").with_suffix(".schedule.h").write_text("// schedule\n")
        files.append(str(p))
    w0 = Weights.baseline()
    w0.save(tmp_path / "init.weights")
    out = tmp_path / "out.weights"
    proc = subprocess.run(
        [
            str(tool_path("adams2019_retrain_cost_model")),
            "--epochs=1",
            "--rates=0.001",
            f"--initial_weights={tmp_path / 'init.weights'}",
            f"--weights_out={out}",
            "--num_cores=32",
            f"--best_benchmark={tmp_path / 'best.txt'}",
            f"--best_schedule={tmp_path / 'best.h'}",
        ],
        input="\n".join(files) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"Loss: ([0-9.eE+-]+)", proc.stdout)
    assert m, proc.stdout

    samples = load_from_dir(tmp_path / "s", strict=True)
    batches = group_samples(samples, min_schedules=8)
    assert len(batches) == 1 and batches[0].size == 10
    trainer = Adams2019Trainer(learning_rate=0.001, epochs=1, num_cores=32)
    result = trainer.fit(w0, batches)
    assert result.losses[0] == pytest.approx(float(m.group(1)), rel=1e-3, abs=1e-4)
    theirs = Weights.load(out)
    for name in theirs.buffers:
        np.testing.assert_allclose(result.weights.buffers[name], theirs.buffers[name], atol=2e-5, err_msg=name)
