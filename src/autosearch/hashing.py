"""Content hashes every layer agrees on (schedules are deduplicated by them in sampling and the store)."""

from __future__ import annotations

import hashlib

__all__ = ["schedule_hash"]


def schedule_hash(schedule_text: str) -> str:
    """Hash that identifies a schedule within a (workload, target) group."""
    return hashlib.sha256(schedule_text.encode()).hexdigest()[:32]
