"""What a `tune_network` call is asked, grouped and checked once: the budget (`NetworkBudget`)
and how the network is built, timed and reported (`NetworkTuneOptions`).

Why typed objects: `tune-model`, bench/network.py and the tests each pass these, and a flat list
of keyword arguments let a caller pass a NaN budget or a negative trial count deep into the run;
a frozen dataclass refuses it in one line where it is made. The CLI checks its options first too
(`cli.common.check_number`), so a user sees the option's own name either way.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from autosearch.errors import InputError

__all__ = ["NetworkBudget", "NetworkTuneOptions"]


@dataclass(frozen=True)
class NetworkBudget:
    """How much a network run measures: `trials`, the cap over all tasks, and `minutes` of wall
    clock (from the call on, the import included). Both None or 0: no round is measured, the
    prior's schedules alone; `trials=None` with minutes: as many trials as the minutes allow."""

    trials: int | None = None
    minutes: float | None = None

    def __post_init__(self) -> None:
        if self.trials is not None:
            if isinstance(self.trials, bool) or not isinstance(self.trials, numbers.Integral):
                raise InputError(f"--trials must be a whole number, got {self.trials!r}")
            if self.trials < 0:
                raise InputError(f"--trials must be >= 0, got {self.trials}")
        if self.minutes is not None:
            if isinstance(self.minutes, bool) or not isinstance(self.minutes, numbers.Real):
                raise InputError(f"--budget-minutes must be a number, got {self.minutes!r}")
            if not math.isfinite(self.minutes):
                raise InputError(f"--budget-minutes must be a finite number, got {self.minutes}")
            if self.minutes < 0:
                raise InputError(f"--budget-minutes must be >= 0, got {self.minutes}")

    @property
    def measures(self) -> bool:
        """Whether any round is measured (trials or minutes to spend; neither: the prior alone)."""
        return bool(self.trials) or (self.trials is None and bool(self.minutes))

    def deadline(self, t_start: float) -> float | None:
        """The `time.perf_counter()` instant the minutes end at, for a run started at `t_start`."""
        return t_start + 60.0 * self.minutes if self.minutes else None


@dataclass(frozen=True)
class NetworkTuneOptions:
    """How the network is built, timed and reported. fast_math: fast exp/erf/tanh where the output
    still passes the check (`graph.import_network`); blocked=False: convolutions in the layout
    they were imported in (what bench/network.py compares against); time_torch: time PyTorch
    eager beside the build; precision: what the dense layers and convolutions compute in (fp32, bf16); progress:
    the live task bar; seed: the searches' and the example inputs'; out_dir: where the library is
    exported (None: not exported); check_input: the example inputs' file items (`--check-input`,
    `inputs.load_samples`; empty: drawn at random); calibration: int8's calibration set
    (`--calibration` items; empty: the example inputs calibrate)."""

    fast_math: bool = True
    time_torch: bool = True
    blocked: bool = True
    precision: str = "fp32"
    progress: bool = True
    seed: int = 0
    out_dir: str | None = None
    check_input: tuple[str, ...] = ()
    calibration: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "bf16", "int8"):
            raise InputError(f"tune-model --precision is fp32, bf16 or int8, got {self.precision!r}")
        if self.calibration and self.precision != "int8":
            raise InputError(f"--calibration calibrates --precision int8; this run is {self.precision}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise InputError(f"--seed must be a whole number, got {self.seed!r}")
