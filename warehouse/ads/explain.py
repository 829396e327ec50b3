"""One ADS row down the layers: the DWD rows it summarises, the ODS lines they came from, what was set aside.

``strata explain ads.model_daily event_date=… model=… model_version=…`` takes one mart row by its primary key
(its contract's) and reads:

- the row itself;
- the Delta version of every table the build read, as recorded with the mart's write in ``ops.audit_log``
  (``read_tables``, ``read_versions``: :func:`warehouse.ads.build.build` records the versions its dbt run
  attached), and whether each version can still be read: retention and vacuum delete old versions' files,
  a log purge their log entries;
- the DWD rows the row summarises (:data:`GRAINS`: per mart, which rows of ``dwd.request`` — or of the traces
  of a shape, in ``dwd.request`` and ``dwd.span`` — its key selects): their count, a sample, and the ODS
  files and lines they came from, read at the version the build read while it is still there, else at the
  current version (and it says so: what is still true);
- every ODS line of the row's partitions (the event dates of those rows) accounted for: the lineage of a row
  summarised, of another DWD row, a quarantined line (with its rules), or a duplicate of a DWD row's request;
- the model's SQL (``warehouse/ads/models/marts/<name>.sql``).

Raw lines (ODS's) are read only when asked (``raw``): prompts may be in them. Everything else is ids, counts,
file names and line numbers.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs

from contracts.errors import InputError
from warehouse.ads.project import PROJECT_DIR
from warehouse.errors import NoData
from warehouse.storage.duck import lake_reader
from warehouse.storage.lake import Lake, sql_literal
from warehouse.tables import DWD_QUARANTINE, DWD_REQUEST, DWD_SPAN, ODS_REQUESTS, OPS_AUDIT_LOG, Table, table

#: The DWD rows sampled.
SAMPLE_ROWS = 5
#: The columns of a sampled ``dwd.request`` row (ids, times and counts: nothing personal).
SAMPLE_COLUMNS = (
    "request_id",
    "ts",
    "tenant_id",
    "model",
    "status_code",
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "source_file",
    "line_no",
)


@dataclass(frozen=True)
class Grain:
    """Which DWD rows one row of a mart summarises.

    ``columns`` maps each key column that is a ``dwd.request`` column to the SQL of it as the mart's staging
    reads it (``model_version``: ``'(none)'`` for a null); ``where`` is the mart's own condition on its rows.
    ``whole_life``: the key names an instance, whose rows on every day are the row's (the instance marts read
    all of ``dwd.request``); ``window``: the row's ``window_start`` … ``window_end`` bound the rows' times;
    ``shape``: the row is a workflow shape, whose traces' calls and spans are its rows.
    """

    columns: Mapping[str, str]
    where: str = "model IS NOT NULL"
    whole_life: bool = False
    window: bool = False
    shape: bool = False


_MODEL = {"model": "model"}
_TENANT = {"tenant_id": "tenant_id"}
#: Per mart (by name), the DWD rows a row summarises: docs/ads.md defines each mart.
GRAINS: dict[str, Grain] = {
    "ads.model_daily": Grain({**_MODEL, "model_version": "coalesce(model_version, '(none)')"}),
    "ads.tenant_daily": Grain(_TENANT),
    "ads.latency_breakdown": Grain(_MODEL),
    "ads.retry_storms": Grain({**_TENANT, **_MODEL}, window=True),
    "ads.version_mix": Grain(_MODEL),
    "ads.capacity": Grain(_MODEL),
    "ads.cold_starts": Grain({"server": "server", "server_instance": "server_instance"}, where="TRUE", whole_life=True),
    "ads.server_drift": Grain(
        {"server": "server", "server_instance": "server_instance"}, where="TRUE", whole_life=True
    ),
    "ads.token_anomalies": Grain(_TENANT),
    "ads.retry_policy": Grain({**_TENANT, **_MODEL}),
    "ads.trace_breakdown": Grain({}, where="TRUE", shape=True),
    # a day's books, writes and quarantine: the day's requests are the DWD rows it speaks of
    "ads.data_quality": Grain({}, where="TRUE"),
}


@dataclass(frozen=True)
class Read:
    """A table the build read, at the version it read, and whether that version is still there."""

    table: str
    version: int
    current: int | None
    #: Why the version can no longer be read (its files vacuumed, its log entry removed); None: it can.
    gone: str | None

    @property
    def readable(self) -> bool:
        return self.gone is None


@dataclass(frozen=True)
class Lines:
    """The ODS lines of one file that rows came from: how many, the first and the last."""

    source_file: str
    lines: int
    first: int
    last: int


@dataclass(frozen=True)
class Partition:
    """Every ODS line of one event date, accounted for: how many lines each fate holds."""

    event_date: dt.date
    ods_lines: int
    #: The lineage of a row this mart row summarises.
    summarised: int
    #: The lineage of another ``dwd.request`` or ``dwd.span`` row.
    other_rows: int
    quarantined: int
    #: A line whose request id a DWD row holds from another line: of this row's requests, of others'.
    duplicates_of_these: int
    duplicates: int
    unaccounted: int
    #: Quarantined lines of the date by rule (a line may break several).
    rules: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Explanation:
    """One mart row and what it came from."""

    table: str
    key: dict[str, object]
    row: dict[str, Any]
    #: When the partition was last published (the audit log's row), and the mart's version then.
    built_at: dt.datetime | None
    built_version: int | None
    #: The build's reads as recorded (empty when none were: a build before they were, a recovered crash).
    reads: list[Read]
    #: The DWD version the rows were read at, and whether that is the one the build read.
    dwd_version: int | None
    dwd_as_built: bool
    rows: int
    #: Per DWD table the rows come from (``dwd.request``, ``dwd.span``), how many.
    rows_by_table: dict[str, int]
    sample: list[dict[str, Any]]
    lines: list[Lines]
    partitions: list[Partition]
    sql_path: str
    sql: str
    #: The raw ODS line of each sampled row, by (file, line), with ``raw`` (else empty).
    raw_lines: dict[tuple[str, int], bytes]


def marts() -> list[str]:
    """The marts explain takes (those dbt builds), by name."""
    return list(GRAINS)


def parse_key(mart: str, pairs: Sequence[str]) -> tuple[Table, dict[str, object]]:
    """The mart and its primary key's values from ``KEY=VALUE`` pairs, typed by its contract; an unknown mart,
    a malformed pair, an unknown or repeated column or a missing one is an :class:`InputError` naming the key."""
    if mart not in GRAINS:
        raise InputError(f"{mart!r} is not a mart explain takes: one of {', '.join(GRAINS)}", argument="table")
    target = table(mart)
    contract = target.contract
    names = list(contract.primary_key)
    wanted = f"{mart}'s key is {', '.join(names)}: give KEY=VALUE for each"
    key: dict[str, object] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        name = name.strip()
        if not equals or name not in names or name in key:
            why = "not KEY=VALUE" if not equals else ("repeated" if name in key else "not a key column")
            raise InputError(f"{pair!r} is {why}; {wanted}")
        key[name] = _typed(contract.column(name).arrow_type, value, name, wanted)
    if missing := [n for n in names if n not in key]:
        raise InputError(f"missing {', '.join(missing)}; {wanted}")
    return target, {n: key[n] for n in names}


def _typed(kind: pa.DataType, value: str, name: str, wanted: str) -> object:
    try:
        if pa.types.is_date(kind):
            return dt.date.fromisoformat(value)
        if pa.types.is_timestamp(kind):
            stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)
        if pa.types.is_integer(kind):
            return int(value)
    except ValueError:
        raise InputError(f"{name}={value!r} is not {_KINDS.get(str(kind), f'a {kind}')}; {wanted}") from None
    return value


#: How a key's type is named to a person.
_KINDS = {
    "date32[day]": "a date (YYYY-MM-DD)",
    "timestamp[us, tz=UTC]": "a UTC time (ISO 8601)",
    "int64": "an integer",
}


def explain(lake: Lake, mart: str, pairs: Sequence[str], *, raw: bool = False) -> Explanation:
    """The row of ``mart`` whose primary key ``pairs`` (``KEY=VALUE``) give, and what it came from; :class:`NoData`
    when the mart holds no such row. ``raw`` reads the ODS lines of the sampled rows too."""
    target, key = parse_key(mart, pairs)
    con = lake_reader(lake.settings)
    if not lake.exists(target):
        raise NoData(f"{mart} was never built", step="build_ads")
    where = " AND ".join(f"{c} = {sql_literal(v)}" for c, v in key.items())
    found = _query(con, f"SELECT * FROM delta_scan('{lake.uri(target)}') WHERE {where}")
    if not found:
        shown = ", ".join(f"{c}={v}" for c, v in key.items())
        raise NoData(f"{mart} has no row with {shown}")
    row = found[0]
    day = key["event_date"]
    assert isinstance(day, dt.date)
    built = _built(con, lake, mart, day)
    reads = _reads(lake, built)
    request_read = next((r for r in reads if r.table == DWD_REQUEST.name), None)
    span_read = next((r for r in reads if r.table == DWD_SPAN.name), None)
    requests = _scan(lake, DWD_REQUEST, request_read)
    spans = _scan(lake, DWD_SPAN, span_read) if lake.exists(DWD_SPAN) else None
    quarantine = _scan(lake, DWD_QUARANTINE, next((r for r in reads if r.table == DWD_QUARANTINE.name), None))
    selected = _selected(GRAINS[mart], row, requests, spans)
    con.execute(f"CREATE OR REPLACE TEMP TABLE explained AS {selected}")
    counts = dict(_query(con, "SELECT dwd_table, count(*) FROM explained GROUP BY ALL ORDER BY 1", tuples=True))
    sample = _query(
        con,
        f"SELECT {', '.join(SAMPLE_COLUMNS)} FROM explained WHERE dwd_table = 'dwd.request' "
        f"ORDER BY ts, request_id LIMIT {SAMPLE_ROWS}",
    )
    lines = [
        Lines(*r)
        for r in _query(
            con,
            "SELECT source_file, count(DISTINCT line_no), min(line_no), max(line_no) FROM explained "
            "GROUP BY source_file ORDER BY source_file",
            tuples=True,
        )
    ]
    dates = [d for (d,) in _query(con, "SELECT DISTINCT event_date FROM explained ORDER BY 1", tuples=True)] or [day]
    partitions = _accounted(con, lake, dates, requests, spans, quarantine)
    path = PROJECT_DIR / "models" / "marts" / f"{mart.split('.', 1)[1]}.sql"
    raw_lines = _raw_lines(con, lake, sample) if raw else {}
    return Explanation(
        mart,
        key,
        row,
        built.get("started_at"),
        built.get("delta_version"),
        reads,
        request_read.version if request_read and request_read.readable else lake.version(DWD_REQUEST),
        bool(request_read and request_read.readable),
        sum(counts.values()),
        counts,
        sample,
        lines,
        partitions,
        str(path.relative_to(PROJECT_DIR.parent.parent)),
        path.read_text(),
        raw_lines,
    )


def _query(con: duckdb.DuckDBPyConnection, sql: str, *, tuples: bool = False) -> list[Any]:
    """The rows of ``sql``: dicts by column, or tuples. Values go in as literals (a query with parameters makes
    DuckDB import pandas, a third of a second of a command's start)."""
    cursor = con.execute(sql)
    rows = cursor.fetchall()
    if tuples:
        return rows
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, r)) for r in rows]


def _built(con: duckdb.DuckDBPyConnection, lake: Lake, mart: str, day: dt.date) -> dict[str, Any]:
    """The audit log's row of the last published write of ``mart`` that named ``day`` (empty: none)."""
    if not lake.exists(OPS_AUDIT_LOG):
        return {}
    named = sql_literal(f"event_date = '{day.isoformat()}'")
    rows = _query(
        con,
        f"SELECT * FROM delta_scan('{lake.uri(OPS_AUDIT_LOG)}') WHERE table_name = {sql_literal(mart)} "
        f"AND status = 'published' AND contains(partition, {named}) ORDER BY started_at DESC LIMIT 1",
    )
    return rows[0] if rows else {}


def _reads(lake: Lake, built: Mapping[str, Any]) -> list[Read]:
    """The build's reads as its audit-log row records them, each checked against the lake as it is now."""
    names, versions = built.get("read_tables") or [], built.get("read_versions") or []
    reads = []
    for name, version in zip(names, versions):
        current = lake.version(table(name))
        reads.append(Read(name, version, current, _gone(lake, table(name), version)))
    return reads


def _gone(lake: Lake, target: Table, version: int) -> str | None:
    """Why ``version`` of ``target`` can no longer be read, or None when it can: its log entry was removed (a
    log purge, log retention), or files it reads were deleted (vacuumed after retention, forget, a rewrite)."""
    from deltalake import DeltaTable

    current = lake.open_table(target)
    if current is None:
        return "the table no longer exists"
    if version == current.version():
        return None
    try:
        old = DeltaTable(lake.uri(target), version=version, storage_options=lake.options)
    except Exception:  # deltalake raises several kinds for a version its log cannot rebuild
        return "its log entry was removed"
    kept = set(current.file_uris())
    others = [uri for uri in old.file_uris() if uri not in kept]
    if not others:
        return None
    fs, _ = lake.filesystem(others[0])
    paths = [lake.filesystem(uri)[1] for uri in others]
    if any(info.type == pafs.FileType.NotFound for info in fs.get_file_info(paths)):
        return "its files were vacuumed"
    return None


def _scan(lake: Lake, target: Table, read: Read | None) -> str:
    """``target`` as DuckDB reads it: at the version the build read while that is there, else the current."""
    pinned = f", version => {read.version}" if read is not None and read.readable else ""
    return f"delta_scan('{lake.uri(target)}'{pinned})"


def _selected(grain: Grain, row: Mapping[str, Any], requests: str, spans: str | None) -> str:
    """SQL of the DWD rows one mart row summarises: ``dwd_table``, the :data:`SAMPLE_COLUMNS` (a span's id as its
    ``request_id``, nulls for what a span lacks) and the event date."""
    conditions = [grain.where] + [f"{sql} = {sql_literal(row[c])}" for c, sql in grain.columns.items()]
    if not grain.whole_life:
        conditions.append(f"event_date = {sql_literal(row['event_date'])}")
    if grain.window:
        conditions.append(f"ts >= {sql_literal(row['window_start'])} AND ts < {sql_literal(row['window_end'])}")
    if grain.shape:
        on_day = f"event_date = {sql_literal(row['event_date'])}"
        traces = f"SELECT trace_id FROM ({shapes_sql(requests, spans, on_day)}) WHERE shape = "
        conditions.append(f"trace_id IN ({traces}{sql_literal(row['shape'])})")
    where = " AND ".join(conditions)
    calls = f"SELECT 'dwd.request' AS dwd_table, {', '.join(SAMPLE_COLUMNS)}, event_date FROM {requests} WHERE {where}"
    if not grain.shape or spans is None:
        return calls
    return (
        f"{calls} UNION ALL SELECT 'dwd.span', span_id, ts, tenant_id, NULL, NULL, duration_ms, NULL, NULL, "
        f"source_file, line_no, event_date FROM {spans} "
        f"WHERE event_date = {sql_literal(row['event_date'])} AND {conditions[-1]}"
    )


def shapes_sql(requests: str, spans: str | None, days: str) -> str:
    """SQL of each multi-call trace of the days ``days`` (a predicate on ``event_date``) with its workflow shape
    (``event_date``, ``trace_id``, ``shape``, ``duration_ms``; a trace across midnight is one on each day): the
    definitions of docs/ads.md ("Traces, shapes and critical paths"), as ``int_trace_steps`` and
    ``ads.trace_breakdown`` compute them (a test checks the traces found per shape are the mart's);
    ``requests`` and ``spans`` are the tables' scans."""
    other = (
        f"UNION ALL SELECT event_date, trace_id, span_id, parent_span_id, name, ts, duration_ms FROM {spans} "
        f"WHERE {days}"
        if spans is not None
        else ""
    )
    return f"""
        WITH calls AS (SELECT event_date, trace_id, span_id, parent_span_id, operation AS step_name, ts, duration_ms
                       FROM {requests} WHERE {days} AND span_id IS NOT NULL),
             multi AS (SELECT event_date, trace_id FROM calls GROUP BY ALL HAVING count(*) >= 2),
             steps AS (SELECT * FROM (SELECT * FROM calls {other}) SEMI JOIN multi USING (event_date, trace_id)),
             parented AS (SELECT steps.*, parents.span_id IS NULL AS has_no_parent FROM steps
                          LEFT JOIN steps AS parents
                            ON steps.event_date = parents.event_date AND steps.trace_id = parents.trace_id
                            AND steps.parent_span_id = parents.span_id),
             ranked AS (SELECT *, row_number() OVER (PARTITION BY event_date, trace_id
                                                     ORDER BY has_no_parent DESC, ts, span_id) = 1 AS is_root,
                               ts + to_microseconds(CAST(round(coalesce(duration_ms, 0) * 1000) AS BIGINT)) AS ended
                        FROM parented)
        SELECT event_date, trace_id,
               any_value(step_name) FILTER (WHERE is_root) || coalesce(': ' || string_agg(step_name, ' > '
                   ORDER BY ts, span_id) FILTER (WHERE NOT is_root), '') AS shape,
               coalesce(any_value(duration_ms) FILTER (WHERE is_root),
                        (epoch_us(max(ended)) - epoch_us(min(ts))) / 1000) AS duration_ms
        FROM ranked GROUP BY event_date, trace_id"""


def _accounted(
    con: duckdb.DuckDBPyConnection, lake: Lake, dates: list[dt.date], requests: str, spans: str | None, quarantine: str
) -> list[Partition]:
    """Each ODS line of ``dates`` with its fate (:class:`Partition`): ODS read for its lineage columns only."""
    if not lake.exists(ODS_REQUESTS):
        return [Partition(d, 0, 0, 0, 0, 0, 0, 0) for d in dates]
    days = ", ".join(sql_literal(d) for d in dates)
    near = (
        f"event_date BETWEEN {sql_literal(dates[0] - dt.timedelta(days=1))} "
        f"AND {sql_literal(dates[-1] + dt.timedelta(days=1))}"
    )
    # A line's rows are on its own date, and on the next where its records cross midnight (ODS's event_dates):
    # only those dates, and of them only the rows of the lines' own files, are matched (with the integer keys
    # and the two steps below, explain of a row of a 1M-request day took 0.7 s instead of 2.7).
    crossed = con.execute(
        f"SELECT DISTINCT unnest(event_dates) FROM delta_scan('{lake.uri(ODS_REQUESTS)}') "
        f"WHERE event_date IN ({days}) AND event_dates IS NOT NULL"
    ).fetchall()
    lines_on = ", ".join(sql_literal(d) for d in sorted({*dates, *(d for (d,) in crossed)}))
    lines = f"event_date IN ({lines_on})"

    def keyed(source: str, where: str = "TRUE") -> str:
        """A line as one integer (its file's number among the days' files, its line number): a line of a file
        not among them is none of these lines'; integers hash far faster than (file, line) pairs."""
        return (
            f"SELECT file_no * 4294967296 + line_no AS line_key FROM {source} "
            f"JOIN ods_files USING (source_file) WHERE {where}"
        )

    span_lines = f"UNION ALL {keyed(spans, lines)}" if spans is not None else ""
    has_quarantine = lake.exists(DWD_QUARANTINE)
    quarantined = keyed(quarantine, lines) if has_quarantine else "SELECT NULL::BIGINT AS line_key WHERE FALSE"
    # First each line's lineage (its rows, quarantined), counted, then the few lines left (duplicates) by request
    # id: the ids of the neighbour days' rows are matched against those lines only, not hashed whole.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE ods_fates AS
        WITH ods AS (SELECT event_date, source_file, line_no, request_id FROM delta_scan('{lake.uri(ODS_REQUESTS)}')
                     WHERE event_date IN ({days})),
             ods_files AS (SELECT source_file, row_number() OVER (ORDER BY source_file) AS file_no
                           FROM (SELECT DISTINCT source_file FROM ods)),
             mine AS ({keyed("explained")}),
             dwd AS ({keyed(requests, lines)} {span_lines}),
             quarantined AS ({quarantined})
        SELECT event_date, fate, if(fate IS NULL, request_id, NULL) AS request_id, count(*) AS lines
        FROM (SELECT event_date, request_id,
                CASE WHEN line_key IN (SELECT line_key FROM mine) THEN 'summarised'
                     WHEN line_key IN (SELECT line_key FROM dwd) THEN 'other_rows'
                     WHEN line_key IN (SELECT line_key FROM quarantined) THEN 'quarantined'
                     END AS fate
              FROM (SELECT event_date, request_id, file_no * 4294967296 + line_no AS line_key
                    FROM ods JOIN ods_files USING (source_file)))
        GROUP BY ALL"""
    )
    fates = _query(
        con,
        f"""
        WITH left_over AS (SELECT DISTINCT request_id FROM ods_fates WHERE fate IS NULL),
             ids AS (SELECT DISTINCT request_id FROM {requests}
                     WHERE {near} AND request_id IN (SELECT request_id FROM left_over))
        SELECT event_date,
               coalesce(fate, CASE WHEN request_id IN (SELECT request_id FROM explained) THEN 'duplicates_of_these'
                                   WHEN request_id IN (SELECT request_id FROM ids) THEN 'duplicates'
                                   ELSE 'unaccounted' END) AS fate,
               sum(lines)
        FROM ods_fates GROUP BY ALL""",
        tuples=True,
    )
    rules: dict[dt.date, dict[str, int]] = {}
    if has_quarantine:
        for d, rule, n in _query(
            con,
            f"SELECT event_date, rule, count(*) FROM (SELECT event_date, unnest(rules) AS rule FROM {quarantine} "
            f"WHERE event_date IN ({days})) GROUP BY ALL ORDER BY 1, 3 DESC, 2",
            tuples=True,
        ):
            rules.setdefault(d, {})[rule] = n
    counted: dict[dt.date, dict[str, int]] = {d: {} for d in dates}
    for d, fate, n in fates:
        counted.setdefault(d, {})[fate] = n
    kinds = ("summarised", "other_rows", "quarantined", "duplicates_of_these", "duplicates", "unaccounted")
    return [
        Partition(d, sum(c.values()), **{f: c.get(f, 0) for f in kinds}, rules=rules.get(d, {}))
        for d, c in sorted(counted.items())
    ]


def _raw_lines(
    con: duckdb.DuckDBPyConnection, lake: Lake, sample: list[dict[str, Any]]
) -> dict[tuple[str, int], bytes]:
    """The ODS line of each sampled row, by (file, line number)."""
    if not sample or not lake.exists(ODS_REQUESTS):
        return {}
    wanted = {(r["source_file"], r["line_no"]) for r in sample}
    files = ", ".join(sql_literal(f) for f, _ in wanted)
    numbers = ", ".join(sql_literal(n) for _, n in wanted)
    rows = _query(
        con,
        f"SELECT source_file, line_no, raw_line FROM delta_scan('{lake.uri(ODS_REQUESTS)}') "
        f"WHERE source_file IN ({files}) AND line_no IN ({numbers})",
        tuples=True,
    )
    return {(f, n): line for f, n, line in rows if (f, n) in wanted}
