"""`networks.prior_workers`: the prior pass's design-space picks in worker processes are the picks
the pass makes in its own process; a worker that dies leaves its tasks to the pass."""

from __future__ import annotations

import os
import signal
from typing import Any

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
torch = pytest.importorskip("torch")

from autosearch.backends.tvm.target import host_target  # noqa: E402
from autosearch.networks import prior_workers  # noqa: E402
from autosearch.networks.graph import import_network  # noqa: E402
from autosearch.networks.inputs import InputSpec  # noqa: E402
from autosearch.networks.prior_pass import PriorPass  # noqa: E402
from autosearch.networks.prior_workers import worker_count  # noqa: E402


@pytest.fixture(scope="module")
def graph_and_picks() -> tuple[Any, dict[int, str | None]]:
    """Two convolutions, a BatchNorm + ReLU between them and a concatenation (a DenseNet layer),
    and the pass's own picks of every task, one at a time in this process (untimed: see
    `_untimed`)."""

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 64, 3, padding=1)
            self.bn, self.conv = torch.nn.BatchNorm2d(64), torch.nn.Conv2d(64, 32, 1, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.stem(x)
            return torch.cat([y, self.conv(torch.relu(self.bn(y)))], 1)

    torch.manual_seed(0)
    x = np.random.default_rng(0).random((1, 3, 14, 14), dtype=np.float32)
    graph = import_network("layer", Layer().eval(), [InputSpec("x", "float32", x.shape)], [x], host_target())
    alone = PriorPass(graph.workloads, host_target(), 0)
    with pytest.MonkeyPatch.context() as mp:
        _untimed(mp)
        for i in range(len(graph.workloads)):
            alone.run(i)
    return graph, {i: alone.traces.get(i) for i in range(len(graph.workloads))}


def _untimed(mp: pytest.MonkeyPatch) -> None:
    """The ranked pick kept as ranked: what `register_blocks.timed_pick` (`timed_built` of what a
    worker built) would choose among it, its runners-up and variants is decided by timing, which
    a busy machine may decide either way; a task with no reduction (no pick) gets the first of
    what the worker built and checked (its unscheduled loops)."""
    from autosearch.networks import register_blocks

    def first_built(workload: Any, target: Any, trace: str | None, built: Any, seed: int = 0) -> str | None:
        return trace if trace is not None else next((b.trace for b in built if b.verified), None)

    mp.setattr(register_blocks, "timed_pick", lambda workload, target, trace, seed=0, runners_up=(): trace)
    mp.setattr(register_blocks, "timed_built", first_built)


def _ranked(graph: Any) -> list[int]:
    """The tasks with a design-space pick: the others' loop nests are chosen by timing, which a
    busy machine may decide either way."""
    from autosearch.networks.spatial import has_timed_forms
    from autosearch.search.registers import simd_bits

    bits = simd_bits(host_target())
    return [i for i, w in enumerate(graph.workloads) if not has_timed_forms(w, bits)]


# integration: worker processes start (~8 s) and pass the layer again (~20 s in all)
@pytest.mark.integration
def test_tasks_passed_in_workers_get_the_picks_of_the_pass_in_process_and_the_run_that_checked_them(
    graph_and_picks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers' picks are the in-process pass's, and each comes back with the unscheduled
    task's run that checked it (`verify.reference_of` here as the task is reported, before this
    process has checked anything of it); the tasks with no reduction are built there too, their
    loop nests checked, and get a schedule as in the pass in process."""
    from autosearch.networks import verify

    graph, picks = graph_and_picks
    monkeypatch.setattr(prior_workers, "MIN_TASKS", 2)  # the layer's two convolutions go to workers
    monkeypatch.setattr(verify, "_REFERENCES", {})  # the fixture's pass ran them in this process
    _untimed(monkeypatch)
    if worker_count(len(picks)) == 0:
        pytest.skip("one physical core: the pass runs in its own process")
    seen: list[int] = []
    checked_by_then: dict[int, bool] = {}

    def reported(i: int) -> None:
        seen.append(i)
        checked_by_then[i] = verify.reference_of(graph.workloads[i], host_target(), 0) is not None

    both = PriorPass(graph.workloads, host_target(), 0)
    both.run_all(range(len(picks)), reported)
    assert sorted(seen) == list(range(len(picks)))  # each task reported once
    ranked = _ranked(graph)
    assert all(checked_by_then[i] for i in picks if picks[i] is not None)
    assert len(ranked) < len(picks)  # the BatchNorm + ReLU and the concatenation went to workers too
    assert {i: both.traces.get(i) for i in ranked} == {i: picks[i] for i in ranked}
    assert sum(picks[i] is not None for i in ranked) >= 2  # the convolutions have picks to compare
    assert all((both.traces.get(i) is None) == (picks[i] is None) for i in picks)  # timed tasks built alike


# integration: two more passes over the layer in workers (~20 s)
@pytest.mark.integration
def test_a_worker_that_dies_leaves_its_tasks_to_the_pass(graph_and_picks: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed as the first task comes back (as a crash in TVM would end it): every task
    is still passed, with the same picks."""
    import multiprocessing

    graph, picks = graph_and_picks
    monkeypatch.setattr(prior_workers, "MIN_TASKS", 2)
    _untimed(monkeypatch)
    if worker_count(len(picks)) == 0:
        pytest.skip("one physical core: the pass runs in its own process")
    killed: list[int] = []

    def kill_a_worker(i: int) -> None:
        workers = [p for p in multiprocessing.active_children() if p.is_alive()]
        if not killed and workers:
            killed.append(workers[0].pid or 0)
            os.kill(workers[0].pid or 0, signal.SIGKILL)

    crashed = PriorPass(graph.workloads, host_target(), 0)
    crashed.run_all(range(len(picks)), kill_a_worker)
    assert killed, "no worker was running"
    assert crashed.passed == set(picks)
    ranked = _ranked(graph)
    assert {i: crashed.traces.get(i) for i in ranked} == {i: picks[i] for i in ranked}


# integration: worker processes start and die (~5 s)
@pytest.mark.integration
def test_workers_that_all_die_before_they_load_are_told_in_one_warning(
    graph_and_picks: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Every worker dying before it answers (as each does where a script calling autosearch has
    no `__main__` guard: a spawned worker reruns it) is one warning naming the cause; no task is
    reported, so the pass takes them all."""
    from autosearch.backends.tvm import space

    graph, picks = graph_and_picks
    monkeypatch.setattr(prior_workers, "MIN_TASKS", 2)
    if worker_count(len(picks)) == 0:
        pytest.skip("one physical core: the pass runs in its own process")
    monkeypatch.setattr(space, "to_plain_json", lambda exported: {"kind": "no-such-target"})  # fails in _start
    reported: list[int] = []
    with pytest.warns(UserWarning, match=r"died before it loaded .*__main__"):
        prior_workers.ranked_in_workers(
            graph.workloads, list(picks), host_target(), 0, lambda i, pick: reported.append(i), str(tmp_path)
        )
    assert reported == []


# integration: workers start, are ended past the cap and replaced, then the pass in process (~30 s)
@pytest.mark.integration
def test_a_task_past_the_workers_cap_ends_its_worker_and_is_passed_in_process(
    graph_and_picks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that holds its worker past the cap (as an LLVM build that does not end would) ends
    that worker, a new one takes the queue, and the task is left to the pass in this process:
    every task is still passed, with the same picks, and no worker is left running."""
    import multiprocessing

    graph, picks = graph_and_picks
    monkeypatch.setattr(prior_workers, "MIN_TASKS", 2)
    monkeypatch.setattr(prior_workers, "TASK_CAP_CEILING", 0.05)  # every task is past it
    monkeypatch.setattr(prior_workers, "TASK_CAP_FLOOR", 0.05)
    _untimed(monkeypatch)
    if worker_count(len(picks)) == 0:
        pytest.skip("one physical core: the pass runs in its own process")
    started: list[int] = []
    monkeypatch.setattr(prior_workers, "_Worker", _counting(prior_workers._Worker, started))
    capped = PriorPass(graph.workloads, host_target(), 0)
    capped.run_all(range(len(picks)))
    assert capped.passed == set(picks)
    assert len(started) > worker_count(len(picks))  # ended workers were replaced
    assert {i: capped.traces.get(i) for i in _ranked(graph)} == {i: picks[i] for i in _ranked(graph)}
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]


def _counting(cls: Any, started: list[int]) -> Any:
    """`cls` (a worker) that notes each one started in `started`."""

    class Counted(cls):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            started.append(self.process.pid or 0)

    return Counted
