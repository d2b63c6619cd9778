"""The scorers of a network's tasks: each task's scorer learns its own task's measurements
(`TaskScorers`), and where the prior updates in place they also learn into one model together
(`PooledPrior`), so that what the rounds learn of this CPU reaches every task after them.

Why: a task's scorer fine-tunes its copy of the prior on its own task and forgets it with the
task, so on a CPU the shipped prior never saw, every task started from the same wrong ranking.
On an AVX2 Zen 3 (the prior trained on AVX-512 CPUs), the prefix prior's first pick of a
MobileNetV2 blocked convolution was often several times slower than the best of its own first
round, and across the network's tasks it ranked that round no better than chance. Fine-tuned on the other
tasks of the same network measured on the same CPU, it ranked a held-out task's round
markedly better (leave-one-task-out; `bench/network_transfer.py`), and MobileNetV2 built faster
in the same 10 minutes (bench/README.md "MobileNetV2 against ONNX Runtime and OpenVINO, with and
without the pooled prior").

How: the pool is a `ModelAdapter` over the network's own copy of the prior. Every task scorer
forwards what it observes (the same extractor's features, grouped by task) to the pool, which
retrains by its own rule (an incremental update on what is new). A task scorer made after that
starts from a copy of the pool's model. Only a prior whose class updates in place
(`CostModel.incremental`) pools: a model fitted on the run alone, or TVM's own, has nothing to
carry from one task to the next.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from autosearch.search.adapter import ModelAdapter
from autosearch.search.scorer import Scorer

__all__ = ["PooledPrior", "TaskScorers", "task_scorers"]


class TaskScorers:
    """A fresh scorer per task, each learning its own task's measurements alone."""

    def __init__(self, make: Callable[[], Scorer]) -> None:
        self._make = make

    def __call__(self) -> Scorer:
        return self._make()


class PooledPrior(TaskScorers):
    """Task scorers that also learn into one pooled model, each starting from it (module docstring)."""

    def __init__(self, make: Callable[[], Scorer], pool: ModelAdapter) -> None:
        super().__init__(make)
        self.pool = pool

    @property
    def learned(self) -> int:
        """Results of this run the pooled model has been updated on."""
        return self.pool.rule.trained_on

    def __call__(self) -> Scorer:
        fresh = self._make()
        assert isinstance(fresh, ModelAdapter)  # `task_scorers` pools adapters only
        if self.learned:
            fresh.model = copy.deepcopy(self.pool.model)
        fresh.shares_with = self.pool
        return fresh


def task_scorers(make: Callable[[], Scorer], pool: Scorer) -> TaskScorers:
    """`PooledPrior` over `pool` (a scorer `make` gave, kept as the network's own copy) where it
    is a pretrained model that updates in place, else `TaskScorers`."""
    model = pool.model
    if isinstance(pool, ModelAdapter) and pool.pretrained and model is not None and type(model).incremental:
        return PooledPrior(make, pool)
    return TaskScorers(make)
