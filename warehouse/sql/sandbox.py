"""A read-only, sandboxed DuckDB session over the lake, for analysts' SQL (``strata sql``).

Every table of the registry that exists in the lake is a view ``<layer>.<name>`` of its
current Delta version, read through its Delta log (``delta_scan``); ``--as-of`` pins a view
to an older version (or the version current at a time). The sandbox is DuckDB's own:

* ``allowed_directories`` lists the folders of the tables the session may read, and
  ``enable_external_access = false`` refuses every other file — reading ``/etc/passwd``,
  ATTACH, INSTALL and LOAD among them. Raw lines (tables with a ``pii`` column: ODS and the
  quarantine, which hold the prompts and responses of the requests too) are left out unless
  ``raw``: their folders are not allowed, so even ``delta_scan('<lake>/ods/…')`` is refused.
  On an ``s3://`` lake the folders are the tables' ``s3://`` prefixes, and the store's secret
  (which the session needs) shows redacted.
* ``lock_configuration = true``: no ``SET`` can undo the above.
* DuckDB's directory setting still lets ``COPY … TO '<a folder of the lake>'`` write, so
  only statements DuckDB's parser reports as reads run: SELECT (with DESCRIBE, SHOW,
  SUMMARIZE and VALUES, which it parses as SELECT) and EXPLAIN of one; writes, COPY, ATTACH,
  INSTALL/LOAD, SET and the rest are refused with a message.
* A SELECT can still write (``enable_logging(storage_path => …)``, ``write_blob``): each one's
  syntax tree is checked by :mod:`warehouse.sql.guard` — the lake's views, a few table
  functions, functions without side effects.
  Statements are parsed by the sandboxed connection itself, since parsing IMPORT DATABASE
  already reads files.
* A statement runs at most ``STRATA_SQL_TIMEOUT_S`` (DuckDB has no timeout of its own: a
  timer interrupts it) in ``STRATA_SQL_MEMORY_LIMIT`` of memory, spilling at most
  ``STRATA_SQL_SPILL_LIMIT`` into this process's scratch folder.
"""

from __future__ import annotations

import datetime as dt
import secrets
import shutil
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from contracts.errors import InputError
from warehouse.settings import Settings
from warehouse.sql.guard import QueryRefused, check, denied_functions
from warehouse.storage.lake import Lake
from warehouse.storage.objectstore import configure_duckdb
from warehouse.storage.scratch import scratch_dir
from warehouse.tables import PII, Table, all_tables, table

#: Payload columns kept away from a session without ``raw`` wherever a table holds them.
PAYLOAD_COLUMNS = ("prompt", "response")
#: What a session accepts, for messages.
READS = "SELECT (and WITH, VALUES, DESCRIBE, SHOW, SUMMARIZE) or EXPLAIN of one"
#: Rows per record batch a result is streamed in.
BATCH_ROWS = 64 * 1024


class QueryCancelled(InputError):
    """A statement was interrupted: it ran past the session's timeout, or Ctrl-C."""


class QueryFailed(InputError):
    """DuckDB could not run a statement as written (its syntax, a name, a type, a value, a file outside
    the sandbox): DuckDB's message and position. The same statement fails the same way."""


#: DuckDB's errors that a statement's text causes, as against a fault of the machine or a bug.
STATEMENT_ERRORS = (duckdb.ProgrammingError, duckdb.DataError, duckdb.NotSupportedError, duckdb.PermissionException)


@dataclass(frozen=True)
class View:
    """One table as the session shows it: its view name, the Delta version read, and whether pinned."""

    table: Table
    version: int
    pinned: bool

    @property
    def name(self) -> str:
        return self.table.name


def is_raw(t: Table) -> bool:
    """Whether a table holds raw lines or payloads: a ``pii`` column, or a prompt/response column."""
    return bool(t.classified(PII)) or any(c in t.contract for c in PAYLOAD_COLUMNS)


def parse_as_of(text: str) -> tuple[Table, int | dt.datetime]:
    """``TABLE=VERSION`` or ``TABLE=TIMESTAMP`` (ISO 8601; UTC when no offset is given)."""
    name, sep, when = text.partition("=")
    if not sep or not name.strip() or not when.strip():
        raise InputError(
            f"as of {text!r}: expected TABLE=VERSION or TABLE=TIMESTAMP, e.g. dwd.request=3", argument="as_of"
        )
    target = table(name.strip())
    when = when.strip()
    if when.isascii() and when.isdigit():  # "²".isdigit() is true, and int() refuses it
        return target, int(when)
    try:
        moment = dt.datetime.fromisoformat(when)
    except ValueError:
        raise InputError(
            f"as of {text!r}: {when!r} is neither a version number nor an ISO 8601 time", argument="as_of"
        ) from None
    return target, moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


class Session:
    """A sandboxed DuckDB connection with a view per table; run reads with :meth:`execute`."""

    def __init__(
        self, settings: Settings, *, raw: bool = False, as_of: Mapping[Table, int | dt.datetime] | None = None
    ) -> None:
        self.raw = raw
        pins = dict(as_of or {})
        for pinned in pins:
            if is_raw(pinned) and not raw:
                raise QueryRefused(f"{pinned} holds raw lines: reading it needs a raw session", argument="raw")
        # Under this process's scratch folder: a session killed before close() leaves it to the
        # next process's start, which clears the folders of processes no longer running.
        self.scratch = scratch_dir(settings) / f"sql-{secrets.token_hex(4)}"
        self.scratch.mkdir(parents=True)
        self.timeout_s = settings.sql_timeout_s
        self._stop: str | None = None  # why the running statement is being interrupted
        con = duckdb.connect()
        try:
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET autoinstall_known_extensions = false")
            con.execute("SET autoload_known_extensions = false")
            con.execute("LOAD delta")  # before the sandbox closes: loading reads the extension's file
            configure_duckdb(con, settings)  # an s3:// lake: httpfs and the store's secret
            self.views = self._create_views(con, settings, pins)
            allowed = [self._folder(settings, v.table) for v in self.views]
            con.execute("SET temp_directory = ?", [str(self.scratch)])  # spills stay under STRATA_HOME
            con.execute("SET memory_limit = ?", [settings.sql_memory_limit])
            con.execute("SET max_temp_directory_size = ?", [settings.sql_spill_limit])
            self._denied = denied_functions(con)
            con.execute("SET allowed_directories = ?", [allowed])
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
        except BaseException:
            con.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        self.con = con

    def _create_views(
        self, con: duckdb.DuckDBPyConnection, settings: Settings, pins: dict[Table, int | dt.datetime]
    ) -> list[View]:
        views = []
        unknown = set(pins)
        lake = Lake(settings)
        for t in all_tables():
            if is_raw(t) and not self.raw:
                continue
            delta = lake.open_table(t)
            if delta is None:
                continue
            unknown.discard(t)
            version, pinned = delta.version(), t in pins
            if pinned:
                version = _pinned_version(t, delta, pins[t])
            layer, name = t.name.split(".", 1)
            location = _sql_text(t.uri(settings))
            scan = f"delta_scan({location}, version => {version})" if pinned else f"delta_scan({location})"
            con.execute(f'CREATE SCHEMA IF NOT EXISTS "{layer}"')
            con.execute(f'CREATE VIEW "{layer}"."{name}" AS SELECT * FROM {scan}')
            views.append(View(t, version, pinned))
        if unknown:
            raise InputError(
                f"as of: {', '.join(sorted(map(str, unknown)))} does not exist in the lake", argument="as_of"
            )
        return views

    @property
    def _unknown_hint(self) -> str:
        return "" if self.raw else " (raw lines — ODS and quarantine tables — are views only in a raw session)"

    @staticmethod
    def _folder(settings: Settings, t: Table) -> str:
        return t.uri(settings).rstrip("/") + "/"

    def statements(self, sql: str) -> list[duckdb.Statement]:
        """The statements of ``sql``, parsed by DuckDB; :class:`QueryRefused` unless each is a read."""
        try:
            statements = self.con.extract_statements(sql)
        except STATEMENT_ERRORS as e:
            raise QueryFailed(str(e)) from e
        if not statements:
            raise QueryRefused("no SQL statement to run")
        views = [(v.table.layer, v.table.name.split(".", 1)[1]) for v in self.views]
        for statement in statements:
            read = self._explained(statement.query) if statement.type == duckdb.StatementType.EXPLAIN else statement
            if read.type != duckdb.StatementType.SELECT:
                # DuckDB expands some reads into a CREATE with no text of its own (PIVOT without IN values).
                made = (
                    ""
                    if read.query.strip()
                    else " (DuckDB makes one of PIVOT … ON col without IN (…) values: list the values)"
                )
                raise QueryRefused(
                    f"{read.type.name} statements are refused{made}: a session is read-only, it runs {READS}"
                )
            check(self.con, read.query, views, self._denied, unknown_hint=self._unknown_hint)
        return statements

    def _explained(self, query: str) -> duckdb.Statement:
        """The statement an EXPLAIN [ANALYZE] [(options)] statement explains.

        EXPLAIN ANALYZE runs its statement: it may only explain a read.
        """
        tokens = duckdb.tokenize(query)
        words = [
            (start, query[start : tokens[i + 1][0] if i + 1 < len(tokens) else len(query)].strip())
            for i, (start, _) in enumerate(tokens)
        ]
        i = 1
        if i < len(words) and words[i][1].lower() == "analyze":
            i += 1
        if i < len(words) and words[i][1] == "(":
            depth = 0
            while i < len(words):
                depth += {"(": 1, ")": -1}.get(words[i][1], 0)
                i += 1
                if depth == 0:
                    break
        if i >= len(words):
            raise QueryRefused("EXPLAIN of nothing")
        inner = self.con.extract_statements(query[words[i][0] :])
        if len(inner) != 1:
            raise QueryRefused("EXPLAIN explains one statement")
        return inner[0]

    def execute(self, sql: str) -> Iterator[pa.RecordBatchReader]:
        """Run every statement of ``sql`` (each checked first), yielding each one's result as batches.

        A statement is interrupted once it has run ``timeout_s`` (its result's streaming included)
        or on :meth:`cancel`: running or reading it then raises :class:`QueryCancelled`.
        """
        self._stop = None
        try:
            for statement in self.statements(sql):  # checking runs SQL too: a Ctrl-C may come then
                self._raise_if_stopped()
                timer = threading.Timer(
                    self.timeout_s,
                    self._interrupt,
                    [
                        f"the statement ran past {self.timeout_s:g} s and was cancelled "
                        "(STRATA_SQL_TIMEOUT_S sets the limit)"
                    ],
                )
                timer.daemon = True
                timer.start()
                try:
                    yield self._guarded(self.con.execute(statement.query).to_arrow_reader(BATCH_ROWS))
                except duckdb.PermissionException as e:
                    hint = "" if self.raw else "; raw lines (ODS, quarantine) need a raw session"
                    raise QueryFailed(f"{e}\n(a session reads only the lake's tables{hint})") from e
                finally:
                    timer.cancel()
        except STATEMENT_ERRORS as e:
            self._raise_if_stopped()
            raise QueryFailed(str(e)) from e
        except Exception:
            self._raise_if_stopped()
            raise

    def cancel(self) -> None:
        """Interrupt the running statement and run no more of the current :meth:`execute` (Ctrl-C)."""
        self._interrupt("cancelled")

    def _interrupt(self, why: str) -> None:
        self._stop = why
        self.con.interrupt()

    def _raise_if_stopped(self) -> None:
        if self._stop is not None:
            raise QueryCancelled(self._stop) from None

    def _guarded(self, reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
        """``reader``, raising :class:`QueryCancelled` instead of DuckDB's interrupt error once stopped."""

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                yield from reader
            except STATEMENT_ERRORS as e:
                self._raise_if_stopped()
                raise QueryFailed(str(e)) from e
            except Exception:
                self._raise_if_stopped()
                raise

        return pa.RecordBatchReader.from_batches(reader.schema, batches())

    def query(self, sql: str) -> pa.Table:
        """The result of the last statement of ``sql``, whole (for small results and tests)."""
        result: pa.Table | None = None
        for reader in self.execute(sql):
            result = reader.read_all()
        assert result is not None
        return result

    def close(self) -> None:
        self.con.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _pinned_version(t: Table, delta: Any, when: int | dt.datetime) -> int:
    current = delta.version()
    if isinstance(when, int):
        if not 0 <= when <= current:
            raise InputError(f"{t} has versions 0 to {current}, not {when}", argument="as_of")
        return when
    history = sorted((h["version"], h["timestamp"]) for h in delta.history())
    at_ms = when.timestamp() * 1000
    versions: list[int] = [version for version, stamp in history if stamp <= at_ms]
    if not versions:
        first = dt.datetime.fromtimestamp(history[0][1] / 1000, dt.UTC)
        raise InputError(
            f"{t} did not exist at {when.isoformat()} (its first version is from {first.isoformat()})", argument="as_of"
        )
    return max(versions)


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
