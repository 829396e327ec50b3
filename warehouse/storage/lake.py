"""Delta Lake IO for layer tables: locate, read, and commit atomically.

Every layer table is a Delta table at ``<lake root>/<layer>/<name>``. Writes go
through :func:`commit`, which is one Delta transaction: data files are written first
and become visible only when the log entry lands, so a crash leaves nothing visible. The
writer's locks are checked after the last batch, just before that entry: a writer that lost
its lock commits nothing (:func:`warehouse.storage.locks.verify`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast
from urllib.parse import unquote

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from deltalake import (
    BloomFilterProperties,
    ColumnProperties,
    CommitProperties,
    DeltaTable,
    WriterProperties,
    write_deltalake,
)
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from contracts.errors import ConflictError, InputError, TransientError
from warehouse.settings import Settings
from warehouse.storage import locks
from warehouse.storage.boundaries import passed
from warehouse.storage.objectstore import S3, filesystem, is_object_store, storage_options
from warehouse.tables import Table

if TYPE_CHECKING:  # pyarrow.dataset takes ~0.25 s to import, which a command reading no dataset (strata trace) spares
    import pyarrow.dataset as ds

#: Delta properties of every table. A checkpoint every 10 commits (Delta's own default; delta-rs
#: writes one every 100): opening a table replays the commits since the last checkpoint, which for
#: an append-per-write table such as ``ops.audit_log`` was ~90 reads per open on object storage.
TABLE_PROPERTIES = {"delta.checkpointInterval": "10"}
#: Bounded writer memory: delta-rs holds a file's row group, then the file, in memory until flushed.
TARGET_FILE_BYTES = 128 * 1024 * 1024
#: Raw bytes (ODS lines) are all distinct and never filtered on: a dictionary or min/max
#: statistics for them cost a third of the write and buy nothing.
_RAW_BYTES = ColumnProperties(dictionary_enabled=False, statistics_enabled="NONE")
#: Rows per Parquet row group of every table.
ROW_GROUP_ROWS = 128 * 1024
#: Columns read by one random value (``strata trace`` finds a trace by its id): each row group's
#: values go into a Bloom filter (1 % false positives, ~256 KB a row group), which DuckDB probes to
#: skip the row groups without the value. Min/max statistics cannot: random ids span every row group
#: (docs/design.md §8: one trace of a week of 1M requests a day, 0.35–0.55 s scanned, 0.03–0.09 s so).
LOOKUP_COLUMNS = ("trace_id",)
_LOOKED_UP = ColumnProperties(
    bloom_filter_properties=BloomFilterProperties(set_bloom_filter_enabled=True, fpp=0.01, ndv=ROW_GROUP_ROWS)
)
#: A read's row filters, all of which a row passes: ``(column, operator, value)``, the operator one of ``=``,
#: ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``.
Filters: TypeAlias = Sequence[tuple[str, str, object]]


def writer_properties(schema: pa.Schema) -> WriterProperties:
    """Parquet settings for a table: 128k-row groups, no dictionary or stats on binary columns, a Bloom
    filter on the :data:`LOOKUP_COLUMNS`.

    Tables that keep raw bytes (ODS, the quarantine) are compressed with Zstandard level 1:
    on JSON log lines it writes a sixth faster than Snappy, reads back five times faster and
    takes half the space. Other tables use Snappy, which is as fast there.
    """
    raw = {f.name: _RAW_BYTES for f in schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)}
    columns = raw | {name: _LOOKED_UP for name in LOOKUP_COLUMNS if name in schema.names}
    if raw:
        return WriterProperties(
            max_row_group_size=ROW_GROUP_ROWS, compression="ZSTD", compression_level=1, column_properties=columns
        )
    return WriterProperties(max_row_group_size=ROW_GROUP_ROWS, compression="SNAPPY", column_properties=columns or None)


class Lake:
    """One step's handle on the lake, built once from the settings and handed down.

    It owns what a step derives from the settings, once: the tables' locations, the
    storage options and filesystem, the tables opened so far, the locks this step holds, and whether
    the attempts a crash cut short were recorded (:attr:`recovered`). A step opens each table it
    has locked once: from its first open under the lock it reads the table as it was then, plus its
    own commits (a commit brings the table up to date first and updates it in place); a table it
    has not locked is brought up to date on each open.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.options = storage_options(settings)
        #: Whether ``ops.audit_log`` holds a row for every attempt a crashed process left (see
        #: :func:`warehouse.storage.audit.recover`); publish makes it so once per handle.
        self.recovered = False
        self._tables: dict[str, tuple[DeltaTable, int, tuple[int, int] | None]] = {}
        self._held: dict[locks.Key, bool] = {}
        #: Names of the tables opened under a lock this handle holds: they are not opened again.
        self._pinned: set[str] = set()
        #: The object store's filesystem, made once (None for a lake on local disk).
        self._s3 = filesystem(settings, settings.lake_uri)[0] if is_object_store(settings.lake_uri) else None

    # ------------------------------------------------------------------ where tables live

    def uri(self, table: Table) -> str:
        return table.uri(self.settings)

    def filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem for ``uri`` (in this lake) and the path inside it."""
        if not is_object_store(uri):
            return cast("tuple[pafs.FileSystem, str]", pafs.FileSystem.from_uri(uri))
        if self._s3 is None:
            raise InputError(f"{uri} is on an object store, but this lake is not ({self.settings.lake_uri})")
        return self._s3, uri.removeprefix(S3).rstrip("/")

    # ------------------------------------------------------------------ open and read

    def open_table(self, table: Table) -> DeltaTable | None:
        """The Delta table, or None when it was never written.

        Opened once per handle, then handed back as the same object. Under a lock this step's handle
        holds, it is not opened again (the table as the step first saw it there, plus its own
        commits). Otherwise it is brought up to date first (``update_incremental``: the commits
        since, one listing), and opened afresh when its log no longer holds the commit it was
        opened at, of the same size and time (the table was removed, or made again): one file
        status per open. Not after ``DeltaTable.is_deltatable``: that reads the log too.
        """
        cached = self._tables.get(self.uri(table))
        if cached is not None and table.name in self._pinned:
            return cached[0]
        delta = self._latest(table)
        if delta is not None and locks.Key.of(table) in self._held:
            self._pinned.add(table.name)
        return delta

    def _latest(self, table: Table) -> DeltaTable | None:
        uri = self.uri(table)
        cached = self._tables.pop(uri, None)
        if cached is not None and self._commit_stamp(uri, cached[1]) == cached[2]:
            cached[0].update_incremental()
            self._tables[uri] = cached  # the commit it was first opened at still tells the table apart
            return cached[0]
        try:
            delta = DeltaTable(uri, storage_options=self.options)
        except TableNotFoundError:
            return None
        except OSError as exc:  # the store unreachable, throttling
            raise TransientError(f"{table}: its log could not be read ({exc})") from exc
        self._tables[uri] = (delta, delta.version(), self._commit_stamp(uri, delta.version()))
        return delta

    def _commit_stamp(self, uri: str, version: int) -> tuple[int, int] | None:
        """Size and time of one commit file of a table: how a later open knows the log is the same."""
        fs, root = self.filesystem(uri)
        info = fs.get_file_info(f"{root.rstrip('/')}/_delta_log/{version:020d}.json")
        return None if info.type == pafs.FileType.NotFound else (info.size, info.mtime_ns)

    def exists(self, table: Table) -> bool:
        """Whether ``table`` was ever written: its log holds a commit or a checkpoint. One listing, no log
        read — for a reader that only asks which tables there are (opening each costs ~50 ms)."""
        fs, root = self.filesystem(self.uri(table))
        log = fs.get_file_info(pafs.FileSelector(f"{root.rstrip('/')}/_delta_log", allow_not_found=True))
        return any(info.base_name.endswith((".json", ".parquet")) for info in log)

    def _existing(self, table: Table) -> DeltaTable:
        delta = self.open_table(table)
        if delta is None:
            raise InputError(f"table {table} does not exist yet at {self.uri(table)}")
        return delta

    def version(self, table: Table) -> int | None:
        """Current committed version, or None when the table does not exist."""
        delta = self.open_table(table)
        return None if delta is None else delta.version()

    def present_columns(self, table: Table, columns: Sequence[str]) -> list[str]:
        """Those of ``columns`` the table has (a column a compatible contract change added may be
        missing from a table written before it)."""
        delta = self.open_table(table)
        names = set() if delta is None else {f.name for f in delta.schema().fields}
        return [c for c in columns if c in names]

    def dataset(self, delta: DeltaTable) -> ds.Dataset:
        """The Delta table's version as a pyarrow dataset, read through pyarrow's own filesystem.

        deltalake's default filesystem is written in Python, so pyarrow's I/O threads call into
        Python; one still doing so when the interpreter exits aborts the process ("terminate called
        without an active exception"; docs/design.md §8).
        """
        fs, root = self.filesystem(delta.table_uri)
        return delta.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(root.rstrip("/"), fs))

    def read(self, table: Table, *, filters: Filters | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """Read the table's current version."""
        dataset = self.dataset(self._existing(table))
        expr = None
        for column, op, value in filters or ():
            term = _comparison(column, op, value)
            expr = term if expr is None else expr & term
        return dataset.to_table(columns=list(columns) if columns else None, filter=expr)

    def read_frame(
        self, table: Table, *, filters: Filters | None = None, columns: Sequence[str] | None = None
    ) -> pl.DataFrame:
        """:meth:`read` as a polars frame."""
        frame = pl.from_arrow(self.read(table, filters=filters, columns=columns))
        assert isinstance(frame, pl.DataFrame)
        return frame

    def snapshot(self, table: Table) -> ds.Dataset:
        """The files of the table's current version as a pyarrow dataset, partition values included.

        Read with pyarrow alone (deltalake reads only the log, here and now), so it may feed a
        Delta write that is running: deltalake cannot read inside its own write.
        """
        import pyarrow.dataset as ds

        from contracts import arrow_schema

        delta = self._existing(table)
        actions = pa.table(delta.get_add_actions(flatten=True))
        fs, root = self.filesystem(delta.table_uri)
        paths = [f"{root.rstrip('/')}/{path}" for path in actions.column("path").to_pylist()]
        values = [actions.column(f"partition.{c}").to_pylist() for c in table.partition_columns]
        partitions = []
        for row in zip(*values) if values else ([] for _ in paths):
            expr = pc.scalar(True)
            for column, value in zip(table.partition_columns, row):
                expr = expr & (pc.field(column) == value)
            partitions.append(expr)
        return ds.FileSystemDataset.from_paths(
            paths,
            schema=arrow_schema(table.contract),
            format=ds.ParquetFileFormat(),
            filesystem=fs,
            partitions=partitions,
        )

    def check_file_types(self, table: Table, version: int | None) -> None:
        """Refuse a version whose new data files do not hold exactly the contract's Arrow types.

        Readers compare and join on these types: a file written with others (``string_view``
        for ``string``) breaks them later, far from the write that caused it.
        """
        import pyarrow.parquet as pq

        from contracts import arrow_schema

        delta = self.open_table(table)
        if delta is None or version is None:
            return
        expected = {f.name: f.type for f in arrow_schema(table.contract) if f.name not in table.partition_columns}
        fs, root = self.filesystem(delta.table_uri)
        added = [unquote(action["add"]["path"]) for action in self._commit_actions(delta, version) if "add" in action]
        for path in added:
            with fs.open_input_file(f"{root.rstrip('/')}/{path}") as handle:
                schema = pq.read_schema(handle)
            found = {f.name: f.type for f in schema}
            wrong = {name: str(found.get(name)) for name, want in expected.items() if found.get(name) != want}
            if wrong:
                raise TypeError(f"{table} version {version} wrote {path} with types {wrong}, not the contract's")

    def commit_actions(self, table: Table, version: int) -> list[dict[str, Any]]:
        """The actions (``add``, ``remove``, ``commitInfo`` …) of one commit of ``table``, from its log;
        ``FileNotFoundError`` once the log no longer holds that commit (log retention)."""
        delta = self.open_table(table)
        if delta is None:
            raise FileNotFoundError(f"{table} does not exist")
        return self._commit_actions(delta, version)

    def _commit_actions(self, delta: DeltaTable, version: int) -> list[dict[str, Any]]:
        import json

        fs, root = self.filesystem(delta.table_uri)
        with fs.open_input_stream(f"{root.rstrip('/')}/_delta_log/{version:020d}.json") as stream:
            return [json.loads(line) for line in stream.read().decode().splitlines() if line.strip()]

    # ------------------------------------------------------------------ locks

    @contextmanager
    def hold(
        self, *, write: Iterable[tuple[Table, dict[str, object] | None]] = (), read: Iterable[Table] = ()
    ) -> Iterator[None]:
        """Hold the locks for writing these partitions (``None``: the whole table) and reading these
        tables until the block ends (:func:`warehouse.storage.locks.hold`), taking only those this
        handle does not hold already: a step takes each of its locks once."""
        write = [
            (t, p)
            for t, p in write
            if self._held.get(locks.Key.of(t, p)) is not True and self._held.get(locks.Key.of(t)) is not True
        ]
        read = [t for t in read if locks.Key.of(t) not in self._held]
        if not write and not read:
            yield
            return
        wanted = locks.wanted(write, read)
        with locks.hold(self.settings, write=write, read=read):
            taken = {key: exclusive for key, exclusive in wanted.items() if key not in self._held}
            self._held |= taken
            self._unpin(taken)  # read from here on as the lock finds them
            try:
                yield
            finally:
                for key in taken:
                    del self._held[key]
                self._unpin(taken)

    def _unpin(self, keys: Iterable[locks.Key]) -> None:
        self._pinned -= {key.name for key in keys}

    def verify(self, table: Table) -> None:
        """:func:`warehouse.storage.locks.verify`: this process still holds the locks of ``table``."""
        locks.verify(self.settings, table)

    # ------------------------------------------------------------------ commit

    def commit(
        self,
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
        last batch, just before the log entry (after :meth:`verify`): what it raises — an audit's
        refusal — aborts the write, and is what the caller sees.
        """
        delta = self._latest(table)  # a write goes on from the table's latest commit
        kwargs: dict[str, object] = {
            "partition_by": list(partition_by) or None,
            "writer_properties": writer_properties(data.schema),
            "target_file_size": TARGET_FILE_BYTES,
        }
        if attempt is not None:
            kwargs["commit_properties"] = CommitProperties(custom_metadata={"strata.attempt": attempt})
        if delta is None:
            kwargs |= {"description": description, "configuration": TABLE_PROPERTIES, "storage_options": self.options}
        else:  # a compatible contract change (a column added) reaches a table written before it
            kwargs["schema_mode"] = "merge"
            _set_properties(delta)
        if mode == "replace_partitions":
            parts = list(partitions)
            if not parts:
                raise ValueError(f"replace_partitions on {table} needs at least one partition")
            # The writer refuses rows outside the predicate, so a partition never leaks into another.
            kwargs["predicate"] = " OR ".join(f"({partition_predicate(p)})" for p in parts)
        feed = _Feed(data, [lambda: self.verify(table), *([check] if check is not None else [])])
        # Handed the table it has just opened, the writer reads the log once and updates it in place.
        try:
            write_deltalake(
                delta if delta is not None else self.uri(table),  # type: ignore[call-overload]
                feed.reader(),
                mode="append" if mode == "append" else "overwrite",
                **kwargs,
            )
        except CommitFailedError as exc:  # another writer committed to what this write replaces
            feed.raise_own()
            raise ConflictError(f"{table}: another writer committed first, nothing was committed ({exc})") from exc
        except OSError as exc:  # a full disk, the store unreachable or throttling
            feed.raise_own()
            raise TransientError(f"{table}: the write failed, nothing was committed ({exc})") from exc
        except Exception:
            feed.raise_own()
            raise
        if delta is None:
            delta = self._latest(table)
            assert delta is not None
        passed(f"commit {table.name}")
        return delta.version()


def _comparison(column: str, op: str, value: object) -> pc.Expression:
    field = pc.field(column)
    if op == "in":
        return field.isin(value)
    operators = {
        "=": field.__eq__,
        "!=": field.__ne__,
        "<": field.__lt__,
        "<=": field.__le__,
        ">": field.__gt__,
        ">=": field.__ge__,
    }
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


def partition_predicate(partition: Mapping[str, object]) -> str:
    """``col = 'value' AND …`` selecting exactly one partition."""
    return " AND ".join(f"{col} = {sql_literal(val)}" for col, val in sorted(partition.items()))


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
