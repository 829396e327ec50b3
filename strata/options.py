"""Options shared by several commands, defined once."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from strata.console import console

if TYPE_CHECKING:
    from warehouse.settings import Settings


def parse_date(text: str, option: str = "--date") -> dt.date:
    """A ``YYYY-MM-DD`` date, or a usage error naming the option."""
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a date like 2026-01-31", param_hint=option) from None


def dates(texts: list[str], option: str = "--date") -> list[dt.date]:
    """Distinct dates of a repeated ``--date`` option, in date order."""
    return sorted({parse_date(text, option) for text in texts})


class EmptyPath(typer.BadParameter):
    """An empty path: refused, never read as ``.`` (a variable unset in a command, ``strata ingest "$DIR"``,
    gives one, which landed the current folder). An input error: exit code 1, as the library's."""

    exit_code = 1


def given_path(text: str | Path) -> Path:
    """A path argument as given (typer's ``parser`` of every path a command takes); an empty one is refused."""
    if isinstance(text, Path):  # a default
        return text
    if not text:
        raise EmptyPath("the path is empty (a variable unset in the command?): name it, '.' for the current folder")
    return Path(text)


def existing_file(text: str | Path) -> Path:
    """A path argument that must name a file: :func:`given_path`, then refused unless it is one."""
    given = given_path(text)
    if not given.is_file():
        raise typer.BadParameter(f"{str(given)!r} is {'a folder' if given.is_dir() else 'no file'}")
    return given


DATES = typer.Option(..., "--date", help="Event date, YYYY-MM-DD; repeat for several.")


WAIT = typer.Option(
    None,
    "--wait",
    min=0,
    metavar="SECONDS",
    help="Wait up to SECONDS for a table another command is writing (default: STRATA_LOCK_WAIT, 0).",
)


def for_writing(wait: float | None = None) -> Settings:
    """The settings of a command that writes, after saying on stderr which lake it writes to
    (a command run from another folder with the default STRATA_HOME would make a second lake)."""
    from warehouse.settings import load_settings

    settings = load_settings()
    if wait is not None:
        settings = dataclasses.replace(settings, lock_wait=float(wait))
    console.print(f"[dim]lake: {escape(settings.lake_uri)}[/]")
    return settings
