"""TVM's C++ log lines that say nothing to the user, kept off the screen.

Why: TVM writes LOG(WARNING) straight to file descriptor 2 and has no switch for it, so loading a
tuned network printed a "Scope Loaded:" line per function of the library (16 for a 2-layer GPT-2)
before the one line a user needed, and every transformer import warned about `take`'s unchecked
mode, which the artifact's own bounds check now covers (`networks.inputs.InputSpec.index_high`).
`dropped(...)` sends fd 2 to a temporary file around such native work and then replays every line
but the known noise (and the indented lines that continue it), in order: an error or an unknown
warning still reaches the user. It is used
only around work that starts no worker process and draws no progress bar (a worker would keep the
file as its stderr; a bar's refreshes would be replayed late).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence

__all__ = ["TVM_NOISE", "dropped"]

#: Substrings of TVM log lines that carry nothing for a user of autosearch, and why.
TVM_NOISE = (
    "Warning: Scope Saving:",  # export_library's per-function trace of what it writes
    "Warning: Scope Loaded:",  # load_module's per-function trace of what it reads
    # `take` built without bounds checks: the artifact refuses out-of-range ids before the call
    "Fast mode segfaults when there are out-of-bounds indices",
    # a pooling task's `schedule_rule` attribute names a rule only TVM's TOPI schedules registered:
    # MetaSchedule then applies its default rules, which is what autosearch searches anyway
    'Warning: Unknown schedule rule "meta_schedule.',
)


@contextlib.contextmanager
def dropped(noise: Sequence[str] = TVM_NOISE) -> Iterator[None]:
    """Native writes to fd 2 inside the block are held back; the lines containing none of `noise`
    are written to stderr after it (also when the block raises)."""
    fd = 2  # where native code writes, whatever Python's sys.stderr is (a capture, a wrapper)
    try:
        saved = os.dup(fd)
    except OSError:  # no fd 2 at all: nothing to filter
        yield
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            held.seek(0)
            kept = _kept(held.read().decode(errors="replace"), noise)
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def _kept(text: str, noise: Sequence[str]) -> list[str]:
    """The lines of `text` that are not noise; an indented line right after a noise line is that
    warning's continuation (TVM indents the rest of a multi-line warning) and goes with it."""
    kept: list[str] = []
    dropping = False
    for line in text.splitlines(keepends=True):
        dropping = any(n in line for n in noise) or (dropping and line[:1] in (" ", "\t"))
        if not dropping:
            kept.append(line)
    return kept
