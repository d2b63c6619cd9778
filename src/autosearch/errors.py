"""One exception family, so the CLI can print any user-facing failure as a single line."""

from __future__ import annotations

import re

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
    """The first non-empty line of an exception's message, cut to `limit` characters; a first line
    that ends in a colon is a heading and goes with the next line.

    TVM and Halide put whole C++ backtraces in their messages; a user needs the first line.
    OpenVINO heads every message with where it was raised, once per level ("Exception from
    src/inference/src/cpp/core.cpp:84:"); those lines are skipped for the reason after them.
    """
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    reasons = [line for line in lines if not _OPENVINO_WHERE.match(line)] or lines
    if not reasons:
        return type(exc).__name__
    first = reasons[0]
    if first.endswith(":") and len(reasons) > 1:
        first = f"{first} {reasons[1]}"
    return first[:limit]


#: OpenVINO's heading of a message: the source line that raised it, one per level it passed.
_OPENVINO_WHERE = re.compile(r"^Exception from \S+:\d+:$")
