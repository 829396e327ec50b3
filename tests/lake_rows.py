"""Every table of a lake as sorted rows, without the run's own metadata: what "the same tables" means.

Two runs of the same dates must leave equal tables: every registered table that exists, its
rows sorted, compared on every column except those that say when or in which batch a run
wrote them. ``ops.audit_log`` records every attempt and ``ads.data_quality`` reports on them, so
they are left out (they grow by design). Paths of landed files are read relative to the lake's
landing zone, so two deployments landing the same files from different folders compare equal.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import polars as pl

from warehouse.settings import Settings
from warehouse.storage.lake import Lake
from warehouse.tables import Table, all_tables

#: Columns that describe the run that wrote a row, not the data.
RUN_METADATA = frozenset(
    {
        "ingested_at",
        "landed_at",
        "quarantined_at",
        "started_at",
        "batch_id",
        "scored_at",
        "first_published_at",
        "last_published_at",
        "checked_at",
    }
)
#: Tables that log runs rather than hold data: every attempt, and ADS's report of them (attempts,
#: Delta versions, publish lag).
RUN_LOGS = frozenset({"ops.audit_log", "ads.data_quality"})


def lake_rows(settings: Settings) -> dict[str, pl.DataFrame]:
    """Table name → its rows (run metadata dropped, landed paths relative), sorted on every sortable column."""
    landing = str(settings.landing_dir.resolve())

    def rows(table: Table) -> pl.DataFrame | None:
        if table.name in RUN_LOGS or Lake(settings).open_table(table) is None:
            return None
        frame = Lake(settings).read_frame(table)
        frame = frame.drop([c for c in frame.columns if c in RUN_METADATA])
        frame = frame.with_columns(
            pl.col(c).str.replace(landing, "<landing>", literal=True) for c, t in frame.schema.items() if t == pl.String
        )
        keys = [c for c, t in frame.schema.items() if not isinstance(t, (pl.List, pl.Struct))]
        return frame.sort(keys, nulls_last=True)

    tables = all_tables()
    with ThreadPoolExecutor(max_workers=4) as pool:  # a lake on object storage answers each read slowly
        frames = list(pool.map(rows, tables))
    return {t.name: f for t, f in zip(tables, frames) if f is not None}


def assert_same_lake(left: dict[str, pl.DataFrame], right: dict[str, pl.DataFrame]) -> None:
    """Both lakes hold the same tables with the same rows; the message names the first difference."""
    assert sorted(left) == sorted(right), f"different tables: {sorted(left)} vs {sorted(right)}"
    for name in left:
        assert left[name].height == right[name].height, f"{name}: {left[name].height} vs {right[name].height} rows"
        assert left[name].equals(right[name]), f"{name}: same row count, different rows"
