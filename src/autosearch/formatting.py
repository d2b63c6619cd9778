"""Human-readable units shared by every table and progress bar."""

from __future__ import annotations

__all__ = ["format_seconds"]


def format_seconds(x: float | None) -> str:
    """A latency in seconds as `1.23 ms` / `45.6 us` (or `-` when unknown)."""
    if x is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x * 1e9:.3g} ns"
