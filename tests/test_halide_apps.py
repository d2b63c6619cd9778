"""Every classic app computes what its numpy reference computes (small inputs, Halide's default
schedule in-process, which is safe: no autoscheduler involved), and Adams2019 can schedule one."""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.backends.halide.apps import APPS
from autosearch.backends.halide.autoschedule import autoschedule_and_benchmark
from autosearch.backends.halide.pipelines import BUILTIN_PIPELINES, build_pipeline, resolve_pipeline


def _run(name: str, params: dict, seed: int = 0) -> tuple[np.ndarray, list[np.ndarray]]:
    import halide as hl

    defn = build_pipeline(resolve_pipeline(name, params))
    for f in defn.keepalive:  # deep stencil chains would take minutes to compile fully inlined
        if isinstance(f, hl.Func):
            f.compute_root()
    pipe = defn.pipeline()
    rng = np.random.default_rng(seed)
    arrays = [rng.random(tuple(shape)[::-1]).astype(np.float32) for _, shape in defn.inputs]
    buffers = [hl.Buffer(a) for a in arrays]  # keep both alive until realize returns
    for (param, _), buf in zip(defn.inputs, buffers):
        param.set(buf)
    out = hl.Buffer(hl.Float(32), list(defn.output_shapes[0]))
    pipe.realize(out)
    return np.asarray(out).copy(), arrays


def test_at_least_eight_classic_apps_with_realistic_defaults():
    assert len(APPS) >= 8
    for name in APPS:
        assert name in BUILTIN_PIPELINES


@pytest.mark.parametrize("name", sorted(APPS))
def test_app_matches_its_numpy_reference(name):
    app = APPS[name]
    got, inputs = _run(name, app.small)
    want = app.reference(*inputs, **app.small)
    assert got.shape == want.shape
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * max(1.0, float(np.abs(want).max())))


def test_a_wrong_reference_is_caught():
    """The check above can fail: a reference that differs by one tap does not match."""
    app = APPS["stencil_chain"]
    got, inputs = _run("stencil_chain", app.small)
    wrong = app.reference(*inputs, **{**app.small, "stages": app.small["stages"] - 1})
    assert not np.allclose(got, wrong, rtol=2e-4, atol=2e-4)


def test_adams2019_schedules_an_app():
    spec = resolve_pipeline("harris", APPS["harris"].small)
    res = autoschedule_and_benchmark(spec, [{"parallelism": 1, "beam_size": 1}], threads=1, repeats=1)[0]
    assert res.status == "ok", res.error
    assert "harris" in res.schedule_source and res.latencies


@pytest.mark.parametrize(("affinity", "expect"), [(range(8), 4), (range(4), 2), (range(1), 1)])
def test_halide_runs_on_one_thread_per_physical_core_by_default(monkeypatch, affinity, expect):
    """A machine of 4 cores x 2 hyper-threads: Halide gets one thread per core this process may use."""
    import os

    import psutil

    from autosearch.backends.halide.toolchain import default_threads

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(affinity), raising=False)
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 8 if logical else 4)
    assert default_threads() == expect
