"""The PyCostModel adapter's logic: adaptive retraining, label scale, scores, extractor checks.

No tuning here (fast): fake models record what the adapter asks of them.
"""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.errors import InputError
from autosearch.models.base import CostModel, FeatureBatch, TrainReport
from autosearch.search.adapter import ModelAdapter, check_extractor
from autosearch.search.online_blend import OnlineBlend
from autosearch.training.metrics import pairwise_accuracy


class FakeModel(CostModel):
    kind = "mlp"
    incremental = True  # fine-tuned on the run, as a pretrained mlp is

    def __init__(self) -> None:
        self.n_features = 4
        self.updates: list = []
        self.fits: list = []

    def fit(self, train, valid=None):  # type: ignore[no-untyped-def]
        self.fits.append(train)
        self.n_features = train.n_features
        return TrainReport(self.kind)

    def update(self, new) -> None:  # type: ignore[no-untyped-def]
        self.updates.append(new)

    def _predict(self, batch):  # type: ignore[no-untyped-def]
        return np.array(
            [batch.rows[batch.offsets[i] : batch.offsets[i + 1], 0].sum() for i in range(batch.n_candidates)]
        )

    def save(self, path) -> None:  # type: ignore[no-untyped-def]
        raise NotImplementedError

    @classmethod
    def _from_dir(cls, path, config):  # type: ignore[no-untyped-def]
        raise NotImplementedError


def _feats(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.random((2, 4), dtype=np.float32) for _ in range(n)]


def test_adaptive_retraining_rule() -> None:
    model = FakeModel()
    ad = ModelAdapter(model, retrain_fraction=0.5)
    # first batch: the model has seen nothing of this run -> retrain
    assert ad.observe("g", _feats(8), [1e-3] * 8)
    assert len(model.updates) == 1 and ad.rule.trained_on == 8
    # 2 new < 0.5 * 8 -> buffered, no retrain
    assert not ad.observe("g", _feats(2), [2e-3, None])
    assert len(model.updates) == 1 and ad.results.n_pending == 2
    # 2 + 2 = 4 >= 0.5 * 8 -> retrain on the 4 buffered results only (incremental)
    assert ad.observe("g", _feats(2, 1), [5e-4, 1e-3])
    assert len(model.updates) == 2 and model.updates[-1].n_candidates == 4
    assert ad.rule.trained_on == 12 and ad.results.n_pending == 0 and ad.n_retrains == 2
    # now 12 seen: 5 new < 6 -> skip; 6 -> retrain
    assert not ad.observe("g", _feats(5), [1e-3] * 5)
    assert ad.observe("g", _feats(1), [1e-3])
    assert ad.rule.n_skipped == 2


def test_labels_use_the_group_best_so_far() -> None:
    model = FakeModel()
    ad = ModelAdapter(model, retrain_fraction=0.0)
    ad.observe("g", _feats(2), [1e-3, 2e-3])
    ad.observe("g", _feats(2, 1), [4e-3, None])  # best so far is 1e-3, not 4e-3
    labels = model.updates[-1].labels
    assert np.allclose(sorted(labels), [0.0, 0.25])


def test_fresh_model_fits_from_scratch_on_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[FakeModel] = []

    def fake_make(kind, **kw):  # type: ignore[no-untyped-def]
        made.append(FakeModel())
        return made[-1]

    monkeypatch.setattr("autosearch.models.make_model", fake_make)
    ad = ModelAdapter(kind="xgb", retrain_fraction=0.2)
    s = ad.score(_feats(5))  # untrained: random exploration, finite
    assert s.shape == (5,) and np.isfinite(s).all()
    ad.observe("g", _feats(4), [1e-3, 2e-3, 3e-3, 4e-3])
    ad.observe("g", _feats(4, 1), [1e-3] * 4)
    assert len(made) == 2 and made[-1].fits[0].n_candidates == 8  # refit on all 8
    assert ad.model is made[-1]


def test_all_failed_batch_does_not_train() -> None:
    model = FakeModel()
    ad = ModelAdapter(model)
    ad.observe("g", _feats(3), [None, None, None])
    assert model.updates == [] and model.fits == []


def test_scores_are_finite_and_ordered() -> None:
    ad = ModelAdapter(FakeModel())
    feats = [np.ones((1, 4), np.float32) * 3, np.zeros((0, 4), np.float32), np.ones((2, 4), np.float32)]
    s = ad.score(feats)
    assert np.isfinite(s).all()
    assert s[0] > s[2] > s[1]  # no stores -> below everything


def test_extractor_mismatch_is_one_line() -> None:
    m = FakeModel()
    m.extractor = ("other-feature", "v1")
    with pytest.raises(InputError, match="trained on features other-feature:v1") as exc:
        check_extractor(m, ("per-store-feature", "tvm-0.27"), 164)
    assert "\n" not in str(exc.value)
    m.extractor = ("per-store-feature", "tvm-0.27")
    with pytest.raises(InputError, match="expects 4 features"):
        check_extractor(m, ("per-store-feature", "tvm-0.27"), 164)


class WrongPrior(FakeModel):
    """Scores the slow candidates highest: a prior that is wrong about this operator."""


def _slow_with_col0(feats: list[np.ndarray]) -> list[float]:
    return [1e-3 * (1.0 + float(f[:, 0].sum())) for f in feats]


def test_online_model_takes_over_from_a_wrong_prior() -> None:
    prior = WrongPrior()
    ad = ModelAdapter(prior, retrain_fraction=0.0, online="xgb", online_warmup=32, seed=0)
    for i in range(2):  # 32 results: the online model is fitted, no evidence yet -> weight 0.5
        f = _feats(16, i)
        ad.observe("g", f, _slow_with_col0(f))
    assert (
        ad.online is not None and ad.online.model is not None and ad.online.weight == 0.5 and ad.online.held_back == []
    )
    for i in range(2, 5):  # each new batch is judged before either model sees it
        f = _feats(16, i)
        ad.observe("g", f, _slow_with_col0(f))
    assert len(ad.online.held_back) == 3
    prior_acc, online_acc = np.mean(ad.online.held_back, axis=0)
    assert prior_acc < 0.2 and online_acc > 0.7
    assert ad.online.weight == 1.0  # all the weight on the model that predicted the fresh results
    test = _feats(40, 99)
    s = ad.score(test)
    assert pairwise_accuracy(s, _slow_with_col0(test)) > 0.7  # the blend now ranks like the online model
    assert pairwise_accuracy(prior.predict(FeatureBatch.from_list(test)), _slow_with_col0(test)) < 0.3


def test_online_model_needs_a_prior_and_a_trainable_kind() -> None:
    with pytest.raises(InputError, match="online model needs a trained prior"):
        ModelAdapter(kind="xgb", online="xgb")
    with pytest.raises(InputError, match="online model needs a trained prior"):
        ModelAdapter(FakeModel(), online="tvm-xgb")
    with pytest.raises(InputError, match="warm-up must be at least 2 results"):
        ModelAdapter(FakeModel(), online="xgb", online_warmup=1)


def test_online_warmup_sets_when_the_online_model_is_first_fitted() -> None:
    from autosearch.search.model_spec import make_scorer

    for warmup, fitted_after in ((16, 1), (32, 2)):
        ad = ModelAdapter(WrongPrior(), retrain_fraction=0.0, online="xgb", online_warmup=warmup, seed=0)
        for i in range(2):
            f = _feats(16, i)
            ad.observe("g", f, _slow_with_col0(f))
            assert (ad.online.model is not None) == (i + 1 >= fitted_after), (warmup, i)
    longer = make_scorer("pretrained+xgb", online_warmup=24)
    assert isinstance(longer, ModelAdapter) and longer.online is not None and longer.online.warmup == 24
    default = make_scorer("pretrained+xgb")
    assert (
        isinstance(default, ModelAdapter) and default.online is not None and default.online.warmup == 16
    )  # the default since a later stop


def test_online_gain_sets_how_far_the_blend_follows_the_evidence() -> None:
    for bad in (0.0, float("nan")):
        with pytest.raises(InputError, match="gain must be a number > 0"):
            ModelAdapter(FakeModel(), online="xgb", online_gain=bad)
    ModelAdapter(FakeModel(), online_warmup=1)  # no online model: nothing uses the warm-up
    ad = ModelAdapter(WrongPrior(), retrain_fraction=0.0, online="xgb", online_warmup=16, online_gain=0.5, seed=0)
    for i in range(3):
        f = _feats(16, i)
        ad.observe("g", f, _slow_with_col0(f))
    prior_acc, online_acc = np.mean(ad.online.held_back[-3:], axis=0)
    assert online_acc - prior_acc > 0.3  # evidence that takes gain 5 to weight 1.0 ...
    w = ad.online.weight  # ... moves gain 0.5 part way
    assert w == pytest.approx(0.5 + 0.5 * (online_acc - prior_acc))
    assert w < 1.0


def test_prior_plus_online_model_spec() -> None:
    from autosearch.search.model_spec import make_scorer

    ad = make_scorer("pretrained+xgb")
    assert isinstance(ad, ModelAdapter)
    assert (
        ad.label == "pretrained+xgb"
        and ad.online is not None
        and ad.online.kind == "xgb"
        and ad.pretrained
        and ad.online.model is None
    )
    ad = make_scorer("pretrained")  # no '+': no online model
    assert isinstance(ad, ModelAdapter) and ad.label == "pretrained" and ad.online is None
    with pytest.raises(InputError, match="after '\\+' must be one of"):
        make_scorer("pretrained+tvm-xgb")
    with pytest.raises(InputError, match="before '\\+' must be pretrained or pretrained-prefix or a model directory"):
        make_scorer("xgb+xgb")


def test_model_directory_with_a_plus_in_its_name_is_a_directory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    from autosearch.search.model_spec import make_scorer, pretrained_dir

    d = shutil.copytree(pretrained_dir(), tmp_path / "mine+xgb")
    ad = make_scorer(str(d))
    assert isinstance(ad, ModelAdapter) and ad.label == "mine+xgb" and ad.online is None


def _stored_space():  # type: ignore[no-untyped-def]
    """The decision space of the test store's first schedule."""
    from pathlib import Path

    from autosearch.features.decision_space import DecisionSpace
    from autosearch.store.db import Store

    with Store(Path(__file__).parent / "data" / "tiny_tvm.db", readonly=True) as st:
        wls = {w.id: w for w in st.workloads()}
        m = next(iter(st.measurements()))
        trace, w = m.schedule, wls[m.workload_id]
    return DecisionSpace(trace, w.ir, w.flops)


def test_decision_vectors_score_through_the_model_tables() -> None:
    """`score_space` gives `score`'s numbers on the space's tokens, by the tlp tables or, for a
    model without them, by the tokens."""
    from autosearch.models import make_model
    from autosearch.training.dataset import Dataset

    space = _stored_space()
    toks = list(space.tokens(space.sample(64, np.random.default_rng(0))))
    ds = Dataset.from_groups([("w", "t", toks, list(np.linspace(1e-3, 2e-3, 64)))])
    x = space.sample(40, np.random.default_rng(1))
    models = {}
    for kind in ("tlp", "xgb"):
        model = make_model(kind, epochs=1, hidden=16, heads=2) if kind == "tlp" else make_model(kind)
        model.fit(ds)
        models[kind] = model
        adapter = ModelAdapter(model)
        got, ref = adapter.score_space(space, x), adapter.score(list(space.tokens(x)))
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    # an online model blending in reads the tokens; the blend is the same as `score`'s
    adapter = ModelAdapter(models["tlp"])
    adapter.online = OnlineBlend("xgb")
    adapter.online.model, adapter.online.weight, adapter.online.norm = models["xgb"], 0.4, ((0.1, 2.0), (0.3, 1.5))
    got, ref = adapter.score_space(space, x), adapter.score(list(space.tokens(x)))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    assert not np.allclose(got, ModelAdapter(models["tlp"]).score_space(space, x))  # the blend changed them


def test_a_tlp_prior_is_fine_tuned_on_the_run_and_its_tables_follow() -> None:
    """A pretrained `tlp` learns from the run's measurements (an incremental kind), and the
    decision-vector tables it scores from are rebuilt from the updated networks."""
    from autosearch.models import make_model
    from autosearch.training.dataset import Dataset

    space = _stored_space()
    toks = list(space.tokens(space.sample(64, np.random.default_rng(0))))
    model = make_model("tlp", epochs=2, hidden=16, heads=2, members=1, update_epochs=20)
    model.fit(Dataset.from_groups([("w", "t", toks, list(np.linspace(1e-3, 2e-3, 64)))]))
    adapter = ModelAdapter(model)
    x = space.sample(32, np.random.default_rng(1))
    before = adapter.score_space(space, x)
    # the run measures the prior's order reversed: its best-scored vectors are the slowest
    lats = list(1e-3 * (1.0 + np.argsort(np.argsort(before))))
    assert adapter.observe("g", list(space.tokens(x)), lats)
    after = adapter.score_space(space, x)
    np.testing.assert_allclose(after, adapter.score(list(space.tokens(x))), rtol=1e-4, atol=1e-5 * np.abs(after).max())
    fast = -np.asarray(lats)
    assert pairwise_accuracy(after, np.asarray(lats)) > pairwise_accuracy(before, np.asarray(lats))
    assert np.corrcoef(after, fast)[0, 1] > np.corrcoef(before, fast)[0, 1]
