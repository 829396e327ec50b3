"""ODS rows of a file's lines: raw bytes, lineage, lenient keys, the malformed flag. Pure.

``event_date`` comes from the line's own timestamp when it is plausible (not before the
configured floor, not more than a day after arrival); otherwise from a date in the file's
path, else the most common date of the lines around it, else the arrival date — so an
impossible timestamp never sends a line to a partition nobody builds (DWD then
quarantines it with the rule it breaks).

A line holding records of several dates (an OTLP batch across UTC midnight) is one row,
byte-exact, dated by its earliest record; ``event_dates`` lists its records' dates (that
one and the next), and the DWD build of each date listed takes the line's records of that
date. A record dated further off stays with the line's date (quarantined there as
``ts.event_date``), so a build of D reads only the partitions D and D - 1.

A trace-only line (an OTLP export holding no GenAI span: a workflow's parent span sent alone)
parses: it is not malformed, and DWD counts it in the books as trace-only.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.sources import files as landed
from warehouse.sources.otlp import TRACE_ONLY
from warehouse.sources.timestamps import parse_ts

#: Lenient request id of a line that does not parse (truncated, bad bytes elsewhere).
_REQUEST_ID = r'"request_id"\s*:\s*"(?P<request_id>[^"\\]{1,256})"'
#: The default earliest plausible time (``STRATA_TS_FLOOR``).
FLOOR = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def salvage_request_ids(raw: pa.Array, parsed: pl.DataFrame) -> pl.Series:
    """Parsed request ids, plus those found by pattern in lines that did not parse."""
    ids = parsed.get_column("request_id").clone()
    lost = np.flatnonzero((ids.is_null() & parsed.get_column("parse_error").is_not_null()).to_numpy())
    if len(lost):
        found = pc.struct_field(pc.extract_regex(raw.take(pa.array(lost)), _REQUEST_ID), 0).to_pylist()
        texts = [v.decode("utf-8", "replace") if v is not None else None for v in found]
        ids = ids.scatter(lost, pl.Series(texts, dtype=pl.String))
    return ids


def per_line(parsed: pl.DataFrame, lines: int) -> pl.DataFrame:
    """One parse row per line: formats that batch records per line (OTLP) keep the first
    record's time and error, every record's time (``_record_ts``, for the line's dates), and
    a request id only when the line holds a single record."""
    if "_line" not in parsed.columns:
        return parsed
    reduced = parsed.group_by("_line").agg(
        pl.when(pl.len() == 1).then(pl.col("request_id").first()).alias("request_id"),
        pl.col("ts").first(),
        pl.col("parse_error").first(),
        pl.col("ts").alias("_record_ts"),
    )
    return (
        pl.DataFrame({"_line": pl.int_range(lines, dtype=pl.Int64, eager=True)})
        .join(reduced, on="_line", how="left")
        .sort("_line")
    )


def trace_only(parsed: pl.DataFrame) -> pl.Series:
    """Which parse rows are trace-only lines (an OTLP export of no GenAI span): they parse, and hold no
    request, so they are not malformed."""
    return (parsed.get_column("parse_error") == TRACE_ONLY).fill_null(False)


def ods_frame(
    raw: pa.Array,
    parsed: pl.DataFrame,
    *,
    source: str,
    file: landed.LandedFile,
    ingested_at: dt.datetime,
    batch_id: str,
    first_line: int = 1,
    floor: dt.datetime = FLOOR,
) -> pl.DataFrame:
    """ODS rows of (a chunk of) one file: raw bytes, lineage, lenient keys, the malformed flag."""
    latest = ingested_at + dt.timedelta(days=1)
    parsed_ts = parsed.select(parse_ts(pl.col("ts"))).to_series()  # parsed once: it is the costly part
    event_ts = parsed_ts.set(~parsed_ts.is_between(floor, latest).fill_null(False), None)
    dates = None  # only formats with several records a line have the column (the contract fills it)
    if "_record_ts" in parsed.columns:
        event_ts, dates = _line_dates(parsed.get_column("_record_ts"), event_ts, floor, latest)
    fallback = _fallback_date(file, event_ts, ingested_at)
    parsed = parsed.with_columns(parsed.get_column("parse_error").set(trace_only(parsed), None))  # no error
    n = len(raw)
    request_id = salvage_request_ids(raw, parsed)
    frame = pl.DataFrame({"raw_line": pl.Series(raw, dtype=pl.Binary)}).with_columns(
        source=pl.lit(source),
        source_file=pl.lit(str(file.path)),
        file_sha256=pl.lit(file.sha256),
        line_no=pl.Series(np.arange(first_line, first_line + n, dtype=np.int64)),
        ingested_at=pl.lit(ingested_at).dt.cast_time_unit("us"),
        batch_id=pl.lit(batch_id),
        request_id=request_id,
        event_ts=event_ts,
        event_date=event_ts.dt.date().fill_null(fallback),
        is_malformed=parsed.get_column("parse_error").is_not_null(),
        parse_error=parsed.get_column("parse_error"),
    )
    return frame if dates is None else frame.with_columns(dates)


def record_dates(rows: pl.DataFrame) -> set[dt.date]:
    """The dates whose DWD holds records of these ODS rows: their ``event_date`` and, for a line
    of two dates, the other one (``event_dates``)."""
    dates = set(rows.get_column("event_date").unique().to_list())
    if "event_dates" in rows.columns:
        dates |= set(rows.get_column("event_dates").explode().drop_nulls().unique().to_list())
    return dates


def _line_dates(
    record_ts: pl.Series, event_ts: pl.Series, floor: dt.datetime, latest: dt.datetime
) -> tuple[pl.Series, pl.Series]:
    """Per line of several records: the earliest plausible record time (its event time), and
    the dates of its records, that date and the next, when they are two (else null)."""
    records = pl.DataFrame({"_i": pl.int_range(len(record_ts), dtype=pl.Int64, eager=True), "ts": record_ts}).explode(
        "ts"
    )
    records = records.with_columns(ts=parse_ts(pl.col("ts"))).filter(pl.col("ts").is_between(floor, latest))
    next_day = pl.col("ts").min().over("_i").dt.date() + pl.duration(days=1)
    per_line = (
        records.filter(pl.col("ts").dt.date() <= next_day)
        .group_by("_i")
        .agg(first=pl.col("ts").min(), dates=pl.col("ts").dt.date().unique().sort())
    )
    lines = (
        pl.DataFrame({"_i": pl.int_range(len(record_ts), dtype=pl.Int64, eager=True)})
        .join(per_line, on="_i", how="left")
        .sort("_i")
    )
    first = lines.get_column("first").dt.cast_time_unit(event_ts.dtype.time_unit)  # type: ignore[attr-defined]
    dates = lines.select(pl.when(pl.col("dates").list.len() > 1).then(pl.col("dates"))).to_series()
    return first.fill_null(event_ts).rename(event_ts.name), dates.rename("event_dates")


def _fallback_date(file: landed.LandedFile, event_ts: pl.Series, ingested_at: dt.datetime) -> dt.date:
    """Event date of the lines without a plausible timestamp (a CSV header, a truncated line):
    the date in the file's path, else the most common date of the lines around them (the same
    chunk of the file), else the arrival day."""
    if file.path_date:
        return file.path_date
    dates = event_ts.drop_nulls().dt.date()
    return dates.mode().min() if dates.len() else ingested_at.date()  # type: ignore[return-value]
