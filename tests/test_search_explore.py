"""Exploration that follows the evidence (search/explore.py): the share of random controls rises and
falls with what the model got right on controls it had not seen, and the run's stall tracker."""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.errors import InputError
from autosearch.models.base import CostModel
from autosearch.search.adapter import ModelAdapter
from autosearch.search.explore import ControlExploration, ControlGate, StallTracker, make_exploration
from autosearch.training.metrics import kendall_tau


class _Prior(CostModel):
    """A trained 'model' whose score is a fixed linear read of the first feature (not an
    incremental kind: a run keeps it as it is)."""

    kind = "fake"
    n_features = 2
    extractor = ("x", "1")

    def __init__(self, sign: float) -> None:
        self.sign = sign

    def predict(self, batch):  # type: ignore[no-untyped-def]
        return self.sign * np.add.reduceat(batch.rows[:, 0], batch.offsets[:-1])

    def update(self, ds):  # type: ignore[no-untyped-def]
        pass

    def fit(self, train, valid=None):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def _predict(self, batch):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def save(self, path) -> None:  # type: ignore[no-untyped-def]
        raise NotImplementedError

    @classmethod
    def _from_dir(cls, path, config):  # type: ignore[no-untyped-def]
        raise NotImplementedError


def _round(rng: np.random.Generator, n: int = 16) -> tuple[list[np.ndarray], list[float]]:
    x = rng.uniform(1, 2, n)
    return [np.array([[v, 0.0]], np.float32) for v in x], list(x)  # latency = feature 0


def _learn(
    ad: ModelAdapter, policy: ControlExploration, feats: list, lat: list, ctrl: list[bool] | None = None
) -> None:
    """What a strategy's `learn` does: the policy judges the round, then the scorer learns it."""
    ctrl = ctrl or [False] * len(feats)
    policy.judge(ad, "g", feats, lat, ctrl)
    ad.observe("g", feats, lat, verdict=policy.verdict())


def test_explore_mode_is_checked() -> None:
    from autosearch.search.strategies import DecisionSettings, EvolutionarySettings, GradientSettings

    with pytest.raises(InputError, match="explore must be one of"):
        make_exploration("ucb-ish")
    for removed in ("trust", "stall"):  # issue 46: measured no better, gone
        with pytest.raises(InputError, match="explore must be one of none, control"):
            make_exploration(removed)
        for strategy in (EvolutionarySettings, DecisionSettings, GradientSettings):  # each strategy's policy
            with pytest.raises(InputError, match="--explore must be one of auto, none, control"):
                strategy(explore=removed)


def test_tuning_warns_when_the_model_never_saw_the_device() -> None:
    import warnings

    from autosearch.backends.tvm.target import parse_target
    from autosearch.search.model_spec import warn_unknown_device

    prior = _Prior(1.0)
    prior.trained_on = ['{"kind":"llvm","num-cores":2,"mcpu":"znver4"}']  # type: ignore[attr-defined]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert warn_unknown_device(prior, parse_target('{"kind":"llvm","mcpu":"x86-64","num-cores":2}'))
        assert not warn_unknown_device(prior, parse_target('{"kind":"llvm","mcpu":"znver4","num-cores":2}'))
        # another CPU of the class it saw (AVX-512): no warning; an AVX2 one is a class it never saw
        assert not warn_unknown_device(prior, parse_target('{"kind":"llvm","mcpu":"znver5","num-cores":2}'))
        assert not warn_unknown_device(prior, parse_target('{"kind":"llvm","mcpu":"sapphirerapids","num-cores":2}'))
        assert warn_unknown_device(prior, parse_target('{"kind":"llvm","mcpu":"znver3","num-cores":2}'))
        assert warn_unknown_device(prior, parse_target('{"kind":"llvm","mcpu":"x86-64","num-cores":2}'), decision=True)
    assert len(seen) == 3 and "znver4/2 cores" in str(seen[0].message) and "never saw" in str(seen[0].message)
    assert "x86-64-v1, 128-bit registers" in str(seen[0].message)
    assert "znver3/2 cores (x86-64-v3, 256-bit registers)" in str(seen[1].message)
    assert "tune's default" in str(seen[0].message)  # the evolutionary search: controls are auto's choice
    assert "decision search fine-tunes" in str(seen[2].message) and "tune's default" not in str(seen[2].message)


def test_control_share_rises_when_the_model_orders_random_schedules_like_chance() -> None:
    gate = ControlGate(share0=0.25, low=0.125, high=0.5)
    assert gate.share == 0.25 and gate.controls(16) == 4  # no evidence yet
    assert gate.controls(1) == 0 and gate.controls(2) == 1  # a round of one has no room for a control
    lat = list(np.linspace(1.0, 2.0, 8))
    gate.judge(-np.array(lat), lat, [True] * 8)  # random schedules ordered perfectly
    assert gate.accuracy == 1.0 and gate.share == 0.125
    for _ in range(6):  # then backwards, round after round: old evidence fades
        gate.judge(np.array(lat), lat, [True] * 8)
    assert gate.accuracy is not None and gate.accuracy < 0.2 and gate.share == 0.5
    assert gate.judge([1.0, 2.0], [None, None], [True, True]) is None  # nothing measured: no evidence
    with pytest.raises(InputError):
        ControlGate(share0=0.9, high=0.5)


def test_adapter_judges_its_model_on_controls_only() -> None:
    # A prior that orders random schedules backwards: the controls' share goes up, and only the
    # controls count (the model's own picks, ordered however, do not move it).
    rng = np.random.default_rng(0)
    ad, policy = ModelAdapter(_Prior(1.0), seed=0), ControlExploration(0)
    assert policy.controls(16) == 4
    feats, lat = _round(rng)
    _learn(ad, policy, feats, lat)  # no control in this round: no evidence
    assert policy.gate.accuracy is None
    for _ in range(3):
        feats, lat = _round(rng)
        _learn(ad, policy, feats, lat, [i % 4 == 0 for i in range(16)])
    assert policy.gate.accuracy is not None and policy.gate.accuracy < 0.1 and policy.controls(16) == 8
    right, policy = ModelAdapter(_Prior(-1.0), seed=0), ControlExploration(0)
    for _ in range(3):
        feats, lat = _round(rng)
        _learn(right, policy, feats, lat, [i % 4 == 0 for i in range(16)])
    assert policy.controls(16) == 2 and policy.state == 0.125
    assert ControlExploration(0, trained=False).controls(16) == 0  # a model fitted on the run alone: no controls


def test_controls_hand_the_score_to_the_online_model_when_the_prior_is_wrong() -> None:
    # The prior orders schedules backwards; an XGBoost fitted on the run's results learns the
    # order. Judged on the controls, the blend moves (nearly) all the way to the online model.
    rng = np.random.default_rng(1)
    ad, policy = ModelAdapter(_Prior(1.0), online="xgb", online_warmup=16, seed=0), ControlExploration(0)
    for _ in range(6):
        feats, lat = _round(rng)
        _learn(ad, policy, feats, lat, [i % 2 == 0 for i in range(16)])
    assert ad.online is not None and ad.online.model is not None
    assert policy.gate.scorer_accuracy("online") > 0.8 > 0.2 > policy.gate.scorer_accuracy("prior")
    assert ad.online.weight == 1.0
    feats, lat = _round(rng, 64)
    assert kendall_tau(ad.score(feats), lat) > 0.8  # scores now order by speed


def test_stall_tracker_widens_after_patience_and_resets_on_progress() -> None:
    st = StallTracker(patience=2)
    assert st.observe([2.0, None, 3.0]) and st.best == 2.0  # anything beats no result yet
    assert not st.observe([1.99]) and st.stalled == 1 and st.best == 1.99  # < 1% better: no progress
    assert st.share() == 0.0 and not st.widened  # still within patience
    assert not st.observe([None, None]) and st.stalled == 2  # a round of failures is no progress either
    assert st.share() == 0.125 and st.widened
    st.observe([5.0])
    assert st.share() == 0.25
    for _ in range(3):
        st.observe([float("nan"), 0.0, float("inf")])  # invalid latencies are not progress
    assert st.share() == 0.5
    assert st.share(0.8) == 0.8  # a larger base share is kept
    assert st.observe([1.5]) and st.stalled == 0 and st.share(0.05) == 0.05
    never = StallTracker(patience=0)
    for _ in range(6):
        never.observe([1.0])
    assert never.stalled == 5 and never.share() == 0.0


@pytest.mark.parametrize(
    "kw", [{"patience": -1}, {"start": 0.0}, {"start": 0.6, "cap": 0.5}, {"cap": 1.5}, {"tol": 1.0}]
)
def test_stall_tracker_checks_its_settings(kw: dict) -> None:
    with pytest.raises(InputError):
        StallTracker(**kw)


def test_auto_explores_with_controls_only_on_a_device_the_prior_never_saw() -> None:
    import warnings

    from autosearch.backends.tvm.target import parse_target
    from autosearch.search.assemble import assemble

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the unknown device's warning; its own test is above
        new, _ = assemble(
            "pretrained", explore="auto", target=parse_target('{"kind":"llvm","mcpu":"x86-64","num-cores":2}')
        )
    known, _ = assemble(
        "pretrained", explore="auto", target=parse_target('{"kind":"llvm","mcpu":"znver4","num-cores":2}')
    )
    assert new.explore == "control" and isinstance(make_exploration(new.explore), ControlExploration)
    assert known.explore == "none"
    assert assemble("pretrained", explore="auto")[0].explore == "none"  # no target: nothing to judge by
    assert assemble("random", explore="auto")[0].explore == "none"  # TVM's own model: no prior to judge
