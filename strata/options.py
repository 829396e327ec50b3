"""Options shared by several commands, defined once."""

from __future__ import annotations

import datetime as dt

import typer


def parse_date(text: str, option: str = "--date") -> dt.date:
    """A ``YYYY-MM-DD`` date, or a usage error naming the option."""
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a date like 2026-01-31", param_hint=option) from None


def dates(texts: list[str], option: str = "--date") -> list[dt.date]:
    """Distinct dates of a repeated ``--date`` option, in date order."""
    return sorted({parse_date(text, option) for text in texts})


DATES = typer.Option(..., "--date", help="Event date, YYYY-MM-DD; repeat for several.")
