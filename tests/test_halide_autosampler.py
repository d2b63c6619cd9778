"""The seed's quick start: `autosampler.retrain_cost_model`, on a tiny pipeline and batch."""

from __future__ import annotations

import json

import pytest

from autosearch.backends.halide.autoschedule import autoschedule_and_benchmark
from autosearch.backends.halide.pipelines import resolve_pipeline
from autosearch.backends.halide.sample_io import load_from_dir
from autosearch.backends.halide.sampling import batch_params, next_batch_id
from autosearch.backends.halide.weights import Weights
from autosearch.errors import InputError
from autosearch.store.db import Store


def test_batch_params_follow_the_autotune_loop():
    ps = batch_params(4, 7, threads=2)
    assert ps[0]["beam_size"] == 32 and ps[0]["random_dropout"] == 100
    assert all(p["beam_size"] == 1 and p["random_dropout"] == 1 for p in ps[1:])
    assert len({p["random_dropout_seed"] for p in ps}) == 4


def test_a_pipeline_file_imports_pipelinedef_without_pytorch():
    """Every Halide worker that loads a pipeline file runs its `from autosearch.halide.autosampler
    import PipelineDef`; the trainer's torch import there cost 3.4 s a worker (the quick start
    below took 20.7 s, 10.1 s without it)."""
    import subprocess
    import sys

    code = "import sys; from autosearch.halide.autosampler import PipelineDef; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


def test_quick_start_retrain_continues_numbering_and_writes_loadable_weights(tmp_path):
    from autosearch.halide import autosampler

    user = tmp_path / "tiny_blur.py"
    user.write_text(
        "import halide as hl\n"
        "from autosearch.halide.autosampler import PipelineDef\n"
        "def pipeline(n=48):\n"
        "    x, y = hl.Var('x'), hl.Var('y')\n"
        "    inp = hl.ImageParam(hl.Float(32), 2, 'input')\n"
        "    bx, by = hl.Func('bx'), hl.Func('by')\n"
        "    bx[x, y] = inp[x, y] + inp[x + 1, y]\n"
        "    by[x, y] = bx[x, y] + bx[x, y + 1]\n"
        "    return PipelineDef([by], [(n, n)], [(inp, (n + 1, n + 1))])\n"
    )
    sd, wp, db = tmp_path / "samples", tmp_path / "random_init.weights", tmp_path / "s.db"
    rep = autosampler.retrain_cost_model(
        str(user),
        "tiny_blur",
        1,
        batch_size=3,
        samples_dir=str(sd),
        weight_path=str(wp),
        train_iters=5,
        threads=1,
        store=str(db),
        repeats=2,
        beam_size=4,
        progress=False,
    )
    assert rep.random_init and rep.batches[0]["batch_id"] == 1 and rep.batches[0]["ok"] == 3
    first = Weights.load(wp)
    assert first != Weights.random(0)  # trained, written back
    rep2 = autosampler.retrain_cost_model(
        str(user),
        "tiny_blur",
        1,
        batch_size=3,
        samples_dir=str(sd),
        weight_path=str(wp),
        train_iters=5,
        threads=1,
        repeats=2,
        beam_size=4,
        progress=False,
    )
    assert not rep2.random_init and rep2.batches[0]["batch_id"] == 2 and next_batch_id(sd) == 3
    samples = load_from_dir(sd, strict=True)
    assert len(samples) == 6 and {s.schedule_id for s in samples} >= {10000, 20000}
    assert len({s.pipeline_id for s in samples}) == 1 and samples[0].pipeline_id != 0
    json.dumps(rep2.to_dict())
    with Store(db) as st:
        rows = list(st.measurements())
        assert rows and all(r.latencies for r in rows if r.status == "ok")
        feats = list(st.iter_features(("halide-adams2019", "1")))
        assert feats and feats[0].features.shape == (2, 326)
    # Halide loads the retrained weights (a random fallback would print a WARNING and differ)
    spec = resolve_pipeline(str(user))
    res = autoschedule_and_benchmark(
        spec, [{"parallelism": 1, "beam_size": 1, "weights_path": str(wp)}], threads=1, benchmark=False
    )[0]
    assert res.status == "ok" and res.schedule_source


def test_quick_start_rejects_bad_arguments(tmp_path):
    from autosearch.halide import autosampler

    with pytest.raises(InputError, match="does not exist"):
        autosampler.retrain_cost_model(str(tmp_path / "missing.py"), "x", 1, weight_path=str(tmp_path / "w.weights"))
    with pytest.raises(InputError, match="batch_num"):
        autosampler.retrain_cost_model("blur", "x", -1)
    bad = tmp_path / "bad.weights"
    bad.write_bytes(b"garbage")
    with pytest.raises(InputError, match="bad.weights"):
        autosampler.retrain_cost_model("blur", "x", 1, weight_path=str(bad), samples_dir=str(tmp_path / "s"))
    assert not (tmp_path / "s").exists()  # nothing sampled with weights Halide would have randomized
