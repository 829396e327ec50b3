"""Console output shared by CLI commands: one stderr console, stdout, and progress bars."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from warehouse.progress import Progress as ProgressFn

console = Console(stderr=True, highlight=False)
out = Console(highlight=False)


@contextmanager
def progress(description: str) -> Iterator[ProgressFn]:
    """A progress bar on stderr (stdout stays parseable), driven by the pipeline's progress protocol.

    The bar is described by ``description`` and the ``what`` the work reports.
    """
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)
    task = None

    def step(what: str, done: int, total: int) -> None:
        nonlocal task
        label = f"{description}: {what}"
        if task is None:
            task = bar.add_task(label, total=total)
        bar.update(task, completed=done, total=total, description=label)

    with bar:
        yield step
