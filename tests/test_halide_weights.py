"""Adams2019 .weights I/O: byte-exact round trips, validation, and Halide's own random init."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from autosearch.backends.halide.toolchain import tool_path
from autosearch.backends.halide.weights import (
    BUFFER_SHAPES,
    Weights,
    baseline_weights_path,
    validate_weights_file,
)
from autosearch.errors import InputError


def test_baseline_round_trips_byte_identically(tmp_path):
    raw = baseline_weights_path().read_bytes()
    w = Weights.baseline()
    assert w.to_bytes() == raw
    out = w.save(tmp_path / "copy.weights")
    assert out.read_bytes() == raw
    assert (w.pipeline_features_version, w.schedule_features_version) == (3, 3)
    assert w.buffers["head1_filter"].shape == (8, 40, 7)
    # Halide's dimension 0 is innermost: the first floats of the file are head1_filter[0..3, 0, 0].
    first = np.frombuffer(raw[16 + 16 : 16 + 16 + 16], "<f4")
    np.testing.assert_array_equal(w.buffers["head1_filter"][:4, 0, 0], first)


def test_baseline_is_the_copy_embedded_in_the_plugin():
    from autosearch.backends.halide.toolchain import plugin_path

    assert baseline_weights_path().read_bytes() in plugin_path().read_bytes()


def test_json_round_trip(tmp_path):
    w = Weights.baseline()
    p = w.save_json(tmp_path / "w.json")
    assert Weights.load_json(p).to_bytes() == w.to_bytes()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b[:-3], "trailing|truncated"),
        (lambda b: b[:100], "truncated"),
        (lambda b: b"xxxx" + b[4:], "signature"),
        (lambda b: b + b"\0\0\0\0", "trailing"),
        (lambda b: b[:12] + (5).to_bytes(4, "little") + b[16:], "buffers"),
        (lambda b: b"", "bytes"),
    ],
)
def test_bad_files_raise_one_line_errors(tmp_path, mutate, message):
    p = tmp_path / "bad.weights"
    p.write_bytes(mutate(baseline_weights_path().read_bytes()))
    with pytest.raises(InputError, match=message) as exc:
        validate_weights_file(p)
    assert "\n" not in str(exc.value)


def test_validate_refuses_names_halide_would_treat_as_a_directory(tmp_path):
    p = tmp_path / "w.bin"
    p.write_bytes(baseline_weights_path().read_bytes())
    with pytest.raises(InputError, match="directory"):
        validate_weights_file(p)
    with pytest.raises(InputError, match="does not exist"):
        validate_weights_file(tmp_path / "missing.weights")


def test_nan_weights_are_refused(tmp_path):
    w = Weights.baseline()
    w.buffers["conv1_bias"][3] = np.nan
    with pytest.raises(InputError, match="NaN"):
        Weights.from_bytes(w.to_bytes())


def test_model_round_trip():
    from autosearch.models.adams2019 import Adams2019Net

    w = Weights.random(7)
    assert Weights.from_model(Adams2019Net(4, w)) == w
    assert set(BUFFER_SHAPES) == {n for n, _ in Adams2019Net().named_parameters()}


def test_random_init_matches_halides_randomize(tmp_path):
    """Halide's retrain tool randomizes with a printed time seed; with no samples it saves them."""
    out = tmp_path / "rand.weights"
    proc = subprocess.run(
        [
            str(tool_path("adams2019_retrain_cost_model")),
            "--epochs=1",
            "--rates=0.001",
            "--randomize_weights=1",
            f"--weights_out={out}",
            "--num_cores=2",
            f"--best_benchmark={tmp_path / 'b.txt'}",
            f"--best_schedule={tmp_path / 'b.h'}",
        ],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"Randomizing weights using seed = (\d+)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    assert Weights.load(out) == Weights.random(int(m.group(1)))
