"""A workload's MetaSchedule design space and random schedules drawn from it.

Sampling goes through MetaSchedule's own `ReplayTrace` strategy: each candidate is a design-space
trace with fresh random decisions, post-processed and validated exactly as tuning would do.
Candidates are deduplicated by their trace, so a group never holds the same schedule twice.
"""

from __future__ import annotations

import json
import math
from typing import Any

from autosearch import interrupts
from autosearch.errors import WorkloadError, one_line
from autosearch.hashing import schedule_hash

__all__ = [
    "NoDesignSpace",
    "TaskSpace",
    "generate_spaces",
    "refitted",
    "replay_postprocessed",
    "replayed",
    "to_plain_json",
    "trace_json",
]


def trace_json(sch: Any) -> str:
    """The stored form of a schedule: its full trace (decisions and post-processing) as JSON."""
    return json.dumps(to_plain_json(sch.trace.as_json()), separators=(",", ":"))


def replayed(mod: Any, trace: str) -> Any:
    """`mod` scheduled by a stored trace (`trace_json`'s text, post-processing included), None
    where it does not apply."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    sch = Schedule(mod)
    try:
        Trace.apply_json_to_schedule(json.loads(trace), sch)
    except Exception:  # a trace that does not apply: no schedule
        interrupts.check()
        return None
    return sch


def _fitted_tiles(factors: list[int], extent: int) -> list[int]:
    """Tile factors of a split of a loop of `extent`: the inner ones kept where each divides what
    is left, the outermost taking the rest (as given where they already multiply to `extent`)."""
    if math.prod(factors) == extent:
        return factors
    rest, inner = extent, []
    for f in reversed(factors[1:]):
        f = f if f > 0 and rest % f == 0 else 1
        inner.append(f)
        rest //= f
    return [rest, *reversed(inner)]


def refitted(source: Any, trace: str, mod: Any, postprocs: Any) -> Any:
    """`mod` scheduled by the stored `trace` of another task, `source`, of the same loop structure
    (a 1x1 convolution of another input width), each tile split refitted to `mod`'s loop extents
    (`_fitted_tiles`), then post-processed; None where it does not apply."""
    origin = replayed(source, trace)
    if origin is None:
        return None

    def replay(sch: Any) -> None:
        def fit(inst: Any, inputs: Any, _attrs: Any, decision: Any) -> Any:
            if inst.kind.name != "SamplePerfectTile":
                return decision
            extent = getattr(sch.get(inputs[0]).extent, "value", None)
            factors = [int(f) for f in decision]
            return factors if extent is None else _fitted_tiles(factors, int(extent))

        origin.trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=fit)

    return replay_postprocessed(mod, postprocs, replay)


def replay_postprocessed(mod: Any, postprocs: Any, replay: Any, seed: int | None = None) -> Any:
    """A schedule of `mod`: `replay(sch)` applies a trace's instructions, then MetaSchedule's
    post-processors run, marked as MetaSchedule marks them; None if the replay or a
    post-processor refuses it (a decision the sketch cannot take)."""
    from tvm.s_tir import Schedule

    sch = Schedule(mod) if seed is None else Schedule(mod, seed=seed)
    try:
        replay(sch)
        sch.enter_postproc()  # a replay of the trace drops what follows: the post-processors rewrite it
        if not all(p.apply(sch) for p in postprocs):
            return None
    except Exception:  # a decision the replay or the post-processors reject: not a schedule
        return None
    return sch


def to_plain_json(obj: Any) -> Any:
    """TVM containers and immediates (as found in trace / record JSON) to plain Python."""
    from tvm.tirx import FloatImm, IntImm

    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (IntImm, FloatImm)):
        return obj.value
    if isinstance(obj, dict) or hasattr(obj, "items"):
        return {str(to_plain_json(k)): to_plain_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) or hasattr(obj, "__len__"):
        return [to_plain_json(x) for x in obj]
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


class NoDesignSpace(WorkloadError):
    """MetaSchedule generated no design space for a workload: there is no schedule to draw."""


def generate_spaces(context: Any) -> list[Any]:
    """A TuneContext's design spaces, with TVM's warning for a pooling task's TOPI-only
    `schedule_rule` kept off the screen (`native_log.TVM_NOISE`): MetaSchedule's default rules
    apply, so the line told a user nothing, twice per pooling task of a network."""
    from autosearch.native_log import dropped

    with dropped():
        return list(context.generate_design_space())


class TaskSpace:
    """Design space of one workload on one target; `sample()` draws unseen random schedules."""

    def __init__(self, mod: Any, target: Any, *, seed: int = 0, num_threads: int = 2, name: str = "task") -> None:
        from tvm.s_tir import meta_schedule as ms

        from autosearch.backends.tvm.intrinsics import register_tensor_intrinsics
        from autosearch.backends.tvm.lowp import space_generator

        register_tensor_intrinsics(target)
        self.mod = mod
        self.target = target
        self.context = ms.TuneContext(
            mod=mod,
            target=target,
            space_generator=space_generator(mod, target),
            search_strategy="replay-trace",
            task_name=name,
            rand_state=seed,
            num_threads=num_threads,
        )
        try:
            self.spaces = generate_spaces(self.context)
        except Exception as exc:
            raise WorkloadError(f"MetaSchedule cannot build a design space for {name}: {one_line(exc)}") from None
        if not self.spaces:
            raise NoDesignSpace(f"{name} has no tunable design space on {target.kind.name}")
        self._started = False

    @property
    def decides(self) -> bool:
        """Whether any design space has a random decision; False: each space is one fixed schedule
        (a network's reshape or transpose), so random sampling draws the same schedule again."""
        return any(len(sch.trace.decisions) > 0 for sch in self.spaces)

    def sample(self, n: int, seen: set[str], max_rounds: int = 8) -> list[tuple[Any, str, str]]:
        """Up to n new candidates as (MeasureCandidate, trace JSON, schedule hash); adds to `seen`.

        Returns fewer when the space seems exhausted (rounds without a new schedule).
        """
        if not self._started:
            self.context.pre_tuning(max_trials=1 << 30, num_trials_per_iter=max(n, 16), design_spaces=self.spaces)
            self._started = True
        out: list[tuple[Any, str, str]] = []
        dry = 0
        while len(out) < n and dry < max_rounds:
            cands = self.context.generate_measure_candidates() or []
            new = 0
            for c in cands:
                text = trace_json(c.sch)
                h = schedule_hash(text)
                if h in seen:
                    continue
                seen.add(h)
                out.append((c, text, h))
                new += 1
                if len(out) == n:
                    break
            dry = 0 if new else dry + 1
        return out
