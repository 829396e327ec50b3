"""DWD: one clean, typed, deduplicated, pseudonymized row per request, per event date.

A build of date D reads every ODS row whose ``event_date`` is D, whenever it arrived
(so late data is picked up by re-running D), and replaces D's partition of
``dwd.request`` / ``dwd.feedback``. Nothing is dropped silently: malformed lines and
rows that break the contract go to ``dwd.quarantine`` with their rule ids and raw
line, and the books must balance before anything is published::

    ods records = dwd rows + duplicates + quarantined + malformed

(a record is an ODS line, or one span of an OTLP line).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Callable, Iterator

import polars as pl
import pyarrow.compute as pc

from strata.config import Settings
from warehouse import lake
from warehouse.books import Books, record_books
from warehouse.labels import FEEDBACK, REQUEST, latest_labels, merge_labels
from warehouse.memory import detach
from warehouse.ods import TABLES as ODS_TABLES
from warehouse.ods_scan import ods_batches, ods_files, ods_row_count, repeated_lines
from warehouse.privacy import pseudonymize
from warehouse.publish import InvariantFailure, PublishResult, Tally, keeps_every_row, publish
from warehouse.sources.canonical import Kind, fields_for
from warehouse.sources.formats import parser_for
from warehouse.sources.timestamps import parse_ts

QUARANTINE = "dwd.quarantine"
TARGETS: dict[Kind, str] = {"requests": REQUEST, "feedback": FEEDBACK}
_LINEAGE = ["ods_source", "source_file", "line_no", "batch_id"]
_MALFORMED_RULES = [
    (r"^oversized", "line.oversized"), (r"^invalid UTF-8", "line.invalid_utf8"),
    (r"^invalid JSON", "line.invalid_json"), (r"^not a JSON object", "line.not_object"),
    (r"^CSV header", "line.csv_header"), (r"CSV fields", "line.csv_fields"),
    (r"^not an OTLP", "line.not_otlp"), (r"^no GenAI spans", "line.no_genai_spans"),
    (r"^invalid span", "line.invalid_span"),
]


@dataclass(frozen=True)
class BuildReport:
    """The outcome of one DWD build."""

    books: Books
    version: int | None
    rules: dict[str, int]
    #: Published requests with no price in effect at their time (their ``cost_usd`` is null).
    unpriced: int = 0


def malformed_rule(parse_error: pl.Expr) -> pl.Expr:
    """Rule id of a line that did not parse, from its ODS ``parse_error``."""
    expr = pl.lit("line.unparseable")
    for pattern, rule in reversed(_MALFORMED_RULES):
        expr = pl.when(parse_error.str.contains(pattern)).then(pl.lit(rule)).otherwise(expr)
    return expr


def parse_rows(settings: Settings, ods: pl.DataFrame, kind: Kind) -> pl.DataFrame:
    """Records of ODS rows: canonical fields (text) beside their lineage and raw line.

    A line holds one record, except in formats that batch (an OTLP line holds many spans).
    """
    columns = ["raw_line", "ingested_at", *_LINEAGE, "ods_parse_error", "parse_error", "_repeat", "_ods_keyed",
               *fields_for(kind)]
    parts = []
    for (source, malformed), group in ods.group_by(["source", "is_malformed"], maintain_order=True):
        if malformed:  # ODS already said why the line does not parse
            parsed = pl.DataFrame({f: pl.Series([None] * group.height, dtype=pl.String)
                                   for f in ("parse_error", *fields_for(kind))})
        else:
            parse = parser_for(settings, str(source), kind, checked_ok=True)
            parsed = parse(group.get_column("raw_line").to_arrow(), group.get_column("line_no").to_arrow(),
                           group.get_column("file_sha256").to_arrow())
        lineage = group.select(["raw_line", "ingested_at", "source", *_LINEAGE[1:], "parse_error", "request_id",
                                pl.col("_repeat") if "_repeat" in group.columns else pl.lit(False).alias("_repeat")]
                               ).rename({"parse_error": "ods_parse_error", "source": "ods_source",
                                         "request_id": "ods_request_id"})
        if "_line" in parsed.columns:  # several records per line
            joined = parsed.join(lineage.with_columns(_line=pl.int_range(pl.len(), dtype=pl.Int64)),
                                 on="_line", how="left", maintain_order="left").drop("_line")
        else:
            joined = pl.concat([lineage, parsed], how="horizontal")
        parts.append(joined.with_columns(request_id=pl.coalesce("request_id", "ods_request_id"),
                                         _ods_keyed=pl.col("ods_request_id").is_not_null()).select(columns))
    if not parts:
        types = {"raw_line": pl.Binary, "_repeat": pl.Boolean, "_ods_keyed": pl.Boolean}
        return pl.DataFrame(schema={c: types.get(c, pl.String) for c in columns})
    return pl.concat(parts).select(columns)


def _ts_columns(frame: pl.DataFrame) -> pl.DataFrame:
    parsed = frame.select(parse_ts(pl.col("ts"))).to_series()  # parsed once: it is the costly part
    return frame.with_columns(_ts_type_error=pl.col("ts").is_not_null() & parsed.is_null(), ts=parsed)


def _request_columns(frame: pl.DataFrame, key: bytes, prices: pl.DataFrame, labels: pl.DataFrame,
                     day: dt.date, known: dict[str, str]) -> pl.DataFrame:
    from warehouse.prices import with_cost

    typed = _ts_columns(frame).with_columns(
        user_pseudonym=pseudonymize(frame.get_column("user_id"), key, known),
        event_date=pl.lit(day),
        is_error=(pl.col("status_code").cast(pl.Int64, strict=False) >= 400).fill_null(False)
        | pl.col("error_type").is_not_null(),
        is_retry=pl.col("retry_of").is_not_null()
        | (pl.col("attempt").cast(pl.Int64, strict=False) > 1).fill_null(False),
        attempt=pl.col("attempt").fill_null("1"),
    ).drop("user_id")
    # Joined on the key alone, then put beside the (wide) frame: no copy of every column.
    labelled = typed.select("request_id").join(labels, on="request_id", how="left", maintain_order="left")
    return with_cost(typed, prices).with_columns(labelled.drop("request_id"))


def _quarantine_rows(rows: pl.DataFrame, rules: pl.Expr, target: str, day: dt.date) -> pl.DataFrame:
    return rows.select(
        event_date=pl.lit(day), target_table=pl.lit(target),
        request_id=pl.col("request_id") if "request_id" in rows.columns else pl.lit(None, pl.String),
        rules=rules, raw_line=pl.col("raw_line"), source_file=pl.col("source_file"),
        line_no=pl.col("line_no"), batch_id=pl.col("batch_id"),
        quarantined_at=pl.col("ingested_at"),
    )


Progress = Callable[[str, int, int], None]
"""(what, ODS rows done, ODS rows in all) after each batch of a build."""


def build(settings: Settings, kind: Kind, day: dt.date, progress: Progress | None = None) -> BuildReport:
    """Build one event date of ``dwd.request`` or ``dwd.feedback`` from ODS (idempotent).

    Streams the day's ODS rows batch by batch: memory stays bounded however large the day.
    """
    from contracts.audit_worker import warm_up

    warm_up()  # GX imports in its worker while this process reads ODS keys (one core is idle then)
    target = TARGETS[kind]
    ods_table = ODS_TABLES[kind]
    delta = lake.open_table(settings, ods_table)
    if delta is None:
        raise FileNotFoundError(f"{ods_table} does not exist: run `strata ingest` first")
    in_day = pc.field("event_date") == day
    arrivals = delta.to_pyarrow_dataset().to_table(columns=["ingested_at"], filter=in_day).column(0)
    if len(arrivals) == 0:
        raise LookupError(f"no ODS {kind} rows with event_date {day}: nothing to build "
                          f"(check the date, or ingest that day's files first)")
    now = pc.max(arrivals).as_py()
    files = ods_files(settings, kind, day)
    repeats = repeated_lines(files, kind)
    if kind == "requests":
        from warehouse.prices import read_prices

        key, prices, labels = settings.require_pseudonym_key(), read_prices(settings), latest_labels(settings)
    state = {"records": 0, "duplicates": 0, "malformed": 0, "type_errors": 0}
    pseudonyms: dict[str, str] = {}
    set_aside: list[pl.DataFrame] = []
    seen = pl.Series("seen", [], pl.String)

    def records() -> Iterator[pl.DataFrame]:
        nonlocal seen
        done = 0
        for ods in ods_batches(files, day):
            done += ods.height
            if progress:
                progress(target, done, len(arrivals))
            repeat = ods.select("file_sha256", "line_no").join(
                repeats.with_columns(_repeat=pl.lit(True)), on=["file_sha256", "line_no"], how="left",
                maintain_order="left").get_column("_repeat").fill_null(False)
            parsed = parse_rows(settings, ods.with_columns(repeat), kind)
            state["records"] += parsed.height
            bad = pl.col("ods_parse_error").is_not_null() | pl.col("parse_error").is_not_null()
            malformed = parsed.filter(bad)
            state["malformed"] += malformed.height
            set_aside.append(detach(_quarantine_rows(
                malformed, pl.concat_list(malformed_rule(pl.coalesce("ods_parse_error", "parse_error"))), target, day)))
            good = parsed.filter(~bad)
            ident = (pl.col("request_id") if kind == "requests"
                     else pl.concat_str(["request_id", "kind", "ts", "value"], separator="\x1f", ignore_nulls=True))
            # Repeats of an earlier arrival were found in the first pass; a key the first pass
            # could not see (an OTLP line holds several spans) is deduplicated as it streams by.
            good = good.with_columns(_key=ident).with_columns(_first=pl.when(pl.col("_repeat")).then(False).when(
                pl.col("_key").is_null() | pl.col("_ods_keyed")).then(True).otherwise(
                pl.col("_key").is_first_distinct() & ~pl.col("_key").is_in(seen.implode())))
            state["duplicates"] += int((~good.get_column("_first")).sum())
            streamed = good.filter(~pl.col("_ods_keyed") & pl.col("_first")).get_column("_key").drop_nulls()
            if streamed.len():
                seen = pl.concat([seen, detach(streamed.rename("seen"))]).rechunk()
            unique = good.filter(pl.col("_first")).drop(
                "_first", "_key", "_repeat", "_ods_keyed", "ods_parse_error", "parse_error")
            if kind == "requests":
                typed = _request_columns(unique.rename({"ods_source": "source"}), key, prices, labels, day,
                                         pseudonyms)
            else:
                typed = _ts_columns(unique.drop("ods_source")).with_columns(event_date=pl.lit(day))
            # A timestamp present but not canonical breaks ts.type (the row checks would see it as missing).
            type_errors = typed.filter(pl.col("_ts_type_error"))
            state["type_errors"] += type_errors.height
            set_aside.append(detach(_quarantine_rows(type_errors, pl.concat_list(pl.lit("ts.type")), target, day)))
            yield typed.filter(~pl.col("_ts_type_error")).drop("_ts_type_error")

    books_holder: dict[str, Books] = {}

    def books_balance(tally: Tally) -> InvariantFailure | None:
        books = Books(target, day, state["records"], tally.rows_published, state["duplicates"],
                      tally.rows_rejected + state["type_errors"], state["malformed"])
        books_holder["books"] = books
        if books.balanced:
            return None
        return InvariantFailure("books.balance", f"ODS {books.ods_rows} ≠ DWD {books.dwd_rows} + duplicates "
                                f"{books.duplicates} + quarantined {books.quarantined} + malformed {books.malformed}")

    result: PublishResult = publish(
        settings, target, records(), partitions=[{"event_date": day}], invariants=[books_balance],
        keep=["raw_line", "ingested_at"], now=now,
    )
    if result.rejected.height:
        set_aside.append(_quarantine_rows(result.rejected, pl.col("rules"), target, day))
    quarantine = pl.concat(set_aside, how="vertical_relaxed")
    # The quarantine is where refused rows go, so no expectation gate may refuse it in turn:
    # its rows are still conformed and checked against its contract.
    publish(settings, QUARANTINE, quarantine, partitions=[{"event_date": day, "target_table": target}],
            expectations=False, invariants=[keeps_every_row("quarantine.keeps_every_row")])
    books = books_holder["books"]
    record_books(settings, books)
    counts = quarantine.get_column("rules").explode().value_counts()
    unpriced = 0 if kind != "requests" else lake.read(
        settings, target, columns=["cost_usd"], filters=[("event_date", "=", day)]).column(0).null_count
    return BuildReport(books, result.version, dict(zip(counts[:, 0].to_list(), counts[:, 1].to_list())), unpriced)


def build_day(settings: Settings, day: dt.date, progress: Progress | None = None) -> dict[Kind, BuildReport]:
    """Build D's feedback (merging its labels into earlier requests), then D's requests.

    A day may hold only feedback (reviews arrive after the traffic they judge).
    """
    counts = {kind: ods_row_count(settings, kind, day) for kind in TARGETS}
    if not any(counts.values()):
        raise LookupError(f"no ODS rows with event_date {day}: nothing to build "
                          f"(check the date, or ingest that day's files first)")
    reports: dict[Kind, BuildReport] = {}
    if counts["feedback"]:
        reports["feedback"] = build(settings, "feedback", day, progress)
        merge_labels(settings, day)
    if counts["requests"]:
        reports["requests"] = build(settings, "requests", day, progress)
    return reports
