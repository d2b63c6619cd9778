"""Where the time of a tuning run goes.

Why a breakdown: MetaSchedule tuning time is split between the search itself (sampling,
mutation, validation), feature extraction, cost-model prediction, cost-model retraining, building
and running candidates. A learned model only pays off when the measurements it saves outweigh
what it costs to consult and retrain, so every run records each share and prints it.

Sections nest: the search strategy calls the cost model (features + predict) from inside
`generate_measure_candidates`, so `search` is reported *exclusive* of the time spent in sections
entered while it was open.

Each section also records the machine's busy CPU seconds (all processes: builder and runner
workers are separate processes), so `cores_busy` says how much of the machine a section keeps
occupied. Why: it decides whether overlapping sections (building the next round while this one is
searched or measured) can shorten a run at all. On 2 cores build and search each keep ~1.9 busy,
so they cannot (docs/tuning.md). It counts anything else running on the machine too.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from autosearch.atomic_write import write_text_atomic

__all__ = ["SECTIONS", "TimeBreakdown"]

#: Reported sections, in pipeline order.
SECTIONS = ("setup", "search", "features", "predict", "update", "build", "run", "store", "other")


def busy_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot (every core, every process)."""
    t = psutil.cpu_times()
    return float(sum(v for k, v in t._asdict().items() if k not in ("idle", "iowait", "guest", "guest_nice")))


class TimeBreakdown:
    """Exclusive wall-clock seconds per section; nested sections are subtracted from their parent.
    The machine's busy CPU seconds are kept the same way (`cpu`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {s: 0.0 for s in SECTIONS}
        self.cpu: dict[str, float] = {s: 0.0 for s in SECTIONS}
        self.calls: dict[str, int] = {s: 0 for s in SECTIONS}
        self._stack: list[list[Any]] = []  # [name, start, child_time, cpu_start, child_cpu]
        self._t0 = time.perf_counter()
        self._cpu0 = busy_cpu_seconds()
        self.total: float | None = None

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        if name not in self.seconds:
            self.seconds[name] = 0.0
            self.calls[name] = 0
        frame: list[Any] = [name, time.perf_counter(), 0.0, busy_cpu_seconds(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            elapsed = time.perf_counter() - frame[1]
            used = busy_cpu_seconds() - frame[3]
            self.seconds[name] += elapsed - frame[2]
            self.cpu[name] = self.cpu.get(name, 0.0) + used - frame[4]
            self.calls[name] += 1
            if self._stack:
                self._stack[-1][2] += elapsed
                self._stack[-1][4] += used

    def elapsed(self) -> float:
        """Wall seconds since the breakdown started."""
        return time.perf_counter() - self._t0

    def stop(self) -> None:
        """Freeze the total; time not inside any section is reported as `other`."""
        self.total = time.perf_counter() - self._t0
        inside = sum(v for k, v in self.seconds.items() if k != "other")
        self.seconds["other"] = max(0.0, self.total - inside)
        cpu_inside = sum(v for k, v in self.cpu.items() if k != "other")
        self.cpu["other"] = max(0.0, busy_cpu_seconds() - self._cpu0 - cpu_inside)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TimeBreakdown:
        """A stopped breakdown back from `to_dict` (e.g. a saved run's, to print its table)."""
        tb = cls()
        tb.seconds = dict(d["seconds"])
        tb.calls = dict(d["calls"])
        tb.cpu = {k: b * tb.seconds[k] for k, b in d.get("cores_busy", {}).items() if k in tb.seconds}
        tb.total = d["total_s"]
        return tb

    def to_dict(self) -> dict[str, Any]:
        total = self.total if self.total is not None else time.perf_counter() - self._t0
        return {
            "total_s": round(total, 4),
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
            "share": {k: round(v / total, 4) if total > 0 else 0.0 for k, v in self.seconds.items()},
            "calls": dict(self.calls),
            # machine-wide busy cores while the section ran (2.0 = both of 2 cores); none if < 0.1 s
            "cores_busy": {
                k: round(max(self.cpu.get(k, 0.0), 0.0) / v, 2)
                for k, v in self.seconds.items()
                if v >= 0.1 and k in self.cpu
            },
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(p, json.dumps(self.to_dict(), indent=2) + "\n")
        return p

    def table(self, title: str = "time breakdown") -> Any:
        """A rich Table: section, seconds, share of the run, machine cores busy, calls."""
        from rich.table import Table

        d = self.to_dict()
        t = Table(title=title)
        for col in ("section", "seconds", "share", "cores busy", "calls"):
            t.add_column(col, justify="left" if col == "section" else "right")
        busy = d["cores_busy"]
        for k in self.seconds:
            b = f"{busy[k]:.2f}" if k in busy else "-"
            t.add_row(k, f"{d['seconds'][k]:.2f}", f"{100 * d['share'][k]:.1f}%", b, str(d["calls"][k]))
        t.add_section()
        t.add_row("total", f"{d['total_s']:.2f}", "100%", "", "", style="bold")
        return t
