"""`autosearch tune` / `apply` end to end on one tiny operator, and the bad-input cases.

One real tuning run (softmax 256x256, 16 trials: a round of 8 and one of 4 new schedules, then 4
trials confirming the 2 fastest; the shipped pretrained model) is shared by the tests of this
module that take `tuned`; they and the control-rounds run are marked `integration` (`make
test-integration`). Every other case fails before any measurement, or is one short `tune` call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autosearch.cli import main
from conftest import made_once

WL = "softmax/256x256"
SMALL = [
    "--trials",
    "16",
    "--trials-per-round",
    "8",
    "--population",
    "16",
    "--genetic-iters",
    "1",
    "--repeats",
    "2",
    "--min-repeat-ms",
    "1",
    "--screen",  # on, as by default, over 64 draws instead of 512: ~5 s less here
    "64",
]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One `autosearch tune --json` run (one per test run: `made_once`); returns its summary, db
    and output dir."""
    import contextlib
    import io

    def make(tmp: Path) -> None:
        db, out = tmp / "t.db", tmp / "out"
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            try:
                main(["tune", WL, "--model", "pretrained", *SMALL, "--db", str(db), "--out", str(out)] + ["--json"])
            except SystemExit as exc:
                assert not exc.code, buf.getvalue()
        text = buf.getvalue()
        (tmp / "summary.json").write_text(text[text.index("{") :])

    tmp = made_once(tmp_path_factory, "tune", make)
    summary = json.loads((tmp / "summary.json").read_text())
    return {"summary": summary, "db": tmp / "t.db", "out": tmp / "out"}


@pytest.mark.integration
def test_summary_is_complete(tuned: dict) -> None:
    s = tuned["summary"]
    assert s["workload"] == WL and s["model"] == "pretrained"
    assert s["search"] == "evolutionary"  # `--search auto` with the PerStoreFeature prior
    assert s["trials_measured"] == 16 and s["trials_ok"] >= 1
    assert s["best_latency_s"] > 0 and s["untuned_latency_s"] > 0
    assert s["reference"].startswith("PyTorch") and s["reference_latency_s"] > 0
    for k in ("search", "features", "predict", "update", "build", "run"):
        assert k in s["time_breakdown"]["seconds"]
    saved = json.loads((tuned["out"] / "breakdown.json").read_text())
    assert saved["total_s"] > 0
    assert saved["calls"]["search:screen"] == 1  # the first round screened, only it
    # build workers are other processes: the machine-wide count sees them (>= 1 of the cores busy)
    assert saved["cores_busy"]["build"] >= 0.5


def test_breakdown_counts_busy_cores_exclusively_per_section(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from autosearch.search import breakdown

    tb = breakdown.TimeBreakdown()
    with tb.section("search"):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.3:  # this process alone keeps one core busy
            pass
    assert tb.to_dict()["cores_busy"]["search"] >= 0.7
    # the arithmetic, on a fake machine clock: a child's CPU is not its parent's
    clock = iter([0.0, 10.0, 11.0, 14.0, 18.0, 20.0, 21.0])
    monkeypatch.setattr(breakdown, "busy_cpu_seconds", lambda: next(clock))
    tb = breakdown.TimeBreakdown()  # cpu0 = 0
    with tb.section("search"), tb.section("features"):  # search starts at 10, features runs 11 .. 14
        pass
    # search ends at 18: 8 busy seconds, 3 of them the child's; stop() reads 20 for `other`
    tb.stop()
    assert tb.cpu["features"] == 3.0 and tb.cpu["search"] == 5.0 and tb.cpu["other"] == 20.0 - 8.0
    again = breakdown.TimeBreakdown.from_dict(tb.to_dict())
    assert again.seconds == {k: round(v, 4) for k, v in tb.seconds.items()} and again.total == round(tb.total or 0, 4)


@pytest.mark.integration
def test_every_measured_candidate_is_stored_with_features(tuned: dict) -> None:
    from autosearch.features.per_store import EXTRACTOR
    from autosearch.store import Store

    with Store(tuned["db"], readonly=True) as st:
        rows = list(st.measurements())
        assert len(rows) == 16  # 16 trials, 16 distinct schedules
        assert all(r.source.startswith("tune:pretrained:") for r in rows)
        feats = list(st.iter_features(extractor=EXTRACTOR))
        assert len(feats) == 16


@pytest.mark.integration
def test_apply_reproduces_the_best_schedule(tuned: dict, capsys: pytest.CaptureFixture[str]) -> None:
    from autosearch.backends.tvm.space import trace_json
    from autosearch.search.apply import apply_best
    from autosearch.store import Store

    with Store(tuned["db"], readonly=True) as st:
        ok = [r for r in list(st.measurements()) if r.status == "ok"]
    best = min(ok, key=lambda r: r.median)  # the run's best is the fastest it measured
    _, sch = apply_best(tuned["out"])
    assert trace_json(sch) == best.schedule  # the replayed trace is the measured one
    assert 'if __name__ == "__main__"' in (tuned["out"] / "best_schedule.py").read_text()
    code, out, _ = _run(capsys, ["apply", str(tuned["out"]), "--no-show"])
    assert code == 0 and "re-applied" in out


@pytest.mark.integration
def test_best_schedule_script_runs(tuned: dict, capsys: pytest.CaptureFixture[str]) -> None:
    import runpy

    runpy.run_path(str(tuned["out"] / "best_schedule.py"), run_name="__main__")
    assert "median" in capsys.readouterr().out


@pytest.mark.integration
def test_convergence_plot(tuned: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "conv.png"
    code, _, err = _run(capsys, ["report-tuning", str(tuned["out"]), "--out", str(png)])
    assert code == 0, err
    assert png.stat().st_size > 1000
    # a history committed xz-compressed (bench/results/*.json.xz) reads the same; a broken one is one line
    import lzma

    packed = tmp_path / "runs.json.xz"
    packed.write_bytes(lzma.compress((tuned["out"] / "history.json").read_bytes()))
    code, _, err = _run(capsys, ["report-tuning", str(packed), "--out", str(tmp_path / "xz.png")])
    assert code == 0, err
    assert (tmp_path / "xz.png").stat().st_size > 1000
    packed.write_bytes(b"not xz")
    code, _, err = _run(capsys, ["report-tuning", str(packed), "--out", str(tmp_path / "bad.png")])
    assert code == 2 and "is not valid JSON (xz)" in err and "Traceback" not in err


def test_interrupt_keeps_measured_records(tmp_path: Path) -> None:
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.backends.tvm.target import host_target
    from autosearch.search.model_spec import make_scorer
    from autosearch.search.strategies import EvolutionarySettings
    from autosearch.search.tune import TuneRun, TuneSettings, tune
    from autosearch.store import Store
    from autosearch.workloads.module import resolve_workload_spec

    def stop(_r):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    settings = TuneSettings(trials=16, trials_per_round=8)
    evolution = EvolutionarySettings(population=16, genetic_num_iters=1)
    ev = EvaluatorSettings(1, 2, 1)

    with Store(tmp_path / "i.db") as st:
        r = tune(
            resolve_workload_spec(WL),
            host_target(),
            evolution,
            make_scorer("random"),
            settings,
            store=st,
            evaluator=ev,
            out_dir=tmp_path / "o",
            progress=False,
            on_round=stop,
        )
        assert r.interrupted and r.trials == 8 and r.best_latency is not None
        assert st.count(r.workload_key, r.target) == 8
        # a second run starts from the store's best schedules (what `tune-model` does per task)
        again = TuneRun(
            resolve_workload_spec(WL), host_target(), evolution, make_scorer("random"), settings, store=st, evaluator=ev
        )
        # every ok row replays (a random schedule may time out on a loaded machine: not an ok row)
        rows = st.best(r.workload_key, r.target, 16)
        assert 1 <= len(rows) <= 8 and again.warm_start(st) == len(rows)
        again.strategy.close()
        assert again.result.best_latency == rows[0].median and again.result.best_trial == 0
        assert again.result.best_trace == rows[0].schedule
    assert (tmp_path / "o" / "best.json").is_file()


# integration: two short runs on one workload (~10 s)
@pytest.mark.integration
def test_a_run_started_from_an_outside_schedule_measures_it_first_and_the_search_keeps_it_as_a_parent(
    tmp_path: Path,
) -> None:
    """`TuneRun.start_from` (what `tune-model` does with the prior's pick): the schedule is
    measured as a trial of its source, is the run's best so far, joins the decision search's
    parents; a trace that does not apply to the workload is left out, not an error."""
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.backends.tvm.target import host_target
    from autosearch.search.model_spec import make_scorer
    from autosearch.search.strategies import DecisionSettings
    from autosearch.search.tune import TuneRun, TuneSettings
    from autosearch.workloads.module import resolve_workload_spec

    settings = TuneSettings(trials=24, trials_per_round=8)
    small, ev = DecisionSettings(population=16, genetic_num_iters=1), EvaluatorSettings(1, 2, 1)

    def run_of(spec: str) -> TuneRun:
        scorer = make_scorer("pretrained-prefix", target=host_target())
        return TuneRun(resolve_workload_spec(spec), host_target(), small, scorer, settings, evaluator=ev)

    first = run_of(WL)
    assert first.step() and first.result.best_trace is not None
    first.strategy.close()
    other = run_of("batch_matmul/1x128x128x128")
    assert other.start_from([first.result.best_trace], "prior") == 0 and other.result.trials == 0
    other.strategy.close()

    run = run_of(WL)
    assert run.start_from([first.result.best_trace], "prior") == 1
    assert run.result.trials == 1 and run.result.history[0]["by"] == "prior"
    assert run.result.best_trace == first.result.best_trace and run.result.best_trial == 1
    assert [lat for lat, *_ in run.strategy.search.best] == [run.result.best_latency]
    assert run.step() and run.result.trials == 9  # the search goes on from it
    run.strategy.close()


# integration: a tune run of two rounds (~10 s)
@pytest.mark.integration
def test_control_rounds_mix_random_controls_into_the_models_picks(tmp_path: Path) -> None:
    """`--explore control`: every round carries controls from the random-scored search, all
    measured schedules are distinct, and the store marks the controls; with `screen`, the first
    round takes its picks from the screened draws, and still nothing is measured twice."""
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.backends.tvm.target import host_target
    from autosearch.search.model_spec import make_scorer
    from autosearch.search.strategies import EvolutionarySettings
    from autosearch.search.tune import TuneSettings, tune
    from autosearch.store import Store
    from autosearch.workloads.module import resolve_workload_spec

    with Store(tmp_path / "c.db") as st:
        r = tune(
            resolve_workload_spec(WL),
            host_target(),
            EvolutionarySettings(explore="control", population=16, genetic_num_iters=1, screen=32),
            make_scorer("pretrained"),
            TuneSettings(trials=16, trials_per_round=8),
            store=st,
            evaluator=EvaluatorSettings(1, 2, 1),
            progress=False,
            baseline=False,
            reference=False,
        )
        assert r.trials == 16 and r.best_latency is not None
        assert r.breakdown["calls"]["search:screen"] == 1  # the first round only
        for rnd in range(2):
            flags = [h["control"] for h in r.history if h["round"] == rnd]
            assert 1 <= sum(flags) < len(flags), flags  # controls and picks in every round
            assert all(h["explore"] is not None for h in r.history)
        rows = list(st.measurements(r.workload_key, r.target))
        assert len({row.schedule for row in rows}) == len(rows) == 16
        assert sum(bool((row.extra or {}).get("control")) for row in rows) == sum(h["control"] for h in r.history)


def test_random_draws_are_distinct_and_skip_what_was_proposed() -> None:
    from autosearch.backends.tvm.target import host_target
    from autosearch.search.strategies import RandomDraws, design_space
    from autosearch.search.tune import TuneSettings
    from autosearch.workloads.module import resolve_workload_spec

    ctx, spaces = design_space(resolve_workload_spec(WL), host_target(), TuneSettings(), None)
    draws = RandomDraws(ctx, spaces, seed=0)
    first = draws.draw(6)
    assert len(first) == 6 and all(not draws.fresh(c) for c in first)  # drawn = seen
    seen = RandomDraws(ctx, spaces, seed=1)
    for c in first:  # six distinct schedules
        assert seen.fresh(c)
        seen.mark([c])
    again = RandomDraws(ctx, spaces, seed=0)
    again.mark(first)  # the same seed, but what was marked is never drawn again
    more = again.draw(6)
    assert len(more) == 6 and all(seen.fresh(c) for c in more)


def test_screen_measures_the_best_scored_draws_and_leaves_the_rest_to_the_search() -> None:
    import numpy as np

    from autosearch.backends.tvm.target import host_target
    from autosearch.errors import InputError
    from autosearch.features.per_store import extract_features
    from autosearch.search.strategies import EvolutionarySettings, RandomDraws, design_space, screen_picks
    from autosearch.search.tune import TuneSettings
    from autosearch.workloads.module import resolve_workload_spec

    ctx, spaces = design_space(resolve_workload_spec(WL), host_target(), TuneSettings(), None)
    pool = RandomDraws(ctx, spaces, seed=0).draw(12, mark=False)  # what a pool of seed 0 draws too

    def score(cands):  # type: ignore[no-untyped-def]  # any deterministic function of the schedule
        return np.array([float(f.sum()) for f in extract_features(ctx, cands)])

    want = sorted(float(s) for s in score(pool))[-3:]
    draws = RandomDraws(ctx, spaces, seed=0)
    picks = screen_picks(draws, 3, 12, score)
    assert sorted(float(s) for s in score(picks)) == want  # the three best of the same twelve
    assert all(not draws.fresh(c) for c in picks)  # measured: never proposed again
    assert sum(draws.fresh(c) for c in pool) == 9  # the other nine stay open to the search
    assert len(screen_picks(RandomDraws(ctx, spaces, seed=0), 20, 12, score)) == 12  # fewer draws than n: all
    with pytest.raises(InputError, match="--screen must be >= 0"):
        EvolutionarySettings(screen=-1)
    with pytest.raises(InputError, match="--population 8 is smaller than one round"):
        EvolutionarySettings(population=8).check_settings(TuneSettings(trials_per_round=16))


def test_feature_cache_extracts_each_schedule_once_and_returns_the_same_features() -> None:
    import numpy as np

    from autosearch.backends.tvm.target import host_target
    from autosearch.features.per_store import extract_features
    from autosearch.search.featurize import FeatureCache
    from autosearch.search.strategies import RandomDraws, design_space
    from autosearch.search.tune import TuneSettings
    from autosearch.workloads.module import resolve_workload_spec

    ctx, spaces = design_space(resolve_workload_spec(WL), host_target(), TuneSettings(), None)
    cands = RandomDraws(ctx, spaces, seed=0).draw(4)
    calls: list[int] = []

    def counting(context, cs):  # type: ignore[no-untyped-def]
        calls.append(len(cs))
        return extract_features(context, cs)

    cache = FeatureCache(counting, capacity=3)
    want = extract_features(ctx, cands)
    got = cache(ctx, [cands[0], cands[1], cands[0]])  # a repeat within one call is extracted once
    assert calls == [2] and (cache.hits, cache.misses) == (1, 2)
    assert all(np.array_equal(g, want[i]) for g, i in zip(got, [0, 1, 0]))
    got = cache(ctx, cands)  # two known, two new
    assert calls == [2, 2] and (cache.hits, cache.misses) == (3, 4)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    with pytest.raises(ValueError):  # shared with later calls: never changed in place
        got[0][0, 0] = 1.0
    cache(ctx, [cands[0]])  # capacity 3: the least recently used (cands[0]) was dropped
    assert calls == [2, 2, 1]


# -- bad input: one line, exit 2, nothing measured ------------------------------------------------
def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], match: str) -> None:
    code, _, err = _run(capsys, argv)
    assert code == 2, err
    errors = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and match in errors[0], err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == errors[0], err


def test_budget_smaller_than_one_round(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _one_line_error(
        capsys,
        ["tune", WL, "--trials", "4", "--trials-per-round", "8", "--db", str(tmp_path / "x.db")],
        "smaller than one round",
    )


def test_unknown_workload_and_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _one_line_error(capsys, ["tune", "softmax/999", "--db", str(tmp_path / "x.db")], "unknown")
    _one_line_error(
        capsys, ["tune", WL, "--model", "nosuch", "--db", str(tmp_path / "x.db")], "neither a model directory"
    )


def test_module_missing_or_raising(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _one_line_error(
        capsys, ["tune", "--module", str(tmp_path / "none.py:f"), "--db", str(tmp_path / "x.db")], "does not exist"
    )
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    raise RuntimeError('boom\\nsecond line')\n")
    _one_line_error(capsys, ["tune", "--module", f"{bad}:f", "--db", str(tmp_path / "x.db")], "RuntimeError: boom")
    (tmp_path / "syn.py").write_text("def f(:\n")
    _one_line_error(
        capsys, ["tune", "--module", f"{tmp_path / 'syn.py'}:f", "--db", str(tmp_path / "x.db")], "SyntaxError"
    )
    (tmp_path / "notir.py").write_text("def f():\n    return 3\n")
    _one_line_error(
        capsys, ["tune", "--module", f"{tmp_path / 'notir.py'}:f", "--db", str(tmp_path / "x.db")], "not a TIR PrimFunc"
    )


NO_SPACE = """
from tvm.script import tirx as T

@T.prim_func(s_tir=True)
def scalar(A: T.Buffer((), "float32"), B: T.Buffer((), "float32")):
    with T.sblock("b"):
        B[()] = A[()] + T.float32(1)

def make():
    return scalar
"""


def test_no_tunable_design_space(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "scalar.py"
    f.write_text(NO_SPACE)
    _one_line_error(
        capsys,
        ["tune", "--module", f"{f}:make", "--model", "random", *SMALL, "--db", str(tmp_path / "x.db")],
        "no tunable design space",
    )


@pytest.mark.parametrize(
    ("model", "search"), [("random", "auto"), ("pretrained-prefix", "auto"), ("pretrained-prefix", "decision")]
)
def test_fixed_space_measures_its_one_schedule_then_stops(tmp_path: Path, model: str, search: str) -> None:
    """`fixed_spaces` (tune-model's setting): a program with nothing to decide is measured once,
    in the scheduled form MetaSchedule's rules give it, and the search ends as exhausted. With the
    prefix prior, `--search auto` picks the decision search, which has no vector to search here:
    the run falls back to the evolutionary search instead of failing; so does `--search decision`
    asked for by name (a network's elementwise task is still measured)."""
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.backends.tvm.target import host_target, physical_cores
    from autosearch.search.adapter import ModelAdapter
    from autosearch.search.assemble import assemble
    from autosearch.search.tune import TuneSettings, tune
    from autosearch.workloads.module import resolve_workload_spec

    f = tmp_path / "scalar.py"
    f.write_text(NO_SPACE)
    strategy, scorer = assemble(model, search, warn=False, population=8, genetic_num_iters=1)
    r = tune(
        resolve_workload_spec(None, f"{f}:make"),
        host_target(),
        strategy,
        scorer,
        TuneSettings(trials=16, trials_per_round=8, fixed_spaces=True),
        evaluator=EvaluatorSettings(1, 2, 1),
        progress=False,
        reference=False,
    )
    assert r.trials == 1 and r.best_latency is not None and r.stop_reason == "search space exhausted"
    assert r.search == "evolutionary"
    assert r.untuned_latency is not None  # the default it is compared with when a network is built
    if isinstance(scorer, ModelAdapter):  # the search scores decision vectors on every core
        assert scorer.score_threads == physical_cores()


def test_a_space_with_nothing_to_decide_is_proposed_without_the_evolution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a space with one schedule MetaSchedule's evolution fills its population with copies of it
    until it gives up (81 s a round for RegNet-Y's 6x6-tile Winograd input transform): the
    evolutionary strategy proposes the sketch's schedule itself, once, and draws no control."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.target import host_target
    from autosearch.search.assemble import assemble
    from autosearch.search.strategies.evolutionary import EvolutionarySettings, EvolutionaryStrategy
    from autosearch.search.tune import TuneSettings
    from autosearch.workloads.module import resolve_workload_spec

    def refuse(self: object) -> None:
        raise AssertionError("the evolution was asked for a space with nothing to decide")

    monkeypatch.setattr(ms.TuneContext, "generate_measure_candidates", refuse)
    f = tmp_path / "scalar.py"
    f.write_text(NO_SPACE)
    _, scorer = assemble("random", "evolutionary", warn=False)
    strategy = EvolutionaryStrategy(
        resolve_workload_spec(None, f"{f}:make"),
        host_target(),
        scorer,
        TuneSettings(trials=16, trials_per_round=8, fixed_spaces=True),
        EvolutionarySettings(population=8, genetic_num_iters=1),
    )
    first = strategy.propose(8)
    assert len(first) == 1
    assert strategy.propose(8) == [] and strategy.draw(4) == []


def test_model_with_other_extractor(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import shutil

    from autosearch.search.model_spec import pretrained_dir

    d = tmp_path / "m"
    shutil.copytree(pretrained_dir(), d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["extractor"] = ["other-feature", "v9"]
    (d / "config.json").write_text(json.dumps(cfg))
    _one_line_error(
        capsys,
        ["tune", WL, "--model", str(d), *SMALL, "--db", str(tmp_path / "x.db")],
        "reads features other-feature:v9, which tuning cannot compute",
    )


def test_apply_bad_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _one_line_error(capsys, ["apply", str(tmp_path)], "no saved schedule")


def test_evolution_never_proposes_a_schedule_already_seen_in_the_run() -> None:
    """MetaSchedule's search only skips its own picks and the database's best, so a control or a
    stored seed it re-discovers must be filtered out, or one schedule is measured twice."""
    from autosearch.backends.tvm.target import host_target
    from autosearch.search.model_spec import make_scorer
    from autosearch.search.strategies import EvolutionarySettings, EvolutionaryStrategy
    from autosearch.search.tune import TuneSettings
    from autosearch.workloads.module import resolve_workload_spec

    settings = TuneSettings(trials=16, trials_per_round=8, seed=3)
    evolution = EvolutionarySettings(population=16, genetic_num_iters=1)
    wl, target = resolve_workload_spec(WL), host_target()
    first = EvolutionaryStrategy(wl, target, make_scorer("random", seed=3), settings, evolution)
    picks = first.propose(8)
    assert picks
    again = EvolutionaryStrategy(wl, target, make_scorer("random", seed=3), settings, evolution)
    again.draws.mark(picks)  # as if measured as this run's controls
    repeat = again.propose(8)
    assert repeat and all(again.draws.fresh(c) is False for c in repeat)  # marked once proposed
    seen = {hash(str(c.sch.mod)) for c in picks}
    assert not seen & {hash(str(c.sch.mod)) for c in repeat}


def test_unknown_search_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _one_line_error(
        capsys, ["tune", WL, "--search", "annealing", *SMALL, "--db", str(tmp_path / "t.db")], "--search must be one of"
    )
    _one_line_error(  # tried, measured no better, removed (issue 46)
        capsys, ["tune", WL, "--search", "portfolio", *SMALL, "--db", str(tmp_path / "t.db")], "--search must be one of"
    )
    for removed in ("trust", "stall"):  # the same, before any model loads
        argv = ["tune", WL, "--explore", removed, *SMALL, "--db", str(tmp_path / "t.db")]
        _one_line_error(capsys, argv, "--explore must be one of auto, none, control")


@pytest.mark.parametrize(
    "option", [["--rescreen", "0.5"], ["--screen-spread", "0.5"], ["--confirm", "4"], ["--sketch-moves", "2"]]
)
def test_options_that_measured_no_better_are_gone(
    option: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 46: options whose own benchmarks found them no better are not offered (a usage error, exit 2)."""
    code, out, err = _run(capsys, ["tune", WL, *option, *SMALL, "--db", str(tmp_path / "t.db")])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, out + err  # the CLI's one line `error: no such option ...`
    assert lines[0].startswith("error:") and "no such option" in lines[0].lower() and option[0] in lines[0], err
    assert not (tmp_path / "t.db").exists()


def test_untuned_baseline_of_a_gpu_is_tvms_default_gpu_schedule() -> None:
    """Built for CUDA, the unscheduled loops become host code with no GPU kernel, which then reads
    device memory from the CPU (on a GPU each such run crashed its runner, ~7.5 s a task). The
    baseline `tune` reports, and `tune-model` keeps where it wins, is what Relax's CUDA pipeline
    compiles: dlight's default rules, a real kernel. A CPU's baseline is the program as it is.
    (Found on a lent H100.)"""
    from autosearch.backends.tvm.build import fast_build
    from autosearch.backends.tvm.target import parse_target
    from autosearch.search.tune import default_schedule
    from autosearch.workloads.registry import get_workload

    cuda = parse_target("cuda-h100")
    for name in ("batch_matmul/1x128x128x128", "bert/layer_norm/128x768"):
        mod = get_workload(name).mod()
        assert default_schedule(mod, parse_target("host")) is mod
        assert not fast_build(mod, cuda, None).imports  # no device module: nothing runs on the GPU
        before = mod.script()
        scheduled = default_schedule(mod, cuda)
        assert mod.script() == before  # untouched: a network task's tuned traces replay on it
        built = fast_build(scheduled, cuda, None)
        src = "\n".join(m.inspect_source() for m in built.imports)
        assert "threadIdx.x" in src and "blockIdx.x" in src


@pytest.mark.integration
def test_a_default_that_timed_below_the_best_is_retimed_in_turns_beside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default is timed at the end of a task, its best in a round before: a load between the
    two made the default look faster and a network built with it ran 3x slower. A default timed
    below the best is timed again in turns with it, and its latency is the best's times their
    ratio, not the lucky figure."""
    import numpy as np

    from autosearch.backends.tvm.measure import EvaluatorSettings, Measurer
    from autosearch.backends.tvm.target import host_target
    from autosearch.search import tune as tune_mod
    from autosearch.search.model_spec import make_scorer
    from autosearch.search.strategies import EvolutionarySettings
    from autosearch.workloads.registry import get_workload

    wl = get_workload("batch_matmul/1x128x128x128")
    lucky = 1e-9
    ran: list[int] = []
    real_run_built = Measurer.run_built

    def counting(self, candidates, built, timeout=None):  # type: ignore[no-untyped-def]
        ran.append(len(candidates))
        return real_run_built(self, candidates, built, timeout)

    monkeypatch.setattr(tune_mod, "measure_untuned", lambda *a: lucky)  # as if timed in a quiet second
    monkeypatch.setattr(Measurer, "run_built", counting)
    r = tune_mod.tune(
        wl,
        host_target(),
        EvolutionarySettings(population=16, genetic_num_iters=1),
        make_scorer("random"),
        tune_mod.TuneSettings(trials=8, trials_per_round=8),
        evaluator=EvaluatorSettings(1, 2, 1),
        progress=False,
        reference=False,
    )
    assert r.best_latency and r.best_trace and r.untuned_latency is not None
    assert ran[-1] == 2 * tune_mod.SIDE_BY_SIDE_TURNS  # untuned and best, in turns, in one call
    assert r.untuned_latency != lucky
    # a real ratio: 8 random schedules of a 128-cube matmul beside its unscheduled loops
    assert np.isfinite(r.untuned_latency / r.best_latency) and r.untuned_latency > 0


def test_the_untuned_baseline_measured_after_a_round_is_not_measured_again_at_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tune-model times each task's untuned schedule right after its first measured round (so a
    deadline sees those seconds), and `finish` keeps that figure instead of timing it again; before
    a round has measured anything there is nothing to compare with, and nothing is timed."""
    from autosearch.backends.tvm.measure import EvaluatorSettings
    from autosearch.backends.tvm.target import host_target
    from autosearch.search import tune as tune_mod
    from autosearch.search.model_spec import make_scorer
    from autosearch.search.strategies import EvolutionarySettings
    from autosearch.workloads.registry import get_workload

    timed: list[float] = []
    real = tune_mod.measure_untuned

    def counting(*a: Any) -> Any:
        timed.append(1.0)
        return real(*a)

    monkeypatch.setattr(tune_mod, "measure_untuned", counting)
    run = tune_mod.TuneRun(
        get_workload("batch_matmul/1x128x128x128"),
        host_target(),
        EvolutionarySettings(population=16, genetic_num_iters=1),
        make_scorer("random"),
        tune_mod.TuneSettings(trials=8, trials_per_round=8),
        evaluator=EvaluatorSettings(1, 2, 1),
    )
    run.measure_untuned()
    assert not timed and run.result.untuned_latency is None  # no round yet
    assert run.step()
    run.measure_untuned()
    first = run.result.untuned_latency
    assert len(timed) == 1 and first is not None and first > 0
    run.measure_untuned()
    r = run.finish(reference=False)
    assert len(timed) == 1 and r.untuned_latency == first
