"""Activation ranges for post-training int8 quantization: the input of each operator `lowp`
computes in int8, observed on the example inputs.

Why in the prepared graph, not in PyTorch: the operators int8 rewrites are the graph's after
folding and blocking (a batch norm folded into a convolution, a transposed convolution made
one); their inputs are tensors of this graph, and an ONNX model has them too. How: each such
input passes through an observer (a packed call back into Python that records the tensor's
smallest and largest value and returns it unchanged), the graph is built as TVM builds it
untuned (no search: its compile and its run take seconds), and run once on each calibration
sample (the example inputs, or the set `--calibration` reads: `inputs.load_samples`). The
observers are numbered in the order the rewrite meets the operators, which is the order
`lowp.int8_layers` meets them in the same graph.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from autosearch.errors import InputError
from autosearch.networks.rewrite import rewrite_calls

__all__ = ["input_ranges", "observed"]

#: The packed function each observer calls (registered for the run of one calibration).
OBSERVER = "autosearch.calibration_observe"


def observed(mod: Any, chosen: Callable[[Any], bool]) -> tuple[Any, int]:
    """`mod` with the first argument of every call `chosen` accepts passed through an observer
    numbered 0, 1, ... in the rewrite's order (every call's, as `lowp.int8_layers` meets them); and
    how many. An observer returns a copy of what it saw, never the tensor itself: Relax's memory
    planner takes the observed tensor as dead after the observer and gives its storage to the
    next output, so a returned alias was overwritten by the call that read it (a stride-2
    convolution wrote its output over its input, and every range after it was wrong)."""
    from tvm import relax

    count = [0]

    def observe(call: Any, builder: Any) -> Any:
        if not chosen(call):
            return None
        x = call.args[0]
        number = relax.const(np.array(count[0], dtype="int64"))
        seen = builder.emit(relax.op.call_pure_packed(OBSERVER, x, number, ty_args=[x.ty]), name_hint="observed")
        count[0] += 1
        return relax.Call(call.op, [seen, *call.args[1:]], call.attrs)

    return rewrite_calls(mod, None, observe), count[0]


def input_ranges(
    mod: Any,
    chosen: Callable[[Any], bool],
    samples: Sequence[Sequence[np.ndarray]],
    build: Callable[[Any], Any],
) -> list[tuple[float, float]]:
    """(smallest, largest) value of the first argument of each call `chosen` accepts, over
    one run of `mod` on each sample (one array per input; `build`: a graph to its untuned Relax
    executable); a non-finite value fails in one line naming the operator's number."""
    import tvm
    from tvm import relax

    probe, n = observed(mod, chosen)
    if n == 0:
        return []
    if not samples:
        raise InputError("--precision int8 calibrates its activation ranges on example inputs; none were given")
    lo, hi = [math.inf] * n, [-math.inf] * n
    nonfinite: set[int] = set()

    def record(x: Any, number: Any) -> Any:
        a, i = x.numpy(), int(number.numpy())
        smallest, largest = float(a.min()), float(a.max())
        if not (math.isfinite(smallest) and math.isfinite(largest)):
            nonfinite.add(i)  # min() would skip a NaN met after a finite range
        lo[i], hi[i] = min(lo[i], smallest), max(hi[i], largest)
        return tvm.runtime.tensor(a, x.device)  # a copy: see `observed`

    tvm.register_global_func(OBSERVER, record, override=True)
    dev = tvm.cpu()
    executable = build(probe)
    main = relax.VirtualMachine(executable, dev)["main"]
    for k, inputs in enumerate(samples):
        main(*[tvm.runtime.tensor(a, dev) for a in inputs])
        if nonfinite:
            where = "the example inputs" if len(samples) == 1 else f"calibration sample {k}"
            raise InputError(
                f"--precision int8: the input of quantized operator {min(nonfinite)} (of {n}) holds a non-finite value "
                f"(NaN or inf) on {where}: its range cannot be calibrated"
            )
    return list(zip(lo, hi, strict=True))
