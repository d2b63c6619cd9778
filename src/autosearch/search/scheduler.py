"""Which task of a network gets the next round of measurements: Ansor's gradient rule.

The objective is the network's latency, f = sum_i w_i * g_i (w_i: how often task i runs, g_i: its
best latency so far). The next round goes to the task whose f would fall most in one round,
estimated as in Ansor (Zheng et al., OSDI'20, section 6, and its `task_scheduler.py`) from its
history, with t_i counted in rounds (all rounds of a network run have the same size):

    df/dt_i ~ w_i * ( alpha * (g_i(t_i) - g_i(t_i - dt)) / dt  +  (1 - alpha) * (g_next - g_i(t_i)) )
    g_next  = min( g_i - g_i / t_i,  beta * C_i / max_{k similar to i} C_k / g_k )

a backward difference over its last rounds (is it still improving?) plus a forward, optimistic
estimate: a task that had few rounds may still gain, and a task far slower per FLOP than the
best similar task can likely reach 1/beta of that task's FLOP/s. Similar: the same operator
(`conv2d`, `conv2d1`, ... are one kind) and FLOP counts in the same band of a factor 1.618
(Ansor's `derive_similarity_tag`). Why the similar-task term: on ResNet-18 without it, `conv2d8`
stayed far below its sibling `conv2d1`'s throughput after its first round, and got no more rounds
(its own history showed no gain). Why rounds, not trials: the similar-task gap is a whole round's
gain; set against per-trial gains (a round's size smaller) it won every pick, and one ResNet-50
task of weight 1 took about a third of a 10-minute run's trials while most of its tasks had one
round (bench/README.md "Whole models against PyTorch"). The similar-task term lapses while a task
gains less than 1% over its last `window` rounds: a task that does not follow its siblings (a 3x3
convolution on 7x7 images against the same FLOPs on 14x14) would otherwise hold the term forever,
since its own estimate g_i / t_i shrinks and the siblings' rate does not: at 30 minutes
ResNet-50's `conv2d181` (weight 1) took 3,104 of 4,848 trials, none faster after its 292nd, while
most tasks had 2-6 rounds. Every task first gets one round; an `eps`
share of rounds goes to a random unfinished task.

The first pass goes in order of weight x FLOPs (the task's share of the network's arithmetic): under a
budget in minutes it may end before every task had a round, and the tasks left then keep the
prior's schedule (`networks.prior`).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["TaskScheduler", "TaskStat", "task_kind"]

STALL_GAIN = 0.01  # a best that falls less than this over `window` rounds is timing noise, not a gain


def task_kind(name: str) -> str:
    """The operator a task computes, from its name: Relax numbers repeated ops (`conv2d8`,
    `fused_batch_norm3_add2_relu3`), so the kind is the name without those numbers."""
    return re.sub(r"(?<=[A-Za-z])\d+(?=_|$)", "", name.rsplit("/", 1)[-1])


def _flop_band(flops: float) -> int:
    """Ansor's FLOP band: floor(log_1.618(FLOPs + 1)); similar tasks share kind and band."""
    return int(math.log(flops + 1.0, 1.618))


@dataclass
class TaskStat:
    """What the scheduler knows of a task: its weight and its best latency after each of its rounds."""

    weight: float
    best: list[float] = field(default_factory=list)  # best latency after each round (inf until one succeeds)
    trials: int = 0
    done: bool = False
    flops: float | None = None  # floating-point operations of one run (C_i)
    kind: str = ""  # tasks of one kind (operator) are compared by FLOP/s; "" compares with none


class TaskScheduler:
    """Picks the next task to tune; `record` tells it what a round did."""

    def __init__(
        self,
        weights: Sequence[float],
        *,
        flops: Sequence[float | None] | None = None,
        kinds: Sequence[str] | None = None,
        alpha: float = 0.2,
        beta: float = 2.0,
        window: int = 3,
        eps: float = 0.05,
        seed: int = 0,
    ) -> None:
        n = len(weights)
        flops = list(flops) if flops is not None else [None] * n
        kinds = list(kinds) if kinds is not None else [""] * n
        if len(flops) != n or len(kinds) != n:
            raise ValueError(f"{n} weights but {len(flops)} FLOP counts and {len(kinds)} kinds")
        self.tasks = [TaskStat(float(w), flops=f, kind=k) for w, f, k in zip(weights, flops, kinds)]
        self.alpha, self.beta, self.window, self.eps = alpha, beta, max(1, window), eps
        self._rng = random.Random(seed)

    def record(self, i: int, trials: int, best: float | None, done: bool = False) -> None:
        t = self.tasks[i]
        t.trials += trials
        t.best.append(best if best is not None and math.isfinite(best) else math.inf)
        t.done = t.done or done

    def close(self, i: int) -> None:
        """No more rounds for task i (a deadline cannot hold its next one; a shorter may fit)."""
        self.tasks[i].done = True

    def gradient(self, i: int) -> float:
        """Estimated change of the network's latency if task i gets the next round (negative = gain)."""
        t = self.tasks[i]
        g = t.best[-1]
        if not math.isfinite(g):
            return -math.inf  # nothing works yet: any success is a gain
        rounds = len(t.best)
        back_from = t.best[-1 - self.window] if rounds > self.window else t.best[0]
        dt = min(self.window, max(1, rounds - 1))
        backward = (g - back_from) / dt if math.isfinite(back_from) else -g / rounds
        g_next = g - g / rounds
        reach = self._similar_best_rate(i) if not self._stalled(t) else None
        if reach is not None and t.flops:
            g_next = min(g_next, self.beta * t.flops / reach)
        return t.weight * (self.alpha * backward + (1 - self.alpha) * (g_next - g))

    def _stalled(self, t: TaskStat) -> bool:
        """No real gain (STALL_GAIN) over the task's last `window` rounds: it has shown it does not
        follow its siblings' FLOP/s, so their rate stops counting for it (until it gains again)."""
        if len(t.best) <= self.window:
            return False
        before, now = t.best[-1 - self.window], t.best[-1]
        return math.isfinite(before) and now > before * (1.0 - STALL_GAIN)

    def _similar_best_rate(self, i: int) -> float | None:
        """The highest FLOP/s any task similar to i (i included) has reached; None without a sibling."""
        me = self.tasks[i]
        if not me.kind or not me.flops:
            return None
        band = _flop_band(me.flops)
        rates = [
            t.flops / t.best[-1]
            for t in self.tasks
            if t.kind == me.kind
            and t.flops
            and _flop_band(t.flops) == band
            and t.best
            and math.isfinite(t.best[-1])
            and t.best[-1] > 0
        ]
        return max(rates) if len(rates) > 1 else None

    def pick(self) -> int | None:
        """The next task: first every untried task, then the steepest gradient (eps: a random one)."""
        open_ = [i for i, t in enumerate(self.tasks) if not t.done]
        if not open_:
            return None
        untried = [i for i in open_ if not self.tasks[i].best]
        if untried:  # the largest share of the network's work first: a time budget may end the first pass
            return max(
                untried, key=lambda i: (self.tasks[i].weight * (self.tasks[i].flops or 0.0), self.tasks[i].weight)
            )
        if self._rng.random() < self.eps:
            return self._rng.choice(open_)
        return min(open_, key=self.gradient)
