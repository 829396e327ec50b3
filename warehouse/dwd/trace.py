"""One trace across the layers: every call and span of it, where each came from, what was set aside, its feedback.

``strata trace`` reads, for one ``trace_id``: its calls (``dwd.request``) and its other spans (``dwd.span``)
in time order, each placed under its parent span; the ODS file and line each row came from (the DWD rows'
lineage); the lines of the quarantine that hold the trace's id, with their rules; and the feedback on its
calls (``dwd.feedback`` by request id). Raw lines — ODS's, the quarantine's — are read only when asked
(``raw``): prompts may be in them.

A trace id is random, so nothing orders the tables by it: every file of ``dwd.request`` and ``dwd.span``
carries a Bloom filter of its trace ids per row group (:data:`~warehouse.storage.lake.LOOKUP_COLUMNS`),
which DuckDB probes to read only the row groups holding the trace (docs/design.md §8). The filters are
part of each data file, so a rebuild, a crash or ``forget`` leaves no index to bring up to date.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from contracts.errors import InputError
from warehouse.errors import NoData
from warehouse.storage.duck import lake_reader
from warehouse.storage.lake import Lake, sql_literal
from warehouse.tables import DWD_FEEDBACK, DWD_QUARANTINE, DWD_REQUEST, DWD_SPAN, ODS_REQUESTS, Table

_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
#: A call's stages, in the order they run.
STAGES = ("queue", "preprocess", "inference", "postprocess")
#: A quarantined line is looked for on the trace's dates and the days beside them (a line's date is its
#: own timestamp's, which a broken line may lack); a trace found nowhere else is looked for on every date.
_QUARANTINE_DAYS = dt.timedelta(days=1)


@dataclass(frozen=True)
class Step:
    """One call or span of a trace, placed in its tree (``depth``: 0 for a root)."""

    table: str
    #: The request id of a call, the span id of a span.
    id: str
    span_id: str | None
    parent_span_id: str | None
    #: A call's operation and model (``chat gpt-4o``), a span's name.
    name: str
    #: A call's server, a span's service.
    service: str | None
    ts: dt.datetime
    duration_ms: float | None
    #: The call's stages it logged, in order: (stage, ms).
    stages: tuple[tuple[str, float], ...]
    #: ``ok``, ``error``, or a call's status code and error type (``429 rate_limited``).
    status: str
    event_date: dt.date
    source_file: str
    line_no: int
    depth: int
    #: A call's attempt (1 for the first) and its tokens in and out.
    attempt: int | None = None
    tokens: tuple[int | None, int | None] = (None, None)
    #: The parent span this step names is in neither table (not built, erased or never sent).
    orphan: bool = False


@dataclass(frozen=True)
class Quarantined:
    """A line of the quarantine holding the trace's id, with the rules its row broke."""

    target_table: str
    event_date: dt.date
    request_id: str | None
    rules: tuple[str, ...]
    source_file: str
    line_no: int
    raw_line: bytes | None


@dataclass(frozen=True)
class Feedback:
    """A feedback event on one of the trace's calls."""

    request_id: str
    ts: dt.datetime
    kind: str
    value: str | None
    source: str | None


@dataclass(frozen=True)
class Trace:
    """Everything the lake holds of one trace."""

    trace_id: str
    #: Depth first from the roots, each step's children in time order.
    steps: list[Step]
    quarantined: list[Quarantined]
    feedback: list[Feedback]
    #: The ODS line of each (file, line) the steps came from, with ``raw`` (else empty).
    raw_lines: dict[tuple[str, int], bytes]
    #: The tables searched, in the order read.
    searched: tuple[str, ...]

    @property
    def start(self) -> dt.datetime:
        return min(s.ts for s in self.steps)

    @property
    def end(self) -> dt.datetime:
        return max(s.ts + dt.timedelta(milliseconds=s.duration_ms or 0) for s in self.steps)


def trace(lake: Lake, trace_id: str, *, raw: bool = False) -> Trace:
    """The trace ``trace_id`` (32 hex digits) as the lake holds it; :class:`NoData` when no table does.

    ``raw`` reads the raw lines too: the ODS lines of the steps and those of the quarantine.
    """
    wanted = trace_id.strip().lower()
    if not _TRACE_ID.match(wanted):
        raise InputError(f"{trace_id!r} is no trace id: a trace id is 32 hex digits (W3C trace context)")
    con = lake_reader(lake.settings)
    searched = tuple(t.name for t in (DWD_REQUEST, DWD_SPAN, DWD_QUARANTINE) if lake.exists(t))
    calls = _rows(con, lake, DWD_REQUEST, f"trace_id = '{wanted}'")
    spans = _rows(con, lake, DWD_SPAN, f"trace_id = '{wanted}'")
    steps = _ordered([_call(row) for row in calls] + [_span(row) for row in spans])
    dates = sorted({s.event_date for s in steps})
    quarantined = _quarantined(con, lake, wanted, dates, raw=raw)
    if not steps and not quarantined:
        tables = ", ".join(searched[:-1]) + f" or {searched[-1]}" if len(searched) > 1 else "".join(searched)
        raise NoData(f"trace {wanted}: no row in {tables or 'the lake (no DWD table built yet)'}, on any date")
    request_ids = sorted({s.id for s in steps if s.table == DWD_REQUEST.name})
    feedback = _feedback(con, lake, request_ids, dates[0]) if request_ids else []
    lines = _raw_lines(con, lake, steps) if raw else {}
    return Trace(wanted, steps, quarantined, feedback, lines, searched)


def _rows(
    con: duckdb.DuckDBPyConnection, lake: Lake, table: Table, where: str, *, leave: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """``table``'s rows matching ``where`` as dicts, less the columns to ``leave``; none when the table does not
    exist. Every column is asked for (DuckDB reads the others only for the rows found): a column a table
    written before its contract added it lacks is missing from the dicts. Values are written into ``where`` as
    literals (:func:`~warehouse.storage.lake.sql_literal`): a query with parameters makes DuckDB import pandas,
    a third of a second of the command's start."""
    if not lake.exists(table):
        return []
    left = f" EXCLUDE ({', '.join(leave)})" if leave else ""
    cursor = con.execute(f"SELECT *{left} FROM delta_scan('{lake.uri(table)}') WHERE {where}")
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _listed(values: Sequence[object]) -> str:
    """``values`` as a list of SQL literals, for ``IN (…)``."""
    return ", ".join(sql_literal(v) for v in values)


def _call(row: dict[str, Any]) -> Step:
    stages = tuple((s, row[f"{s}_ms"]) for s in STAGES if row.get(f"{s}_ms") is not None)
    if row["is_error"]:
        status = " ".join(str(v) for v in (row["status_code"], row["error_type"]) if v is not None) or "error"
    else:
        status = "ok"
    return Step(
        DWD_REQUEST.name,
        row["request_id"],
        row.get("span_id"),  # partitions built before dwd.request 2.2.0 have no span columns
        row.get("parent_span_id"),
        " ".join(v for v in (row["operation"], row["model"]) if v),
        row["server"],
        row["ts"],
        row["duration_ms"],
        stages,
        status,
        row["event_date"],
        row["source_file"],
        row["line_no"],
        0,
        row["attempt"],
        (row["input_tokens"], row["output_tokens"]),
    )


def _span(row: dict[str, Any]) -> Step:
    return Step(
        DWD_SPAN.name,
        row["span_id"],
        row["span_id"],
        row["parent_span_id"],
        row["name"] or "(no name)",
        row["service"],
        row["ts"],
        row["duration_ms"],
        (),
        row["status"],
        row["event_date"],
        row["source_file"],
        row["line_no"],
        0,
    )


def _ordered(steps: list[Step]) -> list[Step]:
    """``steps`` depth first: the roots, each followed by its children, each level in time order.

    A step whose parent is in neither table is a root marked ``orphan``; a cycle of parents (a hostile
    log) is broken where it is met.
    """
    by_span = {s.span_id: s for s in steps if s.span_id is not None}
    children: dict[str, list[Step]] = {}
    roots: list[Step] = []
    seen_roots: set[int] = set()
    for step in steps:
        parent = step.parent_span_id
        if parent is not None and parent in by_span and parent != step.span_id:
            children.setdefault(parent, []).append(step)
        else:
            roots.append(step if parent is None else _with(step, orphan=True))
            seen_roots.add(id(step))

    def when(step: Step) -> tuple[dt.datetime, str]:
        return step.ts, step.id

    out: list[Step] = []
    seen: set[int] = set()

    def walk(step: Step, depth: int) -> None:
        seen.add(id(step))
        out.append(_with(step, depth=depth))
        for child in sorted(children.get(step.span_id or "", []), key=when):
            if id(child) not in seen:
                walk(child, depth + 1)

    for root in sorted(roots, key=when):
        walk(root, 0)
    for step in sorted(steps, key=when):  # steps left in a cycle of parents: each shown as a root
        if id(step) not in seen and id(step) not in seen_roots:
            walk(_with(step, orphan=True), 0)
    return out


def _with(step: Step, **changes: Any) -> Step:
    return dataclasses.replace(step, **changes)


def _quarantined(
    con: duckdb.DuckDBPyConnection, lake: Lake, trace_id: str, dates: list[dt.date], *, raw: bool
) -> list[Quarantined]:
    """The quarantined lines (meant for ``dwd.request`` or ``dwd.span``) that hold ``trace_id``, on ``dates``
    and the days beside them (on every date when there are none)."""
    where = (
        f"target_table IN ({_listed([DWD_REQUEST.name, DWD_SPAN.name])}) "
        f"AND contains(lower(raw_line::VARCHAR), '{trace_id}')"
    )
    if dates:
        low, high = dates[0] - _QUARANTINE_DAYS, dates[-1] + _QUARANTINE_DAYS
        where += f" AND event_date BETWEEN {sql_literal(low)} AND {sql_literal(high)}"
    rows = _rows(con, lake, DWD_QUARANTINE, where, leave=[] if raw else ["raw_line"])
    found = [
        Quarantined(
            r["target_table"],
            r["event_date"],
            r["request_id"],
            tuple(r["rules"] or ()),
            r["source_file"],
            r["line_no"],
            r.get("raw_line"),
        )
        for r in rows
    ]
    return sorted(found, key=lambda q: (q.event_date, q.source_file, q.line_no, q.target_table))


def _feedback(con: duckdb.DuckDBPyConnection, lake: Lake, request_ids: list[str], first: dt.date) -> list[Feedback]:
    """The feedback events on ``request_ids``, given on ``first`` or later (feedback follows its call)."""
    where = f"event_date >= {sql_literal(first)} AND request_id IN ({_listed(request_ids)})"
    rows = _rows(con, lake, DWD_FEEDBACK, where)
    found = (Feedback(r["request_id"], r["ts"], r["kind"], r["value"], r["source"]) for r in rows)
    return sorted(found, key=lambda f: (f.ts, f.request_id))


def _raw_lines(con: duckdb.DuckDBPyConnection, lake: Lake, steps: list[Step]) -> dict[tuple[str, int], bytes]:
    """The ODS line each step came from, by (file, line number). A line is filed under its own date, which
    is its first record's: a line across midnight (an export batch) lies under the day before."""
    wanted = {(s.source_file, s.line_no) for s in steps}
    files = sorted({f for f, _ in wanted})
    dates = sorted({s.event_date for s in steps})
    numbers = sorted({n for _, n in wanted})
    where = (
        f"event_date BETWEEN {sql_literal(dates[0] - dt.timedelta(days=1))} AND {sql_literal(dates[-1])} "
        f"AND source_file IN ({_listed(files)}) AND line_no IN ({_listed(numbers)})"
    )
    rows = _rows(con, lake, ODS_REQUESTS, where)
    return {(r["source_file"], r["line_no"]): r["raw_line"] for r in rows if (r["source_file"], r["line_no"]) in wanted}
