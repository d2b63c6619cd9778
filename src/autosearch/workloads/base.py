"""What a workload is: a named program with a family, shape parameters, a stable key and a FLOP count.

Kept apart from the registry so that generators (benchmark tables, network shapes, random
programs) can build `Workload`s without importing the registry that lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autosearch.errors import WorkloadError

if TYPE_CHECKING:
    import tvm
    from tvm.tirx import PrimFunc

__all__ = ["RANDOM_FAMILY", "Workload", "estimate_flops", "structural_key"]

#: Family of the random program generator (never part of `list_workloads`).
RANDOM_FAMILY = "random"


@dataclass(frozen=True)
class Workload:
    """One program to be scheduled: a readable unique name, a family and its shape parameters.

    `prim_func()` rebuilds the program from the private builder each call (milliseconds); the
    structural-hash `key` and the `flops` estimate are computed once and cached.
    """

    name: str
    family: str
    params: dict[str, Any] = field(hash=False)
    #: Zero-argument callable returning a `PrimFunc` (picklable: a partial of a module function).
    _builder: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    #: One human-readable line describing the program (operator, layout, op list of a random one).
    description: str = field(default="", compare=False, repr=False)
    _cache: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False, hash=False)

    def prim_func(self) -> PrimFunc:
        """The program as a fresh TIR `PrimFunc` (`tvm.tirx.PrimFunc` in TVM 0.27)."""
        if self._builder is None:
            raise WorkloadError(f"workload '{self.name}' has no builder")
        return self._builder()

    def mod(self) -> tvm.IRModule:
        """The program as an `IRModule` whose only function is ``main``."""
        import tvm

        return tvm.IRModule({"main": self.prim_func()})

    @property
    def key(self) -> str:
        """Stable structural hash of the program: 16 lowercase hex digits."""
        if "key" not in self._cache:
            self._cache["key"] = structural_key(self.prim_func())
        return self._cache["key"]

    @property
    def flops(self) -> float | None:
        """Floating-point operations of one run (TVM's `estimate_tir_flops`); None if unknown or 0."""
        if "flops" not in self._cache:
            self._cache["flops"] = estimate_flops(self.mod())
        return self._cache["flops"]


def structural_key(obj: Any) -> str:
    """The stable key of a PrimFunc or IRModule: its structural hash as 16 lowercase hex digits.

    The one spelling of the key: the store, the registry, custom modules and MetaSchedule imports
    must agree on it, or the same program becomes two workloads.
    """
    import tvm_ffi

    return f"{int(tvm_ffi.structural_hash(obj)) & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def estimate_flops(mod: Any) -> float | None:
    """Floating-point operations of one run (TVM's `estimate_tir_flops`); None if unknown or 0."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        value = float(estimate_tir_flops(mod))
    except Exception:
        return None
    return value if value > 0 else None
