"""Retention and erasure: remove data for good (Delta delete, then vacuum).

Both end with a vacuum that keeps no old versions, because a Delta delete only hides
rows: the files of earlier versions still hold them until vacuumed.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from warehouse.settings import Settings
from warehouse.storage import lake
from warehouse.tables import PII, Table, all_tables


def vacuum_now(settings: Settings, table: Table, *, purge_log: bool = False) -> int:
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


def raw_tables() -> list[Table]:
    """Tables holding the user's identity in clear (a ``pii`` column: raw lines, payloads),
    partitioned by date: the raw-data retention applies to them."""
    return [t for t in all_tables() if t.classified(PII) and _date_partition(t)]


def _date_partition(table: Table) -> str | None:
    dates = [c for c in table.partition_columns if pa.types.is_date(table.contract.column(c).arrow_type)]
    return dates[0] if dates else None


def apply_retention(settings: Settings, *, days: int | None = None, today: dt.date | None = None) -> dict[str, int]:
    """Delete raw-data partitions (ODS, the quarantine, any table with a ``pii`` column) older
    than ``days``; rows deleted per table. ``days`` defaults to the configured ODS retention.

    Whole partitions go, so Delta drops their files without rewriting any.
    """
    keep_days = settings.ods_retention_days if days is None else days
    if keep_days < 1:
        raise ValueError("retention must keep at least 1 day")
    cutoff = (today or dt.datetime.now(dt.timezone.utc).date()) - dt.timedelta(days=keep_days)
    deleted: dict[str, int] = {}
    for table in raw_tables():
        delta = lake.open_table(settings, table)
        if delta is None:
            continue
        metrics = delta.delete(f"{_date_partition(table)} < '{cutoff.isoformat()}'")
        deleted[table.name] = int(metrics.get("num_deleted_rows", 0))
        vacuum_now(settings, table)
    return deleted
