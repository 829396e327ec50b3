"""Delta Lake IO for layer tables: locate, read, and commit atomically.

Every layer table is a Delta table at ``<lake root>/<layer>/<name>``. Writes go
through :func:`commit`, which is one Delta transaction: data files are written first
and become visible only when the log entry lands, so a crash leaves nothing visible. The
writer's locks are checked after the last batch, just before that entry: a writer that lost
its lock commits nothing (:func:`warehouse.storage.locks.verify`).
"""

from __future__ import annotations

import datetime as dt
import threading
from urllib.parse import unquote
from typing import Callable, Iterable, Iterator, Literal, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from deltalake import ColumnProperties, CommitProperties, DeltaTable, WriterProperties, write_deltalake
from deltalake.exceptions import TableNotFoundError

from warehouse.settings import Settings
from warehouse.storage import locks
from warehouse.storage.boundaries import passed
from warehouse.storage.objectstore import filesystem, storage_options
from warehouse.tables import Table


#: Delta properties of every table. A checkpoint every 10 commits (Delta's own default; delta-rs
#: writes one every 100): opening a table replays the commits since the last checkpoint, which for
#: an append-per-write table such as ``ops.audit_log`` was ~90 reads per open on object storage.
TABLE_PROPERTIES = {"delta.checkpointInterval": "10"}
#: Bounded writer memory: delta-rs holds a file's row group, then the file, in memory until flushed.
TARGET_FILE_BYTES = 128 * 1024 * 1024
#: Raw bytes (ODS lines) are all distinct and never filtered on: a dictionary or min/max
#: statistics for them cost a third of the write and buy nothing.
_RAW_BYTES = ColumnProperties(dictionary_enabled=False, statistics_enabled="NONE")


def writer_properties(schema: pa.Schema) -> WriterProperties:
    """Parquet settings for a table: 128k-row groups, no dictionary or stats on binary columns.

    Tables that keep raw bytes (ODS, the quarantine) are compressed with Zstandard level 1:
    on JSON log lines it writes a sixth faster than Snappy, reads back five times faster and
    takes half the space. Other tables use Snappy, which is as fast there.
    """
    raw = {f.name: _RAW_BYTES for f in schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)}
    if raw:
        return WriterProperties(max_row_group_size=128 * 1024, compression="ZSTD", compression_level=1,
                                column_properties=raw)
    return WriterProperties(max_row_group_size=128 * 1024, compression="SNAPPY")


def open_table(settings: Settings, table: Table) -> DeltaTable | None:
    """The Delta table at its latest version, or None when it was never written.

    A thread opens a table once and then brings it up to date (``update_incremental``: the commits
    since, one listing), rather than replaying its log from the last checkpoint on every open —
    a step opens the same tables dozens of times, ~25 requests each on object storage. It is
    opened afresh when its log no longer holds the commit it was opened at, of the same size and
    time (the table was removed, or made again): one file status per open. Callers get the same object: it moves on with the
    table, a handle is never pinned to a version. Not after ``DeltaTable.is_deltatable``: that
    reads the log too.
    """
    uri, options = table.uri(settings), storage_options(settings)
    handles: dict[tuple[str, str], tuple[DeltaTable, int, object]] = _opened.__dict__.setdefault("handles", {})
    key = (uri, repr(sorted((options or {}).items())))
    cached = handles.pop(key, None)
    if cached is not None and _commit_stamp(settings, uri, cached[1]) == cached[2]:
        cached[0].update_incremental()
        handles[key] = cached  # the commit it was first opened at still tells the table apart
        return cached[0]
    try:
        delta = DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        return None
    handles[key] = (delta, delta.version(), _commit_stamp(settings, uri, delta.version()))
    return delta


#: Per thread: (table URI, storage options) → the open table, the version it was opened at, that
#: commit's stamp.
_opened = threading.local()


def _commit_stamp(settings: Settings, uri: str, version: int) -> tuple[int, int] | None:
    """Size and time of one commit file of a table: how a later open knows the log is the same."""
    fs, root = filesystem(settings, uri)
    info = fs.get_file_info(f"{root.rstrip('/')}/_delta_log/{version:020d}.json")
    return None if info.type == pafs.FileType.NotFound else (info.size, info.mtime_ns)


def version(settings: Settings, table: Table) -> int | None:
    """Current committed version, or None when the table does not exist."""
    dt_ = open_table(settings, table)
    return None if dt_ is None else dt_.version()


def read(
    settings: Settings,
    table: Table,
    *,
    filters: Sequence[tuple[str, str, object]] | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """Read the table's current version."""
    dt_ = open_table(settings, table)
    if dt_ is None:
        raise FileNotFoundError(f"table {table} does not exist yet at {table.uri(settings)}")
    dataset = dt_.to_pyarrow_dataset()
    expr = None
    for column, op, value in filters or ():
        term = _comparison(column, op, value)
        expr = term if expr is None else expr & term
    return dataset.to_table(columns=list(columns) if columns else None, filter=expr)


def snapshot(settings: Settings, table: Table) -> ds.Dataset:
    """The files of the table's current version as a pyarrow dataset, partition values included.

    Read with pyarrow alone (deltalake reads only the log, here and now), so it may feed a
    Delta write that is running: deltalake cannot read inside its own write.
    """
    from contracts import arrow_schema

    delta = open_table(settings, table)
    if delta is None:
        raise FileNotFoundError(f"table {table} does not exist yet at {table.uri(settings)}")
    actions = pa.table(delta.get_add_actions(flatten=True))
    fs, root = filesystem(settings, delta.table_uri)
    paths = [f"{root.rstrip('/')}/{path}" for path in actions.column("path").to_pylist()]
    values = [actions.column(f"partition.{c}").to_pylist() for c in table.partition_columns]
    partitions = []
    for row in zip(*values) if values else ([] for _ in paths):
        expr = pc.scalar(True)
        for column, value in zip(table.partition_columns, row):
            expr = expr & (pc.field(column) == value)
        partitions.append(expr)
    return ds.FileSystemDataset.from_paths(paths, schema=arrow_schema(table.contract), format=ds.ParquetFileFormat(),
                                           filesystem=fs, partitions=partitions)


def check_file_types(settings: Settings, table: Table, version: int | None) -> None:
    """Refuse a version whose new data files do not hold exactly the contract's Arrow types.

    Readers compare and join on these types: a file written with others (``string_view``
    for ``string``) breaks them later, far from the write that caused it.
    """
    import pyarrow.parquet as pq

    from contracts import arrow_schema

    delta = open_table(settings, table)
    if delta is None or version is None:
        return
    expected = {f.name: f.type for f in arrow_schema(table.contract) if f.name not in table.partition_columns}
    fs, root = filesystem(settings, delta.table_uri)
    added = [unquote(action["add"]["path"]) for action in _commit_actions(settings, delta, version) if "add" in action]
    for path in added:
        with fs.open_input_file(f"{root.rstrip('/')}/{path}") as handle:
            schema = pq.read_schema(handle)
        found = {f.name: f.type for f in schema}
        wrong = {name: str(found.get(name)) for name, want in expected.items() if found.get(name) != want}
        if wrong:
            raise TypeError(f"{table} version {version} wrote {path} with types {wrong}, not the contract's")


def commit_actions(settings: Settings, table: Table, version: int) -> list[dict]:
    """The actions (``add``, ``remove``, ``commitInfo`` …) of one commit of ``table``, from its log;
    ``FileNotFoundError`` once the log no longer holds that commit (log retention)."""
    delta = open_table(settings, table)
    if delta is None:
        raise FileNotFoundError(f"{table} does not exist")
    return _commit_actions(settings, delta, version)


def _commit_actions(settings: Settings, delta: DeltaTable, version: int) -> list[dict]:
    import json

    fs, root = filesystem(settings, delta.table_uri)
    with fs.open_input_stream(f"{root.rstrip('/')}/_delta_log/{version:020d}.json") as stream:
        return [json.loads(line) for line in stream.read().decode().splitlines() if line.strip()]


def read_frame(
    settings: Settings,
    table: Table,
    *,
    filters: Sequence[tuple[str, str, object]] | None = None,
    columns: Sequence[str] | None = None,
) -> pl.DataFrame:
    """:func:`read` as a polars frame."""
    frame = pl.from_arrow(read(settings, table, filters=filters, columns=columns))
    assert isinstance(frame, pl.DataFrame)
    return frame


def _comparison(column: str, op: str, value: object) -> pc.Expression:
    field = pc.field(column)
    if op == "in":
        return field.isin(value)  # type: ignore[arg-type]
    operators = {"=": field.__eq__, "!=": field.__ne__, "<": field.__lt__, "<=": field.__le__,
                 ">": field.__gt__, ">=": field.__ge__}
    if op not in operators:
        raise ValueError(f"unsupported filter operator {op!r}")
    return operators[op](value)


def sql_literal(value: object) -> str:
    """A value as a Delta (DataFusion) SQL literal for a replace predicate."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (dt.date, dt.datetime)):
        return f"'{value.isoformat()}'"
    return "'" + str(value).replace("'", "''") + "'"


def partition_predicate(partition: dict[str, object]) -> str:
    """``col = 'value' AND …`` selecting exactly one partition."""
    return " AND ".join(f"{col} = {sql_literal(val)}" for col, val in sorted(partition.items()))


def commit(
    settings: Settings,
    table: Table,
    data: pa.Table | pa.RecordBatchReader,
    *,
    mode: Literal["append", "replace_partitions", "overwrite"],
    partition_by: Sequence[str] = (),
    partitions: Iterable[dict[str, object]] = (),
    description: str | None = None,
    attempt: str | None = None,
    check: Callable[[], None] | None = None,
) -> int:
    """Commit ``data`` as one Delta version and return that version.

    ``replace_partitions`` swaps exactly the rows matching the listed column values for
    ``data`` (a re-run of a logical date replaces that date and nothing else; a re-landed
    ODS file replaces that file's lines); ``append`` adds rows;
    ``overwrite`` replaces the whole table. ``attempt`` is stamped on the commit
    (``strata.attempt``), so the audit log can find it after a crash. ``check`` runs after the
    last batch, just before the log entry (after :func:`~warehouse.storage.locks.verify`): what it
    raises — an audit's refusal — aborts the write, and is what the caller sees.
    """
    location, options = table.uri(settings), storage_options(settings)
    delta = open_table(settings, table)
    kwargs: dict[str, object] = {"partition_by": list(partition_by) or None,
                                 "writer_properties": writer_properties(data.schema),
                                 "target_file_size": TARGET_FILE_BYTES}
    if attempt is not None:
        kwargs["commit_properties"] = CommitProperties(custom_metadata={"strata.attempt": attempt})
    if delta is None:
        kwargs |= {"description": description, "configuration": TABLE_PROPERTIES, "storage_options": options}
    else:  # a compatible contract change (a column added) reaches a table written before it
        kwargs["schema_mode"] = "merge"
        _set_properties(delta)
    if mode == "replace_partitions":
        parts = list(partitions)
        if not parts:
            raise ValueError(f"replace_partitions on {table} needs at least one partition")
        # The writer refuses rows outside the predicate, so a partition never leaks into another.
        kwargs["predicate"] = " OR ".join(f"({partition_predicate(p)})" for p in parts)
    feed = _Feed(data, [lambda: locks.verify(settings, table), *([check] if check is not None else [])])
    # Handed the table it has just opened, the writer reads the log once and updates it in place.
    try:
        write_deltalake(delta if delta is not None else location,  # type: ignore[call-overload]
                        feed.reader(), mode="append" if mode == "append" else "overwrite", **kwargs)
    except Exception:
        feed.raise_own()
        raise
    version = (delta if delta is not None else DeltaTable(location, storage_options=options)).version()
    passed(f"commit {table.name}")
    return version


class _Feed:
    """The batches a Delta write consumes, then its last checks: the one place where a write is
    stopped from inside its stream.

    Whatever the data or a check raises aborts the write — nothing commits — and the writer wraps
    it in a ``DeltaError`` ("C Data interface error"); :meth:`raise_own` raises the original.
    """

    def __init__(self, data: pa.Table | pa.RecordBatchReader, checks: Sequence[Callable[[], None]]) -> None:
        self.data, self.checks = data, checks
        self.error: BaseException | None = None

    def reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.data.schema, self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from (self.data.to_batches() if isinstance(self.data, pa.Table) else self.data)
            for check in self.checks:  # the last batch is in: only the last file and the log entry are left
                check()
        except BaseException as exc:
            self.error = exc
            raise

    def raise_own(self) -> None:
        """Raise the error the stream or a check raised, if either did."""
        if self.error is not None:
            raise self.error.with_traceback(self.error.__traceback__) from None


def _set_properties(delta: DeltaTable) -> None:
    """Give a table written before :data:`TABLE_PROPERTIES` existed its properties (one commit, once)."""
    configuration = delta.metadata().configuration
    missing = {k: v for k, v in TABLE_PROPERTIES.items() if configuration.get(k) != v}
    if missing:
        delta.alter.set_table_properties(missing, raise_if_not_exists=False)
