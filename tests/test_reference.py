"""The PyTorch reference of a tuned operator: timed on the target's device, or not at all."""

from __future__ import annotations

import pytest

from autosearch.reference import reference_latency, time_callable, torch_device
from autosearch.workloads import get_workload


def test_cpu_reference_says_its_device() -> None:
    ref = reference_latency(get_workload("batch_matmul/1x128x128x128"), min_time=0.01, repeat=2, isolated=False)
    assert ref is not None and ref["device"] == "cpu" and ref["latency"] > 0 and ref["threads"] >= 1


def test_cuda_reference_is_none_without_a_cuda_pytorch() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the CUDA reference is real")
    ref = reference_latency(get_workload("batch_matmul/1x128x128x128"), isolated=False, device="cuda")
    assert ref is None  # never a CPU figure under a GPU's name


def test_unknown_reference_device_is_refused() -> None:
    with pytest.raises(ValueError, match="cpu' or 'cuda"):
        reference_latency(get_workload("batch_matmul/1x128x128x128"), device="rocm")


def test_time_callable_waits_for_the_device_before_each_clock_read() -> None:
    calls = {"fn": 0, "sync": 0}

    def fn() -> None:
        calls["fn"] += 1

    def sync() -> None:
        calls["sync"] += 1

    assert time_callable(fn, min_time=0.001, repeat=3, sync=sync) >= 0
    assert calls["sync"] == 2 * 3 + 2  # around the two probe calls, and around each timed batch


def test_cuda_reference_runs_on_the_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA PyTorch here")
    ref = reference_latency(
        get_workload("batch_matmul/1x128x128x128"), min_time=0.01, repeat=2, isolated=False, device="cuda"
    )
    assert ref is not None and ref["device"] == "cuda" and ref["latency"] > 0 and " on " in ref["name"]


def test_pytorch_runs_where_the_target_does() -> None:
    from autosearch.backends.tvm.target import host_target, parse_target

    assert torch_device(host_target()) == "cpu"
    assert torch_device(parse_target("cuda-h100")) == "cuda"
    assert torch_device(parse_target('{"kind": "rocm"}')) is None  # no CPU time under a GPU's name


def test_nchw_convolution_reference_computes_the_workloads_output() -> None:
    """The PyTorch twin of a registered NCHW conv: same layout, so the same output shape."""
    from autosearch.reference import reference_fn

    wl = get_workload("resnet50/conv2d_nchw/1x256x56x56/k1s2p0/512")
    ref = reference_fn(wl.params)
    assert ref is not None and ref[0] == "torch.nn.functional.conv2d"
    assert tuple(ref[1]().shape) == (1, 512, 28, 28)
