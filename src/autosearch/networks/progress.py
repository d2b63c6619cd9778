"""The progress of `tune-model` on the console: a bar over the network's tasks with the time left."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["TaskProgress"]


class TaskProgress:
    """A bar over the network's tasks with the time left; on a terminal a live rich bar, elsewhere
    (a pipe, `--json`) a plain line on stderr at most every 15 s, so a long run is never silent."""

    def __init__(self, console: Any, enabled: bool, deadline: float | None) -> None:
        self.console, self.enabled, self.deadline = console, enabled, deadline
        self.live = enabled and bool(getattr(console, "is_terminal", False))
        self._bar: Any = None
        self._task: Any = None
        self._last = 0.0

    def __enter__(self) -> TaskProgress:
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("[bold]tune-model[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[left]}"),
                console=self.console,
                transient=False,
            )
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def left(self) -> str:
        if self.deadline is None:
            return ""
        s = max(0, int(self.deadline - time.perf_counter()))
        return f"{s // 60}:{s % 60:02d} left"

    def stage(self, name: str, total: int) -> None:
        if self._bar is not None:
            self._task = self._bar.add_task(name, total=total, left=self.left())
        elif self.enabled:
            self.console.print(f"tune-model: {name} ({total}) {self.left()}", highlight=False)
            self._last = time.perf_counter()

    def update(self, done: int, total: int, what: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done, description=what[:70], left=self.left())
        elif self.enabled and (time.perf_counter() - self._last >= 15 or done == total):
            self._last = time.perf_counter()
            self.console.print(f"tune-model: {what} {done}/{total} {self.left()}", highlight=False)
