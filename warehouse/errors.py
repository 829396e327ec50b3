"""Outcomes every layer can report that are not failures."""

from __future__ import annotations

from contracts.errors import InputError


class NotYet(InputError):
    """What a step needs is not there yet (reviews to learn from, …): nothing is written, and a
    scheduler skips the task rather than failing it; the message says what is missing."""


class NoData(InputError):
    """The date holds no data for this step (no ODS rows to build, no requests to score): nothing is
    written. The CLI refuses the date (an error: check it); a scheduled task skips it, saying so —
    a scheduler meets days without data (today, before its files arrive; a quiet day)."""
