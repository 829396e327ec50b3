"""A dbt-duckdb plugin giving dbt's DuckDB connection the same access to the lake as ours.

Every lake table a dbt command reads is attached to its connection once, at the version it has
then or the one the caller names (``ATTACH … (TYPE delta, PIN_SNAPSHOT, VERSION n)``), under the
name the sources' ``external_location`` reads it by (:func:`relation`): every model and test of
the command sees one version of each table, and the project names no lake, so a parse of it holds
for every lake (and every home).

For a lake on ``s3://`` the connection also needs ``httpfs`` and a secret for the lake's store
(:func:`~warehouse.storage.objectstore.configure_duckdb`). The settings reach the plugin through
:func:`using`, in-process, never through dbt's ``--vars``: dbt writes those to its log, and a
secret key must not land there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from dbt.adapters.duckdb.plugins import BasePlugin

from warehouse.settings import Settings
from warehouse.storage.objectstore import configure_duckdb
from warehouse.tables import Table

_current: list[tuple[Settings, tuple[Table, ...], dict[str, int]]] = []


def relation(table: Table) -> str:
    """The name dbt's SQL reads a lake table by: ``dwd.request`` → ``lake__dwd__request``."""
    return "lake__" + table.name.replace(".", "__")


@contextmanager
def using(
    settings: Settings, tables: Sequence[Table] = (), versions: Mapping[str, int] | None = None
) -> Iterator[None]:
    """The settings dbt's connections are configured with while the block runs, and the lake
    tables they attach (those that exist: the sources dbt reads), each at its version in ``versions``
    (by name; else its current one)."""
    _current.append((settings, tuple(tables), dict(versions or {})))
    try:
        yield
    finally:
        _current.pop()


class Plugin(BasePlugin):  # type: ignore[misc]  # dbt is skipped by mypy here: its base is Any
    """Configures every connection dbt-duckdb opens (named in ``profiles.yml``)."""

    def configure_connection(self, conn: Any) -> None:
        if not _current:
            return
        settings, tables, versions = _current[-1]
        configure_duckdb(conn, settings)
        if tables:
            conn.execute("LOAD delta")
        for table in tables:
            uri = table.uri(settings).replace("'", "''")
            pinned = f", VERSION {int(versions[table.name])}" if table.name in versions else ""
            conn.execute(f"ATTACH '{uri}' AS {relation(table)} (TYPE delta, PIN_SNAPSHOT{pinned})")
