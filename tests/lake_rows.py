"""Every table of a lake as sorted rows, without the run's own metadata: what "the same tables" means.

Two runs of the same dates must leave equal tables: every registered table that exists, its
rows sorted, compared on every column except those that say when or in which batch a run
wrote them. ``ops.audit_log`` records every attempt and ``ads.data_quality`` reports on them, so
they are left out (they grow by design).
"""

from __future__ import annotations

import polars as pl

from warehouse.settings import Settings
from warehouse.storage import lake
from warehouse.tables import all_tables

#: Columns that describe the run that wrote a row, not the data.
RUN_METADATA = frozenset({"ingested_at", "landed_at", "quarantined_at", "started_at", "batch_id", "scored_at",
                          "first_published_at", "last_published_at", "checked_at"})
#: Tables that log runs rather than hold data: every attempt, and ADS's report of them (attempts,
#: Delta versions, publish lag).
RUN_LOGS = frozenset({"ops.audit_log", "ads.data_quality"})


def lake_rows(settings: Settings) -> dict[str, pl.DataFrame]:
    """Table name → its rows (run metadata dropped), sorted on every sortable column."""
    rows: dict[str, pl.DataFrame] = {}
    for table in all_tables():
        if table.name in RUN_LOGS or lake.open_table(settings, table) is None:
            continue
        frame = lake.read_frame(settings, table)
        frame = frame.drop([c for c in frame.columns if c in RUN_METADATA])
        keys = [c for c, t in frame.schema.items() if not isinstance(t, (pl.List, pl.Struct))]
        rows[table.name] = frame.sort(keys, nulls_last=True)
    return rows


def assert_same_lake(left: dict[str, pl.DataFrame], right: dict[str, pl.DataFrame]) -> None:
    """Both lakes hold the same tables with the same rows; the message names the first difference."""
    assert sorted(left) == sorted(right), f"different tables: {sorted(left)} vs {sorted(right)}"
    for name in left:
        assert left[name].height == right[name].height, f"{name}: {left[name].height} vs {right[name].height} rows"
        assert left[name].equals(right[name]), f"{name}: same row count, different rows"
