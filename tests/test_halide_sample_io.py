"""`.sample` files: byte-compatible with Halide's featurization_to_sample, strict validation."""

from __future__ import annotations

import struct
import subprocess

import numpy as np
import pytest

from autosearch.backends.halide.sample_io import (
    FEATURES_PER_STAGE,
    load_a_sample,
    load_from_dir,
    unique_schedules,
    write_sample,
)
from autosearch.backends.halide.toolchain import tool_path
from autosearch.errors import InputError


def _feats(stages=3, seed=0):
    rng = np.random.default_rng(seed)
    return np.round(rng.uniform(0, 1000, size=(stages, FEATURES_PER_STAGE))).astype(np.float32)


def test_bytes_match_featurization_to_sample(tmp_path):
    f = _feats()
    feat_file = tmp_path / "x.featurization"
    feat_file.write_bytes(f.tobytes())
    theirs = tmp_path / "theirs.sample"
    subprocess.run(
        [str(tool_path("featurization_to_sample")), str(feat_file), "0.00125", "42", "10003", str(theirs)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    ours = write_sample(tmp_path / "ours.sample", f.tobytes(), 1.25, 42, 10003)
    assert (tmp_path / "ours.sample").read_bytes() == theirs.read_bytes()
    back = load_a_sample(theirs)
    assert (back.pipeline_id, back.schedule_id, back.num_stages) == (42, 10003, 3)
    assert back.runtime_ms == pytest.approx(1.25)
    np.testing.assert_array_equal(back.features, ours.features)
    # the network's view: 40 x 7 pipeline features per stage, type-mask row dropped
    np.testing.assert_array_equal(back.pipeline_features[1, 0], f[1, 39 + 7 : 39 + 14])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b[:-2], "4-byte"),
        (lambda b: b[:-8], "truncated"),
        (lambda b: b[:8], "truncated"),
        (lambda b: b[:-12] + struct.pack("<fii", float("nan"), 1, 1), "runtime"),
        (lambda b: b[:-12] + struct.pack("<fii", 2e5, 1, 1), "implausible"),
        (lambda b: struct.pack("<f", -1.0) + b[4:], "negative"),
    ],
)
def test_bad_samples_give_one_line_errors(tmp_path, mutate, message):
    good = write_sample(tmp_path / "g.sample", _feats(), 1.0, 1, 1).to_bytes()
    bad = tmp_path / "bad.sample"
    bad.write_bytes(mutate(good))
    with pytest.raises(InputError, match=message) as exc:
        load_a_sample(bad)
    assert "\n" not in str(exc.value)


def test_load_from_dir_skips_bad_files_and_reports_them(tmp_path):
    for i in range(3):
        write_sample(tmp_path / "a" / f"{i}.sample", _feats(seed=i), 1.0 + i, 5, i)
    (tmp_path / "a" / "junk.sample").write_bytes(b"abc")
    skipped: list[str] = []
    got = load_from_dir(tmp_path, skipped=skipped)
    assert len(got) == 3 and len(skipped) == 1 and "junk" in skipped[0]
    with pytest.raises(InputError):
        load_from_dir(tmp_path, strict=True)
    with pytest.raises(InputError, match="does not exist"):
        load_from_dir(tmp_path / "nope")


def test_duplicate_schedules_keep_the_fastest(tmp_path):
    f = _feats()
    a = write_sample(tmp_path / "a.sample", f, 2.0, 1, 1)
    b = write_sample(tmp_path / "b.sample", f, 1.5, 1, 2)
    u = unique_schedules([a, b])
    assert len(u) == 1 and u[0].runtime_ms == 1.5
