"""Registering only the x86 (or CUDA) tensor intrinsics (backends/tvm/intrinsics.py) must not change
any design space: the traces MetaSchedule generates are the same as with TVM's full import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_SCRIPT = r"""
import json, sys
partial = sys.argv[1] == "partial"
from autosearch.backends.tvm.target import host_target, parse_target
from autosearch.workloads import get_workload
target = parse_target(sys.argv[2]) if sys.argv[2] != "host" else host_target()
if partial:
    from autosearch.backends.tvm.intrinsics import register_tensor_intrinsics
    register_tensor_intrinsics(target)
from tvm.s_tir import meta_schedule as ms
out = {}
for name in sys.argv[3:]:
    ctx = ms.TuneContext(mod=get_workload(name).mod(), target=target, space_generator="post-order-apply",
                         search_strategy="evolutionary", task_name=name, rand_state=0)
    out[name] = [str(s.trace) for s in ctx.generate_design_space()]
print(json.dumps({"spaces": out, "full": "tvm.s_tir.tensor_intrin.riscv_cpu" in sys.modules}))
"""

WORKLOADS = ["batch_matmul/1x128x128x128", "conv2d_nhwc/1x56x56x64/k1s1p0/64", "softmax/256x256"]


def _spaces(mode: str, target: str = "host") -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode, target, *WORKLOADS], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("target", ["host", "cuda-h100"])
def test_partial_registration_gives_the_same_design_spaces(target: str) -> None:
    partial, full = _spaces("partial", target), _spaces("full", target)
    assert not partial["full"] and full["full"]  # the partial run really skipped the other targets'
    assert partial["spaces"] == full["spaces"]


def _last_line(code: str) -> str:
    """The last line `code` prints in a fresh interpreter (it must exit 0)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def test_partial_registration_registers_x86_only() -> None:
    code = (
        "import sys; sys.modules['torch'] = None;"  # tvm_ffi's torch import: 4 s of this process, unused
        "from autosearch.backends.tvm.target import host_target;"
        "from autosearch.backends.tvm.intrinsics import register_tensor_intrinsics;"
        "register_tensor_intrinsics(host_target());"
        "import tvm.s_tir.tensor_intrin as ti; from tvm.s_tir import TensorIntrin;"
        "TensorIntrin.get('dot_16x4_vnni');"
        "print('cuda' if 'tvm.s_tir.tensor_intrin.cuda' in sys.modules else 'x86-only')"
    )
    assert _last_line(code).endswith("x86-only")


@pytest.mark.slow  # ~10-30 s: a fresh process imports TVM and the CUDA intrinsics (ran on the H100 machine)
def test_cuda_target_registers_cuda_only() -> None:
    code = (
        "import sys; from autosearch.backends.tvm.target import parse_target;"
        "from autosearch.backends.tvm.intrinsics import register_tensor_intrinsics;"
        "register_tensor_intrinsics(parse_target('cuda-h100'));"
        "from tvm.s_tir import TensorIntrin;"
        "TensorIntrin.get('mma_ldmatrix_f16_a');"
        "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('tvm.s_tir.tensor_intrin.')))"
    )
    assert _last_line(code) == "['cuda']"
