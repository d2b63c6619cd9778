"""Ctrl-C that TVM cannot lose: a SIGINT handler that remembers, checked between batches.

Why: TVM's C++ code polls Python's signals while it works (tvm-ffi's `EnvCheckSignals`). A Ctrl-C
that lands there becomes a C++ error, which MetaSchedule may catch and drop (collection then ran
to its end and exited 0) or pass up as a `RuntimeError` (an "internal error" exit 1); and a main
thread blocked on a pool's future sees it only when that future is done, long after the key
(bench/HISTORY.md, "Figures from the code's docstrings").
`install()` (the CLI does it) routes SIGINT through a handler that counts it before raising
KeyboardInterrupt as usual; `check()` re-raises a counted one at the next batch boundary, and
`wait()` waits on futures in short slices so a Ctrl-C is acted on within `poll` seconds.
Inside `deferred()` (TVM's multithreaded C++ work) a Ctrl-C is only counted, and raised after.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import signal
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

__all__ = ["check", "clear", "deferred", "handled", "install", "interrupted", "wait"]

_count = 0
_deferring = 0


def _handler(signum: int, frame: FrameType | None) -> None:
    global _count
    _count += 1
    if not _deferring:
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Count a Ctrl-C inside the block but raise it only when the block ends. For TVM's
    multithreaded C++ work (MetaSchedule's search, feature extraction): a KeyboardInterrupt
    raised into it through its signal poll became a C++ exception that ended in `std::terminate`:
    a Ctrl-C during a round's search could end `tune` in a segfault with nothing saved, and none
    did with this (CHANGELOG.md)."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
    check()


def install() -> None:
    """Count every Ctrl-C from now on (main thread only). A process started with SIGINT ignored
    (a background job of a non-interactive shell) keeps ignoring it, as Python itself does."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is (
        signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, _handler)


def interrupted() -> bool:
    """Whether a Ctrl-C arrived since `install()` (or the last `clear()`), caught by anyone or not."""
    return _count > 0


def clear() -> None:
    """Forget past Ctrl-Cs: for a caller that handled one and goes on (collection's summary)."""
    global _count
    _count = 0


def handled(exc: BaseException) -> bool:
    """For `except BaseException as exc`: True, and the count cleared, when `exc` is a Ctrl-C or an
    error TVM raised in its place (any exception after a counted Ctrl-C); the caller then wraps up
    as interrupted (saves what it has) instead of re-raising."""
    if isinstance(exc, KeyboardInterrupt) or (isinstance(exc, Exception) and interrupted()):
        clear()
        return True
    return False


def check() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C arrived that something in between swallowed."""
    if _count:
        raise KeyboardInterrupt


def wait(futures: Sequence[concurrent.futures.Future[Any]], poll: float = 0.25) -> None:
    """Wait until every future is done, waking every `poll` s so a Ctrl-C is not held up."""
    pending = set(futures)
    while pending:
        check()
        _, pending = concurrent.futures.wait(pending, timeout=poll)
    check()
