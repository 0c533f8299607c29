"""Progress of long commands (export, import, verify, checkpoint) on stderr: a bar drawn by
rich on a terminal, a plain line every few seconds anywhere else (a log, CI)."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Self, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

PLAIN_EVERY_SECONDS = 5.0


class ProgressReport:
    """``with ProgressReport("verifying", "records") as progress: progress.update(done,
    total)``; ``total`` may stay None when it is not known (a count, no bar)."""

    def __init__(self, what: str, unit: str, stream: TextIO | None = None) -> None:
        self.what, self.unit = what, unit
        self.stream = stream or sys.stderr
        self.bar: Progress | None = None
        self.task = TaskID(0)
        self.last_line = time.monotonic()

    def __enter__(self) -> Self:
        if self.stream.isatty():
            self.bar = Progress(
                SpinnerColumn(),
                TextColumn(f"{self.what}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(self.unit),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=True,
                redirect_stdout=False,  # stdout is the command's output (an export's lines)
                redirect_stderr=False,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=None)
        return self

    def update(self, done: int, total: int | None = None) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total)
        elif time.monotonic() - self.last_line >= PLAIN_EVERY_SECONDS:
            of = f"/{total}" if total is not None else ""
            print(f"baton: {self.what}: {done}{of} {self.unit}", file=self.stream, flush=True)
            self.last_line = time.monotonic()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.bar is not None:
            self.bar.stop()
