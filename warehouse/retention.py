"""Retention and erasure: remove data for good (Delta delete, then vacuum).

Both end with a vacuum that keeps no old versions, because a Delta delete only hides
rows: the files of earlier versions still hold them until vacuumed.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import polars as pl

from strata.config import Settings
from warehouse import lake
from warehouse.ods import TABLES as ODS_TABLES


def vacuum_now(settings: Settings, table: str, *, purge_log: bool = False) -> int:
    """Delete every file no longer in the table's current version; returns how many.

    With ``purge_log`` the transaction log before the current version goes too: old
    log entries keep column statistics (min/max values) of the files they added.
    """
    delta = lake.open_table(settings, table)
    if delta is None:
        return 0
    removed = delta.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    if purge_log:
        retention = delta.metadata().configuration.get("delta.logRetentionDuration")
        delta.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
        delta.create_checkpoint()
        delta.cleanup_metadata()
        delta.alter.set_table_properties({"delta.logRetentionDuration": retention or "interval 30 days"})
    return len(removed)


#: Tables that keep raw lines (payloads included): the raw-data retention applies to them.
RAW_TABLES = (*ODS_TABLES.values(), "dwd.quarantine")


def apply_retention(settings: Settings, *, days: int | None = None, today: dt.date | None = None) -> dict[str, int]:
    """Delete raw-line partitions (ODS and the quarantine) older than ``days``; rows deleted per table.

    ``days`` defaults to the configured ODS retention.
    """
    keep_days = settings.ods_retention_days if days is None else days
    if keep_days < 1:
        raise ValueError("retention must keep at least 1 day")
    cutoff = (today or dt.datetime.now(dt.timezone.utc).date()) - dt.timedelta(days=keep_days)
    deleted: dict[str, int] = {}
    for table in RAW_TABLES:
        delta = lake.open_table(settings, table)
        if delta is None:
            continue
        metrics = delta.delete(f"event_date < '{cutoff.isoformat()}'")
        deleted[table] = int(metrics.get("num_deleted_rows", 0))
        vacuum_now(settings, table)
    return deleted


@dataclass
class ForgetReport:
    """Rows removed per table for one user."""

    rows: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.rows.values())


#: Rows read at a time when looking for a user's lines: bounds memory however large the lake.
SCAN_ROWS = 128 * 1024


def _may_hold(user_id: str) -> pl.Expr:
    """Lines whose bytes could hold ``user_id``: it appears as is, or a JSON escape may spell it."""
    found = pl.col("raw_line").bin.contains(user_id.encode()) | pl.col("raw_line").bin.contains(b"\\u")
    if "/" in user_id:  # JSON may also write "/" as "\\/"
        found = found | pl.col("raw_line").bin.contains(b"\\/")
    return found


def _gives_every_line(settings: Settings, source: str, user_id: str) -> bool:
    """Whether the mapping of ``source`` sets every line's user id to ``user_id`` (a constant)."""
    from warehouse.sources.formats import registered_mapping

    return source.startswith("mapping:") and registered_mapping(settings, source).constants.get("user_id") == user_id


def _user_rows(settings: Settings, table: str, user_id: str) -> pl.DataFrame:
    """Keys (``file_sha256``/``source_file``, ``line_no``, ``request_id``) of the ODS or
    quarantine rows that hold ``user_id``.

    Streamed a batch at a time, and only lines whose bytes could hold the id are parsed.
    Well-formed ODS lines are matched on their parsed user id; lines that do not parse (and
    quarantined lines) on the raw bytes, so a broken line is not kept just because it is broken.
    """
    from warehouse.sources.formats import parser_for

    delta = lake.open_table(settings, table)
    assert delta is not None
    dataset = delta.to_pyarrow_dataset()
    ods = "source" in dataset.schema.names
    keys = ["file_sha256" if ods else "source_file", "line_no", "request_id"]
    raw_hit = pl.col("raw_line").bin.contains(user_id.encode())
    everyones: dict[str, bool] = {}  # source → whether its mapping gives every line this user id
    hits = [pl.DataFrame(schema={k: pl.Int64 if k == "line_no" else pl.String for k in keys})]
    columns = [*keys, "raw_line", *(["source", "is_malformed"] if ods else [])]
    for batch in dataset.to_batches(columns=columns, batch_size=SCAN_ROWS):
        frame = pl.from_arrow(batch)
        assert isinstance(frame, pl.DataFrame)
        if not ods:
            hits.append(frame.filter(raw_hit).select(keys))
            continue
        for source in frame.get_column("source").unique().to_list():
            if source not in everyones:
                everyones[source] = _gives_every_line(settings, source, user_id)
        all_theirs = pl.col("source").is_in([source for source, yes in everyones.items() if yes])
        hits.append(frame.filter(all_theirs).select(keys))
        candidates = frame.filter(_may_hold(user_id) & ~all_theirs)
        for (source,), group in candidates.group_by(["source"]):
            parsed = parser_for(settings, str(source), "requests")(
                group.get_column("raw_line").to_arrow(), group.get_column("line_no").to_arrow(),
                group.get_column("file_sha256").to_arrow())
            if "_line" in parsed.columns:
                owned = parsed.filter(pl.col("user_id") == user_id).get_column("_line").unique()
                mask = pl.Series(range(group.height)).is_in(owned.implode())
            else:
                mask = (parsed.get_column("user_id") == user_id).fill_null(False)
            hits.append(group.filter(mask | (raw_hit & pl.col("is_malformed"))).select(keys))
    return pl.concat(hits, how="vertical_relaxed")


def _delete_lines(settings: Settings, table: str, rows: pl.DataFrame) -> int:
    if rows.is_empty():
        return 0
    delta = lake.open_table(settings, table)
    assert delta is not None
    clauses = [
        f"(file_sha256 = {lake.sql_literal(sha)} AND line_no IN ({', '.join(map(str, sorted(set(lines))))}))"
        for sha, lines in rows.group_by("file_sha256").agg(pl.col("line_no")).iter_rows()
    ]
    return int(delta.delete(" OR ".join(clauses)).get("num_deleted_rows", 0))


def forget_user(settings: Settings, user_id: str) -> ForgetReport:
    """Remove one user from every layer (raw lines included), then vacuum what was touched."""
    from warehouse.privacy import pseudonym

    if not user_id.strip():
        raise ValueError("a user id to forget is required")
    report = ForgetReport()
    pseud = pseudonym(settings.require_pseudonym_key(), user_id)
    request_ids: set[str] = set()

    raw_table = ODS_TABLES["requests"]
    if lake.open_table(settings, raw_table) is not None:
        owned = _user_rows(settings, raw_table, user_id)
        request_ids |= set(owned.get_column("request_id").drop_nulls().to_list())
        report.rows[raw_table] = _delete_lines(settings, raw_table, owned)

    request = lake.open_table(settings, "dwd.request")
    if request is not None:
        # Delete by request id, never by pseudonym: a delete's predicate is kept in the Delta log.
        mine = lake.read(settings, "dwd.request", columns=["request_id"], filters=[("user_pseudonym", "=", pseud)])
        request_ids |= set(mine.column(0).to_pylist())
        if request_ids:
            id_list = ", ".join(lake.sql_literal(r) for r in sorted(request_ids))
            report.rows["dwd.request"] = int(request.delete(f"request_id IN ({id_list})").get("num_deleted_rows", 0))

    quarantine = lake.open_table(settings, "dwd.quarantine")
    if quarantine is not None:
        id_list = ", ".join(lake.sql_literal(r) for r in sorted(request_ids)) or "NULL"
        pieces = [f"request_id IN ({id_list})"]
        held = _user_rows(settings, "dwd.quarantine", user_id)
        for sha_line in held.select("source_file", "line_no").unique().iter_rows():
            pieces.append(f"(source_file = {lake.sql_literal(sha_line[0])} AND line_no = {sha_line[1]})")
        report.rows["dwd.quarantine"] = int(quarantine.delete(" OR ".join(pieces)).get("num_deleted_rows", 0))

    if request_ids:
        id_list = ", ".join(lake.sql_literal(r) for r in sorted(request_ids))
        for table in (ODS_TABLES["feedback"], "dwd.feedback"):
            delta = lake.open_table(settings, table)
            if delta is not None:
                report.rows[table] = int(delta.delete(f"request_id IN ({id_list})").get("num_deleted_rows", 0))

    for table in report.rows:
        vacuum_now(settings, table, purge_log=True)
    return report
