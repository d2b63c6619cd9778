"""`--search decision`: an evolutionary search over decision vectors, scored without building schedules.

Why: MetaSchedule's evolutionary search builds a TVM schedule for every candidate it scores
(replay, post-processors, then features), a few hundred a second at best. With a model trained on
`trace-prefix-tokens`, a candidate is fully described by its sketch and its decision vector
(`features.decision_space`), and the model scores tens of thousands of vectors a second (`tlp`
from its per-sketch tables, `TLPModel.predict_space`; other models from the tokens). So the
population lives as vectors: each round, per sketch, random vectors and mutations of the run's
best measured ones are scored (each distinct vector once a round), the best quarter is kept and
mutated for a few generations, and only the round's picks are built (replayed and
post-processed) and measured; a vector the post-processors reject is skipped. An `eps_greedy`
share of the picks are random vectors, and at most an eighth of a round's picks share one loop
structure (`_spread`); the first round starts with every sketch's best-scored vector
(`_cover_sketches`, at most half the round). The `tlp` prior is
fine-tuned on the run's measurements (the adapter's incremental update), so a structure it
ranked high and that measured slow sinks in the next round's scores. Warm-start seeds (the store's
best schedules of the workload) are read back into sketch and vector (`adopt`) and become parents
like its own picks; random controls (`--explore control`) train the model but are not parents
(as parents they measured no better: bench/README.md, "Controls that become parents of the
decision search").

Sketches: one `DecisionSpace` per design space and compute location. A compute location is no
knob (it changes the loop structure), so the spaces come from the design spaces and from a few
uniform draws (`RandomDraws`), which sample compute locations as MetaSchedule does. Those draws
miss most locations (a depthwise conv has ~45 sketches, softmax hundreds); new sketches moved from
measured elites by MetaSchedule's `MutateComputeLocation` measured no better (bench/README.md,
"Sketch moves once the search stalls") and are gone.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from autosearch import interrupts
from autosearch.errors import InputError, WorkloadError

__all__ = ["MIN_SKETCH_POPULATION", "DecisionSearch", "check_decision_model", "sketch_population"]

#: The fewest vectors a sketch's population holds where a task's sketches share one (`sketch_population`).
MIN_SKETCH_POPULATION = 256


def sketch_population(sketches: int, population: int, shared: int | None = None) -> int:
    """Vectors a generation holds per sketch: `population`, at least 1024; with `shared`, the
    share of it each of `sketches` gets, at least `MIN_SKETCH_POPULATION` (and no more than alone).

    Why: the first round scores every sketch's population four times, and a depthwise convolution
    has up to 23 sketches: EfficientNet-B0's 13 depthwise tasks took 9-20 s each of its prior pass,
    half of the pass. 4,096 shared built it as fast (4.18 against 4.06 ms, MobileNetV2 2.01
    against 2.06 side by side, Zen 5) with the compile 216 -> 174 s (bench/README)."""
    alone = max(population, 1024)
    if shared is None:
        return alone
    return min(alone, max(MIN_SKETCH_POPULATION, shared // max(sketches, 1)))


#: Uniform draws whose sketches (with their compute locations) join the design spaces' own.
_SKETCH_DRAWS = 32
#: The most of a round's picks that may share one sketch and loop structure (`_spread`).
_PER_STRUCTURE = 1 / 8
#: The most of the first round's picks spent on covering the sketches (`_cover_sketches`).
_SKETCH_COVER = 1 / 2


def check_decision_model(scorer: Any) -> None:
    """Refuse a scorer the decision search cannot score with (it scores decision vectors through a
    trained model that reads prefix tokens); `tune-model` calls it before the network's import."""
    from autosearch.features.trace_tokens import PREFIX_EXTRACTOR

    if (
        scorer is None
        or not scorer.scores_decision_vectors
        or tuple(scorer.extractor) != PREFIX_EXTRACTOR
        or not scorer.trained
    ):
        raise InputError(
            "--search decision scores decision vectors: it needs a trained model that reads "
            f"{':'.join(PREFIX_EXTRACTOR)} (autosearch train --model tlp --extractor {':'.join(PREFIX_EXTRACTOR)})"
        )


class DecisionSearch:
    """The search behind `strategies.DecisionStrategy` (needs a `trace-prefix-tokens` model).

    context, spaces: the TuneContext and its design spaces; draws: the run's `RandomDraws` (its
    uniform draws, post-processors and record of what was proposed); adapter: the scorer (a
    `Scorer` that `scores_decision_vectors`, e.g. `ModelAdapter`); settings: `TuneSettings`
    (eps_greedy, seed); options: `strategies.DecisionSettings` (population, genetic_num_iters);
    policy: the strategy's exploration (`search.explore.Exploration`; none by
    default), through which every score is asked; shared: a population a generation shares over
    all the task's sketches (`sketch_population`; the prior pass's), else each its own."""

    def __init__(
        self,
        context: Any,
        spaces: list[Any],
        draws: Any,
        adapter: Any,
        settings: Any,
        options: Any,
        *,
        policy: Any = None,
        shared: int | None = None,
    ) -> None:
        from autosearch.backends.tvm.space import trace_json
        from autosearch.search.explore import NoExploration

        check_decision_model(adapter)
        self.context, self.adapter, self.draws, self.settings = context, adapter, draws, settings
        self.policy = policy if policy is not None else NoExploration()
        self.rng = np.random.default_rng([settings.seed, 0xDEC1])
        ir = context.mod.script()
        self._ir = ir
        self._index: dict[str, int] = {}  # sketch signature (instructions, fixed decisions) -> index
        self.sketches: list[Any] = []
        traces = [trace_json(s) for s in spaces]
        traces += [trace_json(c.sch) for c in draws.draw(_SKETCH_DRAWS, mark=False)]
        for text in traces:
            self._add_sketch(text)
        if not self.sketches:
            raise WorkloadError("no design space of this workload can be searched as decision vectors")
        self.population = sketch_population(len(self.sketches), int(options.population), shared)
        self.iters = max(1, int(options.genetic_num_iters))
        self.best: list[tuple[float, int, np.ndarray]] = []  # (latency, sketch, vector) of measured results
        self.tried: set[tuple[int, bytes]] = set()  # vectors proposed so far
        self._origin: dict[int, tuple[int, np.ndarray]] = {}  # id(candidate) -> (sketch, vector)
        self._scored: dict[tuple[int, bytes], float] = {}  # this round's scores (the model is fixed within a round)

    def _add_sketch(self, text: Any) -> int | None:
        """Index of a new sketch read from a trace, or None (unreadable, no knob, or held already)."""
        placed = self._place(text)
        return placed[0] if placed is not None and placed[2] else None

    def _place(self, text: Any) -> tuple[int, np.ndarray, bool] | None:
        """(sketch, vector, whether the sketch is new) of a schedule's trace: its sketch is held
        from now on; None where the decision space cannot read it or it has no knob."""
        from autosearch.features.decision_space import DecisionSpace, SketchHead, decisions_by_inst

        try:
            head = SketchHead.read(text)
        except Exception:  # a trace the decision space cannot read: MetaSchedule's search can
            return None
        if not head.knobs:
            return None
        s = self._index.get(head.signature)
        if s is not None:  # a sketch held already: its space reads the trace's decisions
            v = self.sketches[s].vector(decisions_by_inst(head.representative))
            return None if v is None else (s, v, False)
        try:
            space = DecisionSpace(text, self._ir, head=head)
        except Exception:
            return None
        self._index[head.signature] = len(self.sketches)
        self.sketches.append(space)
        return len(self.sketches) - 1, space.current.copy(), True

    def propose(self, n: int) -> list[Any]:
        """Up to n new candidates: the best-scored vectors of every sketch's evolved population,
        spread over loop structures (`_spread`), and an `eps_greedy` share of random ones."""
        if n <= 0:
            return []
        self._scored.clear()  # the model was fine-tuned since the last round
        pool: list[tuple[float, int, np.ndarray, bytes]] = []
        for s, space in enumerate(self.sketches):
            pop = self._evolve(s, space)
            scores = self._score(s, pop)
            shapes = space.structure(pop)
            pool += [(float(sc), s, v, shape.tobytes()) for sc, v, shape in zip(scores, pop, shapes)]
        pool.sort(key=lambda t: -t[0])
        n_random = round(self.settings.eps_greedy * n)
        order = _spread(pool, max(1, math.ceil(_PER_STRUCTURE * n)))
        if not self.tried:  # nothing proposed yet: the first round covers the sketches before the prior's top
            order = _cover_sketches(pool, max(1, int(_SKETCH_COVER * n)), order)
        out = self._build(order, n - n_random)
        if len(out) < n:
            out += self._build(self._random_vectors(), n - len(out))
        return out

    def notify(self, candidates: list[Any], measured: list[Any]) -> None:
        """Measured results of a round: the fastest of the search's own picks become the next
        rounds' parents; a schedule it did not propose (a random control) does not."""
        own = [(c, r) for c, r in zip(candidates, measured) if id(c) in self._origin]
        self.adopt(
            [c for c, _ in own],
            [float(np.median(r.latencies)) if r.status == "ok" and r.latencies else None for _, r in own],
        )

    def adopt(self, candidates: list[Any], latencies: list[float | None]) -> None:
        """Measured schedules (latency in seconds, None: failed) join the parents. One the search
        did not propose (a warm-start seed from the store) is read back into its sketch and vector
        (`_place`; a sketch not held yet is added): a second run starts where the first ended."""
        from autosearch.backends.tvm.space import trace_json

        for c, lat in zip(candidates, latencies):
            origin = self._origin.pop(id(c), None)
            if lat is None or not math.isfinite(lat):
                continue
            if origin is None:
                placed = self._place(trace_json(c.sch))
                if placed is None:
                    continue
                origin = placed[:2]
                self.tried.add((origin[0], origin[1].tobytes()))
            self.best.append((lat, origin[0], origin[1]))
        self.best.sort(key=lambda t: t[0])
        del self.best[64:]

    # -- the search ------------------------------------------------------------------------------
    def _score(self, s: int, x: np.ndarray) -> np.ndarray:
        """Scores of vectors `x` of sketch `s`; each distinct vector is scored once a round.

        Why: a generation repeats vectors (a small space's mutants and random draws collide: 89% of
        softmax's scored rows were repeats) and keeps the best quarter of the last one. Not under
        an exploration policy whose scores are relative to the batch (`--explore control`)."""
        if self.policy.relative:
            return np.asarray(self.policy.score_space(self.adapter, self.sketches[s], x), dtype=np.float64)
        uniq, inverse = np.unique(x, axis=0, return_inverse=True)
        keys = [(s, row.tobytes()) for row in uniq]
        todo = [i for i, key in enumerate(keys) if key not in self._scored]
        if todo:
            new = np.asarray(self.policy.score_space(self.adapter, self.sketches[s], uniq[todo]), dtype=np.float64)
            self._scored.update((keys[i], float(v)) for i, v in zip(todo, new))
        return np.asarray([self._scored[key] for key in keys], dtype=np.float64)[inverse.reshape(-1)]

    def _evolve(self, s: int, space: Any) -> np.ndarray:
        """This round's population of one sketch: random vectors and the measured best's mutants,
        kept to the best-scored quarter and mutated, `iters` times."""
        pop = self._initial(s, space)
        for _ in range(self.iters):
            interrupts.check()  # a round scores every sketch's population: Ctrl-C acts between them
            scores = self._score(s, pop)
            keep = pop[np.argsort(-scores, kind="stable")[: max(1, self.population // 4)]]
            fresh = space.sample(self.population // 4, self.rng)
            pop = np.concatenate([keep, space.mutate(keep, self.rng), space.mutate(keep, self.rng), fresh])
        return np.unique(pop, axis=0)

    def _initial(self, s: int, space: Any) -> np.ndarray:
        """Random vectors, and one- and two-knob mutants of the sketch's fastest measured ones."""
        elites = self._elites(s)
        pop = space.sample(self.population, self.rng)
        if elites:
            pop = np.concatenate([pop, self._local_moves(space, elites, self.population // (4 * len(elites)))])
        return pop

    def _elites(self, s: int) -> list[np.ndarray]:
        """The sketch's fastest measured vectors (at most 16), fastest first."""
        return [v for _, si, v in self.best if si == s][:16]

    def _local_moves(self, space: Any, elites: list[np.ndarray], per: int) -> np.ndarray:
        """`per` (at least 1) one-knob mutants of each elite, and a further one-knob move of each
        of those: the neighbourhood of the measured bests a round refines (the gradient search's
        screen makes the same moves)."""
        near = space.mutate(np.repeat(np.stack(elites), max(1, per), axis=0), self.rng)
        return np.concatenate([near, space.mutate(near, self.rng)])

    def _random_vectors(self) -> Any:
        for _ in range(64 * len(self.sketches)):
            s = int(self.rng.integers(len(self.sketches)))
            yield s, self.sketches[s].sample(1, self.rng)[0]

    def _build(self, vectors: Any, n: int) -> list[Any]:
        """Up to n new candidates from (sketch, vector) pairs in order: replayed, post-processed,
        never one proposed or measured before in this run."""
        out: list[Any] = []
        if n <= 0:
            return out
        for s, v in vectors:
            interrupts.check()
            key = (s, v.tobytes())
            if key in self.tried:
                continue
            self.tried.add(key)
            cand = self._replay(self.sketches[s].trace(v))
            if cand is None or not self.draws.claim([cand], 1):
                continue
            self._origin[id(cand)] = (s, v)
            out.append(cand)
            if len(out) >= n:
                break
        return out

    def _replay(self, trace: list[Any]) -> Any:
        """The candidate of a prefix trace: replayed, then post-processed; None if they refuse it."""
        from tvm.s_tir.meta_schedule import MeasureCandidate
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.schedule import Trace

        from autosearch.backends.tvm.space import replay_postprocessed

        sch = replay_postprocessed(
            self.context.mod, self.draws.postprocs, lambda s: Trace.apply_json_to_schedule(trace, s)
        )
        return None if sch is None else MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def _cover_sketches(
    pool: list[tuple[float, int, np.ndarray, bytes]], k: int, then: Iterator[tuple[int, np.ndarray]]
) -> Iterator[tuple[int, np.ndarray]]:
    """Each sketch's best-scored vector first (sketches in the order of their best scores, at most
    `k` of them), then `then`.

    Why: the prior's top of a round can all come from one sketch (e.g. a dense layer's sketch without
    a cache-write stage), and the search only mutates sketches with a measured result: a sketch the
    prior underrates is then never measured at all. One pick per sketch in the first round lets the
    measurements, not the prior alone, choose which sketches the later rounds refine."""
    firsts: dict[int, np.ndarray] = {}
    for _, s, v, _shape in pool:
        if s not in firsts:
            firsts[s] = v
            if len(firsts) >= k:
                break
    yield from firsts.items()
    yield from then


def _spread(pool: list[tuple[float, int, np.ndarray, bytes]], cap: int) -> Iterator[tuple[int, np.ndarray]]:
    """(sketch, vector) pairs of a score-sorted pool, at most `cap` of one sketch and loop structure
    (`DecisionSpace.structure`) first, then the rest in score order.

    Why: a confident prior puts one parallel/vector/unroll structure at the top with every inner
    tile size, and the round's picks would all measure it; when the prior is wrong about that
    structure the whole round is lost, and the next round's mutants of those picks stay near it."""
    count: Counter[tuple[int, bytes]] = Counter()
    later: list[tuple[int, np.ndarray]] = []
    for _, s, v, shape in pool:
        if count[s, shape] < cap:
            count[s, shape] += 1
            yield s, v
        else:
            later.append((s, v))
    yield from later
