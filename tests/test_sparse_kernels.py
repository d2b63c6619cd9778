"""Every SuperSchedule computes what scipy computes: a property test over random configurations."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from autosearch.errors import InputError
from autosearch.sparse.matrices import MatrixSpec, generate
from autosearch.sparse.measure import MatrixBench, Timing, config_reason
from autosearch.sparse.space import FORMATS, SuperSchedule, default_config, sample_config

os.environ.setdefault("AUTOSEARCH_SPARSE_CACHE", "")  # build for real in the tests, no disk cache

_MATS = [
    MatrixSpec("powerlaw", 97, 83, 5.0, seed=1),
    MatrixSpec("blockdiag", 64, 72, 6.0, seed=2),
    MatrixSpec("banded", 50, 50, 3.0, seed=3),
    MatrixSpec("diagnoise", 40, 120, 2.0, seed=4),
    MatrixSpec("uniform", 30, 3000, 4.0, seed=5),  # wide: column panels apply
]


def test_random_configurations_match_scipy() -> None:
    """24 random configurations (8 per operator), each on a random small matrix it applies to."""
    rng = np.random.default_rng(2024)
    benches: dict[tuple[str, int], MatrixBench] = {}
    seen_formats: set[str] = set()
    checked = 0
    for op, dense in (("spmv", 0), ("spmm", 16), ("sddmm", 8)):
        for _ in range(8):
            c = sample_config(rng, op, dense)
            fits = [i for i in rng.permutation(len(_MATS)) if not config_reason(c, generate(_MATS[i]))]
            if not fits:  # e.g. a panel wider than every test matrix: check the same schedule on CSR
                c = SuperSchedule.from_json(
                    {**json.loads(c.to_json()), "fmt": "csr", "panel": 0, "br": 1, "bc": 1, "slice": 1}
                )
                fits = [0]
            mi = int(fits[0])
            a = generate(_MATS[mi])
            mb = benches.setdefault((op, mi), MatrixBench(op, a, dense, seed=mi))
            bad = mb.check(c)
            assert bad == "", f"{c.to_json()} on {_MATS[mi].name}: {bad}"
            seen_formats.add(c.fmt)
            checked += 1
    assert checked == 24
    assert seen_formats == set(FORMATS), seen_formats  # the sample covers every format


def test_check_catches_a_wrong_result() -> None:
    a = generate(_MATS[0])
    mb = MatrixBench("spmm", a, 8)
    c = default_config("spmm", 8)
    assert mb.check(c) == ""
    mb.ref = mb.ref * 1.5  # the kernel is right, the reference is not: check must say so
    assert "differs from scipy" in mb.check(c)


def test_run_times_and_rejects_with_a_reason() -> None:
    a = generate(_MATS[2])
    mb = MatrixBench("spmv", a)
    out = mb.run(default_config("spmv"), Timing(repeat=2, min_repeat_ms=0))
    assert out.status == "ok" and len(out.latencies) == 2 and all(t > 0 for t in out.latencies)
    wide = SuperSchedule(op="spmv", fmt="cpcsr", panel=1024)
    out = mb.run(wide, Timing(repeat=1, min_repeat_ms=0))
    assert out.status == "run_error" and "one panel" in out.error
    with pytest.raises(InputError, match="CSC only suits SDDMM"):
        SuperSchedule(op="spmm", fmt="csc", dense=8)
    with pytest.raises(InputError, match="does not divide"):
        SuperSchedule(op="spmm", vec=16, dense=24)
