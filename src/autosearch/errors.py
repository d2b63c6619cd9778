"""One exception family, so the CLI can print any user-facing failure as a single line."""

from __future__ import annotations

__all__ = ["AutosearchError", "InputError", "StoreError", "TargetError", "WorkloadError", "one_line"]


class AutosearchError(Exception):
    """Base of every error the user can cause; its message is one line that names the problem."""


class StoreError(AutosearchError):
    """The records database is missing, corrupt, or of an unknown schema."""


class WorkloadError(AutosearchError):
    """A workload name, family or generator argument is not known or not valid."""


class TargetError(AutosearchError):
    """A target description cannot be parsed or lacks what MetaSchedule needs."""


class InputError(AutosearchError):
    """A file or argument supplied by the user is malformed."""


def one_line(exc: BaseException, limit: int = 200) -> str:
    """The first non-empty line of an exception's message, cut to `limit` characters.

    TVM and Halide put whole C++ backtraces in their messages; a user needs the first line.
    """
    for line in str(exc).strip().splitlines():
        if line.strip():
            return line.strip()[:limit]
    return type(exc).__name__
