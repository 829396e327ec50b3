"""The ledger of landed files: every file ODS ever landed, kept when its lines are gone.

Retention and ``strata forget`` delete ODS lines, but the fact that a file was landed
stays here, so re-ingesting a landing folder never lands an expired or erased file again.
The ledger holds hashes, paths and counts, no line content.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Collection, Sequence

import polars as pl

from warehouse.settings import Settings
from warehouse.storage import lake
from warehouse.storage.publish import publish
from warehouse.tables import OPS_LANDED_FILES, Table


@dataclass(frozen=True)
class Landing:
    """One file landed in one ODS table."""

    file_sha256: str
    table_name: str
    source_file: str
    source: str
    lines: int
    malformed: int
    batch_id: str
    landed_at: dt.datetime


def seen_files(settings: Settings, ods_table: Table, hashes: Collection[str]) -> dict[str, str]:
    """Content hash → source (how it was read) of those of ``hashes`` ever landed in ``ods_table``.

    ODS's own rows count too: they cover lakes older than the ledger, and a run that
    crashed between its ODS commit and its ledger entry.
    """
    if not hashes:
        return {}
    seen: dict[str, str] = {}
    wanted = ("file_sha256", "in", sorted(hashes))
    for table, filters in ((ods_table, [wanted]), (OPS_LANDED_FILES, [wanted, ("table_name", "=", ods_table.name)])):
        if lake.open_table(settings, table) is None:
            continue
        keys = lake.read_frame(settings, table, columns=["file_sha256", "source"], filters=filters)
        seen.update(keys.unique("file_sha256", keep="last").iter_rows())
    return seen


def record(settings: Settings, landings: Sequence[Landing], *, replace: bool = False) -> None:
    """Add the landings to the ledger, after their ODS commit; ``replace`` swaps their earlier rows."""
    if not landings:
        return
    frame = pl.DataFrame([asdict(landing) for landing in landings])
    keys = [{"file_sha256": landing.file_sha256, "table_name": landing.table_name} for landing in landings]
    publish(settings, OPS_LANDED_FILES, frame, mode="replace_partitions" if replace else "append",
            partitions=keys if replace else (), expectations=False)


def recent(settings: Settings, last: int) -> pl.DataFrame:
    """The ``last`` most recent landings, newest first (empty when nothing was landed yet)."""
    if lake.open_table(settings, OPS_LANDED_FILES) is None:
        return pl.DataFrame(schema={name: pl.String for name in Landing.__dataclass_fields__})
    return lake.read_frame(settings, OPS_LANDED_FILES).sort(["landed_at", "source_file"], descending=True).head(last)
