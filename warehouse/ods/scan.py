"""Reading one event date of ODS back, for a DWD build: its files, its key columns, its batches.

The files are read with pyarrow alone (not deltalake) because the batches feed a Delta
write that is already running.
"""

from __future__ import annotations

import datetime as dt
from typing import Iterator

import polars as pl
from deltalake import DeltaTable

from warehouse.storage.lake import Lake

#: ODS rows per batch of a DWD build: bounds memory on large days.
BATCH_ROWS = 100_000


def ods_files(delta: DeltaTable, day: dt.date) -> list[str]:
    """URIs of the Parquet files of the opened ODS table that hold one event date, in arrival order."""
    actions = pl.DataFrame(delta.get_add_actions(flatten=True))
    # Arrival order: a writer streams rows in order and cuts files as it goes, so the files
    # sort by their first row's (ingested_at, source_file, line_no).
    paths = (actions.filter(pl.col("partition.event_date") == day)
             .sort(["min.ingested_at", "min.source_file", "min.line_no", "path"]).get_column("path").to_list())
    root = delta.table_uri.rstrip("/")
    return [f"{root}/{path}" for path in paths]


def ods_batches(lake: Lake, files: list[str], day: dt.date) -> Iterator[pl.DataFrame]:
    """ODS rows of one event date, batch by batch, read with pyarrow alone.

    Plain pyarrow (not deltalake) because the batches feed a Delta write that is running.
    """
    import pyarrow.parquet as pq

    for uri in files:
        fs, path = lake.filesystem(uri)
        with fs.open_input_file(path) as handle:
            for batch in pq.ParquetFile(handle).iter_batches(batch_size=BATCH_ROWS):
                if batch.num_rows:
                    frame = pl.from_arrow(batch)
                    assert isinstance(frame, pl.DataFrame)
                    yield frame.with_columns(event_date=pl.lit(day))


def read_columns(lake: Lake, files: list[str], columns: list[str]) -> pl.DataFrame:
    """A few columns of the ODS files, read with pyarrow alone (a cheap first pass over a day)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = []
    for uri in files:
        fs, path = lake.filesystem(uri)
        with fs.open_input_file(path) as handle:
            parts.append(pq.read_table(handle, columns=columns))
    frame = pl.from_arrow(pa.concat_tables(parts)) if parts else pl.DataFrame()
    assert isinstance(frame, pl.DataFrame)
    return frame
