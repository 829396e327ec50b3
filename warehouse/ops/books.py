"""The books of a DWD build: where every ODS record of a partition went."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl

from warehouse.storage.lake import Lake
from warehouse.storage.publish import publish
from warehouse.tables import OPS_BOOKS


@dataclass(frozen=True)
class Books:
    """Where every ODS row of a partition went."""

    table: str
    event_date: dt.date
    ods_rows: int
    dwd_rows: int
    duplicates: int
    quarantined: int
    malformed: int
    #: Records of forgotten users left out at ingest (outside the balance: they never reached ODS).
    suppressed: int = 0
    #: Records that parse and carry no request: OTLP lines holding no GenAI span.
    trace_only: int = 0

    @property
    def balanced(self) -> bool:
        return self.ods_rows == self.dwd_rows + self.duplicates + self.quarantined + self.malformed + self.trace_only


def record_books(lake: Lake, books: Books) -> None:
    """Replace the (table, event date) row of ``ops.books`` with this build's books."""
    frame = pl.DataFrame(
        [
            {
                "table_name": books.table,
                "event_date": books.event_date,
                "ods_rows": books.ods_rows,
                "dwd_rows": books.dwd_rows,
                "duplicates": books.duplicates,
                "quarantined": books.quarantined,
                "malformed": books.malformed,
                "suppressed": books.suppressed,
                "trace_only": books.trace_only,
                "balanced": books.balanced,
            }
        ]
    )
    publish(
        lake,
        OPS_BOOKS,
        frame,
        partitions=[{"event_date": books.event_date, "table_name": books.table}],
        expectations=False,
    )
