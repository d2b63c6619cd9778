"""Symbolic features vs. the same quantities of concretely applied and post-processed schedules.

Real TVM: design spaces of two small workloads, random decisions replayed, MetaSchedule's
RewriteParallelVectorizeUnroll applied; footprints by TVM's interval analysis (concrete.py).
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from autosearch.search.gradient.concrete import applied_quantities, postprocessed_quantities
from autosearch.search.gradient.features import FEATURE_NAMES, MAX_LOOPS, FeatureFn
from autosearch.search.gradient.sketch import Sketch
from autosearch.search.gradient.structure import read_structure


def _sketches(name: str, host) -> list[tuple[str, Sketch]]:
    from tvm.s_tir import meta_schedule as ms

    from autosearch.workloads import get_workload

    mod = get_workload(name).mod()
    ctx = ms.TuneContext(
        mod=mod,
        target=host,
        space_generator="post-order-apply",
        search_strategy="replay-trace",
        task_name=name,
        num_threads=1,
        rand_state=0,
    )
    return [(name, Sketch.from_space(mod, sp, i)) for i, sp in enumerate(ctx.generate_design_space())]


@pytest.fixture(scope="module")
def sketches(host):
    return _sketches("batch_matmul/1x128x128x128", host)


def _check(sk: Sketch, seed: int) -> list[str]:
    from tvm.s_tir import meta_schedule as ms

    st = read_structure(sk)
    fn = FeatureFn(st)
    rng = random.Random(seed)
    errors: list[str] = []
    checked = 0
    for _ in range(4):
        dec = sk.random_decisions(rng)
        sch = sk.apply(dec)
        applied = applied_quantities(sch)
        if [len(v["extents"]) for v in applied.values()] != [len(b.loops) for b in st.blocks]:
            continue  # a compute-location index that names another loop here: another structure
        post = sch.copy()
        assert ms.postproc.RewriteParallelVectorizeUnroll().apply(post)
        postq = postprocessed_quantities(post)
        feats = fn.of_decisions([dec])[0]
        logf = torch.tensor([sk.log_factors(dec)], dtype=torch.float64)
        for b, (blk, le) in enumerate(zip(st.blocks, fn.loop_log_extents(logf))):
            f = dict(zip(FEATURE_NAMES, feats[b].tolist()))
            truth, ptruth = applied[blk.name], postq[blk.name]
            exact = all(lp.exact for lp in blk.loops)
            if exact:
                ext = [round(math.exp(x)) for x in le[0].tolist()]
                if ext != truth["extents"]:
                    errors.append(f"{blk.name} extents {ext} != {truth['extents']}")
            got = (
                round(math.exp(f["log_parallel"])),
                round(math.exp(f["log_vector"])),
                round(math.expm1(f["log1p_unroll_step"])),
            )
            want = (ptruth["parallel"], ptruth["vector"] or 1, ptruth["unroll_step"])
            if blk.root_child and got != want:
                errors.append(f"{blk.name} parallel/vector/unroll {got} != {want} at {dec}")
            if exact and blk.chain_ok:
                accs = sorted(blk.accesses, key=lambda a: not a.write)
                L = len(truth["extents"])
                for a, acc in enumerate(accs[:4]):
                    for j in range(max(0, L - MAX_LOOPS), L):
                        mine = round(math.exp(f[f"acc{a}_log_footprint{L - 1 - j}"] - math.log(acc.nbytes)))
                        if mine != truth["footprints"][a][j]:
                            errors.append(
                                f"{blk.name} {acc.buffer} footprint at loop {j}: {mine} != {truth['footprints'][a][j]}"
                            )
            checked += 1
    assert checked > 0
    return errors


def test_features_equal_the_applied_and_postprocessed_schedules(sketches) -> None:
    errors = []
    for i, (name, sk) in enumerate(sketches):
        errors += [f"{name} sketch {sk.index}: {e}" for e in _check(sk, seed=i)]
    assert errors == []


@pytest.mark.slow
def test_conv2d_features_equal_the_applied_and_postprocessed_schedules(host) -> None:
    errors = []
    for i, (name, sk) in enumerate(_sketches("conv2d_nhwc/1x7x7x512/k3s1p1/512", host)):
        errors += [f"{name} sketch {sk.index}: {e}" for e in _check(sk, seed=i)]
    assert errors == []


def test_relaxed_features_are_smooth_and_match_at_integer_knobs(sketches) -> None:
    _, sk = sketches[0]
    fn = FeatureFn(read_structure(sk))
    dec = sk.own_decisions()
    logf = torch.tensor([sk.log_factors(dec)], dtype=torch.float64, requires_grad=True)
    cats = [
        torch.nn.functional.one_hot(torch.tensor([d]), len(c.candidates)).to(torch.float64)
        for d, c in zip(dec[1], sk.cats)
    ]
    hard = fn(logf, cats, tau=0.0)
    soft = fn(logf, cats, tau=0.05)
    names = list(FEATURE_NAMES)
    smooth = [i for i, n in enumerate(names) if n not in ("log_parallel", "log_vector")]
    assert torch.allclose(hard[..., smooth], soft[..., smooth])
    soft.sum().backward()
    assert logf.grad is not None and float(logf.grad.abs().sum()) > 0


def test_structure_of_the_matmul_sketch(sketches) -> None:
    _, sk = sketches[0]
    st = read_structure(sk)
    assert len(sk.tiles) == 4 and [t.n for t in sk.tiles] == [4, 4, 4, 2]
    assert st.max_parallel > 0 and st.max_vectorize > 0 and st.unroll_cat is not None
    main = st.blocks[0]
    assert main.name == "Z" and len(main.loops) == 14 and all(lp.exact for lp in main.loops)
    assert sum(lp.reduce for lp in main.loops) == 2  # k split in two levels
