"""The fine-tuning options of the Adams2019 trainer: calibration, validation-based model
selection, and one pipeline per batch (the loss's reference only means something within one)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from autosearch.backends.halide.sample_io import Sample
from autosearch.backends.halide.weights import Weights
from autosearch.errors import InputError
from autosearch.models.adams2019 import (
    Adams2019Net,
    Adams2019Trainer,
    PipelineBatch,
    calibration_factor,
    group_samples,
    ordering_score,
)

CORES = 2


def _batch(pid: int, n: int = 8, stages: int = 3, seed: int = 0) -> PipelineBatch:
    rng = np.random.default_rng(seed)
    pf = rng.integers(0, 6, size=(stages, 40, 7)).astype(np.float32)
    sf = np.round(rng.uniform(1, 2000, size=(n, stages, 39))).astype(np.float32)
    rt = rng.uniform(1.0, 5.0, size=n).astype(np.float32)
    return PipelineBatch(pid, torch.from_numpy(pf), torch.from_numpy(sf), torch.from_numpy(rt))


def test_calibration_rescales_predictions_without_changing_the_order():
    batches = [_batch(1, seed=1), _batch(2, seed=2)]
    w = Weights.baseline()
    a = calibration_factor(Adams2019Net(CORES, w), batches, CORES)
    assert a > 0 and a != 1.0
    res = Adams2019Trainer(learning_rate=1e-12, epochs=1, num_cores=CORES, calibrate=True).fit(w, batches)
    assert res.calibration == pytest.approx(a)
    before, after = Adams2019Net(CORES, w), Adams2019Net(CORES, res.weights)
    for b in batches:
        with torch.no_grad():
            p0 = before(b.pipeline_features, b.schedule_features, CORES).numpy()
            p1 = after(b.pipeline_features, b.schedule_features, CORES).numpy()
        np.testing.assert_allclose(p1 / p0, a, rtol=1e-3)
        assert list(np.argsort(p0)) == list(np.argsort(p1))
    # the calibrated start has the lower loss
    plain = Adams2019Trainer(learning_rate=1e-12, epochs=1, num_cores=CORES).fit(w, batches)
    assert res.losses[0] < plain.losses[0]


def test_best_valid_selection_never_returns_worse_than_the_start():
    train = [_batch(1, seed=1), _batch(2, seed=2)]
    valid = [_batch(3, seed=3), _batch(4, seed=4)]
    w = Weights.baseline()
    # a huge learning rate wrecks the model; selection must fall back to the starting weights
    res = Adams2019Trainer(learning_rate=10.0, epochs=4, num_cores=CORES, select="best_valid").fit(
        w, train, valid=valid
    )
    assert len(res.valid_scores) == 5 and res.best_epoch is not None
    kept = ordering_score(Adams2019Net(CORES, res.weights), valid, CORES)
    assert kept == pytest.approx(max(res.valid_scores)) and kept >= res.valid_scores[0]
    if res.best_epoch == 0:
        assert res.weights == w
    # plain training keeps the last epoch and records no selection
    last = Adams2019Trainer(learning_rate=1e-3, epochs=2, num_cores=CORES).fit(w, train)
    assert last.best_epoch is None and last.valid_scores == []


def test_selection_needs_disjoint_validation_pipelines():
    b = _batch(1)
    with pytest.raises(InputError, match="validation"):
        Adams2019Trainer(epochs=1, select="best_valid").fit(Weights.baseline(), [b])
    with pytest.raises(InputError, match="also in training"):
        Adams2019Trainer(epochs=1, select="best_valid").fit(Weights.baseline(), [b], valid=[_batch(1, seed=5)])
    with pytest.raises(InputError, match="select"):
        Adams2019Trainer(epochs=1, select="best").fit(Weights.baseline(), [b])


def test_every_step_sees_one_pipeline(monkeypatch):
    """Samples of several pipelines, shuffled together, become one batch per pipeline_id."""
    rng = np.random.default_rng(0)
    samples = []
    for pid, stages in ((11, 2), (22, 3), (33, 2)):
        pf = rng.integers(0, 5, size=(stages, 287)).astype(np.float32)
        for i in range(4):
            sf = np.round(rng.uniform(1, 500, size=(stages, 39))).astype(np.float32)
            samples.append(Sample(np.concatenate([sf, pf], axis=1), float(1 + i), pid, pid * 100 + i, f"p{pid}_{i}"))
    rng.shuffle(samples)
    batches = group_samples(samples)
    assert [b.pipeline_id for b in batches] == [11, 22, 33] and all(b.size == 4 for b in batches)
    seen = []
    orig = Adams2019Trainer._step

    def spy(self, net, opt, ready, rng=None):
        seen.append(ready.batch.pipeline_id)
        return orig(self, net, opt, ready, rng)

    monkeypatch.setattr(Adams2019Trainer, "_step", spy)
    Adams2019Trainer(epochs=2, num_cores=CORES).fit(Weights.baseline(), batches)
    assert seen == [11, 22, 33, 11, 22, 33]


def test_adam_is_halides_update_over_several_steps():
    """Our ADAM = cost_model_generator.cpp's: m, v smoothed, both bias-corrected at timestep t,
    eps added after the square root; three steps, so the per-step correction is exercised."""
    from autosearch.models.adams2019 import Adam

    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(5, 3)).astype(np.float32)
    grads = [rng.normal(size=(5, 3)).astype(np.float32) for _ in range(3)]
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = Adam([p], lr=0.01, betas=(0.9, 0.999), eps=1e-5)
    w, m, v = w0.astype(np.float64), np.zeros((5, 3)), np.zeros((5, 3))
    for t, g in enumerate(grads):
        p.grad = torch.from_numpy(g)
        opt.step()
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g.astype(np.float64) ** 2
        w = w - 0.01 * m / (1 - 0.9 ** (t + 1)) / (np.sqrt(v / (1 - 0.999 ** (t + 1))) + 1e-5)
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-5, atol=1e-6)


def test_fit_builds_each_groups_tensors_once_and_restores_torch_threads(monkeypatch):
    import autosearch.models.adams2019.optim as m

    batches = [_batch(pid, seed=pid) for pid in (1, 2, 3)]
    calls, threads_seen = [], []
    orig_prepare, orig_step = m.prepare_schedules, Adams2019Trainer._step

    def counting(sf, cores):
        calls.append(1)
        return orig_prepare(sf, cores)

    def spy(self, net, opt, ready, rng=None):
        threads_seen.append(torch.get_num_threads())
        return orig_step(self, net, opt, ready, rng)

    monkeypatch.setattr(m, "prepare_schedules", counting)
    monkeypatch.setattr(Adams2019Trainer, "_step", spy)
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    Adams2019Trainer(epochs=5, num_cores=CORES, threads=want).fit(Weights.baseline(), batches)
    assert len(calls) == 3  # once per group, not once per step (15)
    assert set(threads_seen) == {want} and torch.get_num_threads() == before


def test_fit_equals_the_autograd_step_over_several_epochs(monkeypatch):
    """fit's hand-written gradient and fused ADAM (`_FusedAdam`) = autograd's backward plus `Adam`
    (the path `step` takes, checked against Halide in test_halide_parity), epoch after epoch, also
    through Halide's random window of a batch larger than MAX_BATCH."""
    import random

    import autosearch.models.adams2019.optim as m
    import autosearch.models.adams2019.trainer as trainer_module

    monkeypatch.setattr(m, "MAX_BATCH", 6)  # the 8- and 9-schedule groups take the random window
    monkeypatch.setattr(trainer_module, "MAX_BATCH", 6)  # in both steps: the fused one and autograd's
    batches = [_batch(1, n=8, seed=1), _batch(2, n=5, stages=2, seed=2), _batch(3, n=9, stages=4, seed=3)]
    trainer = Adams2019Trainer(learning_rate=1e-2, epochs=6, num_cores=CORES, seed=7)
    res = trainer.fit(Weights.baseline(), batches)
    net = Adams2019Net(CORES, Weights.baseline())
    opt, rng = trainer.make_optimizer(net), random.Random(7)
    ready = [m._Ready.of(b, CORES) for b in batches]
    losses = [float(np.mean([trainer._step(net, opt, r, rng) for r in ready])) for _ in range(6)]
    np.testing.assert_allclose(res.losses, losses, rtol=1e-4)
    for name, ours in net.params().items():
        scale = max(1e-6, float(np.abs(ours).max()))
        np.testing.assert_allclose(res.weights.buffers[name], ours, atol=1e-5 * scale, err_msg=name)


def test_fit_rejects_a_non_finite_loss():
    b = _batch(1)
    b.schedule_features[0, 0, 0] = float("nan")
    with pytest.raises(InputError, match="non-finite"):
        Adams2019Trainer(epochs=1, num_cores=CORES).fit(Weights.baseline(), [b])
