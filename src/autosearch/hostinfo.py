"""Facts about the machine this process runs on, shared by every backend's device description."""

from __future__ import annotations

import platform

__all__ = ["cpu_flags", "cpu_model_name", "cpu_signature"]


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


def cpu_signature() -> str:
    """Vendor, family, model and stepping from /proc/cpuinfo ("AuthenticAMD 25/1/1"); the
    platform's processor string elsewhere.

    Why: under a hypervisor the model name is often just "AMD EPYC" for Zen 3, Zen 4 and Zen 5
    alike (measured here), so records of three CPU generations would carry one device fingerprint;
    family and model tell them apart.
    """
    fields = _first_processor()
    if "cpu family" not in fields:
        return platform.processor() or platform.machine()
    return (
        f"{fields.get('vendor_id', '')} {fields['cpu family']}/{fields.get('model', '')}/{fields.get('stepping', '')}"
    )


def cpu_flags() -> set[str] | None:
    """The instruction-set flags /proc/cpuinfo lists (`avx512_bf16`, ...); None where it has none.

    Why: a low-precision kernel measured here must run here, whatever CPU the target names."""
    flags = _first_processor().get("flags")
    return None if flags is None else set(flags.split())


def _first_processor() -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo as fields (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields
