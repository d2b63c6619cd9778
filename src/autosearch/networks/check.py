"""Whether a compiled network computes what the original does, relative to the output's scale.

Why not `np.allclose(rtol=1e-4, atol=1e-4)`: a network with default BatchNorm statistics can output
~1e-10 everywhere, and an absolute tolerance of 1e-4 then passes any output at all (issue 47). The
check here scales the tolerance by the reference's own magnitude: the largest absolute error must
be at most `rtol` x the largest absolute reference value (plus a tiny floor for all-zero outputs),
and an output that is all zeros or non-finite where the reference is not fails outright.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PRECISION_RTOL", "OutputCheck", "compare_outputs", "flatten_outputs"]

#: Relative tolerance against the reference's largest magnitude: float32 kernels that reorder
#: reductions (tiling, vectorisation, fast-math polynomials) differ by ~1e-6..1e-4 of the scale.
RTOL = 1e-3
#: The tolerance a build in each `--precision` is held to. bf16 rounds each operand of the dense
#: layers to 8 significant bits (relative 2^-9 = 2e-3 each): OpenVINO's own bf16 BERT-base is off by
#: 5.5e-3 of its scale (issue 72's table); 2e-2 passes that and fails a wrong kernel (~1 of scale).
PRECISION_RTOL = {"fp32": RTOL, "bf16": 2e-2, "int8": 1e-1}
#: Outputs whose largest magnitude is below this come from a model whose activations shrank toward
#: float32's subnormal range (< 1.2e-38): transformers' EfficientNet-B0 at its own initialisation
#: outputs ~7e-31. Such a model says little about real weights (and x86 computes subnormals slowly).
TINY_SCALE = 1e-20


@dataclass(frozen=True)
class OutputCheck:
    """Largest absolute error, the reference's scale, their ratio and the verdict."""

    max_abs_err: float
    scale: float
    relative_err: float
    ok: bool
    reason: str = ""
    rtol: float = RTOL

    def describe(self) -> str:
        verdict = "ok" if self.ok else f"MISMATCH ({self.reason})" if self.reason else "MISMATCH"
        tiny = (
            "; outputs this small mean the activations shrank toward float32's subnormal range: "
            "check how the model's weights are initialised"
            if 0 < self.scale < TINY_SCALE
            else ""
        )
        return (
            f"max abs error {self.max_abs_err:.2e} on outputs of scale {self.scale:.2e} "
            f"(relative {self.relative_err:.1e}, tolerance {self.rtol:.0e}) -> {verdict}{tiny}"
        )


def flatten_outputs(out: Any) -> list[np.ndarray]:
    """Every array of a (nested) output: torch tensors, TVM tensors and arrays, tuples, dataclass-like
    HuggingFace outputs (their tensors in order)."""
    if out is None:
        return []
    if hasattr(out, "numpy") and callable(out.numpy):
        arr = out.detach().numpy() if hasattr(out, "detach") else out.numpy()
        return [np.asarray(arr)]
    if isinstance(out, np.ndarray):
        return [out]
    if isinstance(out, dict):
        return [a for v in out.values() for a in flatten_outputs(v)]
    if hasattr(out, "to_tuple"):  # transformers' ModelOutput
        return [a for v in out.to_tuple() for a in flatten_outputs(v)]
    if isinstance(out, (list, tuple)) or (hasattr(out, "__len__") and hasattr(out, "__getitem__")):
        return [a for i in range(len(out)) for a in flatten_outputs(out[i])]
    return [np.asarray(out)]


def compare_outputs(got: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float = RTOL) -> OutputCheck:
    """Compare every output; see the module doc for the rule."""
    if len(got) != len(expected):
        return OutputCheck(
            float("nan"), float("nan"), float("nan"), False, f"{len(got)} outputs, expected {len(expected)}"
        )
    worst, scale = 0.0, 0.0
    for g, e in zip(got, expected):
        if g.shape != e.shape:
            return OutputCheck(float("nan"), float("nan"), float("nan"), False, f"shape {g.shape}, expected {e.shape}")
        g64, e64 = g.astype(np.float64), e.astype(np.float64)
        if not np.all(np.isfinite(g64) == np.isfinite(e64)):
            return OutputCheck(float("nan"), float("nan"), float("nan"), False, "non-finite values differ")
        fin = np.isfinite(e64)
        if g.size:
            worst = max(worst, float(np.max(np.abs(g64[fin] - e64[fin]), initial=0.0)))
            scale = max(scale, float(np.max(np.abs(e64[fin]), initial=0.0)))
    rel = worst / scale if scale > 0 else (0.0 if worst == 0 else float("inf"))
    ok = worst <= rtol * scale + 1e-30
    return OutputCheck(worst, scale, rel, ok, "" if ok else f"relative error {rel:.1e} > {rtol:.0e}", rtol)
