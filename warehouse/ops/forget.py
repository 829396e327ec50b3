"""Erasure: remove one user from every table that can hold them, then vacuum.

The tables are found by walking the registry, not listed here, so a table added with a
classified column is covered with no change to this module:

* a ``pseudonymous`` column matches the user's pseudonym, a ``pii`` text column the user id;
* a ``pii`` column of raw lines matches lines that hold the user: in a table that records
  how its lines were read (a ``source`` column, as ODS does) each line that could hold the
  id is parsed and its user compared; elsewhere (the quarantine) the raw bytes are searched.
  An OTLP export line that also holds other users' spans is not removed but rewritten without
  the user's spans, every other span byte for byte (:mod:`warehouse.sources.span_erasure`),
  and so is its landing file;
* any table with a ``request_id`` column also loses the rows of the user's requests
  (feedback events, quarantined lines of those requests);
* a table keyed by trace (``trace_id`` in its primary key: ``dwd.span``) also loses every span of
  the traces that hold a row of the user (a workflow's parent and retrieval around their calls name
  no user of their own);
* a ``free_text`` column (``ops.audit_log.message``, which may quote a failed rule's examples)
  keeps its rows, with the user's id and pseudonym replaced by ``[forgotten]``.

An HTML report in the lake (``reports/``) that names the user's pseudonym is deleted.

Lines no ingest has landed yet (a landing file not yet ingested, a receiver's spool segment) have
no row to find them by: the report counts those files (:func:`warehouse.ops.landing.unlanded`), and
the user goes on the suppression list first (:mod:`warehouse.ops.suppression`), so the ingest that
lands those lines leaves the user's records out.

Before any table is rewritten, the landing files the user's ODS rows came from lose those
lines (:mod:`warehouse.ops.landing`), so a crash in between finds the rows, and the work, again.

Each touched partition is rewritten without the user's rows through the one publish path
(conformed to the contract, so its exact Arrow types survive), in one commit per table;
then old files and log entries are vacuumed, because a rewrite only hides the old files.
No predicate naming the user is ever written to a Delta log.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from contracts.errors import InputError
from warehouse.ops.landing import LINEAGE, Unlanded, rewrite_landed, unlanded
from warehouse.ops.reports import drop_naming
from warehouse.ops.retention import vacuum_now
from warehouse.ops.suppression import add_forgotten
from warehouse.privacy import pseudonym
from warehouse.settings import Settings
from warehouse.storage import audit, locks
from warehouse.storage.lake import Lake
from warehouse.storage.publish import republish
from warehouse.tables import FREE_TEXT, OPS_FORGOTTEN_USERS, OPS_LANDED_FILES, PII, PSEUDONYMOUS, Table, all_tables

#: Rows read at a time when looking for a user's rows: bounds memory however large the lake.
SCAN_ROWS = 128 * 1024
#: The column of a trace: a table with it in its primary key loses the user's traces whole.
_TRACE = "trace_id"


@dataclass
class ForgetReport:
    """Rows removed per table for one user."""

    rows: dict[str, int] = field(default_factory=dict)
    #: Rows whose free text quoted the user, per table (redacted, kept).
    redacted: dict[str, int] = field(default_factory=dict)
    #: Landing files rewritten without the user's lines (or deleted, when none was left).
    files: int = 0
    #: HTML reports in the lake that named the user's pseudonym, deleted (the next daily run writes them anew).
    reports: int = 0
    #: What no ingest had landed when the forget ran: a forget after its ingest finds the user's lines there.
    unlanded: Unlanded = field(default_factory=lambda: Unlanded(0, 0))

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def _may_hold(user_id: str) -> pl.Expr:
    """Lines whose bytes could hold ``user_id``: it appears as is, or a JSON escape may spell it."""
    found = pl.col("raw_line").bin.contains(user_id.encode()) | pl.col("raw_line").bin.contains(b"\\u")
    if "/" in user_id:  # JSON may also write "/" as "\\/"
        found = found | pl.col("raw_line").bin.contains(b"\\/")
    return found


@dataclass
class _Matcher:
    """Which rows of one table belong to the user."""

    settings: Settings
    table: Table
    user_id: str
    pseudonym: str
    #: Source → whether its mapping sets every line's user id to this user (a constant).
    _everyones: dict[str, bool] = field(default_factory=dict)
    #: (file_sha256, line_no) → an export line that holds others' spans too, without the user's.
    rewritten: dict[tuple[str, int], bytes] = field(default_factory=dict)

    @property
    def columns(self) -> list[str]:
        """The columns the match reads."""
        names = {c.name for c in self.table.classified(PII) + self.table.classified(PSEUDONYMOUS)}
        if self._parses_lines:
            names |= {"source", "is_malformed", "line_no", "file_sha256"}
        return sorted(names)

    @property
    def _parses_lines(self) -> bool:
        return "source" in self.table.contract and any(
            pa.types.is_binary(c.arrow_type) for c in self.table.classified(PII)
        )

    def __call__(self, frame: pl.DataFrame) -> pl.Series:
        mask = pl.repeat(False, frame.height, eager=True)
        for column in self.table.classified(PSEUDONYMOUS):
            mask |= (frame.get_column(column.name) == self.pseudonym).fill_null(False)
        for column in self.table.classified(PII):
            values = frame.get_column(column.name)
            if not pa.types.is_binary(column.arrow_type):
                mask |= (values == self.user_id).fill_null(False)
            elif self._parses_lines:
                mask |= self._parsed_lines(frame.rename({column.name: "raw_line"}, strict=False))
            else:
                mask |= values.bin.contains(self.user_id.encode()).fill_null(False)
        return mask

    def _parsed_lines(self, frame: pl.DataFrame) -> pl.Series:
        """Well-formed lines whose parsed user is this user; lines that do not parse, by their bytes.

        Only lines whose bytes could hold the id are parsed; a mapping that gives every line
        this user as a constant marks all its lines.
        """
        from warehouse.sources.formats import parser_for, registered_mapping

        for source in frame.get_column("source").unique().to_list():
            if source not in self._everyones:
                self._everyones[source] = (
                    source.startswith("mapping:")
                    and registered_mapping(self.settings, source).constants.get("user_id") == self.user_id
                )
        everyone = pl.col("source").is_in([source for source, yes in self._everyones.items() if yes])
        hit = frame.select(
            everyone | (pl.col("raw_line").bin.contains(self.user_id.encode()) & pl.col("is_malformed"))
        ).to_series()
        candidates = frame.with_row_index("_i").filter(_may_hold(self.user_id) & ~everyone & ~pl.col("is_malformed"))
        for (source,), group in candidates.group_by(["source"]):
            parsed = parser_for(self.settings, str(source), "requests")(
                group.get_column("raw_line").to_arrow(),
                group.get_column("line_no").to_arrow(),
                group.get_column("file_sha256").to_arrow(),
            )
            if "_line" in parsed.columns:  # an export line: the user's spans leave it, the others stay
                theirs = self._spans_removed(group, parsed)
            else:
                theirs = (parsed.get_column("user_id") == self.user_id).fill_null(False)
            hit = hit.scatter(group.get_column("_i").filter(theirs), True)
        return hit

    def _spans_removed(self, group: pl.DataFrame, parsed: pl.DataFrame) -> pl.Series:
        """Which export lines hold the user's spans; those that hold others' spans too are kept in
        ``rewritten`` without the user's (:func:`remove_spans`). A line the scanner cannot read
        is the user's whole when the reader found a record of theirs in it."""
        from warehouse.sources.span_erasure import NotReadable, remove_spans

        records = set(parsed.filter(pl.col("user_id") == self.user_id).get_column("_line").to_list())
        theirs = []
        for i, (raw, sha, line_no) in enumerate(group.select("raw_line", "file_sha256", "line_no").iter_rows()):
            try:
                left = remove_spans(raw, lambda user, _start: user == self.user_id)
            except NotReadable:
                theirs.append(i in records)
                continue
            if left is not None and left is not raw:
                self.rewritten[(sha, line_no)] = left
            theirs.append(left is not raw)
        return pl.Series(theirs, dtype=pl.Boolean)


def _batches(
    dataset: ds.Dataset,
    columns: list[str],
    filter_: pc.Expression | None = None,
) -> Iterator[pl.DataFrame]:
    for batch in dataset.to_batches(columns=columns, filter=filter_, batch_size=SCAN_ROWS):
        frame = pl.from_arrow(batch)
        assert isinstance(frame, pl.DataFrame)
        yield frame


@dataclass
class _Marked:
    """The user's rows of one table found by its classified columns."""

    match: _Matcher
    #: Their primary keys (empty when the table has none: the match is then run again).
    keys: pl.DataFrame
    partitions: list[dict[str, object]]
    #: Where in the landing zone they came from (``LINEAGE``, and ``old_line``: the line as the row holds it;
    #: empty for a table that does not say).
    lineage: pl.DataFrame

    def __call__(self, frame: pl.DataFrame) -> pl.Series:
        """The rows that hold the user (rewritten or removed)."""
        if not self.keys.width:
            return self.match(frame)
        names = self.keys.columns
        return frame.select(
            pl.struct(names).is_in(self.keys.select(pl.struct(names)).to_series().implode())
        ).to_series()

    def rewrite(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame``'s export lines that hold others' spans too, with the user's spans removed;
        every other row as it was."""
        if not self.match.rewritten or "raw_line" not in frame.columns:
            return frame
        lines = [
            self.match.rewritten.get((sha, line_no), raw)
            for raw, sha, line_no in frame.select("raw_line", "file_sha256", "line_no").iter_rows()
        ]
        return frame.with_columns(raw_line=pl.Series(lines, dtype=pl.Binary))

    def rewritten(self, frame: pl.DataFrame) -> pl.Series:
        """The rows of ``frame`` that stay, rewritten (:meth:`rewrite`)."""
        keys = [(sha, line_no) for sha, line_no in frame.select("file_sha256", "line_no").iter_rows()]
        return pl.Series([key in self.match.rewritten for key in keys], dtype=pl.Boolean)


def _find(lake: Lake, table: Table, match: _Matcher) -> tuple[_Marked | None, set[str], set[str]]:
    """The user's rows of ``table`` by its classified columns, and the request ids and trace ids they hold."""
    contract = table.contract
    linked = ["request_id"] if "request_id" in contract else []
    traced = [_TRACE] if _TRACE in contract else []
    columns = sorted(
        {*match.columns, *contract.primary_key, *table.partition_columns, *linked, *traced, *_lineage(table)}
    )
    hits = [frame.filter(match(frame)) for frame in _batches(lake.snapshot(table), columns)]
    found = pl.concat(hits, how="vertical_relaxed") if hits else pl.DataFrame()
    if not found.height:
        return None, set(), set()
    partitions = found.select(table.partition_columns).unique().to_dicts() if table.partition_columns else []
    mark = _Marked(match, found.select(contract.primary_key), partitions, _where_from(found.select(_lineage(table))))
    if match.rewritten:  # a line that keeps others' spans: its request id is not the user's
        found = found.filter(~mark.rewritten(found))
        mark.lineage = mark.lineage.with_columns(
            raw_line=pl.Series(
                [match.rewritten.get(key) for key in mark.lineage.select("file_sha256", "line_no").iter_rows()],
                dtype=pl.Binary,
            )
        )
    ids = set(found.get_column("request_id").drop_nulls().to_list()) if linked else set()
    traces = set(found.get_column(_TRACE).drop_nulls().to_list()) if traced else set()
    return mark, ids, traces


def _lineage(table: Table) -> list[str]:
    """The table's columns that say which landing file line a row came from, and the line (ODS), else none."""
    return [*LINEAGE, "raw_line"] if all(c in table.contract for c in [*LINEAGE, "raw_line"]) else []


def _where_from(rows: pl.DataFrame) -> pl.DataFrame:
    """Rows' ``_lineage`` as :func:`rewrite_landed` takes it: the line they hold is ``old_line``."""
    return rows.rename({"raw_line": "old_line"}, strict=False)


def searched_tables() -> list[Table]:
    """The tables a forget searches, and locks exclusively from its first read to its last write."""
    return [
        t
        for t in all_tables()
        if t.classified(PII) or t.classified(PSEUDONYMOUS) or t.classified(FREE_TEXT) or "request_id" in t.contract
    ]


def forget_user(settings: Settings, user_id: str) -> ForgetReport:
    """Remove one user from every table that can hold them, then vacuum those tables.

    The tables are locked exclusively for the whole run, so a concurrent ingest or build
    either finishes first (and its rows are found) or starts after (and finds none). A run
    that crashed is finished by running it again: what is left is found, and every table is
    vacuumed whether or not this run removed rows from it.
    """
    if not user_id.strip():
        raise InputError("a user id to forget is required", argument="user_id")
    key = settings.require_pseudonym_key()
    pseud = pseudonym(key, user_id)
    candidates = searched_tables()
    lake = Lake(settings)
    with locks.hold(settings, write=[(t, None) for t in [*candidates, OPS_LANDED_FILES, OPS_FORGOTTEN_USERS]]):
        audit.recover(lake)  # a forget that crashed: its commits get their audit rows first
        add_forgotten(lake, key, user_id, dt.datetime.now(dt.UTC))  # first: no old record of theirs lands after
        return _forget(lake, user_id, pseud, [t for t in candidates if lake.open_table(t) is not None])


def _forget(lake: Lake, user_id: str, pseud: str, existing: list[Table]) -> ForgetReport:
    # First pass: the user's rows by their classified columns, and the request ids they hold.
    request_ids: set[str] = set()
    trace_ids: set[str] = set()
    marked: dict[Table, _Marked] = {}
    for table in existing:
        if table.classified(PII) or table.classified(PSEUDONYMOUS):
            found, ids, traces = _find(lake, table, _Matcher(lake.settings, table, user_id, pseud))
            request_ids |= ids
            trace_ids |= traces
            if found is not None:
                marked[table] = found

    # The landing files they came from lose those lines first: a crash after this finds the rows again.
    report = ForgetReport()
    for table in existing:
        if not _lineage(table):
            continue
        parts = [marked[table].lineage] if table in marked else []
        if request_ids and _lineage(table) and "request_id" in table.contract:
            linked = pc.field("request_id").isin(sorted(request_ids))
            parts += [_where_from(f) for f in _batches(lake.snapshot(table), _lineage(table), linked)]
        lineage = (
            pl.concat(parts, how="diagonal_relaxed").unique(LINEAGE, keep="first", maintain_order=True)
            if parts
            else pl.DataFrame()
        )
        if lineage.height:
            report.files += rewrite_landed(lake, table, lineage)

    # Second pass: rewrite every partition holding a marked row or a row of the user's requests. The rows
    # found only by a link (a feedback event, a retrieval span of the user's trace) go before the rows the
    # links were read from, and spans before calls: a crash in between leaves the links to be found again.
    request_list = pl.Series("request_id", sorted(request_ids), pl.String).implode()
    trace_list = pl.Series(_TRACE, sorted(trace_ids), pl.String).implode()
    for table in sorted(existing, key=lambda t: (t in marked, _TRACE not in t.contract.primary_key)):
        linked = bool(request_ids) and "request_id" in table.contract
        traced = bool(trace_ids) and _TRACE in table.contract.primary_key
        mark = marked.get(table)
        partitions = list(mark.partitions) if mark else []
        for key, ids, link in (("request_id", request_ids, linked), (_TRACE, trace_ids, traced)):
            if not link:
                continue
            for frame in _batches(
                lake.snapshot(table), [key, *table.partition_columns], pc.field(key).isin(sorted(ids))
            ):
                if frame.height:
                    partitions += frame.select(table.partition_columns).unique().to_dicts() or [{}]
        partitions = [dict(p) for p in {tuple(sorted(p.items())) for p in partitions}]
        if mark is not None or partitions:

            def kept(
                frame: pl.DataFrame, mark: _Marked | None = mark, linked: bool = linked, traced: bool = traced
            ) -> pl.DataFrame:
                mask = mark(frame) if mark else pl.repeat(False, frame.height, eager=True)
                if mark is not None and mark.match.rewritten:
                    mask &= ~mark.rewritten(frame)
                if linked:
                    mask |= frame.get_column("request_id").is_in(request_list).fill_null(False)
                if traced:
                    mask |= frame.get_column(_TRACE).is_in(trace_list).fill_null(False)
                frame = frame.filter(~mask)
                return mark.rewrite(frame) if mark is not None else frame

            before, after = republish(lake, table, kept, [p for p in partitions if p])
            if before > after:
                report.rows[table.name] = before - after
        redacted = bool(table.classified(FREE_TEXT)) and _redact(lake, table, [user_id, pseud], report)
        if redacted or table.classified(PII) or table.classified(PSEUDONYMOUS) or "request_id" in table.contract:
            # (The audit log takes appends without a lock: it is vacuumed only when a redaction needs it.)
            vacuum_now(lake, table, purge_log=True)
    report.reports = drop_naming(lake.settings, pseud)
    report.unlanded = unlanded(lake)
    return report


#: What a redacted user id or pseudonym reads as in free text.
REDACTED = "[forgotten]"


def _redact(lake: Lake, table: Table, texts: list[str], report: ForgetReport) -> bool:
    """Replace ``texts`` in the table's free-text columns (an audit message quoting a failed rule's
    examples): the rows stay, their partitions holding a match are rewritten. Whether any was."""
    columns = [c.name for c in table.classified(FREE_TEXT)]

    def holds(frame: pl.DataFrame) -> pl.Series:
        return frame.select(
            pl.any_horizontal(pl.col(c).str.contains(t, literal=True).fill_null(False) for c in columns for t in texts)
        ).to_series()

    read = sorted({*columns, *table.partition_columns})
    hits = [f.filter(holds(f)) for f in _batches(lake.snapshot(table), read)]
    found = pl.concat(hits, how="vertical_relaxed") if hits else pl.DataFrame()
    if not found.height:
        return False

    def redacted(frame: pl.DataFrame) -> pl.DataFrame:
        for text in texts:
            frame = frame.with_columns(pl.col(c).str.replace_all(text, REDACTED, literal=True) for c in columns)
        return frame

    partitions = found.select(table.partition_columns).unique().to_dicts() if table.partition_columns else []
    republish(lake, table, redacted, partitions)
    report.redacted[table.name] = found.height
    return True
