"""Retention of raw data, and the vacuum that makes any removal final.

Retention drops whole date partitions of the raw-data tables; it and erasure end with a
vacuum that keeps no old versions, because a Delta removal only hides rows: the files of
earlier versions still hold them until vacuumed.
"""

from __future__ import annotations

import datetime as dt
import logging

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from contracts.errors import InputError
from warehouse.ops.landing import LINEAGE, rewrite_landed
from warehouse.settings import Settings
from warehouse.storage import audit, locks
from warehouse.storage.boundaries import passed
from warehouse.storage.lake import Lake
from warehouse.storage.objectstore import filesystem
from warehouse.tables import PII, Table, all_tables

log = logging.getLogger(f"strata.{__name__}")


def vacuum_now(lake: Lake, table: Table, *, purge_log: bool = False) -> int:
    """Delete every file no longer in the table's current version; returns how many.

    The caller holds the table's exclusive lock: with no retention, a vacuum would delete
    the files of a write still in flight.

    With ``purge_log`` the transaction log before the current version goes too: old
    log entries keep column statistics (min/max values) of the files they added.
    """
    delta = lake.open_table(table)
    if delta is None:
        return 0
    lake.verify(table)
    removed = delta.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    passed(f"vacuum {table.name}")
    if purge_log and _older_log_entries(lake.settings, delta):
        retention = delta.metadata().configuration.get("delta.logRetentionDuration")
        delta.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
        delta.create_checkpoint()
        delta.cleanup_metadata()
        delta.alter.set_table_properties({"delta.logRetentionDuration": retention or "interval 30 days"})
        passed(f"purge log {table.name}")
    return len(removed)


def _older_log_entries(settings: Settings, delta: DeltaTable) -> bool:
    """Whether the log holds commits older than the two a purge itself leaves behind."""
    import pyarrow.fs as pafs

    fs, root = filesystem(settings, delta.table_uri)
    entries = fs.get_file_info(pafs.FileSelector(f"{root.rstrip('/')}/_delta_log"))
    versions = [int(e.base_name.split(".")[0]) for e in entries if e.base_name.endswith(".json")]
    return any(v < delta.version() - 1 for v in versions)


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

    Whole partitions go, so Delta drops their files without rewriting any. The landing files
    (under the landing zone) those ODS lines came from lose them first, as for ``forget``: a
    file left with no line is deleted, a rewritten one stays skipped by the ledger.
    """
    keep_days = settings.ods_retention_days if days is None else days
    if keep_days < 1:
        raise InputError("retention must keep at least 1 day", argument="days")
    cutoff = (today or dt.datetime.now(dt.UTC).date()) - dt.timedelta(days=keep_days)
    deleted: dict[str, int] = {}
    tables = raw_tables()
    log.info(
        "deleting raw data before %s (keeping %d day(s)) from %s", cutoff, keep_days, ", ".join(t.name for t in tables)
    )
    lake = Lake(settings)
    with locks.hold(settings, write=[(t, None) for t in tables]):
        audit.recover(lake)
        for table in tables:
            delta = lake.open_table(table)
            if delta is None:
                continue
            column = _date_partition(table)
            if all(c in table.contract for c in LINEAGE):  # the landing files lose the expired lines first
                expired = lake.snapshot(table).to_table(columns=LINEAGE, filter=pc.field(column) < cutoff)
                if expired.num_rows:
                    rewrite_landed(lake, table, pl.from_arrow(expired))  # type: ignore[arg-type]
            locks.verify(settings, table)
            metrics = delta.delete(f"{column} < '{cutoff.isoformat()}'")
            passed(f"commit {table.name}")
            deleted[table.name] = int(metrics.get("num_deleted_rows", 0))
            files = vacuum_now(lake, table)
            log.info("%s: %s row(s) deleted, %d file(s) vacuumed", table.name, f"{deleted[table.name]:,}", files)
    return deleted
