"""`networks.siblings` and `space.refitted`: a task's best schedule, its tile splits refitted,
schedules a task that differs from it only in an extent, and computes what that task computes;
tasks of another structure are not offered it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from autosearch.backends.tvm.target import host_target  # noqa: E402


def _matmul(k: int, m: int = 32, n: int = 32):  # type: ignore[no-untyped-def]
    """C = relu(A @ B), A m x k: a task whose siblings differ in the reduction's extent."""
    from tvm import te

    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    d = te.compute((m, n), lambda i, j: te.max(c[i, j], tvm.tirx.const(0, "float32")), name="D")
    return tvm.IRModule({"main": te.create_prim_func([a, b, d])})


def _add(m: int = 32):  # type: ignore[no-untyped-def]
    from tvm import te

    a = te.placeholder((m, m), name="A")
    return tvm.IRModule({"main": te.create_prim_func([a, te.compute((m, m), lambda i, j: a[i, j] + 1, name="B")])})


def _traces(mod, n: int) -> list[str]:  # type: ignore[no-untyped-def]
    from autosearch.backends.tvm.space import TaskSpace

    return [trace for _, trace, _ in TaskSpace(mod, host_target(), seed=0).sample(n, set())]


def test_tile_factors_keep_the_inner_splits_that_divide_and_the_outermost_takes_the_rest() -> None:
    from autosearch.backends.tvm.space import _fitted_tiles

    assert _fitted_tiles([4, 16], 64) == [4, 16]  # already this loop's: as given
    assert _fitted_tiles([4, 16], 96) == [6, 16]
    assert _fitted_tiles([2, 7, 4], 28) == [1, 7, 4]
    assert _fitted_tiles([1, 5, 8], 96) == [12, 1, 8]  # 5 does not divide 12: left whole


def test_a_siblings_schedule_refitted_to_another_reduction_width_computes_that_task() -> None:
    from autosearch.backends.tvm.space import TaskSpace, refitted

    source, task = _matmul(64), _matmul(96)
    postprocs = TaskSpace(task, host_target(), seed=0).context.space_generator.postprocs
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 96)).astype("float32"), rng.standard_normal((96, 32)).astype("float32")
    built = 0
    for trace in _traces(source, 4):
        sch = refitted(source, trace, task, postprocs)
        if sch is None:
            continue
        lib = tvm.compile(sch.mod, target=host_target())
        out = tvm.runtime.tensor(np.zeros((32, 32), "float32"))
        lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
        np.testing.assert_allclose(out.numpy(), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
        built += 1
    assert built >= 2  # most of a sibling's schedules carry over


def test_only_tasks_of_the_same_structure_are_offered_a_siblings_best_fastest_first_and_once() -> None:
    from autosearch.backends.tvm.space import TaskSpace
    from autosearch.networks.siblings import OFFERS_PER_ROUND, SiblingSchedules, structure_key

    mods = [_matmul(64), _matmul(96), _matmul(128), _add()]
    assert structure_key(mods[0]) == structure_key(mods[1]) == structure_key(mods[2]) != structure_key(mods[3])
    assert structure_key(_matmul(64, m=16)) != structure_key(mods[0])  # another output shape: no sibling
    workloads = [SimpleNamespace(mod=lambda m=m: m, flops=2.0 * 32 * 32 * k) for m, k in zip(mods, (64, 96, 128, 32))]
    traces = [_traces(m, 1)[0] for m in mods]
    runs = {
        i: SimpleNamespace(result=SimpleNamespace(best_trace=traces[i], best_latency=latency))
        for i, latency in ((0, 1e-5), (2, 4e-5), (3, 1e-6))
    }
    siblings = SiblingSchedules(workloads)
    postprocs = TaskSpace(mods[1], host_target(), seed=0).context.space_generator.postprocs
    offered = siblings.offers(1, runs, postprocs)
    assert 1 <= len(offered) <= OFFERS_PER_ROUND
    assert siblings.tried[1] == {traces[0], traces[2]}  # the matmuls' bests; the add is no sibling
    assert siblings.offers(1, runs, postprocs) == []  # each best is offered once
    runs[0].result.best_trace = traces[1]  # a sibling's new best is offered in turn
    assert siblings.offers(1, runs, postprocs) != [] and traces[1] in siblings.tried[1]
