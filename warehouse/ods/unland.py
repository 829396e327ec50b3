"""Undoing a landing: ``strata unland FILE|--batch ID`` removes those files' ODS lines.

For a file landed by mistake (a manifest, a file of another format): its lines go in one
commit per ODS table, the ledger keeps the memory that the file was landed and then
unlanded (a plain ingest skips it; ``--reland`` may land it again, e.g. with a mapping),
and the report names the event dates whose DWD was built from those lines.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from contracts.errors import InputError
from warehouse.ods import ODS_TABLES
from warehouse.ods.rows import record_dates
from warehouse.ops import ledger
from warehouse.settings import Settings
from warehouse.storage import locks
from warehouse.storage.lake import Lake
from warehouse.storage.publish import republish
from warehouse.tables import OPS_LANDED_FILES


@dataclass
class UnlandReport:
    """Lines removed per ODS table, and the event dates whose DWD is now stale."""

    rows: dict[str, int] = field(default_factory=dict)
    files: int = 0
    stale_dates: set[dt.date] = field(default_factory=set)


def _without_files(hashes: list[str]) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """The change :func:`republish` applies to drop the rows of the files whose SHA-256 is in ``hashes``."""
    return lambda rows: rows.filter(~pl.col("file_sha256").is_in(hashes))


def _landed(lake: Lake, files: Sequence[Path], batch: str | None) -> pl.DataFrame:
    """Ledger rows (file_sha256, table_name) of the files named, by content or path, or of the batch."""
    if lake.open_table(OPS_LANDED_FILES) is None:
        raise InputError("nothing was landed yet: the ledger ops.landed_files does not exist")
    rows = lake.read_frame(OPS_LANDED_FILES, columns=["file_sha256", "table_name", "source_file", "batch_id"])
    if batch is not None:
        found = rows.filter(pl.col("batch_id") == batch)
        if found.is_empty():
            raise InputError(
                f"no file was landed by batch {batch!r} (ops.landed_files lists the batches)", argument="batch"
            )
        return found
    hits: list[pl.DataFrame] = []
    unknown: list[str] = []
    for path in files:
        # The file as it is now (its content), or as it was landed (its path: it may be gone).
        sha = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        hit = rows.filter((pl.col("source_file") == str(path.expanduser().resolve())) | (pl.col("file_sha256") == sha))
        if hit.height:
            hits.append(hit)
        else:
            unknown.append(str(path))
    if unknown:
        raise InputError(f"never landed: {', '.join(unknown)} (ops.landed_files lists what was)")
    return pl.concat(hits).unique(["file_sha256", "table_name"])


def unland(settings: Settings, files: Sequence[Path] = (), *, batch: str | None = None) -> UnlandReport:
    """Remove the ODS lines of these files (or of every file of ``batch``), one commit per table."""
    if bool(files) == (batch is not None):
        raise InputError("name the files to unland, or a batch, not both", argument="batch")
    report = UnlandReport()
    lake = Lake(settings)
    with locks.hold(settings, write=[(t, None) for t in ODS_TABLES.values()] + [(OPS_LANDED_FILES, None)]):
        found = _landed(lake, files, batch)
        report.files = found.height
        now = dt.datetime.now(dt.UTC)
        for table in ODS_TABLES.values():
            hashes = found.filter(pl.col("table_name") == table.name).get_column("file_sha256").to_list()
            if not hashes or lake.open_table(table) is None:
                continue
            rows = lake.read_frame(
                table,
                columns=lake.present_columns(table, ["event_date", "event_dates"]),
                filters=[("file_sha256", "in", hashes)],
            )
            dates = rows.get_column("event_date").unique()
            report.stale_dates |= record_dates(rows)
            if dates.len():
                before, after = republish(
                    lake, table, _without_files(hashes), [{"event_date": d} for d in sorted(dates.to_list())]
                )
                report.rows[table.name] = before - after
            ledger.stamp_unlanded(lake, table, hashes, now)
    return report
