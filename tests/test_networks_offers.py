"""`networks.offers.ConsumerLevels` and `space.consumer_moved`: a task's best schedule with its
fused consumer moved to the other tile level keeps every decision, computes what the task computes,
and is offered once per best."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from autosearch.backends.tvm.target import host_target  # noqa: E402


def _matmul_relu(m: int = 64, k: int = 64, n: int = 64):  # type: ignore[no-untyped-def]
    from tvm import te

    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    d = te.compute((m, n), lambda i, j: te.max(c[i, j], tvm.tirx.const(0, "float32")), name="D")
    return tvm.IRModule({"main": te.create_prim_func([a, b, d])})


def _fused_level(trace: str) -> int | None:
    """Which output of its 4-way tile split the trace's consumer is fused at (0 or 1), if any."""
    insts = json.loads(trace)[0]
    fused = [inst[1][1] for inst in insts if inst[0] == "ReverseComputeAt"]
    for inst in insts:
        if fused and inst[0] == "Split" and len(inst[3]) == 4 and fused[0] in inst[3]:
            return inst[3].index(fused[0])
    return None


def _fused_traces(mod, n: int = 24) -> list[str]:  # type: ignore[no-untyped-def]
    from autosearch.backends.tvm.space import TaskSpace

    traces = [trace for _, trace, _ in TaskSpace(mod, host_target(), seed=0).sample(n, set())]
    return [t for t in traces if _fused_level(t) in (0, 1)]


def _decisions(trace: str) -> list:  # type: ignore[type-arg]
    insts, decisions = json.loads(trace)
    return [d for k, d in decisions if insts[k][0].startswith("Sample")]


def test_the_consumer_moves_to_the_other_tile_level_with_every_decision_kept_and_computes_the_task() -> None:
    from autosearch.backends.tvm.space import TaskSpace, consumer_moved, trace_json

    mod = _matmul_relu()
    postprocs = TaskSpace(mod, host_target(), seed=0).context.space_generator.postprocs
    traces = _fused_traces(mod)
    assert {_fused_level(t) for t in traces} == {0, 1}  # both sketches are drawn
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 64)).astype("float32"), rng.standard_normal((64, 64)).astype("float32")
    for trace in traces[:4]:
        sch = consumer_moved(mod, trace, postprocs)
        assert sch is not None
        moved = trace_json(sch)
        assert _fused_level(moved) == 1 - _fused_level(trace)
        assert _decisions(moved)[: len(_decisions(trace)) - 1] == _decisions(trace)[:-1]  # the tiles kept
        lib = tvm.compile(sch.mod, target=host_target())
        out = tvm.runtime.tensor(np.zeros((64, 64), "float32"))
        lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
        np.testing.assert_allclose(out.numpy(), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
        back = consumer_moved(mod, moved, postprocs)
        assert back is not None and _fused_level(trace_json(back)) == _fused_level(trace)


def test_a_schedule_with_nothing_fused_after_its_tiles_is_not_moved() -> None:
    from autosearch.backends.tvm.space import TaskSpace, consumer_moved

    mod = _matmul_relu()
    space = TaskSpace(mod, host_target(), seed=0)
    traces = [trace for _, trace, _ in space.sample(24, set())]
    unfused = [t for t in traces if '"ReverseComputeAt"' not in t]
    assert unfused  # the sketch that leaves the consumer after the whole reduction is drawn
    assert all(consumer_moved(mod, t, space.context.space_generator.postprocs) is None for t in unfused)


def test_each_best_is_offered_once_and_the_schedule_it_moved_to_is_not_moved_back() -> None:
    from autosearch.backends.tvm.space import TaskSpace, trace_json
    from autosearch.networks.offers import ConsumerLevels

    mod = _matmul_relu()
    postprocs = TaskSpace(mod, host_target(), seed=0).context.space_generator.postprocs
    trace = _fused_traces(mod)[0]
    levels = ConsumerLevels([SimpleNamespace(mod=lambda: mod)])
    run = SimpleNamespace(result=SimpleNamespace(best_trace=trace))
    offered = levels.offers(0, {0: run}, postprocs)
    assert len(offered) == 1 and _fused_level(trace_json(offered[0])) == 1 - _fused_level(trace)
    assert levels.offers(0, {0: run}, postprocs) == []  # the same best: not again
    run.result.best_trace = trace_json(offered[0])  # the moved one measured fastest
    assert levels.offers(0, {0: run}, postprocs) == []  # moving it back gives what was measured
    assert levels.offers(1, {0: run}, postprocs) == []  # a task not reached yet: nothing
