"""The workload registry and the random program generator.

One TuneContext-heavy fixture per module (the first TuneContext in a process costs ~20 s).
"""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

from autosearch.errors import WorkloadError
from autosearch.store import WorkloadRecord
from autosearch.workloads import (
    Workload,
    families,
    get_workload,
    list_workloads,
    random_program,
    resolve_workloads,
)
from autosearch.workloads.random_programs import _REDUCTIONS, MAX_ELEMENTS, MAX_REDUCTIONS, MAX_WORK, random_plan

BENCHMARK_FAMILIES = [
    "C1D",
    "C2D",
    "C3D",
    "GMM",
    "GRP",
    "DIL",
    "DEP",
    "T2D",
    "CAP",
    "NRM",
    "SFM",
    "CBR",
    "TBG",
    "C2D_WIN_NHWC",
]
HEX16 = re.compile(r"^[0-9a-f]{16}$")


@pytest.fixture(scope="module")
def ms_env():
    """(meta_schedule module, target, design-space function); pays the first-TuneContext cost once."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    target = tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu(), "num-cores": 2})

    def context(wl: Workload, rand_state: int = 1):
        return ms.TuneContext(
            mod=wl.mod(),
            target=target,
            space_generator="post-order-apply",
            search_strategy="replay-trace",
            task_name=wl.name,
            rand_state=rand_state,
            num_threads=2,
        )

    return ms, target, context


# -- the registry ------------------------------------------------------------------------------


def test_all_53_benchmark_operators_with_unique_readable_names():
    fams = families()
    bench = [wl for f in BENCHMARK_FAMILIES for wl in fams[f]]
    assert len(bench) == 53
    assert [len(fams[f]) for f in BENCHMARK_FAMILIES] == [4] * 13 + [1]
    names = [wl.name for wl in bench]
    assert len(set(names)) == 53
    assert "conv2d_nhwc/1x56x56x64/k1s1p0/64" in names
    assert "conv2d_nhwc/1x56x56x64/k1s1p0/64/g4" in names  # grouped
    assert "conv2d_nhwc/1x56x56x64/k1s1p0/64/d2" in names  # dilated
    assert "batch_matmul/1x128x128x128" in names
    assert "softmax/256x256" in names and "norm/1x256x256" in names
    assert "conv2d_winograd_nhwc/1x14x14x128/k3s1p0/128/t4" in names
    for wl in bench:
        assert wl.params["op"] and json.loads(json.dumps(wl.params)) == wl.params


def test_network_families():
    fams = families()
    names = {wl.name for wl in list_workloads()}
    assert len(names) == len(list_workloads())  # unique across the whole registry
    resnet = [wl.name for wl in fams["resnet50"]]
    assert len(resnet) == 24 + 23 and "resnet50/dense/1x2048/1000" in resnet  # NHWC, dense, NCHW twins
    assert "resnet50/conv2d_nhwc/1x224x224x3/k7s2p3/64" in resnet
    assert "resnet50/conv2d_nhwc/1x56x56x256/k1s2p0/512" in resnet  # stride-2 shortcut
    mnv2 = [wl.name for wl in fams["mobilenetv2"]]
    assert "mobilenetv2/dense/1x1280/1000" in mnv2
    assert "mobilenetv2/depthwise_conv2d_nhwc/1x112x112x96/k3s2p1" in mnv2
    assert "mobilenetv2/conv2d_nhwc/1x7x7x320/k1s1p0/1280" in mnv2
    assert "mobilenetv2/conv2d_nchw/1x320x7x7/k1s1p0/1280" in mnv2
    nchw = get_workload("resnet50/conv2d_nchw/1x256x56x56/k1s2p0/512")
    assert nchw.params == {
        "op": "conv2d_nchw",
        "N": 1,
        "CI": 256,
        "H": 56,
        "W": 56,
        "CO": 512,
        "kernel_size": 1,
        "stride": 2,
        "padding": 0,
    }
    script = nchw.prim_func().script()  # NCHW data, OIHW weight, NCHW output
    for buffer in ("data: T.Buffer((1, 256, 56, 56)", "weight: T.Buffer((512, 256, 1, 1)", "T.Buffer((1, 512, 28, 28)"):
        assert buffer in script
    assert sorted(wl.name for wl in fams["bert"]) == sorted(
        [
            "bert/dense/128x768/768",
            "bert/dense/128x768/3072",
            "bert/dense/128x3072/768",
            "bert/batch_matmul/12x128x128x64",
            "bert/batch_matmul/12x128x64x128",
            "bert/softmax/12x128x128",
            "bert/layer_norm/128x768",
        ]
    )
    assert "random" not in fams


def test_key_stable_distinct_and_cached():
    wl = get_workload("batch_matmul/1x128x128x128")
    twin = Workload(wl.name, wl.family, dict(wl.params), wl._builder)  # fresh cache, second build
    assert HEX16.match(wl.key) and wl.key == twin.key
    bench = [w for f in BENCHMARK_FAMILIES for w in families()[f]]
    assert len({w.key for w in bench}) == 53
    assert (
        get_workload("resnet50/conv2d_nhwc/1x56x56x64/k1s1p0/64").key
        == get_workload("conv2d_nhwc/1x56x56x64/k1s1p0/64").key
    )  # same program, two names, one key


# slow: two fresh interpreters import TVM (~12 s)
@pytest.mark.slow
def test_key_stable_across_processes_and_import_is_lazy():
    code = (
        "import sys, autosearch.workloads as w\n"
        "assert 'tvm' not in sys.modules\n"
        "print(w.get_workload('softmax/256x256').key, w.random_program(3).key)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [get_workload("softmax/256x256").key, random_program(3).key]


def test_flops_record_and_pickle():
    gmm = get_workload("batch_matmul/1x128x128x128")
    assert gmm.flops == pytest.approx(2 * 128**3)
    assert get_workload("bert/dense/128x768/3072").flops == pytest.approx(2 * 128 * 768 * 3072)
    rec = WorkloadRecord.from_workload(gmm)
    assert (rec.key, rec.name, rec.family, rec.backend, rec.flops) == (gmm.key, gmm.name, "GMM", "tvm", gmm.flops)
    assert "def main" in rec.ir and rec.params == gmm.params
    back = pickle.loads(pickle.dumps(random_program(5)))
    assert back == random_program(5) and back.key == random_program(5).key
    assert hash(gmm) == hash(get_workload(gmm.name))


def test_unknown_name_names_closest_matches():
    with pytest.raises(WorkloadError) as err:
        get_workload("conv2d_nhwc/1x56x56x64/k1s1p0/65")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("unknown workload 'conv2d_nhwc/1x56x56x64/k1s1p0/65'; closest: ")
    assert "conv2d_nhwc/1x56x56x64/k1s1p0/64" in msg
    assert get_workload("SOFTMAX/256x256").name == "softmax/256x256"  # case-insensitive fallback


def test_resolve_names_families_random_and_dedup():
    got = resolve_workloads("gmm, batch_matmul/1x128x128x128,random:3,GMM,random/1,bert/layer_norm/128x768")
    names = [wl.name for wl in got]
    assert names == [w.name for w in families()["GMM"]] + [
        "random/0",
        "random/1",
        "random/2",
        "bert/layer_norm/128x768",
    ]
    assert [wl.name for wl in resolve_workloads(["resnet50", "c2d"])][:47] == [w.name for w in families()["resnet50"]]
    assert len(resolve_workloads(["resnet50", "c2d"])) == 47 + 4
    assert get_workload("random/7") == random_program(7)
    for bad, needle in [
        ("", "no workloads"),
        ("random:0", "random:N"),
        ("random:x", "random:N"),
        ("random", "random:N"),
        ("GMM,nosuchthing", "closest: "),
    ]:
        with pytest.raises(WorkloadError, match=needle) as err:
            resolve_workloads(bad)
        assert "\n" not in str(err.value)


# -- random programs ---------------------------------------------------------------------------


def test_random_program_same_seed_same_program():
    a, b = random_program(11), random_program(11)
    assert a is not b and a.key == b.key and a.description == b.description
    assert (a.name, a.family, a.params) == ("random/11", "random", {"seed": 11})
    keys = {random_program(s).key for s in range(40)}
    assert len(keys) == 40
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(WorkloadError):
            random_program(bad)


def test_random_plans_stay_small():
    for seed in range(300):
        plan = random_plan(seed)
        assert 2 <= plan.num_ops <= 6, plan.describe()
        assert sum(_REDUCTIONS.get(n.op, 0) for n in plan.nodes) <= MAX_REDUCTIONS
        assert plan.work <= MAX_WORK + 6 * MAX_ELEMENTS
        assert all(np.prod(n.shape) <= MAX_ELEMENTS for n in plan.nodes)


def test_random_programs_have_design_spaces(ms_env):
    _, _, context = ms_env
    for seed in range(8):
        assert len(context(random_program(seed)).generate_design_space()) >= 1, seed


def test_winograd_reimplementation_has_a_design_space(ms_env):
    _, _, context = ms_env
    wl = get_workload("conv2d_winograd_nhwc/1x14x14x128/k3s1p0/128/t4")
    assert len(context(wl).generate_design_space()) >= 1


def test_random_programs_build_and_run(ms_env):
    """A sampled, post-processed schedule compiles, runs, and matches the unscheduled program."""
    import tvm

    ms, target, context = ms_env
    dev = tvm.cpu()
    # Programs with at most one reduction: with two chained reductions TVM 0.27's
    # RewriteReductionBlock can hoist an init out of a recomputation loop (a TVM bug).
    seeds = [s for s in range(100) if sum(_REDUCTIONS.get(n.op, 0) for n in random_plan(s).nodes) == 1][:3]
    assert len(seeds) == 3
    rng = np.random.default_rng(0)

    def run(mod, args):
        tensors = [tvm.runtime.tensor(a, dev) for a in args]
        tvm.compile(mod, target=target)["main"](*tensors)
        return tensors[-1].numpy()

    for seed in seeds:
        wl = random_program(seed)
        ctx = context(wl, rand_state=seed)
        sch = ctx.generate_design_space()[0]
        assert all(p.apply(sch) for p in ctx.space_generator.postprocs)
        infos = ms.arg_info.ArgInfo.from_prim_func(wl.prim_func())
        args = [rng.standard_normal([int(d) for d in info.shape]).astype("float32") for info in infos]
        args[-1][:] = 0
        got, want = run(sch.mod, args), run(wl.mod(), args)
        assert np.isfinite(want).all()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


# slow: imports a PyTorch module through Relax (~10 s)
@pytest.mark.slow
def test_nchw_convolution_is_what_relax_makes_of_a_pytorch_conv() -> None:
    """The registry's NCHW twin has the blocks and loop nests of the task `tune-model` extracts from
    an `nn.Conv2d` (Relax spells extents as int64; nothing else may differ)."""
    import torch

    from autosearch.backends.tvm.target import parse_target
    from autosearch.networks.graph import import_network
    from autosearch.networks.inputs import InputSpec

    net = torch.nn.Conv2d(128, 128, 3, stride=2, padding=1, bias=False).eval()
    x = np.random.default_rng(0).random((1, 128, 56, 56), dtype=np.float32)
    graph = import_network("conv", net, [InputSpec("x", "float32", x.shape)], [x], parse_target("host"))
    (task,) = graph.workloads

    def loops(script: str) -> tuple[list[str], list[str]]:
        script = re.sub(r"T\.int64\((\d+)\)", r"\1", script)
        return re.findall(r'T\.sblock\("(\w+)"\)', script), re.findall(r"T\.grid\(([^)]*)\)", script)

    mine = get_workload("resnet50/conv2d_nchw/1x128x56x56/k3s2p1/128")
    assert loops(task.mod().script()) == loops(mine.mod().script())
    assert loops(mine.mod().script())[0] == ["root", "pad_temp", "conv2d_nchw"]
    # and a token model reads the two alike (the int64 extents had read as 0)
    from autosearch.features.trace_tokens import workload_tokens

    assert np.array_equal(
        workload_tokens(task.mod().script(), task.flops, postproc=False),
        workload_tokens(mine.mod().script(), mine.flops, postproc=False),
    )
