"""`autosearch halide sample|retrain|schedule` on tiny pipelines, and their one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autosearch.backends.halide.sample_io import load_from_dir
from autosearch.backends.halide.weights import Weights, validate_weights_file
from autosearch.cli.halide import app as halide_app
from autosearch.store.db import Store

runner = CliRunner()
TINY = ["-p", "width=64", "-p", "height=48"]


def _json(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_schedule_json(tmp_path):
    out = tmp_path / "blur.schedule.h"
    d = _json(
        runner.invoke(
            halide_app, ["schedule", "blur", *TINY, "--threads", "1", "--beam-size", "1", "-o", str(out), "--json"]
        )
    )
    assert d["stages"] == 2 and "blur_y" in d["schedule"] and out.read_text() == d["schedule"]


def test_sample_then_retrain_from_existing_samples(tmp_path):
    sd, db = tmp_path / "samples", tmp_path / "a.db"
    d = _json(
        runner.invoke(
            halide_app,
            [
                "sample",
                "blur",
                *TINY,
                "--batch-size",
                "3",
                "--threads",
                "1",
                "--repeats",
                "2",
                "--samples-dir",
                str(sd),
                "--db",
                str(db),
                "--json",
            ],
        )
    )
    assert d[0]["batch_id"] == 1 and d[0]["ok"] == 3
    assert len(load_from_dir(sd, strict=True)) == 3
    with Store(db) as st:
        rows = list(st.measurements())
        assert len(rows) >= 1 and rows[0].extra["pipeline_id"] == d[0]["pipeline_id"]
    w = tmp_path / "w.weights"
    r = _json(
        runner.invoke(
            halide_app,
            [
                "retrain",
                "blur",
                "tiny",
                "--batches",
                "0",
                "--iters",
                "3",
                "--samples-dir",
                str(sd),
                "--weights",
                str(w),
                "--db",
                "",
                "--json",
            ],
        )
    )
    assert r["random_init"] and r["groups"] == 1 and r["final_loss"] is not None
    validate_weights_file(w)
    assert Weights.load(w) != Weights.random(0)


@pytest.mark.parametrize(
    "args, message",
    [
        (["schedule", "no_such_pipeline"], "unknown pipeline"),
        (["schedule", "missing.py"], "does not exist"),
        (["schedule", "blur", "-p", "depth=3"], "no parameters"),
        (["retrain", "blur", "x", "--weights", "w.bin"], "must end in '.weights'"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(halide_app, args)
    assert res.exit_code == 2
    assert message in res.output and len(res.output.strip().splitlines()) == 1


def test_corrupt_weights_are_refused_before_halide_sees_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.weights"
    bad.write_bytes(b"\x31\x66\x77\x68" + b"\0" * 40)
    res = runner.invoke(halide_app, ["schedule", "blur", *TINY, "--weights", str(bad)])
    assert res.exit_code == 2 and "bad.weights" in res.output
