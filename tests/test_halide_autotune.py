"""`autotune`: Halide's autotune loop on one pipeline (tiny), resumable, best schedule kept."""

from __future__ import annotations

import json

import pytest

from autosearch.backends.halide.weights import Weights
from autosearch.errors import InputError
from autosearch.halide.autotune import autotune

KW = {
    "pipeline_params": {"width": 48, "height": 32},
    "threads": 1,
    "repeats": 1,
    "beam_size": 2,
    "final_repeats": 2,
    "final_min_time_s": 0.001,
}


# integration: two whole autotune runs, one batch and then continued to two (~35 s)
@pytest.mark.integration
def test_autotune_loop_picks_the_best_by_remeasuring_finalists_and_continues(tmp_path):
    from autosearch.backends.halide.sample_io import load_from_dir, write_sample

    out = tmp_path / "run"
    res = autotune("blur", out, 1, 2, **KW)
    assert [b.batch_id for b in res.batches] == [1] and res.resumed_from == 0 and res.batches[0].ok >= 1
    assert Weights.load(out / "weights" / "batch_1.weights") == Weights.baseline()
    assert res.best["rebuilt_identically"] and (out / "best" / "blur.a").stat().st_size > 0
    assert (out / "best.schedule.h").read_text().strip() and (out / "convergence.png").stat().st_size > 0
    # a sample whose recorded runtime is a lucky (here: impossible) low must not win by it
    lucky = max(load_from_dir(out / "samples"), key=lambda s: s.runtime_ms)
    write_sample(lucky.path, lucky.features, 1e-6, lucky.pipeline_id, lucky.schedule_id)
    first = sorted((out / "samples" / "batch_1_0").rglob("*.sample"))
    stamps = [p.stat().st_mtime_ns for p in first]
    res = autotune("blur", out, 2, 2, **KW)  # continue to 2 batches
    assert res.resumed_from == 1 and [b.batch_id for b in res.batches] == [1, 2]
    assert [p.stat().st_mtime_ns for p in first] == stamps  # batch 1 was not sampled again
    assert Weights.load(out / "weights" / "batch_2.weights") != Weights.baseline()  # retrained on batch 1
    assert res.batches[0].train_s > 0
    assert res.batches[-1].best_so_far_ms == pytest.approx(1e-6)  # the log shows what was sampled ...
    medians = [f["median_ms"] for f in res.finalists]
    assert res.best_ms == medians[0] == min(medians) and all(len(f["rounds_ms"]) == 2 for f in res.finalists)
    assert all(f["rebuilt_identically"] for f in res.finalists)
    lucky_row = next(f for f in res.finalists if f["sample"] == lucky.path)  # the fastest sample: a finalist
    assert lucky_row["sample_ms"] == pytest.approx(1e-6) and lucky_row["median_ms"] > 1e-3
    assert res.best_ms > 1e-3 and res.best["runtime_ms"] == res.best_ms  # ... the pick a re-measured median
    assert json.loads((out / "autotune.json").read_text())["best_ms"] == res.best_ms


@pytest.mark.slow
def test_autotune_resamples_a_batch_killed_while_sampling(tmp_path):
    out = tmp_path / "run"
    autotune("blur", out, 2, 2, **KW)
    first = sorted((out / "samples" / "batch_1_0").rglob("*.sample"))
    stamps = [p.stat().st_mtime_ns for p in first]
    (out / "samples" / "batch_2_0" / "done.json").unlink()  # what a kill during batch 2 leaves
    res = autotune("blur", out, 2, 2, **KW)
    assert res.resumed_from == 1 and [b.batch_id for b in res.batches] == [1, 2]
    assert [p.stat().st_mtime_ns for p in first] == stamps
    assert (out / "samples" / "batch_2_0" / "done.json").exists()


def test_autotune_refuses_another_pipeline_in_the_same_folder(tmp_path):
    (tmp_path / "pipeline.json").write_text(json.dumps({"kind": "builtin", "name": "matmul"}))
    with pytest.raises(InputError, match="another pipeline"):
        autotune("blur", tmp_path, 1, 2, threads=1)
    with pytest.raises(InputError, match="not 'random'"):
        autotune("random", tmp_path / "r", 1, 2)
    with pytest.raises(InputError, match="batches"):
        autotune("blur", tmp_path / "b", 0, 2)


def test_cli_autotune_bad_input_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from autosearch.cli.halide import app

    res = CliRunner().invoke(app, ["autotune", "random", "--batches", "1", "--out", str(tmp_path / "o"), "--db", ""])
    assert res.exit_code == 2 and "not 'random'" in res.output and "Traceback" not in res.output


@pytest.mark.slow
def test_each_retrain_continues_from_the_weights_that_sampled_the_batch(tmp_path, monkeypatch):
    """Halide's loop: --initial_weights=$WEIGHTS --weights_out=$WEIGHTS (not the stock weights each time)."""
    import autosearch.halide.autotune as at

    starts = []
    orig = at.Adams2019Trainer.fit

    def spy(self, weights, batches, valid=None):
        starts.append(weights)
        return orig(self, weights, batches, valid)

    monkeypatch.setattr(at.Adams2019Trainer, "fit", spy)
    out = tmp_path / "run"
    autotune("blur", out, 3, 2, **KW)
    assert len(starts) == 2 and starts[0] == Weights.baseline()
    assert starts[1] == Weights.load(out / "weights" / "batch_2.weights") != Weights.baseline()
