"""Console output shared by CLI commands: one stderr console, stdout, progress bars and the log."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from warehouse.progress import Progress as ProgressFn

console = Console(stderr=True, highlight=False)
out = Console(highlight=False)


class Command(str):
    """A command line for a person to copy: printed whole on one line, however narrow the terminal."""


def say(renderable: object, console: Console = out) -> None:
    """Print for a person on ``console``; a :class:`Command` is never broken or cropped by rich (the
    terminal wraps it on screen; copied, it is one line that runs as printed)."""
    if isinstance(renderable, Command):
        console.print(renderable, soft_wrap=True, markup=False, highlight=False)
    else:
        console.print(renderable)


def plain(value: float) -> str:
    """A number as a person reads it in a table: thousands separated, about three significant
    digits (four below 1), never an exponent (``32,850`` not ``3.285e+04``; ``0.000000119`` not ``1.19e-07``)."""
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    decimals = 2 if magnitude >= 1 else (3 - math.floor(math.log10(magnitude)) if magnitude else 0)
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


#: Log levels by ``-v`` count: none shows warnings only, ``-v`` what each step does, ``-vv`` detail.
LEVELS = ("WARNING", "INFO", "DEBUG")


def log_level(verbose: int, env: Mapping[str, str] | None = None) -> str:
    """The level of Strata's log on the terminal: ``-v``/``-vv`` when given, else ``STRATA_LOG_LEVEL``, else WARNING."""
    if verbose:
        return LEVELS[min(verbose, len(LEVELS) - 1)]
    env = os.environ if env is None else env
    level = env.get("STRATA_LOG_LEVEL", "").strip().upper() or LEVELS[0]
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError(f"STRATA_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not {level!r}")
    return level


@contextmanager
def log_shown(level: str) -> Iterator[None]:
    """Show the ``strata.*`` loggers' records at ``level`` and above on stderr, through rich (above any
    progress bar), while a command runs; other libraries' loggers are left alone. Undone on exit, so
    a command run in-process (a test) leaves the process's logging as it found it."""
    handler = RichHandler(console=console, show_path=False, markup=False, log_time_format="[%X]")
    handler.setFormatter(logging.Formatter("%(message)s"))
    strata = logging.getLogger("strata")
    saved = strata.level, strata.propagate
    strata.addHandler(handler)
    strata.setLevel(level)
    strata.propagate = False  # shown once, here, whatever else configured the root logger
    try:
        yield
    finally:
        strata.removeHandler(handler)
        strata.setLevel(saved[0])
        strata.propagate = saved[1]


@contextmanager
def progress(description: str) -> Iterator[ProgressFn]:
    """A progress bar on stderr (stdout stays parseable), driven by the pipeline's progress protocol.

    The bar is described by ``description`` and the ``what`` the work reports.
    """
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    task = None

    def step(what: str, done: int, total: int) -> None:
        nonlocal task
        label = f"{description}: {what}"
        if task is None:
            task = bar.add_task(label, total=total)
        bar.update(task, completed=done, total=total, description=label)

    with bar:
        yield step
