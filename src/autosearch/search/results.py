"""What a tuning run found: `TuneResult`, and how it is saved (best.json, history, breakdown).

Saved results are data: best.json holds the trace as JSON and the workload's name and key; the
generated best_schedule.py carries every value as a Python literal (repr), never as code.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autosearch.atomic_write import write_text_atomic
from autosearch.search.breakdown import TimeBreakdown

__all__ = ["TuneResult", "safe_name", "save_result"]


@dataclass
class TuneResult:
    """What one tuning run found, and what it cost."""

    workload: str
    workload_key: str
    family: str
    model: str
    target: str
    seed: int
    trials: int = 0
    ok: int = 0
    best_latency: float | None = None
    best_trace: str | None = None
    best_trial: int | None = None
    flops: float | None = None
    #: TVM's default build's latency; where it measured below the best, re-timed in turns beside
    #: it (`search.tune.untuned_over_best`) and given as the best's latency times their ratio.
    untuned_latency: float | None = None
    reference: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    breakdown: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    stop_reason: str = ""
    run_id: str = ""
    out_dir: str | None = None
    retrains: int = 0
    module: str | None = None
    runtime_threads: int | None = None  # threads TVM ran the kernels with (`target.runtime_threads`)
    search: str = ""  # the search strategy that ran (`--search auto` resolved)

    @property
    def gflops(self) -> float | None:
        if self.flops and self.best_latency:
            return self.flops / self.best_latency / 1e9
        return None

    @property
    def speedup(self) -> float | None:
        if self.untuned_latency and self.best_latency:
            return self.untuned_latency / self.best_latency
        return None

    def summary(self) -> dict[str, Any]:
        """The one machine-readable summary `--json` prints."""
        ref = self.reference or {}
        return {
            "workload": self.workload,
            "workload_key": self.workload_key,
            "model": self.model,
            "search": self.search,
            "target": self.target,
            "runtime_threads": self.runtime_threads,
            "seed": self.seed,
            "trials_measured": self.trials,
            "trials_ok": self.ok,
            "best_latency_s": self.best_latency,
            "best_gflops": self.gflops,
            "untuned_latency_s": self.untuned_latency,
            "speedup_vs_untuned": self.speedup,
            "reference": ref.get("name"),
            "reference_latency_s": ref.get("latency"),
            "reference_device": ref.get("device"),
            "interrupted": self.interrupted,
            "stop_reason": self.stop_reason,
            "model_retrains": self.retrains,
            "time_breakdown": self.breakdown,
            "out_dir": self.out_dir,
            "run_id": self.run_id,
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "workload"


def save_result(
    result: TuneResult, workload: Any, out_dir: str | os.PathLike[str], timer: TimeBreakdown | None = None
) -> Path:
    """best.json (+ best_schedule.py when a schedule was found), history.json, breakdown.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if timer is not None:
        timer.save(out / "breakdown.json")
    write_text_atomic(
        out / "history.json",
        json.dumps(
            {
                "workload": result.workload,
                "model": result.model,
                "search": result.search,
                "seed": result.seed,
                "history": result.history,
            },
            indent=1,
        )
        + "\n",
    )
    summary = result.summary()
    summary["out_dir"] = str(out)
    result.out_dir = str(out)
    if result.best_trace is not None:
        from autosearch.hashing import schedule_hash
        from autosearch.search.apply import write_script

        best = {
            **summary,
            "format": "autosearch-best-schedule",
            "format_version": 1,
            "workload_name": workload.name,
            "module": result.module,
            "trace": json.loads(result.best_trace),
            "schedule_hash": schedule_hash(result.best_trace),  # `apply` refuses a trace edited since
            "best_trial": result.best_trial,
            "flops": result.flops,
        }
        write_text_atomic(out / "best.json", json.dumps(best, indent=1) + "\n")
        write_script(out / "best.json", workload)
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    return out
