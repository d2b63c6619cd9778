"""Facts about the machine this process runs on, shared by every backend's device description."""

from __future__ import annotations

import platform

__all__ = ["cpu_model_name"]


def cpu_model_name() -> str:
    """The CPU's marketing name from /proc/cpuinfo ("AMD EPYC ..."); platform.processor() elsewhere.

    Why: records say which CPU measured them, and platform.processor() is often empty on Linux.
    """
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""
