"""Console output shared by CLI commands: one stderr console, stdout, progress bars and the log."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from warehouse.progress import Progress as ProgressFn

console = Console(stderr=True, highlight=False)
out = Console(highlight=False)


class Command(str):
    """A command line for a person to copy: printed whole on one line, however narrow the terminal."""


class Clauses:
    """A line of clauses (rich markup, each with its separator: ``" 15.3 s;"``) that, wider than the console,
    breaks only between them, never inside one (``15.3`` / ``s``), its further lines indented by ``indent``."""

    def __init__(self, clauses: Sequence[str], indent: int = 4) -> None:
        self.clauses = list(clauses)
        self.indent = indent

    def __str__(self) -> str:
        return "".join(self.clauses)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        line = Text()
        for markup in self.clauses:
            clause = Text.from_markup(markup)
            if line.cell_len and line.cell_len + clause.cell_len > options.max_width:
                yield line
                line, clause = Text(" " * self.indent), Text.from_markup(markup.lstrip())
            line.append_text(clause)
        yield line


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


def rounded(value: float, digits: int = 6) -> str:
    """A float of a query's result as a person reads it: ``digits`` significant digits, trailing zeros
    dropped (``2667.87``, not ``2667.8708927480407``), the digits before the point all kept; an exponent only
    outside 1e-7 … 1e16. For display: a result written to a file keeps every digit."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)))
    if not -7 <= exponent < 16:
        return f"{value:.{digits}g}"
    text = f"{value:.{max(digits - 1 - exponent, 0)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


_MS = re.compile(r"(^|_)ms(_|$)")
_USD = re.compile(r"(^|_)usd(_|$)")


def cell(value: object, name: str = "") -> str:
    """A value as a table shows it, in plain units: what ``name`` (a column or feature) measures in
    milliseconds as ``623 ms`` or ``38.24 s``, in US dollars as ``$0.5921``; other numbers :func:`plain`
    (integers whole, thousands separated), a boolean ✓ or ✗, a time to the second in UTC, nothing for null."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "✓" if value else "✗"
    if isinstance(value, int | float | decimal.Decimal):
        number = float(value)
        if _MS.search(name) and math.isfinite(number):
            return f"{plain(number)} ms" if abs(number) < 1000 else f"{plain(number / 1000)} s"
        if _USD.search(name) and math.isfinite(number):
            return f"{'-' if number < 0 else ''}${plain(abs(number))}"
        return f"{value:,}" if isinstance(value, int) else plain(number)
    if isinstance(value, dt.datetime):  # in UTC, as the lake keeps time
        return f"{value.astimezone(dt.UTC) if value.tzinfo else value:%Y-%m-%d %H:%M:%S}"
    return str(value)


def short_path(path: str, width: int) -> str:
    """``path`` in at most ``width`` cells, shortened from the middle: its first folder and as many
    of its last parts as fit stay whole (``/tmp/…/date=2026-12-01/feedback.jsonl.gz``). The file's name
    is never cut: where ``…/name`` is wider than ``width``, that is the path shortened (a table folds it)."""
    if cell_len(path) <= width or "/" not in path.strip("/"):
        return path
    parts = path.split("/")
    first = 2 if not parts[0] and len(parts) > 2 else 1  # "/tmp" of an absolute path, else "tmp"
    head, tail = "/".join(parts[:first]), parts[-1]
    for start in range(len(parts) - 2, first - 1, -1):  # the parts before the last, while they fit
        candidate = "/".join(parts[start:])
        if cell_len(f"{head}/…/{candidate}") > width:
            break
        tail = candidate
    if cell_len(f"{head}/…/{tail}") <= width:
        return f"{head}/…/{tail}"
    return f"…/{tail}"


def table_width(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """The width a rich table of these cells takes unsqueezed: each column's widest cell or header,
    padded by a space on each side, between rules."""
    widths = [max([cell_len(h), *(cell_len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    return sum(widths) + 3 * len(widths) + 1


#: The narrowest a column of paths is shortened to before other columns are left out.
PATH_WIDTH = 32


class FitTable:
    """A table that reads at the width of the console it is printed on: every cell whole, none cropped
    to ``…``. When its columns do not fit, columns are left out — those named in ``drop`` first, in
    that order, then from the last, never those in ``keep`` (folded over lines instead) — and named under
    it; the cells of the ``path`` column are shortened from the middle to the room left (at least
    :data:`PATH_WIDTH`, and never below a file's name: columns are left out first, and a name wider than
    the terminal is folded). Cells are plain text, not markup."""

    def __init__(
        self,
        columns: Sequence[str],
        rows: Iterable[Sequence[str]],
        *,
        title: str | None = None,
        drop: Sequence[str] = (),
        path: str | None = None,
        keep: Sequence[str] = (),
    ) -> None:
        self.columns = list(columns)
        self.rows = [list(row) for row in rows]
        self.title = title
        self.drop = list(drop)
        self.path = path
        self.keep = list(keep)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        shown = list(self.columns)
        order = [c for c in [*self.drop, *reversed(self.columns)] if c not in self.keep]
        least = PATH_WIDTH  # the narrowest the paths go: every file's name whole
        if self.path in self.columns:
            at = self.columns.index(self.path)
            least = max([least, *(min(cell_len(r[at]), cell_len(short_path(r[at], 0))) for r in self.rows)])
        while self._width(shown, least) > width and any(c in shown for c in order) and len(shown) > 1:
            shown.remove(next(c for c in order if c in shown))
        others = [self.columns.index(name) for name in shown if name != self.path]
        beside = table_width([self.columns[i] for i in others], [[row[i] for i in others] for row in self.rows])
        room = max(width - beside - 3, PATH_WIDTH)  # what the other columns leave the paths (3: its padding, rule)
        table = Table(title=self.title, title_justify="left")
        for name in shown:
            table.add_column(name, overflow="fold")
        index = [self.columns.index(name) for name in shown]
        for row in self.rows:
            cells = [short_path(row[i], room) if self.columns[i] == self.path else row[i] for i in index]
            table.add_row(*(Text(c) for c in cells))
        yield table
        hidden = [c for c in self.columns if c not in shown]
        if hidden:
            yield Text(f"not shown at {width} columns: {', '.join(hidden)}", style="dim")

    def _width(self, shown: list[str], path_width: int) -> int:
        index = [self.columns.index(name) for name in shown]
        rows = [[row[i] for i in index] for row in self.rows]
        width = table_width(shown, rows)
        if self.path in shown:  # its cells shorten to path_width (its header stays whole)
            at = shown.index(self.path)
            natural = max([cell_len(self.path), *(cell_len(r[at]) for r in rows)])
            width -= natural - min(natural, max(path_width, cell_len(self.path)))
        return width


#: Log levels by ``-v`` count: none shows warnings only, ``-v`` what each step does, ``-vv`` detail.
LEVELS = ("WARNING", "INFO", "DEBUG")


def log_level(verbose: int, env: Mapping[str, str] | None = None) -> str:
    """The level of Strata's log on the terminal: ``-v``/``-vv`` when given, else ``STRATA_LOG_LEVEL``, else WARNING."""
    if verbose:
        return LEVELS[min(verbose, len(LEVELS) - 1)]
    env = os.environ if env is None else env
    level = env.get("STRATA_LOG_LEVEL", "").strip().upper() or LEVELS[0]
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        from warehouse.settings import ConfigError  # only here: the family's module brings polars and pyarrow

        raise ConfigError(f"STRATA_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not {level!r}")
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

    # On one terminal, what a command prints on stdout meanwhile goes above the bar too, as stderr's
    # lines do; else it would follow the bar's last drawing on its line and leave it on the screen.
    above = out.is_terminal and console.is_terminal
    with bar:
        if above:
            out.push_render_hook(bar.live)
        try:
            yield step
        finally:
            if above:
                out.pop_render_hook()
