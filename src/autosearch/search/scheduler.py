"""Which task of a network gets the next round of measurements: Ansor's gradient rule.

The objective is the network's latency, f = sum_i w_i * g_i (w_i: how often task i runs, g_i: its
best latency so far). The next round goes to the task whose f would fall most per trial, estimated
as in Ansor (Zheng et al., OSDI'20, section 6) from its own history:

    df/dt_i ~ w_i * ( alpha * (g_i(t_i) - g_i(t_i - dt)) / dt  +  (1 - alpha) * (-g_i(t_i) / t_i) )

a backward difference over its last rounds (is it still improving?) plus an optimistic term (a task
that used few trials relative to its latency may still gain a lot). Every task first gets one
round; an `eps` share of rounds goes to a random unfinished task. (Ansor's third term, which
compares similar tasks, is left out: the tasks of one network rarely share a shape.)
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["TaskScheduler", "TaskStat"]


@dataclass
class TaskStat:
    """What the scheduler knows of a task: its weight and its best latency after each of its rounds."""

    weight: float
    best: list[float] = field(default_factory=list)  # best latency after each round (inf until one succeeds)
    trials: int = 0
    done: bool = False


class TaskScheduler:
    """Picks the next task to tune; `record` tells it what a round did."""

    def __init__(
        self, weights: Sequence[float], *, alpha: float = 0.2, window: int = 3, eps: float = 0.05, seed: int = 0
    ) -> None:
        self.tasks = [TaskStat(float(w)) for w in weights]
        self.alpha, self.window, self.eps = alpha, max(1, window), eps
        self._rng = random.Random(seed)

    def record(self, i: int, trials: int, best: float | None, done: bool = False) -> None:
        t = self.tasks[i]
        t.trials += trials
        t.best.append(best if best is not None and math.isfinite(best) else math.inf)
        t.done = t.done or done

    def gradient(self, i: int) -> float:
        """Estimated change of the network's latency per trial given to task i (negative = gain)."""
        t = self.tasks[i]
        g = t.best[-1]
        if not math.isfinite(g):
            return -math.inf  # nothing works yet: any success is a gain
        back_from = t.best[-1 - self.window] if len(t.best) > self.window else t.best[0]
        per_round = max(1, t.trials // max(1, len(t.best)))
        dt = per_round * min(self.window, max(1, len(t.best) - 1))
        backward = (g - back_from) / dt if math.isfinite(back_from) else -g / max(1, t.trials)
        optimistic = -g / max(1, t.trials)
        return t.weight * (self.alpha * backward + (1 - self.alpha) * optimistic)

    def pick(self) -> int | None:
        """The next task: first every untried task, then the steepest gradient (eps: a random one)."""
        open_ = [i for i, t in enumerate(self.tasks) if not t.done]
        if not open_:
            return None
        untried = [i for i in open_ if not self.tasks[i].best]
        if untried:
            return max(untried, key=lambda i: self.tasks[i].weight)
        if self._rng.random() < self.eps:
            return self._rng.choice(open_)
        return min(open_, key=self.gradient)
