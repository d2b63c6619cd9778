"""Matrix generator families, the Matrix Market loader, format conversion and the pattern features."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from autosearch.errors import InputError
from autosearch.sparse.features import IMAGE, INFO_DIM, TOKEN_DIM, config_tokens, matrix_info, pattern_image
from autosearch.sparse.formats import applicable, convert, fill_ratio
from autosearch.sparse.matrices import FAMILIES, MatrixSpec, generate, load_matrix, load_mtx, matrix_hash
from autosearch.sparse.space import SuperSchedule, config_pool, sample_configs


@pytest.mark.parametrize("family", FAMILIES)
def test_families_are_reproducible_and_distinct(family: str) -> None:
    spec = MatrixSpec(family, 400, 300, 6.0, seed=3)
    a, b = generate(spec), generate(spec)
    assert a.shape == (400, 300) and a.dtype == np.float32 and a.nnz > 0
    assert matrix_hash(a) == matrix_hash(b)
    assert matrix_hash(generate(MatrixSpec(family, 400, 300, 6.0, seed=4))) != matrix_hash(a)
    assert a.has_sorted_indices and a.has_canonical_format
    assert 0.3 * 6.0 * 400 < a.nnz < 3 * 6.0 * 400  # about the asked row length


def test_families_differ_where_it_matters() -> None:
    lens = {f: np.diff(generate(MatrixSpec(f, 2000, 2000, 8.0, seed=1)).indptr) for f in FAMILIES}
    assert lens["powerlaw"].max() > 5 * lens["uniform"].max()  # hub rows
    band = generate(MatrixSpec("banded", 2000, 2000, 8.0, seed=1)).tocoo()
    assert np.abs(band.row - band.col).max() < 100
    blocky = generate(MatrixSpec("blockdiag", 2000, 2000, 8.0, seed=2, extra={"block": 4, "fill": 1.0}))
    assert (
        fill_ratio(blocky, "bcsr", 4, 4)
        < 1.2
        < fill_ratio(generate(MatrixSpec("uniform", 2000, 2000, 8.0)), "bcsr", 4, 4)
    )


def test_mtx_loader_and_errors(tmp_path) -> None:
    a = generate(MatrixSpec("community", 120, 90, 4.0, seed=1))
    p = tmp_path / "m.mtx"
    scipy.io.mmwrite(str(p), a)
    b = load_mtx(p)
    assert matrix_hash(a) == matrix_hash(b)
    spec = MatrixSpec("mtx", 120, 90, path=str(p))
    assert load_matrix(spec, matrix_hash(a)).nnz == a.nnz
    with pytest.raises(InputError, match="no longer hashes"):
        load_matrix(spec, "0" * 24)
    (tmp_path / "bad.mtx").write_text("this is not a matrix\n")
    with pytest.raises(InputError, match="not a readable Matrix Market"):
        load_mtx(tmp_path / "bad.mtx")
    with pytest.raises(InputError, match="no Matrix Market file"):
        load_mtx(tmp_path / "missing.mtx")
    with pytest.raises(InputError, match="unknown matrix family"):
        MatrixSpec("fractal", 10, 10)


@pytest.mark.parametrize("fmt,kw", [("csr", {}), ("dcsr", {}), ("csc", {}), ("bcsr", {"br": 2, "bc": 4}),
                                    ("ell", {"slice_": 8}), ("cpcsr", {"panel": 32})])  # fmt: skip
def test_conversion_keeps_every_nonzero(fmt: str, kw: dict) -> None:
    a = generate(MatrixSpec("powerlaw", 150, 130, 5.0, seed=2))
    cv = convert(a, fmt, **kw)
    vals = next(cv.arrays[k] for k in ("data", "bdata", "val") if k in cv.arrays)
    real = cv.perm >= 0
    assert real.sum() == a.nnz and cv.slots == vals.size
    np.testing.assert_array_equal(vals[real], a.data[cv.perm[real]])
    assert np.all(vals[~real] == 0)  # padding stores zeros


def test_applicable_gives_reasons() -> None:
    a = generate(MatrixSpec("uniform", 300, 300, 3.0, seed=0))
    assert "would store" in applicable(a, "bcsr", 8, 8, 1, 0)
    assert "one panel" in applicable(a, "cpcsr", 1, 1, 1, 1024)
    assert applicable(a, "csr", 1, 1, 1, 0) == ""
    assert "no nonzeros" in applicable(sp.csr_matrix((5, 5), dtype=np.float32), "csr", 1, 1, 1, 0)


def test_features_fixed_size_and_normalised() -> None:
    big = generate(MatrixSpec("uniform", 200_000, 200_000, 2.0, seed=0))
    img = pattern_image(big)
    assert img.shape == (2, IMAGE, IMAGE) and img.dtype == np.float32
    assert img.min() >= 0 and img.max() <= 1.0
    info = matrix_info(big)
    assert info.shape == (INFO_DIM,) and np.all(np.abs(info) <= 4)
    c = SuperSchedule(op="spmm", fmt="bcsr", br=4, bc=2, parallel=True, chunk=16, vec=8, vectorize=True, dense=64)
    t = config_tokens(c, info)
    assert t.shape == (10, TOKEN_DIM) and np.all(np.abs(t) <= 4)
    assert config_tokens(c, info, embedding_token=False).shape == (9, TOKEN_DIM)


def test_config_json_roundtrip_and_pool() -> None:
    rng = np.random.default_rng(0)
    for c in sample_configs(rng, "sddmm", 30, 32):
        assert SuperSchedule.from_json(c.to_json()) == c
    pool = config_pool("spmm", 32)
    assert pool[0].fmt == "csr" and not pool[0].parallel and len({c.to_json() for c in pool}) == len(pool)
    with pytest.raises(InputError, match="unknown keys"):
        SuperSchedule.from_json('{"op": "spmv", "tiling": 3}')


def test_fast_distinct_matches_numpy() -> None:
    from autosearch.sparse.formats import _unique_inverse, count_distinct

    keys = np.random.default_rng(0).integers(0, 500, 3000)
    u, inv = np.unique(keys, return_inverse=True)
    u2, inv2 = _unique_inverse(keys)
    np.testing.assert_array_equal(u, u2)
    np.testing.assert_array_equal(inv, inv2)
    assert count_distinct(keys) == u.size and count_distinct(keys[:0]) == 0
