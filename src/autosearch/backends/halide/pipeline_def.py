"""What a pipeline builder returns: output Funcs with their estimated extents, and the inputs.

Why its own module: the builders (hand-written apps, the random generator, user files) and the
registry that dispatches to them all need it; here it depends on none of them, so no import runs
in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autosearch.errors import InputError

__all__ = ["PipelineDef"]


@dataclass
class PipelineDef:
    """What a pipeline builder returns: outputs with their estimated extents, and inputs."""

    outputs: list[Any]
    output_shapes: list[tuple[int, ...]]
    inputs: list[tuple[Any, tuple[int, ...]]] = field(default_factory=list)
    description: str = ""  # a readable account of the stages (stored as the workload IR)
    keepalive: list[Any] = field(default_factory=list)

    def pipeline(self) -> Any:
        """Set every estimate and return a fresh `hl.Pipeline` (not yet scheduled)."""
        import halide as hl

        if not self.outputs:
            raise InputError("a pipeline needs at least one output Func")
        if len(self.output_shapes) != len(self.outputs):
            raise InputError(f"{len(self.outputs)} outputs but {len(self.output_shapes)} output shapes")
        for param, shape in self.inputs:
            if param.dimensions() != len(shape):
                raise InputError(f"input {param.name()} has {param.dimensions()} dimensions, estimate has {len(shape)}")
            for d, e in enumerate(shape):
                param.dim(d).set_estimate(0, int(e))
        for f, shape in zip(self.outputs, self.output_shapes):
            args = f.args()
            if len(args) != len(shape):
                raise InputError(f"output {f.name()} has {len(args)} dimensions, estimate has {len(shape)}")
            for v, e in zip(args, shape):
                f.set_estimate(v, 0, int(e))
        return hl.Pipeline(self.outputs)
