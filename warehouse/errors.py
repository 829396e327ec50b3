"""Outcomes every layer can report that are not failures."""

from __future__ import annotations


class NotYet(Exception):
    """What a step needs is not there yet (reviews to learn from, …): nothing is written, and a
    scheduler skips the task rather than failing it; the message says what is missing."""
