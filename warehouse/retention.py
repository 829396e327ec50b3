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


def _user_rows(settings: Settings, table: str, user_id: str) -> pl.DataFrame:
    """(file_sha256, line_no, request_id) of ODS/quarantine rows that hold ``user_id``.

    Well-formed lines are parsed and matched on their user id; lines that do not parse
    are matched on the raw bytes, so a broken line is not kept just because it is broken.
    """
    from warehouse.sources.formats import parser_for

    rows = lake.read_frame(settings, table)
    needle = user_id.encode()
    hits = []
    if "source" not in rows.columns:  # quarantine: raw line only
        return rows.filter(pl.col("raw_line").bin.contains(needle))
    for (source,), group in rows.group_by(["source"]):
        parsed = parser_for(settings, str(source), "requests")(
            group.get_column("raw_line").to_arrow(), group.get_column("line_no").to_arrow(),
            group.get_column("file_sha256").to_arrow())
        if "_line" in parsed.columns:
            owned = parsed.filter(pl.col("user_id") == user_id).get_column("_line").unique()
            mask = pl.Series(range(group.height)).is_in(owned.implode())
        else:
            mask = (parsed.get_column("user_id") == user_id).fill_null(False)
        raw_hit = pl.col("raw_line").bin.contains(needle) & pl.col("is_malformed")
        hits.append(group.with_columns(_mask=mask).filter(pl.col("_mask") | raw_hit).drop("_mask"))
    return pl.concat(hits) if hits else rows.head(0)


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
