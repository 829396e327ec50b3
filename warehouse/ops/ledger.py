"""The ledger of landed files: every file ODS ever landed, kept when its lines are gone.

Retention and ``strata forget`` delete ODS lines, but the fact that a file was landed
stays here, so re-ingesting a landing folder never lands an expired or erased file again.
``strata unland`` stamps a file's row instead of removing it. The ledger holds hashes,
paths and counts, no line content.

ODS is committed before the ledger (two tables, two commits): a crash between them leaves
ODS rows whose file the ledger lacks, and :func:`reconcile` writes those rows from ODS
itself the next time the file is seen.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass

import polars as pl

from warehouse.storage.lake import Lake
from warehouse.storage.publish import publish, republish
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


def _rows(lake: Lake, ods_table: Table, hashes: Collection[str]) -> pl.DataFrame:
    if not hashes or lake.open_table(OPS_LANDED_FILES) is None:
        return pl.DataFrame(
            schema={
                "file_sha256": pl.String,
                "source": pl.String,
                "lines": pl.Int64,
                "unlanded_at": pl.Datetime("us", "UTC"),
            }
        )
    rows = lake.read_frame(
        OPS_LANDED_FILES, filters=[("file_sha256", "in", sorted(hashes)), ("table_name", "=", ods_table.name)]
    )
    if "unlanded_at" not in rows.columns:  # a ledger written before files could be unlanded
        rows = rows.with_columns(unlanded_at=pl.lit(None, pl.Datetime("us", "UTC")))
    return rows.select("file_sha256", "source", "lines", "unlanded_at")


def seen_files(lake: Lake, ods_table: Table, hashes: Collection[str]) -> pl.DataFrame:
    """The ledger rows (``file_sha256``, ``source`` — how it was read —, ``lines``,
    ``unlanded_at``) of those of ``hashes`` ever landed in ``ods_table``."""
    return _rows(lake, ods_table, hashes).unique("file_sha256", keep="last")


def reconcile(lake: Lake, ods_table: Table, hashes: Collection[str]) -> int:
    """Write the ledger rows of files among ``hashes`` that ODS holds but the ledger lacks;
    returns how many. The caller holds those files' locks."""
    missing = set(hashes) - set(_rows(lake, ods_table, hashes).get_column("file_sha256").to_list())
    if not missing or lake.open_table(ods_table) is None:
        return 0
    ods = lake.read_frame(
        ods_table,
        filters=[("file_sha256", "in", sorted(missing))],
        columns=["file_sha256", "source_file", "source", "is_malformed", "batch_id", "ingested_at"],
    )
    if ods.is_empty():
        return 0
    found = ods.group_by("file_sha256").agg(
        pl.col("source_file").first(),
        pl.col("source").first(),
        pl.len().alias("lines"),
        pl.col("is_malformed").sum().alias("malformed"),
        pl.col("batch_id").first(),
        pl.col("ingested_at").min().alias("landed_at"),
    )
    record(lake, [Landing(table_name=ods_table.name, **row) for row in found.iter_rows(named=True)])
    return found.height


def record(lake: Lake, landings: Sequence[Landing], *, replace: bool = False) -> None:
    """Add the landings to the ledger, after their ODS commit; ``replace`` swaps their earlier rows."""
    if not landings:
        return
    frame = pl.DataFrame([asdict(landing) for landing in landings])
    keys = [{"file_sha256": landing.file_sha256, "table_name": landing.table_name} for landing in landings]
    publish(
        lake,
        OPS_LANDED_FILES,
        frame,
        mode="replace_partitions" if replace else "append",
        partitions=keys if replace else (),
        expectations=False,
    )


def stamp_unlanded(lake: Lake, ods_table: Table, hashes: Collection[str], at: dt.datetime) -> None:
    """Stamp the ledger rows of these files as unlanded (their lines removed on purpose)."""
    wanted = sorted(hashes)

    def stamped(rows: pl.DataFrame) -> pl.DataFrame:
        mine = pl.col("file_sha256").is_in(wanted) & (pl.col("table_name") == ods_table.name)
        return rows.with_columns(unlanded_at=pl.when(mine).then(pl.lit(at)).otherwise(pl.col("unlanded_at")))

    republish(lake, OPS_LANDED_FILES, stamped, [{"table_name": ods_table.name}])


def recent(lake: Lake, last: int) -> pl.DataFrame:
    """The ``last`` most recent landings, newest first (empty when nothing was landed yet)."""
    if lake.open_table(OPS_LANDED_FILES) is None:
        return pl.DataFrame(schema={name: pl.String for name in Landing.__dataclass_fields__})
    return lake.read_frame(OPS_LANDED_FILES).sort(["landed_at", "source_file"], descending=True).head(last)
