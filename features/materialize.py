"""Materialization: the latest DWS row of each entity into the online store, fast and in bounded memory.

Incremental by default, with the DWS tables' Delta versions as the watermark (not a time):
the partitions that commits after the watermark added or removed files in are read again,
and for every entity in them the latest row of the whole table is written — so a rebuilt
past partition reaches the online store, and a rebuilt partition's new values replace the
old ones. A first run (or a new online store) reads everything. With ``start``/``end``, the
latest row per entity with ``start <= feature_ts < end`` is written, as Feast's
``materialize(start, end)`` does.

Every run that reads a table also takes out of the online store the entities the table no
longer holds (erased by ``forget``, aged out by retention): writing alone never removes one.
The served tables are locked (shared) for the whole run, so a ``forget`` waits for it.

DuckDB computes the latest rows (``QUALIFY`` over the Delta log, within a memory limit, and
spilling under ``STRATA_HOME``); batches of rows stream to an encoder thread and then to the
writer, so memory stays flat however many entities there are. The bytes written are Feast's
(``features.encoding``); the layout is Feast's (``features.online_store``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from features import encoding
from features.online_store import Chunk, RedisWriter, SqliteWriter, Writer, prune_redis, prune_sqlite
from features.repo.definitions import feature_names, feature_tables, join_key, timestamp_column, view_name
from features.store import PROJECT, applied_store, feast_dir, replace_text, sqlite_path
from warehouse.progress import Progress
from warehouse.settings import Settings
from warehouse.storage import boundaries, locks
from warehouse.storage.duck import lake_reader
from warehouse.storage.lake import Lake
from warehouse.storage.publish import prefetch
from warehouse.tables import Table

#: Entities per encoded batch: bounds memory (about 20 features × 8 k entities in flight at once).
BATCH_ENTITIES = 16_384
_STATE = "materialized.json"


@dataclass
class ViewRun:
    """What materializing one view did."""

    view: str
    table: str
    #: "full", "incremental", "range" or "unchanged".
    mode: str
    version: int | None
    entities: int = 0
    values_written: int = 0
    #: Entities taken out of the online store: their rows are gone from the table (forget, retention).
    removed: int = 0
    partitions: list[str] = field(default_factory=list)


@dataclass
class MaterializeReport:
    views: list[ViewRun]
    store: str

    @property
    def entities(self) -> int:
        return sum(v.entities for v in self.views)


def store_id(settings: Settings) -> str:
    """Which online store a watermark belongs to (a new store starts from nothing)."""
    if settings.online_store == "redis":
        from urllib.parse import urlsplit

        url = urlsplit(settings.redis_url)
        return f"redis://{url.hostname}:{url.port or 6379}{url.path or '/0'}"
    return f"sqlite:{sqlite_path(settings)}"


def _load_state(settings: Settings) -> dict[str, Any]:
    path = feast_dir(settings) / _STATE
    return json.loads(path.read_text()) if path.exists() else {}


def _save_state(settings: Settings, state: dict[str, Any]) -> None:
    replace_text(feast_dir(settings) / _STATE, json.dumps(state, indent=1, sort_keys=True))


def stores_written(settings: Settings) -> list[str]:
    """The ids of every online store materialized to from this home, the configured one first
    (``sqlite:PATH``, ``redis://host:port/db``: never a password)."""
    current = store_id(settings)
    return [current, *sorted(set(_load_state(settings)) - {current})]


def watermarks(settings: Settings) -> dict[str, dict[str, Any]]:
    """Per view, what the current online store was last materialized from (version, as_of, at)."""
    return dict(_load_state(settings).get(store_id(settings), {}))


def touched_partitions(lake: Lake, table: Table, after: int, upto: int) -> set[str] | None:
    """``event_date`` values that commits ``after+1..upto`` added or removed files in; None when the
    log no longer holds those commits (then everything is read again)."""
    dates: set[str] = set()
    for version in range(after + 1, upto + 1):
        try:
            actions = lake.commit_actions(table, version)
        except (FileNotFoundError, OSError):
            return None
        for action in actions:
            change = action.get("add") or action.get("remove")
            if change is not None:
                value = (change.get("partitionValues") or {}).get("event_date")
                if value is None:
                    return None  # a file without its partition: read everything
                dates.add(value)
    return dates


def latest_rows(
    settings: Settings,
    table: Table,
    *,
    partitions: set[str] | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
) -> pa.RecordBatchReader:
    """The latest row per entity (key, features, ``feature_ts``), sorted by key, as a stream.

    ``partitions``: only entities with a row in these ``event_date`` partitions (their latest row
    anywhere at or after the earliest of them). ``start``/``end``: only rows in that time range.
    """
    key, ts = join_key(table), timestamp_column(table)
    columns = ", ".join([*(f'"{c}"' for c in [key, *feature_names(table)]), f'"{ts}" AS feature_ts'])
    source = f"delta_scan('{table.uri(settings)}')"
    where, params = ["TRUE"], []
    if partitions is not None:
        first = min(dt.date.fromisoformat(p) for p in partitions)
        days = sorted(dt.date.fromisoformat(p) for p in partitions)
        where.append(
            f'event_date >= ? AND "{key}" IN (SELECT "{key}" FROM {source} WHERE event_date IN '
            f"({', '.join('?' for _ in days)}))"
        )
        params += [first, *days]
    if start is not None:
        where.append(f'"{ts}" >= ? AND event_date >= ?')
        params += [start, start.astimezone(dt.UTC).date()]
    if end is not None:
        where.append(f'"{ts}" < ? AND event_date <= ?')
        params += [end, end.astimezone(dt.UTC).date()]
    con = lake_reader(settings, ordered=False)
    # A grouped max joined back (both spill to disk) rather than a window, which must hold it all.
    rows = f"SELECT {columns} FROM {source} WHERE {' AND '.join(where)}"
    result = con.execute(
        f"""
        WITH candidate AS ({rows}),
             latest AS (SELECT "{key}" AS k, max(feature_ts) AS ts FROM candidate GROUP BY "{key}")
        SELECT c.* FROM candidate c JOIN latest l ON c."{key}" = l.k AND c.feature_ts = l.ts
        ORDER BY c."{key}" """,
        params,
    )
    return result.to_arrow_reader(BATCH_ENTITIES)


def encode(batch: pa.RecordBatch, key: str, features: list[str], texts: bool = True) -> Chunk:
    """One batch of latest rows as Feast's bytes (``texts``: with SQLite's ``value_text``)."""
    keys = encoding.entity_keys(key, batch.column(key))
    columns = [encoding.values(batch.column(f), None, texts=texts) for f in features]
    times = batch.column("feature_ts").to_pylist()
    return Chunk(keys, columns, times)


def _encoded(reader: pa.RecordBatchReader, key: str, features: list[str], texts: bool) -> Iterator[Chunk]:
    """Chunks encoded in a thread ahead of the writer (DuckDB and SQLite release the GIL)."""
    return prefetch((encode(batch, key, features, texts) for batch in reader if batch.num_rows), depth=2)


def writer(settings: Settings, view: str, features: list[str]) -> Writer:
    """The configured online store's writer for one view."""
    if settings.online_store == "redis":
        return RedisWriter(settings.redis_url, PROJECT, view, features)
    return SqliteWriter(sqlite_path(settings), PROJECT, view, features)


def write_view(
    settings: Settings, table: Table, reader: pa.RecordBatchReader, run: ViewRun, progress: Progress | None = None
) -> None:
    """Stream ``reader``'s latest rows into the online store, counting into ``run``."""
    features = feature_names(table)
    sink = writer(settings, view_name(table), features)
    try:
        for chunk in _encoded(reader, join_key(table), features, settings.online_store == "sqlite"):
            if not run.entities:
                boundaries.first_read("materialize")
            run.values_written += sink.write(chunk)
            run.entities += len(chunk.keys)
            if progress is not None:
                progress(run.view, run.entities, run.entities)
    finally:
        sink.close()


def prune(settings: Settings, table: Table) -> int:
    """Take out of the online store the entities of ``table``'s view that the table no longer
    holds (a materialization only writes; without this an erased entity would stay online)."""
    key, view = join_key(table), view_name(table)
    con = lake_reader(settings)
    held = con.execute(f"SELECT DISTINCT \"{key}\" FROM delta_scan('{table.uri(settings)}')").to_arrow_table()
    keep = set(encoding.entity_keys(key, held.column(0).combine_chunks()))
    if settings.online_store == "redis":
        prefix = encoding.entity_keys(key, pa.array([""]))[0][:-4]  # the key's bytes before the value's length
        return prune_redis(settings.redis_url, PROJECT, view, feature_names(table), prefix, keep)
    return prune_sqlite(sqlite_path(settings), PROJECT, view, keep)


def materialize(
    settings: Settings,
    *,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    full: bool = False,
    progress: Progress | None = None,
) -> MaterializeReport:
    """Bring the online store up to the DWS tables (see the module's docstring).

    The served tables are locked (shared) from the first read to the last write, so a
    ``forget`` waits for the run, then removes what it wrote; a run after it finds nothing.
    """
    applied_store(settings)  # the online tables exist, the registry knows the views
    with locks.hold(settings, read=feature_tables()):
        return _materialize(settings, start, end, full, progress)


def _materialize(
    settings: Settings, start: dt.datetime | None, end: dt.datetime | None, full: bool, progress: Progress | None
) -> MaterializeReport:
    state = _load_state(settings)
    marks = state.setdefault(store_id(settings), {})
    runs = []
    lake = Lake(settings)
    for table in feature_tables():
        view = view_name(table)
        version = lake.version(table)
        run = ViewRun(view, table.name, "unchanged", version)
        runs.append(run)
        if version is None:
            continue
        mark = marks.get(view) or {}
        if start is not None or end is not None:
            run.mode = "range"
            write_view(settings, table, latest_rows(settings, table, start=start, end=end), run, progress)
            continue
        before = mark.get("version")
        if before == version and mark.get("table") == table.uri(settings) and not full:
            continue
        partitions = None
        if before is not None and not full and mark.get("table") == table.uri(settings) and before < version:
            partitions = touched_partitions(lake, table, before, version)
        run.mode = "full" if partitions is None else "incremental"
        run.partitions = sorted(partitions or [])
        if partitions is None or partitions:
            write_view(settings, table, latest_rows(settings, table, partitions=partitions), run, progress)
        run.removed = prune(settings, table)
        marks[view] = {
            "version": version,
            "table": table.uri(settings),
            "as_of": _as_of(settings, table),
            "at": dt.datetime.now(dt.UTC).isoformat(),
        }
        _save_state(settings, state)
    return MaterializeReport(runs, store_id(settings))


def _as_of(settings: Settings, table: Table) -> str | None:
    """The latest timestamp (``feature_ts``) of the table: the instant the online store now reflects."""
    con = lake_reader(settings)
    row = con.execute(f"SELECT max(\"{timestamp_column(table)}\") FROM delta_scan('{table.uri(settings)}')").fetchone()
    return row[0].astimezone(dt.UTC).isoformat() if row and row[0] is not None else None
