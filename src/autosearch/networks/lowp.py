"""A network's dense layers in bf16: each matmul by a constant weight computes on bf16 operands
with fp32 sums, its weight packed once for the CPU's `vdpbf16ps`.

Why these layers: in a transformer they are nearly all the arithmetic (BERT-base: 22 of its 22.5
GFLOP), and they are what OpenVINO runs in bf16 by default on a CPU with AVX512_BF16. Everything
else (softmax, layer norms, GELU, residual adds) stays fp32, as OpenVINO's bf16 mode also keeps
its normalisations in fp32; the attention's matmuls of two activations stay fp32 too (no constant
to pack, and 2% of BERT's arithmetic).

How: after the weights are bound and folded, `relax.matmul(x, W)` with `W` a constant (K, N)
becomes a reshape of `x` to rows, a cast to bf16 (fused into the operator before it), the packed
dense kernel (`workloads.lowp.packed_dense`, the registry's `...@bf16` workloads' computation,
with the network's int64 extents), and a reshape back. A weight whose sizes the packing does not divide (N
not a multiple of 16, K odd) stays fp32. The reshapes keep the bias add out of the dense task
(FuseOps fuses elementwise operators, not a reshape, after it): one of the next steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autosearch.networks.rewrite import rewrite_functions
from autosearch.workloads.lowp import pack_weight, packed_dense

__all__ = ["bf16_dense_layers"]

#: Products each output lane of `vdpbf16ps` sums (the packing's inner width), and its lanes.
_PAIRS = 2
_LANES = 16


def _packed_bf16(weight_kn: np.ndarray) -> np.ndarray:
    """A (K, N) float32 weight rounded to bf16 (to nearest even) in the packing (N/16, K/2, 16, 2)."""
    import ml_dtypes

    return pack_weight(np.ascontiguousarray(weight_kn.T).astype(ml_dtypes.bfloat16), _PAIRS)


def _te_packed_dense(data: Any, weight: Any) -> Any:
    return packed_dense(data, weight, "float32")


def _static_dims(expr: Any) -> list[int] | None:
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    dims = getattr(shape, "values", None)
    if dims is None:
        return None
    try:
        return [int(d) for d in dims]
    except (TypeError, ValueError):
        return None  # a symbolic extent


def bf16_dense_layers(mod: Any) -> tuple[Any, int]:
    """`mod` with every float32 matmul by a constant weight computed in bf16; and how many."""
    import tvm
    from tvm import relax
    from tvm.relax import expr_functor

    count = [0]

    @expr_functor.mutator
    class Bf16Dense(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if str(getattr(call.op, "name", "")) != "relax.matmul":
                return call
            x, w = call.args
            if not isinstance(w, tvm.ir.expr.Constant):
                return call
            xdims, wdims = _static_dims(x), _static_dims(w)
            if xdims is None or wdims is None or len(wdims) != 2 or len(xdims) < 2:
                return call
            if str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32":
                return call
            k, n = wdims
            if xdims[-1] != k or n % _LANES or k % _PAIRS:
                return call
            rows = int(np.prod(xdims[:-1]))
            packed = relax.const(tvm.runtime.tensor(_packed_bf16(w.value.numpy())))
            x2 = self.builder_.emit(relax.op.reshape(x, [rows, k]))
            xb = self.builder_.emit(relax.op.astype(x2, "bfloat16"))
            y = self.builder_.emit_te(_te_packed_dense, xb, packed, primfunc_name_hint="dense_packed_bf16")
            count[0] += 1
            return relax.op.reshape(y, [*xdims[:-1], n])

    out = rewrite_functions(Bf16Dense, mod)
    return out, count[0]
