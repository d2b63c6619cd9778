"""Sketch knobs: factorisations, rounding, canonical trace matching (no TuneContext needed)."""

from __future__ import annotations

import math
import random

import pytest

from autosearch.search.gradient.sketch import Sketch, TileKnob, _canonical, factorizations, relax_reason


def test_factorizations_are_exactly_the_ordered_products() -> None:
    got = factorizations(12, 3)
    assert all(math.prod(f) == 12 for f in got)
    assert len(set(got)) == len(got) == 18  # ordered 3-factorisations of 2^2*3: C(4,2)*C(3,2)
    assert factorizations(1, 4) == ((1, 1, 1, 1),)
    assert all(f[-1] <= 4 for f in factorizations(64, 2, 4)) and (16, 4) in factorizations(64, 2, 4)
    assert factorizations(0, 2) == ()


def test_round_tiles_goes_to_the_nearest_valid_factorisation() -> None:
    sk = Sketch(mod=None, trace=None, tiles=[TileKnob(0, 64, 3, 16)])
    (got,) = sk.round_tiles([[math.log(4.2), math.log(3.9), math.log(4.0)]])
    assert got == (4, 4, 4)
    (got,) = sk.round_tiles([[0.0, 0.0, math.log(64)]])  # innermost over its limit: clipped to 16
    assert got[-1] <= 16 and math.prod(got) == 64


def test_canonical_form_ignores_dead_getters_and_renaming() -> None:
    a = [
        [
            ["GetSBlock", [], ["Z", "main"], ["b0"]],
            ["GetSBlock", [], ["D", "main"], ["b1"]],
            ["GetLoops", ["b0"], [], ["l2", "l3"]],
            ["SamplePerfectTile", ["l2"], [2, 64], ["v4", "v5"]],
            ["GetConsumers", ["b0"], [], []],
            ["EnterPostproc", [], [], []],
        ],
        [[3, [4, 8]]],
    ]
    b = [
        [
            ["GetSBlock", [], ["Z", "main"], ["x"]],
            ["GetLoops", ["x"], [], ["y", "z"]],
            ["SamplePerfectTile", ["y"], [2, 64], ["p", "q"]],
        ],
        [[2, [2, 16]]],
    ]
    ca, pa = _canonical(a)
    cb, pb = _canonical(b)
    assert ca == cb and pa == [0, 2, 3] and pb == [0, 1, 2]
    c = [
        [
            ["GetSBlock", [], ["Z", "main"], ["x"]],
            ["GetLoops", ["x"], [], ["y", "z"]],
            ["SamplePerfectTile", ["z"], [2, 64], ["p", "q"]],
        ],
        [],
    ]  # another loop: another sketch
    assert _canonical(c)[0] != ca


def test_relax_reason_needs_a_design_space() -> None:
    assert relax_reason([]) == "no design space"


@pytest.mark.parametrize("extent,n", [(128, 4), (768, 3), (7, 2)])
def test_random_decisions_are_valid(extent: int, n: int) -> None:
    sk = Sketch(mod=None, trace=None, tiles=[TileKnob(0, extent, n, 64)])
    rng = random.Random(0)
    for _ in range(20):
        (f,), _ = sk.random_decisions(rng)
        assert math.prod(f) == extent and len(f) == n and f[-1] <= 64
