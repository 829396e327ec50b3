"""DWD: one clean, typed, deduplicated, pseudonymized row per request, per event date.

A build of date D reads every ODS row whose ``event_date`` is D, whenever it arrived
(so late data is picked up by re-running D), and the lines of D - 1 whose ``event_dates``
lists D (an OTLP batch across midnight: each build takes the line's records of its own
date, so every span lands once), and replaces D's partition of
``dwd.request`` / ``dwd.feedback`` (and ``dwd.span``: the spans that are no call, from the
same pass, published after ``dwd.request`` with books of their own). Nothing is dropped silently: malformed lines and
rows that break the contract go to ``dwd.quarantine`` with their rule ids and raw
line, and the books must balance before anything is published::

    ods records = dwd rows + duplicates + quarantined + malformed + trace-only

(a record is an ODS line, or one span of an OTLP line; the books of D count D's records; a
trace-only record is an OTLP line holding no GenAI span, which stays in ODS).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from contracts.errors import InputError
from warehouse.dwd.labels import latest_labels, merge_labels
from warehouse.dwd.prices import read_prices
from warehouse.dwd.transform import TARGETS, DwdTransform, RequestInputs, key_columns, keyed_ids, repeats
from warehouse.errors import NoData
from warehouse.ods import ODS_TABLES
from warehouse.ods.scan import borrowed_arrivals, borrowed_files, ods_batches, ods_files, read_columns
from warehouse.ops.suppression import Suppression, suppressed_on
from warehouse.progress import Progress
from warehouse.runner import Batch, RunResult, claim, run
from warehouse.sources.canonical import Kind
from warehouse.sources.formats import parser_for
from warehouse.storage.lake import Lake
from warehouse.tables import (
    DWD_FEEDBACK,
    DWD_MODEL_PRICE,
    DWD_SPAN,
    OPS_BOOKS,
    OPS_FORGOTTEN_USERS,
    OPS_SUPPRESSED_RECORDS,
    Table,
)

log = logging.getLogger(f"strata.{__name__}")


def build(lake: Lake, kind: Kind, day: dt.date, progress: Progress | None = None) -> RunResult:
    """Build one event date of ``dwd.request`` or ``dwd.feedback`` from ODS (idempotent).

    Streams the day's ODS rows batch by batch: memory stays bounded however large the day.
    """
    result = _build_locked(lake, kind, day, progress, require=True)
    if result is None:
        raise NoData(
            f"no ODS {kind} rows with event_date {day}: nothing to build "
            f"(check the date, or ingest that day's files first)"
        )
    return result


def _build_locked(
    lake: Lake, kind: Kind, day: dt.date, progress: Progress | None, *, require: bool
) -> RunResult | None:
    """:func:`build` under the build's locks, taken once; None when ODS holds no such rows (or,
    unless ``require``, no such table)."""
    from contracts.audit_worker import warm_up

    key = lake.settings.require_pseudonym_key() if kind == "requests" else b""
    target, ods_table = TARGETS[kind], ODS_TABLES[kind]
    reads = [ods_table, DWD_FEEDBACK, DWD_MODEL_PRICE, OPS_FORGOTTEN_USERS] if kind == "requests" else [ods_table]
    reads.append(OPS_SUPPRESSED_RECORDS)
    with claim(lake, target, day, reads=reads, also=[DWD_SPAN] if kind == "requests" else []):
        ods = lake.open_table(ods_table)  # the build's one open of its ODS table, under its lock
        if ods is None and not require:
            return None
        if ods is None:
            raise InputError(f"{ods_table} does not exist: land files first", step="land")
        own = lake.dataset(ods).to_table(columns=["ingested_at"], filter=pc.field("event_date") == day).column(0)
        borrowed = borrowed_files(lake, ods, day)
        arrivals = pa.concat_arrays([own.combine_chunks(), borrowed_arrivals(lake, borrowed, day).to_arrow()])
        if len(arrivals) == 0:
            return None
        warm_up()  # GX imports in its worker while this process reads ODS keys (one core is idle then)
        files = ods_files(ods, day)
        keys, batches = read_columns(lake, files, key_columns(kind)), ods_batches(lake, files, day, borrowed)
        requests = RequestInputs(key, read_prices(lake), latest_labels(lake)) if kind == "requests" else None
        transform = DwdTransform(
            kind,
            day,
            lambda source, kind: parser_for(lake.settings, source, kind, checked_ok=True, spans=kind == "requests"),
            repeats=repeats(keys, kind),
            keyed=keyed_ids(keys, kind),
            now=pc.max(arrivals).as_py(),
            requests=requests,
            floor=lake.settings.ts_floor,
        )
        if kind == "requests":
            suppression = Suppression.load(lake)
            transform.forgotten = suppression.gone if suppression else None
        log.info(
            "%s %s: %s ODS records from %d file(s)", target.name, day, f"{len(arrivals):,}", len(files) + len(borrowed)
        )
        result = run(
            lake,
            transform.target,
            transform,
            batches,
            day=day,
            total=len(arrivals),
            progress=progress,
            now=transform.now,
            suppressed=suppressed_on(lake, ods_table, day),
        )
        made = transform.spans
        if kind == "requests" and (
            any(b.counts.records for b in made) or transform.spans_suppressed or _built(lake, DWD_SPAN, day)
        ):
            # the day's spans that are no call, now that the calls are published (a day of none, of a
            # source without spans, writes nothing unless a build of the day wrote some to replace)
            spans = run(
                lake,
                DWD_SPAN,
                _Replay(made),
                [batch.rows for batch in made],
                day=day,
                total=sum(batch.counts.records for batch in made),
                progress=progress,
                now=transform.now,
                suppressed=transform.spans_suppressed,
            )
            result = dataclasses.replace(result, spans=spans)
            log.info("%s %s: %s span(s) that are no call", DWD_SPAN.name, day, f"{spans.published:,}")
    if result.rules:
        log.info(
            "%s %s: quarantined %s",
            result.table.name,
            day,
            ", ".join(f"{n:,} {rule}" for rule, n in sorted(result.rules.items())),
        )
    return result


def _built(lake: Lake, table: Table, day: dt.date) -> bool:
    """Whether a build wrote ``table``'s partition of ``day`` (its books say so)."""
    books = lake.open_table(OPS_BOOKS)
    where = (pc.field("event_date") == day) & (pc.field("table_name") == table.name)
    return books is not None and lake.dataset(books).count_rows(filter=where) > 0


class _Replay:
    """The batches a transform already made, handed to the runner again in order (``dwd.span``'s, made
    while the build's one pass over ODS built ``dwd.request``)."""

    def __init__(self, batches: list[Batch]):
        self._batches = iter(batches)

    def __call__(self, _rows: pl.DataFrame, /) -> Batch:
        return next(self._batches)


#: Feedback first: its labels reach the requests built next.
_DAY_ORDER: tuple[Kind, ...] = ("feedback", "requests")


def build_day(lake: Lake, day: dt.date, progress: Progress | None = None) -> dict[Kind, RunResult]:
    """Build D's feedback (merging its labels into earlier requests), then D's requests, on one
    handle of the lake: each input table is opened once, each lock taken once.

    A day may hold only feedback (reviews arrive after the traffic they judge). The
    configuration is checked before anything is read or written.
    """
    lake.settings.require_pseudonym_key()
    reports: dict[Kind, RunResult] = {}
    for kind in _DAY_ORDER:
        result = _build_locked(lake, kind, day, progress, require=False)
        if result is None:
            continue
        reports[kind] = result
        if kind == "feedback":
            merged = merge_labels(lake, day)
            log.info("%s: labels of %s earlier request(s) merged into dwd.request", day, f"{merged:,}")
    if not reports:
        raise NoData(
            f"no ODS rows with event_date {day}: nothing to build (check the date, or ingest that day's files first)"
        )
    return reports
