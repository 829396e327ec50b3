"""The DWD transform: one batch of ODS rows → clean facts, quarantined rows and counts.

Pure: it reads no table. Everything it needs from the lake (parsers, prices, labels, the
repeated lines found in a first pass over the day's keys) is handed to it, so a few
hand-written batches test it whole. State kept across batches: the keys seen so far (a
record the first pass could not key, such as a span of an OTLP line, is deduplicated as it
streams by) and the pseudonyms computed so far.

For every record the transform decides exactly one fate, which keeps the books::

    records = published + duplicates + quarantined + malformed + trace-only

(a trace-only record is an OTLP line holding no GenAI span: it parses, and carries no request).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeAlias

import polars as pl

from contracts import Contract, split_rows
from contracts.rules import MaxLength, Pattern
from warehouse.dwd.prices import with_cost
from warehouse.ods.rows import FLOOR
from warehouse.privacy import pseudonymize, without_private
from warehouse.runner import Batch, Counts
from warehouse.sources.canonical import LINK_FIELDS, REQUEST_FIELDS, SPAN_FIELDS, Kind, fields_for
from warehouse.sources.dialects import LEVELS, PRECEDENCE
from warehouse.sources.formats import Parser
from warehouse.sources.otlp import CALL, SPAN, TRACE_ONLY
from warehouse.sources.timestamps import parse_ts
from warehouse.storage.memory import detach
from warehouse.tables import DWD_FEEDBACK, DWD_REQUEST, DWD_SPAN, Table

TARGETS: dict[Kind, Table] = {"requests": DWD_REQUEST, "feedback": DWD_FEEDBACK}
_LINEAGE = ["ods_source", "source_file", "line_no", "batch_id"]
#: What a record of requests carries beside its fields and links: whether it is a call or another span
#: (``_kind``), and the fields only another span has (a row of ``dwd.span``).
_SPAN_ONLY = ("_kind", *(f for f in SPAN_FIELDS if f not in REQUEST_FIELDS))
#: ODS ``parse_error`` text → rule id of a line that did not parse (:data:`UNPARSEABLE` when none matches).
MALFORMED_RULES = [
    (r"^oversized", "line.oversized"),
    (r"^invalid UTF-8", "line.invalid_utf8"),
    (r"^invalid JSON", "line.invalid_json"),
    (r"^not a JSON object", "line.not_object"),
    (r"^CSV header", "line.csv_header"),
    (r"CSV fields", "line.csv_fields"),
    (r"^not an OTLP", "line.not_otlp"),
    (r"^invalid span", "line.invalid_span"),
]
UNPARSEABLE = "line.unparseable"
#: The timestamp rules a contract cannot state: before ``STRATA_TS_FLOOR``, outside the day being built.
TS_FLOOR, TS_EVENT_DATE = "ts.floor", "ts.event_date"
#: A call names its model, unless it is a tool's or an agent's (which have none): a rule across two columns.
MODEL_REQUIRED = "model.required"
MODELLESS_OPERATIONS: tuple[str, ...] = ("execute_tool", "invoke_agent", "create_agent")
#: Columns outside the target's contract that a quarantined row needs (its other lineage
#: columns are the target's own).
_CARRIED = ["raw_line", "ingested_at"]
#: The rules of ``tenant_id`` the raw ``user_id`` is held to: what makes an id fit to be a key.
_ID_RULES = (MaxLength.name, Pattern.name)

#: A span's place among calls (:func:`linked`): its trace, the span (or its parent) and the operation.
_PLACE = ["trace_id", "_span", "operation"]
#: Places of calls published by earlier batches of a build, each with its call's key.
_LINKS = {**dict.fromkeys(_PLACE, pl.String), "_call": pl.String}


ParserFor: TypeAlias = Callable[[str, Kind], Parser]
"""(ODS ``source``, kind) → the parser of lines landed so (already passed ODS's line checks)."""


def malformed_rule(parse_error: pl.Expr) -> pl.Expr:
    """Rule id of a line that did not parse, from its ODS ``parse_error``."""
    expr = pl.lit(UNPARSEABLE)
    for pattern, rule in reversed(MALFORMED_RULES):
        expr = pl.when(parse_error.str.contains(pattern)).then(pl.lit(rule)).otherwise(expr)
    return expr


def parse_rows(ods: pl.DataFrame, kind: Kind, parser_for: ParserFor) -> pl.DataFrame:
    """Records of ODS rows: canonical fields (text) beside their lineage and raw line.

    A line holds one record, except in formats that batch (an OTLP line holds many spans).
    Requests keep their links (``LINK_FIELDS``, null where the source has none).
    """
    links = (*LINK_FIELDS, *_SPAN_ONLY) if kind == "requests" else ()
    columns = [
        "raw_line",
        "ingested_at",
        *_LINEAGE,
        "ods_parse_error",
        "parse_error",
        "_repeat",
        "_ods_keyed",
        "_line_date",
        "_line_dates",
        *fields_for(kind),
        *links,
    ]
    parts = []
    for (source, malformed), group in ods.group_by(["source", "is_malformed"], maintain_order=True):
        if malformed:  # ODS already said why the line does not parse
            parsed = pl.DataFrame(
                {f: pl.Series([None] * group.height, dtype=pl.String) for f in ("parse_error", *fields_for(kind))}
            )
        else:
            parse = parser_for(str(source), kind)
            parsed = parse(
                group.get_column("raw_line").to_arrow(),
                group.get_column("line_no").to_arrow(),
                group.get_column("file_sha256").to_arrow(),
            )
        parsed = parsed.with_columns(pl.lit(None, pl.String).alias(c) for c in links if c not in parsed.columns)
        if kind == "requests":  # a record of a format without spans is a call's
            parsed = parsed.with_columns(_kind=pl.col("_kind").fill_null(CALL))
        lineage = group.select(
            [
                "raw_line",
                "ingested_at",
                "source",
                *_LINEAGE[1:],
                "parse_error",
                "request_id",
                pl.col("_repeat") if "_repeat" in group.columns else pl.lit(False).alias("_repeat"),
                pl.col("event_date").alias("_line_date"),
                (pl.col("event_dates") if "event_dates" in group.columns else pl.lit(None, pl.List(pl.Date))).alias(
                    "_line_dates"
                ),
            ]
        ).rename({"parse_error": "ods_parse_error", "source": "ods_source", "request_id": "ods_request_id"})
        if "_line" in parsed.columns:  # several records per line
            joined = parsed.join(
                lineage.with_columns(_line=pl.int_range(pl.len(), dtype=pl.Int64)),
                on="_line",
                how="left",
                maintain_order="left",
            ).drop("_line")
        else:
            joined = pl.concat([lineage, parsed], how="horizontal")
        parts.append(
            joined.with_columns(
                request_id=pl.coalesce("request_id", "ods_request_id"),
                _ods_keyed=pl.col("ods_request_id").is_not_null(),
            ).select(columns)
        )
    if not parts:
        types: dict[str, pl.DataType | type[pl.DataType]] = {
            "raw_line": pl.Binary,
            "_repeat": pl.Boolean,
            "_ods_keyed": pl.Boolean,
            "_line_date": pl.Date,
            "_line_dates": pl.List(pl.Date),
        }
        return pl.DataFrame(schema={c: types.get(c, pl.String) for c in columns})
    return pl.concat(parts).select(columns)


def with_raw_user_id(contract: Contract) -> Contract:
    """``contract`` plus a ``user_id`` column held to ``tenant_id``'s length and character rules.

    The raw user id never reaches ``dwd.request`` (its pseudonym does), so no column there can
    state its rules; checked with the row's other rules before it is pseudonymized, a broken
    one quarantines the row as ``user_id.max_length`` / ``user_id.pattern``.
    """
    tenant = contract.column("tenant_id")
    user = dataclasses.replace(
        tenant,
        name="user_id",
        rules=tuple((name, value) for name, value in tenant.rules if name in _ID_RULES),
        description="The raw user id, before it is pseudonymized (checked, never written).",
    )
    return dataclasses.replace(contract, columns=(*contract.columns, user))


def quarantine_rows(rows: pl.DataFrame, rules: pl.Expr, target: Table, day: dt.date) -> pl.DataFrame:
    """Rows of ``dwd.quarantine`` for records meant for ``target`` on ``day``."""
    return rows.select(
        event_date=pl.lit(day),
        target_table=pl.lit(target.name),
        request_id=pl.col("request_id") if "request_id" in rows.columns else pl.lit(None, pl.String),
        rules=rules,
        raw_line=pl.col("raw_line"),
        source_file=pl.col("source_file"),
        line_no=pl.col("line_no"),
        batch_id=pl.col("batch_id"),
        quarantined_at=pl.col("ingested_at"),
    )


def key_columns(kind: Kind) -> list[str]:
    """The ODS columns :func:`repeats` reads: the key, the arrival order, the malformed flag."""
    return [
        "request_id",
        "ingested_at",
        "file_sha256",
        "line_no",
        "is_malformed",
        *(["raw_line"] if kind == "feedback" else []),
    ]


def keyed_ids(keys: pl.DataFrame, kind: Kind) -> pl.Series:
    """The request ids ODS keyed among the day's lines (requests; feedback is keyed whole lines only)."""
    if kind != "requests" or not keys.height:
        return pl.Series("seen", [], pl.String)
    keyed = keys.filter(~pl.col("is_malformed")).get_column("request_id").drop_nulls().unique()
    return detach(keyed.rename("seen"))


def repeats(keys: pl.DataFrame, kind: Kind) -> pl.DataFrame:
    """``(file_sha256, line_no)`` of ODS rows that repeat an earlier arrival's key.

    Arrival order is data, not file order: (ingested_at, file_sha256, line_no). The key is
    the request id for requests and the exact line for feedback (at-least-once delivery
    repeats lines).
    """
    if not keys.height:
        return pl.DataFrame(schema={"file_sha256": pl.String, "line_no": pl.Int64})
    keyed = keys.filter(~pl.col("is_malformed") & pl.col("request_id").is_not_null())
    if kind == "feedback":
        keyed = keyed.with_columns(
            request_id=pl.concat_str("request_id", pl.col("raw_line").hash(seed=0).cast(pl.String), separator="#")
        )
    ordered = keyed.select("request_id", "ingested_at", "file_sha256", "line_no").sort(
        ["ingested_at", "file_sha256", "line_no"]
    )
    return detach(ordered.filter(~pl.col("request_id").is_first_distinct()).select("file_sha256", "line_no"))


@dataclass(frozen=True)
class RequestInputs:
    """What typing requests needs from the lake: the pseudonym key, prices and labels."""

    key: bytes
    prices: pl.DataFrame
    labels: pl.DataFrame


@dataclass
class DwdTransform:
    """ODS rows of one kind and event date → a :class:`~warehouse.runner.Batch` for DWD."""

    kind: Kind
    day: dt.date
    parser_for: ParserFor
    #: ``(file_sha256, line_no)`` of lines whose key an earlier arrival already holds.
    repeats: pl.DataFrame
    #: Check time of the row rules (``ts.future``): the latest arrival of the day's lines.
    now: dt.datetime
    requests: RequestInputs | None = None
    #: The earliest plausible request time (``STRATA_TS_FLOOR``).
    floor: dt.datetime = FLOOR
    #: Request ids of the day's lines ODS keyed (one record a line): a record streamed from a line of
    #: several (an OTLP span) with one of them repeats that arrival, whatever format it came in.
    keyed: pl.Series = field(default_factory=lambda: pl.Series("seen", [], pl.String))
    #: (raw user ids, times) → which are of users on the suppression list from before their forget: the spans
    #: that are no call are checked here (an ingest checks calls only), and left out of ``dwd.span``.
    forgotten: Callable[[pl.Series, pl.Series], pl.Series] | None = None
    #: Spans that are no call left out so (the books of ``dwd.span`` count them as suppressed).
    spans_suppressed: int = 0
    _seen: pl.Series = field(default_factory=lambda: pl.Series("seen", [], pl.String))
    _spans: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=_LINKS))
    _parents: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=_LINKS))
    _pseudonyms: dict[str, str] = field(default_factory=dict)
    #: The keys (trace, span) of the spans that are no call kept so far, and their batches for ``dwd.span``.
    _span_keys: pl.Series = field(default_factory=lambda: pl.Series("seen", [], pl.String))
    spans: list[Batch] = field(default_factory=list)

    @property
    def target(self) -> Table:
        return TARGETS[self.kind]

    @cached_property
    def checked(self) -> Contract:
        """The contract the rows are checked with: the target's, plus the raw user id of requests."""
        contract = self.target.contract
        return with_raw_user_id(contract) if self.requests is not None else contract

    def __call__(self, ods: pl.DataFrame) -> Batch:
        repeat = (
            ods.select("file_sha256", "line_no")
            .join(
                self.repeats.with_columns(_repeat=pl.lit(True)),
                on=["file_sha256", "line_no"],
                how="left",
                maintain_order="left",
            )
            .get_column("_repeat")
            .fill_null(False)
        )
        records = self._own(parse_rows(ods.with_columns(repeat), self.kind, self.parser_for))
        if self.kind == "requests":  # the spans that are no call go to dwd.span; the books here count calls
            other = pl.col("_kind") == SPAN
            self.spans.append(self._span_batch(records.filter(other)))
            records = records.filter(~other).drop(*_SPAN_ONLY)
        parse_error = pl.coalesce("ods_parse_error", "parse_error")
        trace_only = (parse_error == TRACE_ONLY).fill_null(False)  # ODS marked it malformed before it knew better
        bad = parse_error.is_not_null() & ~trace_only
        malformed = records.filter(bad)
        unique, duplicates = self._deduplicated(records.filter(parse_error.is_null()))
        typed = self._typed(unique)
        rows, set_aside, quarantined = self._checked(
            typed, malformed, malformed_rule(parse_error), self.checked, self.target
        )
        incomplete = no_usage = 0
        if self.kind == "requests":  # a null cost: no price in effect, or no usage to price
            unpriced = rows.select(
                priced=pl.col("cost_usd").is_null() & pl.col("input_tokens").is_not_null(),
                no_usage=pl.col("cost_usd").is_null() & pl.col("input_tokens").is_null(),
            ).sum()
            incomplete, no_usage = unpriced.row(0)
        counts = Counts(
            records=records.height,
            duplicates=duplicates,
            malformed=malformed.height,
            quarantined=quarantined,
            trace_only=records.select(trace_only.sum()).item(),
            incomplete=incomplete,
            no_usage=no_usage,
        )
        return Batch(rows, set_aside, counts)

    def _span_batch(self, spans: pl.DataFrame) -> Batch:
        """Rows of ``dwd.span`` from a batch's spans that are no call: the first arrival of each (trace, span),
        typed, checked, pseudonymized and through the attribute policy; the rest set aside or counted."""
        if self.forgotten is not None and spans.height:
            gone = self.forgotten(spans.get_column("user_id"), spans.select(parse_ts(pl.col("ts"))).to_series())
            self.spans_suppressed += int(gone.sum())
            spans = spans.filter(~gone)
        bad = pl.col("parse_error").is_not_null()
        malformed = spans.filter(bad)
        key = pl.concat_str("trace_id", "span_id", separator="\x1f")
        good = spans.filter(~bad).with_columns(
            _first=key.is_null() | (key.is_first_distinct() & ~key.is_in(self._span_keys.implode()))
        )
        unique = good.filter("_first")
        kept = unique.select(key.alias("seen")).to_series().drop_nulls()
        if kept.len():
            self._span_keys = pl.concat([self._span_keys, detach(kept)]).rechunk()
        names = [c for c in DWD_SPAN.contract.column_names if c in SPAN_FIELDS]
        typed = _ts_columns(
            unique.select(
                *names,
                "user_id",
                *_CARRIED,
                source="ods_source",
                source_file="source_file",
                line_no="line_no",
                batch_id="batch_id",
            )
        ).with_columns(event_date=pl.lit(self.day))
        rows, set_aside, quarantined = self._checked(
            typed, malformed, malformed_rule(pl.col("parse_error")), self._span_contract, DWD_SPAN
        )
        counts = Counts(
            records=spans.height,
            duplicates=good.height - unique.height,
            malformed=malformed.height,
            quarantined=quarantined,
        )
        return Batch(detach(rows), detach(set_aside), counts)

    def _checked(
        self, typed: pl.DataFrame, malformed: pl.DataFrame, rule: pl.Expr, checked: Contract, table: Table
    ) -> tuple[pl.DataFrame, pl.DataFrame, int]:
        """A batch's typed rows through ``checked`` (``table``'s contract with the raw user id) and the
        timestamp rules a contract cannot state: (the rows to publish, pseudonymized; the rows set aside
        for the quarantine, ``malformed`` with its ``rule`` among them; how many typed rows were set aside)."""
        # A timestamp present but not canonical breaks ts.type (the row checks would see it as missing).
        ts_faults = typed.filter(pl.col("_ts_type_error"))
        split = split_rows(
            typed.filter(~pl.col("_ts_type_error")).drop("_ts_type_error"), checked, now=self.now, keep=_CARRIED
        )
        # Rules a contract cannot state: the configured floor, the row's own partition, a call's model.
        implausible = self._row_rules(table)
        valid = self._pseudonymized(split.valid, table.contract).with_columns(_ts_rules=implausible)
        rejected = pl.concat(
            [
                split.rejected.with_columns(rules=pl.concat_list("rules", implausible).list.unique().list.sort()),
                valid.filter(pl.col("_ts_rules").list.len() > 0).rename({"_ts_rules": "rules"}),
            ],
            how="diagonal_relaxed",
        )
        set_aside = pl.concat(
            [
                quarantine_rows(malformed, pl.concat_list(rule), table, self.day),
                quarantine_rows(ts_faults, pl.concat_list(pl.lit("ts.type")), table, self.day),
                quarantine_rows(rejected, pl.col("rules"), table, self.day),
            ],
            how="vertical_relaxed",
        )
        rows = valid.filter(pl.col("_ts_rules").list.len() == 0).drop(_CARRIED, "_ts_rules")
        return rows, set_aside, ts_faults.height + rejected.height

    @cached_property
    def _span_contract(self) -> Contract:
        """``dwd.span``'s contract plus the raw user id, checked as a call's is."""
        return with_raw_user_id(DWD_SPAN.contract)

    def _own(self, records: pl.DataFrame) -> pl.DataFrame:
        """The records that are this day's: a line listing several dates gives each record to
        its own date when listed, else to the line's date (see :mod:`warehouse.ods.rows`)."""
        several = records.get_column("_line_dates").is_not_null()
        if several.any():
            dated = records.filter(several)
            own = dated.select(parse_ts(pl.col("ts")).dt.date()).to_series()
            owner = dated.select(
                pl.when(pl.col("_line_dates").list.contains(own)).then(own).otherwise(pl.col("_line_date"))
            ).to_series()
            where = several.arg_true()
            keep = pl.Series([True] * records.height).scatter(where, (owner == self.day).fill_null(False))
            records = records.filter(keep)  # in arrival order: the first arrival of a key wins
        return records.drop("_line_date", "_line_dates")

    def _row_rules(self, table: Table) -> pl.Expr:
        """``ts.floor`` (before the earliest plausible time: a 1970 date, epoch seconds read as
        milliseconds), ``ts.event_date`` (outside the day being built) and, for a call, ``model.required``
        (no model, and not a tool's or an agent's operation), as a list per row."""
        ts = pl.col("ts")
        rules = [
            pl.when(ts < self.floor).then(pl.lit(TS_FLOOR)),
            pl.when(ts.dt.date() != self.day).then(pl.lit(TS_EVENT_DATE)),
        ]
        if table is DWD_REQUEST:
            modelless = pl.col("model").is_null() & ~pl.col("operation").is_in(MODELLESS_OPERATIONS)
            rules.append(pl.when(modelless).then(pl.lit(MODEL_REQUIRED)))
        return pl.concat_list(rules).list.drop_nulls().list.sort()

    def _deduplicated(self, good: pl.DataFrame) -> tuple[pl.DataFrame, int]:
        """The first arrival of each key, and how many repeats were dropped.

        Repeats of an earlier arrival were found in the first pass; a key the first pass
        could not see (an OTLP line holds several spans) is deduplicated as it streams by.
        A request's key is its call's (:func:`linked`): the spans of one call seen at several
        levels of a trace in this batch become one row (:func:`merged`).
        """
        ident = (
            pl.col("request_id")
            if self.kind == "requests"
            else pl.concat_str(["request_id", "kind", "ts", "value"], separator="\x1f", ignore_nulls=True)
        )
        good = good.with_columns(_key=ident)
        own_key = pl.col("_ods_keyed")  # a key the first pass saw: unless it became another call's
        if self.kind == "requests":
            good = linked(good, self._spans, self._parents)
            own_key = own_key & (pl.col("_key") == pl.col("request_id"))
        good = good.with_columns(
            _first=pl.when(pl.col("_repeat") | (pl.col("_earlier") if self.kind == "requests" else False))
            .then(False)
            .when(pl.col("_key").is_null() | own_key)
            .then(True)
            .otherwise(
                pl.col("_key").is_first_distinct()
                & ~pl.col("_key").is_in(self._seen.implode())
                & ~pl.col("_key").is_in(self.keyed.implode())
            )
        )
        streamed = good.filter(~pl.col("_ods_keyed") & pl.col("_first")).get_column("_key").drop_nulls()
        if streamed.len():
            self._seen = pl.concat([self._seen, detach(streamed.rename("seen"))]).rechunk()
        unique = good.filter(pl.col("_first"))
        if self.kind == "requests":
            unique = merged(good, unique)
            self._remember(unique)
            unique = unique.drop(*LINK_FIELDS, "_earlier")
        unique = unique.drop("_first", "_key", "_repeat", "_ods_keyed", "ods_parse_error", "parse_error")
        return unique, good.height - unique.height

    def _remember(self, calls: pl.DataFrame) -> None:
        """Keep the links of the calls published (their span's and their parent's), for later batches."""
        for name, span in (("_spans", "_span_id"), ("_parents", "_parent_span_id")):
            places = _places(calls, span)  # views of columns kept whole: no batch buffer is held for a few rows
            if places.height:
                setattr(self, name, pl.concat([getattr(self, name), places], rechunk=False))

    def _pseudonymized(self, valid: pl.DataFrame, contract: Contract) -> pl.DataFrame:
        """Rows that kept their rules, the raw user id replaced by its pseudonym (requests and spans) and
        their attributes passed through ``contract``'s attribute policy."""
        valid = without_private(valid, contract)
        if self.requests is None:
            return valid
        pseudonyms = pseudonymize(valid.get_column("user_id"), self.requests.key, self._pseudonyms)
        return valid.with_columns(user_pseudonym=pseudonyms).drop("user_id")

    def _typed(self, unique: pl.DataFrame) -> pl.DataFrame:
        if self.requests is None:
            return _ts_columns(unique.drop("ods_source")).with_columns(event_date=pl.lit(self.day))
        frame = unique.rename({"ods_source": "source"})
        typed = _ts_columns(frame).with_columns(
            event_date=pl.lit(self.day),
            is_error=(pl.col("status_code").cast(pl.Int64, strict=False) >= 400).fill_null(False)
            | pl.col("error_type").is_not_null(),
            is_retry=pl.col("retry_of").is_not_null()
            | (pl.col("attempt").cast(pl.Int64, strict=False) > 1).fill_null(False),
            attempt=pl.col("attempt").fill_null("1"),
        )
        # Joined on the key alone, then put beside the (wide) frame: no copy of every column.
        labelled = typed.select("request_id").join(
            self.requests.labels, on="request_id", how="left", maintain_order="left"
        )
        return with_cost(typed, self.requests.prices).with_columns(labelled.drop("request_id"))


def linked(records: pl.DataFrame, spans: pl.DataFrame, parents: pl.DataFrame) -> pl.DataFrame:
    """``records`` with each one's ``_key`` made its call's: a call span whose parent, in the same trace,
    is another call span of the same operation is that call seen one level further in (an app's client
    span and the gateway's span under it), so it takes its parent's key. ``_earlier`` marks a record
    whose call an earlier batch published: by its own span (``spans``) or a child span's (``parents``).

    Only a direct parent counts, and only among the day's call spans: a span in between that is no call
    (an instrumented HTTP client under the app's call) hides the link, and such a failure counts once
    per level (a success's levels still share its response id, the request id).
    """
    up = pl.col("_parent_span_id").is_not_null() & pl.col("trace_id").is_not_null()
    records = records.with_columns(_earlier=pl.lit(False))
    if not spans.height and not records.select(up.any()).item():
        return records

    def call_of(span: str, links: pl.DataFrame, where: pl.Expr) -> pl.Series:
        """The call key of the records' ``span`` among ``links``, looked up where ``where`` holds."""
        places = records.select(pl.col("trace_id"), pl.col(span).alias("_span"), pl.col("operation"), _at=where)
        asked = places.with_row_index("_i").filter("_at")
        found = asked.join(links.unique(_PLACE, keep="first"), on=_PLACE, how="inner").drop_nulls("_call")
        return pl.Series("_call", [None] * records.height, pl.String).scatter(found["_i"], found["_call"])

    here = _places(records, "_span_id").filter(pl.col("trace_id").is_in(records.filter(up)["trace_id"].implode()))
    keyed = records.with_columns(_key=pl.coalesce(call_of("_parent_span_id", here, up), "_key"))
    if spans.height:
        everyone = pl.col("trace_id").is_not_null()
        before = pl.coalesce(call_of("_parent_span_id", spans, up), call_of("_span_id", parents, everyone))
        keyed = keyed.with_columns(_key=pl.coalesce(before, "_key"), _earlier=before.is_not_null())
    return keyed


def _places(calls: pl.DataFrame, span: str) -> pl.DataFrame:
    """The places of ``calls`` by their own span or their parent's (``span``), each with its call's key."""
    places = calls.select(pl.col("trace_id"), pl.col(span).alias("_span"), pl.col("operation"), _call="_key")
    return places.drop_nulls(_PLACE)


def merged(records: pl.DataFrame, unique: pl.DataFrame) -> pl.DataFrame:
    """``unique`` (the first arrivals of ``records``' keys) with each call seen at several levels in
    ``records`` made one row, its fields chosen by :data:`~warehouse.sources.dialects.PRECEDENCE`.

    A field's value is the first non-null of the call's spans ordered by level (``_level``, a source
    without levels is the outermost) and, at one level, by start time: innermost and latest first for
    ``"inner"`` fields, outermost and earliest first for the others. Lineage is the first arrival's.
    Records of one span (a repeated export, a line without spans) keep the first arrival whole.
    """
    if unique.height == records.height:  # no key twice
        return unique
    several = records.filter(pl.col("_key").is_duplicated())
    # a key published here, seen in several spans (a repeated line keeps its first arrival, as ever)
    several = several.filter(pl.col("_first").any().over("_key") & (pl.col("_span_id").n_unique().over("_key") > 1))
    if not several.height:
        return unique
    rank = pl.col("_level").replace_strict(LEVELS, range(len(LEVELS)), default=0, return_dtype=pl.Int8)
    # Outermost and earliest first: an "outer" field's value is its first non-null, an "inner" one's its last.
    several = several.with_row_index("_arrival").sort(["_key", rank, "ts"], nulls_last=True, maintain_order=True)
    fields, first_arrival = set(REQUEST_FIELDS), pl.col("_arrival").arg_min()

    def chosen(name: str) -> pl.Expr:
        if name not in fields:  # lineage
            return pl.col(name).get(first_arrival)
        values = pl.col(name).drop_nulls()
        return values.last() if PRECEDENCE.get(name, "outer") == "inner" else values.first()

    calls = several.group_by("_key", maintain_order=True).agg(chosen(c) for c in unique.columns if c != "_key")
    merging = pl.col("_key").is_in(calls.get_column("_key").implode())
    return pl.concat([unique.filter(~merging), calls.select(unique.columns)])


def _ts_columns(frame: pl.DataFrame) -> pl.DataFrame:
    parsed = frame.select(parse_ts(pl.col("ts"))).to_series()  # parsed once: it is the costly part
    return frame.with_columns(_ts_type_error=pl.col("ts").is_not_null() & parsed.is_null(), ts=parsed)
