"""DuckDB connections configured the same way everywhere: UTC, no downloads."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import duckdb

from warehouse.settings import Settings

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


#: Instances kept per process, one per lake (and STRATA_HOME, whose scratch folder they spill to,
#: and memory limit, ``STRATA_LAKE_READER_MEMORY``: beyond it they spill).
_KEPT_READERS = 4
_readers: OrderedDict[tuple[str, ...], duckdb.DuckDBPyConnection] = OrderedDict()
_readers_lock = threading.Lock()


def lake_reader(settings: Settings, *, ordered: bool = True) -> duckdb.DuckDBPyConnection:
    """A connection that reads the lake's Delta tables (``delta_scan``), in UTC.

    A cursor of one DuckDB instance per lake and process: loading the delta extension into an
    instance takes ~0.2 s, and a feature build or check opened a connection per query. Views and
    Arrow tables a caller registers stay on its cursor. ``ordered=False`` lets results come in
    any order (less memory for large scans).
    """
    from warehouse.storage.objectstore import configure_duckdb
    from warehouse.storage.scratch import scratch_dir

    key = (
        str(settings.home),
        settings.lake_uri,
        settings.s3_endpoint_url or "",
        settings.s3_region or "",
        settings.s3_access_key_id or "",
        settings.lake_reader_memory,
    )
    with _readers_lock:
        base = _readers.get(key)
        if base is None:
            base = connect()
            configure_duckdb(base, settings)  # a lake on s3://: httpfs and the lake's credentials
            base.execute("LOAD delta")
            base.execute(f"SET memory_limit = '{settings.lake_reader_memory}'")
            base.execute(f"SET temp_directory = '{scratch_dir(settings) / 'duckdb'}'")
            _readers[key] = base
            while len(_readers) > _KEPT_READERS:  # dropped, not closed: that would close its cursors
                _readers.popitem(last=False)
        _readers.move_to_end(key)
        con = base.cursor()
    con.execute("SET TimeZone = 'UTC'")
    if not ordered:
        con.execute("SET SESSION preserve_insertion_order = false")
    return con
