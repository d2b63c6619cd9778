"""Target detection: the host CPU's mcpu is always set; CUDA targets get MetaSchedule's limits."""

from __future__ import annotations

import json

import pytest

from autosearch.backends.tvm.target import canonical_target, host_cpu, parse_target
from autosearch.errors import TargetError


def test_default_is_host_cpu_with_mcpu():
    t = parse_target(None)
    assert t.kind.name == "llvm"
    assert str(t.attrs["mcpu"]) == host_cpu() != ""
    assert int(t.attrs["num-cores"]) >= 1


def test_json_dict_and_native_mcpu():
    t = parse_target('{"kind": "llvm", "mcpu": "native", "num-cores": 1}')
    assert str(t.attrs["mcpu"]) == host_cpu() and int(t.attrs["num-cores"]) == 1
    assert json.loads(canonical_target(t))["kind"] == "llvm"


def test_cuda_gets_required_attrs_and_host():
    for spec in ('{"kind": "cuda", "arch": "sm_80"}', "cuda-h100", "cuda-h200"):
        t = parse_target(spec)
        assert t.kind.name == "cuda"
        for key in ("max_threads_per_block", "max_shared_memory_per_block", "thread_warp_size"):
            assert int(t.attrs[key]) > 0
        assert t.host is not None and t.host.kind.name == "llvm"


@pytest.mark.parametrize(
    "spec, msg",
    [
        ("{not json", "not valid JSON"),
        ("warp-drive", "unknown target"),
        ('{"mcpu": "x"}', "'kind' key"),
        ('{"kind": "no-such-kind"}', "invalid target"),
    ],
)
def test_bad_targets_one_line(spec, msg):
    with pytest.raises(TargetError, match=msg) as info:
        parse_target(spec)
    assert "\n" not in str(info.value)


def test_fingerprint_tells_apart_cpus_a_hypervisor_names_alike(monkeypatch):
    """Zen 3, 4 and 5 all read "AMD EPYC" here: the family/model numbers must change the fingerprint."""
    import re
    from pathlib import Path

    import autosearch.backends.tvm.target as tgt
    from autosearch.hostinfo import cpu_signature

    target = parse_target(None)
    if Path("/proc/cpuinfo").is_file():  # elsewhere it is the platform's processor string
        assert re.fullmatch(r"\S+ \d+/\d+/\d*", cpu_signature()), cpu_signature()
    monkeypatch.setattr(tgt, "cpu_model_name", lambda: "AMD EPYC")
    monkeypatch.setattr(tgt, "cpu_signature", lambda: "AuthenticAMD 25/1/1")  # Zen 3
    zen3 = tgt.device_fingerprint(target)
    monkeypatch.setattr(tgt, "cpu_signature", lambda: "AuthenticAMD 25/17/1")  # Zen 4
    assert tgt.device_fingerprint(target) != zen3
    monkeypatch.setattr(tgt, "cpu_signature", lambda: "AuthenticAMD 25/1/1")
    assert tgt.device_fingerprint(target) == zen3  # and stays stable for one CPU
