"""A dbt-duckdb plugin giving dbt's DuckDB connection the same access to the lake as ours.

For a lake on ``s3://`` the connection needs ``httpfs`` and a secret for the lake's store
(:func:`~warehouse.storage.objectstore.configure_duckdb`). The settings reach the plugin
through :func:`using`, in-process, never through dbt's ``--vars``: dbt writes those to its
log, and a secret key must not land there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dbt.adapters.duckdb.plugins import BasePlugin

from warehouse.settings import Settings
from warehouse.storage.objectstore import configure_duckdb

_current: list[Settings] = []


@contextmanager
def using(settings: Settings) -> Iterator[None]:
    """The settings dbt's connections are configured with while the block runs."""
    _current.append(settings)
    try:
        yield
    finally:
        _current.pop()


class Plugin(BasePlugin):
    """Configures every connection dbt-duckdb opens (named in ``profiles.yml``)."""

    def configure_connection(self, conn: Any) -> None:
        if _current:
            configure_duckdb(conn, _current[-1])
