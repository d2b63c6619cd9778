"""The network's kernels compiled on every core (`networks.codegen`): split into one LLVM module
a core, written in threads, and the library computes what TVM's own build and export compute."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def test_a_build_split_over_the_cores_links_every_kernel_and_computes_what_relax_build_computes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small convnet built untuned by `graph.build_network` (kernels split in two groups, built
    and written in threads) runs, loaded from `export_parallel`'s library, exactly as the same
    module built by `relax.build` and exported by `export_library`; each group is its own LLVM
    module, and every kernel is found in the library, whichever object it came from."""
    import torch
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from autosearch.backends.tvm.target import host_target
    from autosearch.networks import codegen
    from autosearch.networks.graph import build_network, import_network
    from autosearch.networks.inputs import InputSpec

    monkeypatch.setattr("autosearch.backends.tvm.target.physical_cores", lambda: 2)
    target = host_target()
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 1), torch.nn.Flatten()
    ).eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype("float32")
    graph = import_network("net", net, [InputSpec("x", "float32", x.shape)], [x], target)
    split = build_network(graph, ms.database.MemoryDatabase(), target)
    llvm = [m for m in split.mod._collect_dso_modules() if m.kind == "llvm"]
    assert len(llvm) == 2  # one a core
    codegen.export_parallel(split, str(tmp_path / "split.so"))

    monkeypatch.setattr(  # TVM's own build, one LLVM module
        "autosearch.networks.graph.build_parallel",
        lambda mod, target, pipeline: relax.build(mod, target=target, relax_pipeline=pipeline),
    )
    whole = build_network(graph, ms.database.MemoryDatabase(), target)
    assert len([m for m in whole.mod._collect_dso_modules() if m.kind == "llvm"]) == 1
    whole.export_library(str(tmp_path / "whole.so"))

    def run(path: Path) -> np.ndarray:
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
        out = vm["main"](tvm.runtime.tensor(x))
        return (out if hasattr(out, "numpy") else out[0]).numpy()

    want = net(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_array_equal(run(tmp_path / "split.so"), run(tmp_path / "whole.so"))
    np.testing.assert_allclose(run(tmp_path / "split.so"), want, rtol=1e-4, atol=1e-4)
