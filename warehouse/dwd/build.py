"""DWD: one clean, typed, deduplicated, pseudonymized row per request, per event date.

A build of date D reads every ODS row whose ``event_date`` is D, whenever it arrived
(so late data is picked up by re-running D), and the lines of D - 1 whose ``event_dates``
lists D (an OTLP batch across midnight: each build takes the line's records of its own
date, so every span lands once), and replaces D's partition of
``dwd.request`` / ``dwd.feedback``. Nothing is dropped silently: malformed lines and
rows that break the contract go to ``dwd.quarantine`` with their rule ids and raw
line, and the books must balance before anything is published::

    ods records = dwd rows + duplicates + quarantined + malformed

(a record is an ODS line, or one span of an OTLP line; the books of D count D's records).
"""

from __future__ import annotations

import datetime as dt
import logging

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.dwd.labels import latest_labels, merge_labels
from warehouse.errors import NoData
from warehouse.dwd.prices import read_prices
from warehouse.dwd.transform import TARGETS, DwdTransform, RequestInputs, key_columns, repeats
from warehouse.ods import ODS_TABLES
from warehouse.ods.scan import (borrowed_arrivals, borrowed_files, ods_batches, ods_files, ods_row_count,
                                read_columns)
from warehouse.progress import Progress
from warehouse.runner import RunResult, claim, run
from warehouse.settings import Settings
from warehouse.sources.canonical import Kind
from warehouse.sources.formats import parser_for
from warehouse.storage import lake
from warehouse.tables import DWD_FEEDBACK, DWD_MODEL_PRICE

log = logging.getLogger(f"strata.{__name__}")


def build(settings: Settings, kind: Kind, day: dt.date, progress: Progress | None = None) -> RunResult:
    """Build one event date of ``dwd.request`` or ``dwd.feedback`` from ODS (idempotent).

    Streams the day's ODS rows batch by batch: memory stays bounded however large the day.
    """
    from contracts.audit_worker import warm_up

    key = settings.require_pseudonym_key() if kind == "requests" else b""
    warm_up()  # GX imports in its worker while this process reads ODS keys (one core is idle then)
    target, ods_table = TARGETS[kind], ODS_TABLES[kind]
    reads = [ods_table, DWD_FEEDBACK, DWD_MODEL_PRICE] if kind == "requests" else [ods_table]
    with claim(settings, target, day, reads=reads):
        return _build(settings, kind, day, key, progress)


def _build(settings: Settings, kind: Kind, day: dt.date, key: bytes, progress: Progress | None) -> RunResult:
    ods_table = ODS_TABLES[kind]
    delta = lake.open_table(settings, ods_table)
    if delta is None:
        raise FileNotFoundError(f"{ods_table} does not exist: run `strata ingest` first")
    own = delta.to_pyarrow_dataset().to_table(columns=["ingested_at"], filter=pc.field("event_date") == day).column(0)
    borrowed = borrowed_files(settings, kind, day)
    arrivals = pa.concat_arrays([own.combine_chunks(), borrowed_arrivals(settings, borrowed, day).to_arrow()])
    if len(arrivals) == 0:
        raise LookupError(f"no ODS {kind} rows with event_date {day}: nothing to build "
                          f"(check the date, or ingest that day's files first)")
    files = ods_files(settings, kind, day)
    requests = None
    if kind == "requests":
        requests = RequestInputs(key, read_prices(settings), latest_labels(settings))
    transform = DwdTransform(
        kind, day, lambda source, kind: parser_for(settings, source, kind, checked_ok=True),
        repeats=repeats(read_columns(settings, files, key_columns(kind)), kind), now=pc.max(arrivals).as_py(),
        requests=requests, floor=settings.ts_floor)
    log.info("%s %s: %s ODS records from %d file(s)", transform.target.name, day, f"{len(arrivals):,}", len(files))
    result = run(settings, transform.target, transform, ods_batches(settings, files, day, borrowed), day=day,
                 total=len(arrivals), progress=progress, now=transform.now)
    if result.rules:
        log.info("%s %s: quarantined %s", result.table.name, day,
                 ", ".join(f"{n:,} {rule}" for rule, n in sorted(result.rules.items())))
    return result


def build_day(settings: Settings, day: dt.date, progress: Progress | None = None) -> dict[Kind, RunResult]:
    """Build D's feedback (merging its labels into earlier requests), then D's requests.

    A day may hold only feedback (reviews arrive after the traffic they judge). The
    configuration is checked before anything is read or written.
    """
    settings.require_pseudonym_key()
    counts = {kind: ods_row_count(settings, kind, day) for kind in ODS_TABLES}
    if not any(counts.values()):
        raise NoData(f"no ODS rows with event_date {day}: nothing to build "
                          f"(check the date, or ingest that day's files first)")
    reports: dict[Kind, RunResult] = {}
    if counts["feedback"]:
        reports["feedback"] = build(settings, "feedback", day, progress)
        merged = merge_labels(settings, day)
        log.info("%s: labels of %s earlier request(s) merged into dwd.request", day, f"{merged:,}")
    if counts["requests"]:
        reports["requests"] = build(settings, "requests", day, progress)
    return reports
