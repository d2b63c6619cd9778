"""Pipelines, parameter validation and the crash-safe child-process driver."""

from __future__ import annotations

import pytest

from autosearch.backends.halide.autoschedule import (
    autoschedule_and_benchmark,
    validate_params,
)
from autosearch.backends.halide.pipelines import (
    BUILTIN_PIPELINES,
    build_pipeline,
    resolve_pipeline,
)
from autosearch.errors import InputError, WorkloadError

USER_FILE = """
import os, time
import halide as hl
from autosearch.backends.halide.pipelines import PipelineDef

def pipeline(size=32, crash_at=0, mode="abort", counter=""):
    if counter:
        n = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
        open(counter, "w").write(str(n))
        if n == crash_at:
            if mode == "abort":
                os.abort()
            time.sleep(60)
    x, y = hl.Var("x"), hl.Var("y")
    inp = hl.ImageParam(hl.Float(32), 2, "input")
    f = hl.Func("f")
    f[x, y] = inp[x, y] * 2 + inp[y, x]
    return PipelineDef([f], [(size, size)], [(inp, (size, size))])
"""


def test_random_pipeline_is_deterministic_and_varied():
    a = build_pipeline(resolve_pipeline("random", {"seed": 3})).description
    b = build_pipeline(resolve_pipeline("random", {"seed": 3})).description
    c = build_pipeline(resolve_pipeline("random", {"seed": 4})).description
    assert a == b and a != c
    kinds = set()
    for s in range(30):
        d = build_pipeline(resolve_pipeline("random", {"seed": s, "max_stages": 4}))
        kinds.update(line.split(" = ")[1].split(" of ")[0].split()[0] for line in d.description.splitlines()[1:])
    assert len(kinds) >= 6


def test_pipeline_ids_are_unique_per_pipeline():
    ids = {resolve_pipeline("random", {"seed": s}).pipeline_id() for s in range(50)}
    ids |= {resolve_pipeline(n).pipeline_id() for n in BUILTIN_PIPELINES}
    assert len(ids) == 50 + len(BUILTIN_PIPELINES) and all(0 < i < 2**31 for i in ids)


@pytest.mark.parametrize("name", sorted(BUILTIN_PIPELINES))
def test_builtins_build(name):
    d = build_pipeline(resolve_pipeline(name))
    assert d.outputs and d.pipeline() is not None


@pytest.mark.parametrize(
    "params, message",
    [
        ({"beam_sise": 1}, "unknown Adams2019 parameter"),
        ({"beam_size": "x"}, "integer"),
        ({"random_dropout": 101}, r"\[0, 100\]"),
        ({"parallelism": 0}, "parallelism"),
        ({"beam_size": 1.5}, "integer"),
        ({"weights_path": "/nope/x.weights"}, "does not exist"),
    ],
)
def test_bad_params_raise_instead_of_aborting(params, message):
    with pytest.raises(InputError, match=message):
        validate_params(params)


def test_user_file_errors_are_one_line(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        resolve_pipeline(str(tmp_path / "nope.py"))
    bad = tmp_path / "bad.py"
    bad.write_text("raise ValueError('boom')\n")
    with pytest.raises(InputError, match="ValueError on import: boom"):
        build_pipeline(resolve_pipeline(str(bad)))
    nofn = tmp_path / "nofn.py"
    nofn.write_text("x = 1\n")
    with pytest.raises(InputError, match=r"must define a function pipeline"):
        build_pipeline(resolve_pipeline(str(nofn)))
    with pytest.raises(WorkloadError):
        resolve_pipeline("not_a_pipeline")


def test_crashing_and_hanging_candidates_are_recorded_as_failed(tmp_path):
    f = tmp_path / "user.py"
    f.write_text(USER_FILE)
    params = [{"parallelism": 1, "beam_size": 1, "random_dropout": 50, "random_dropout_seed": s} for s in range(3)]
    crash = resolve_pipeline(str(f), {"crash_at": 2, "counter": str(tmp_path / "c1")})
    res = autoschedule_and_benchmark(crash, params, threads=1, repeats=2)
    assert [r.status for r in res] == ["ok", "build_error", "ok"]
    assert "worker died" in res[1].error and all(len(r.latencies) == 2 for r in (res[0], res[2]))
    hang = resolve_pipeline(str(f), {"crash_at": 3, "mode": "hang", "counter": str(tmp_path / "c2")})
    res = autoschedule_and_benchmark(hang, params, threads=1, repeats=1, build_timeout_s=4)
    assert [r.status for r in res] == ["ok", "ok", "timeout"]
