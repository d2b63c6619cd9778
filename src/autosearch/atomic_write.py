"""Write a result file by renaming a finished temporary file into place (`write_text_atomic`).

Why: `tune --out` writes into a folder the user names, while the run goes on for minutes. A file
written in place follows a symbolic link planted at its name meanwhile, out of the folder, and a
run killed midway leaves half a file. A temporary file in the same folder, created exclusively
and without following links, then `os.replace`d, replaces whatever stands at the name (a link
included, never its target) with the whole file, or leaves the old one. The temporary name starts
with `.autosearch-`, which `search.tune.check_out_dir` counts as a leftover of ours.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["SCRATCH_PREFIX", "write_text_atomic"]

#: How the names of our temporary files start (a killed run's leftovers are known by it).
SCRATCH_PREFIX = ".autosearch-"


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` (UTF-8) to `path` through a temporary file in its folder renamed into place.
    The file gets the permissions a new file gets (the umask's), as `Path.write_text` gives."""
    dest = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    while True:
        tmp = dest.parent / f"{SCRATCH_PREFIX}{dest.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest
