"""The one progress protocol of long work (ingest, builds, the generator, materialization)."""

from __future__ import annotations

from typing import Callable

Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``, called as work advances: ``what`` names the table or
file being worked on, ``done`` and ``total`` count rows, lines or files."""
