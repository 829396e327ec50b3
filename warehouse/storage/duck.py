"""DuckDB connections configured the same way everywhere: UTC, no downloads."""

from __future__ import annotations

import os
import threading

import duckdb

_local = threading.local()


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection in UTC that never fetches extensions from the network."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET preserve_insertion_order = true")  # the default, relied on: results keep input order
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


#: Threads of a parsing connection: one core is left to the writer that consumes the parse.
#: On two cores, DuckDB's two threads beside the writer cost ~10 % more CPU and time.
SCRATCH_THREADS = max(1, (os.cpu_count() or 2) - 1)


def scratch() -> duckdb.DuckDBPyConnection:
    """This thread's reusable connection for short parsing queries (opening one costs ~20 ms).

    Callers register their inputs under fixed names and must not leave state behind.
    """
    con = getattr(_local, "con", None)
    if con is None:
        con = _local.con = connect(SCRATCH_THREADS)
    return con
