"""Vectors that fill whole SIMD registers.

Why: LLVM splits a vector longer than one register into register-sized parts, and builds a
part-register tail lane by lane (a 24-float vector on AVX-512: hundreds of `vinsertps` in a
matmul kernel, many times slower than the same loop with 16 floats). Neither prior's features
show it, and on the tuning benchmark's stores such schedules measured several times slower in
median than the others. The zero-trial pass orders them last
(`networks.prior`). Proposing them last in the searches' rounds too was tried and reverted: it
left four of MobileNetV2's padded-output convolutions untuned (bench/HISTORY.md, "The
whole-register rule inside the searches").
"""

from __future__ import annotations

from typing import Any

__all__ = ["simd_bits", "whole_register_vectors"]


def simd_bits(target: Any) -> int:
    """The target's SIMD register width in bits (0 where it has none we know: no rule)."""
    from autosearch.backends.tvm.device import isa_info

    return int(isa_info(target)["simd_bits"])


def whole_register_vectors(sch: Any, register_bits: int) -> bool:
    """Whether every vectorized loop of a built schedule that is longer than one SIMD register is
    a whole number of registers (lanes x element bits a multiple of `register_bits`). A shorter
    vector passes: LLVM widens it into one register instead of splitting it."""
    from tvm.tirx import ForKind

    from autosearch.search.gradient.structure import block_nests

    if register_bits <= 0:
        return True
    for nest in block_nests(sch.mod["main"]):
        lanes = 1
        for lp in nest.loops:
            if lp.kind == ForKind.VECTORIZED:
                lanes *= int(lp.extent)
        if lanes == 1:
            continue
        writes = nest.realize.block.writes
        bits = lanes * (writes[0].source.dtype.bits if writes else 32)
        if bits > register_bits and bits % register_bits:
            return False
    return True
