"""Adams2019 behind the project's `CostModel` contract (models/adams2019/): fit / update /
predict / save / load on the store's `halide-adams2019` rows, equal to Halide's training loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from autosearch.backends.halide.weights import Weights
from autosearch.errors import InputError
from autosearch.models.adams2019 import (
    EXTRACTOR,
    Adams2019Model,
    Adams2019Net,
    Adams2019Trainer,
    batches_from_dataset,
)
from autosearch.models.base import FeatureBatch
from autosearch.models.io import read_config
from autosearch.training.dataset import Dataset

CORES = 2


def _group(seed: int, n: int = 6, stages: int = 3) -> tuple[list[np.ndarray], list[float | None]]:
    rng = np.random.default_rng(seed)
    pf = rng.integers(0, 6, size=(stages, 41 * 7)).astype(np.float32)
    mats = []
    for _ in range(n):
        sf = np.round(rng.uniform(1, 2000, size=(stages, 39))).astype(np.float32)
        mats.append(np.concatenate([sf, pf], axis=1))
    lats: list[float | None] = [float(x) for x in rng.uniform(1e-3, 5e-3, size=n)]
    lats[-1] = None  # a failed candidate: never trained on
    return mats, lats


def _data() -> Dataset:
    groups = [(f"w{k}", "halide", *_group(k)) for k in (1, 2)]
    return Dataset.from_groups(groups, extractor=EXTRACTOR)


def test_fit_is_halides_training_loop_and_predict_ranks_by_predicted_runtime():
    data = _data()
    base = Weights.baseline()
    model = Adams2019Model(learning_rate=1e-3, epochs=3, num_cores=CORES, init=base)
    report = model.fit(data)
    assert len(report.history) == 3 and report.n_train == 10  # 2 groups x 5 successful schedules
    ref = Adams2019Trainer(1e-3, 3, CORES).fit(base, batches_from_dataset(data))
    assert Weights(dict(model.parameters())) == ref.weights
    batch = FeatureBatch(data.rows, data.offsets)
    scores = model.predict(batch)
    net = Adams2019Net(CORES, ref.weights)
    b0 = batches_from_dataset(data)[0]
    with torch.no_grad():
        want = -net(b0.pipeline_features, b0.schedule_features).numpy()
    # group 0's successful candidates, in order, are the first five rows of the dataset
    np.testing.assert_allclose(np.sort(scores[:5]), np.sort(want), rtol=1e-5)


def test_save_load_round_trip_and_update(tmp_path):
    data = _data()
    model = Adams2019Model(epochs=2, update_epochs=1, num_cores=CORES, init=Weights.baseline())
    model.fit(data)
    model.save(tmp_path / "m")
    cfg = read_config(tmp_path / "m")
    assert cfg["kind"] == "adams2019" and cfg["extractor"] == list(EXTRACTOR)
    from autosearch.models import load_model

    loaded = load_model(tmp_path / "m")  # dispatched by the registry on the saved kind
    assert isinstance(loaded, Adams2019Model) and loaded.n_features == int(cfg["n_features"])
    batch = FeatureBatch(data.rows, data.offsets)
    np.testing.assert_array_equal(loaded.predict(batch), model.predict(batch))
    before = dict(loaded.parameters())
    loaded.update(data)
    assert any(not np.array_equal(before[k], v) for k, v in loaded.parameters())


def test_bad_input_is_one_clear_error():
    with pytest.raises(InputError, match="not trained"):
        Adams2019Model().predict(FeatureBatch(np.zeros((1, 326), np.float32), np.array([0, 1])))
    wrong = Dataset.from_groups([("w", "t", [np.zeros((2, 10), np.float32)] * 2, [1e-3, 2e-3])])
    with pytest.raises(InputError, match="326"):
        Adams2019Model(epochs=1).fit(wrong)


def test_the_model_module_knows_nothing_of_halide():
    import ast

    import autosearch.models.adams2019 as mod

    files = sorted(Path(mod.__file__).parent.glob("*.py"))  # the package: every module of it
    assert len(files) > 1, files
    names: set[str] = set()
    for f in files:
        tree = ast.parse(f.read_text())
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names and not [n for n in names if "halide" in n or "backends" in n], names
