"""Reading one event date of ODS back, for a DWD build: its files, its key columns, its batches.

The rows of date D are those of partition D, and those of partition D - 1 whose
``event_dates`` lists D (a line holding records of both days, see :mod:`warehouse.ods.rows`).

The files are read with pyarrow alone (not deltalake) because the batches feed a Delta
write that is already running.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence

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
    paths = (
        actions.filter(pl.col("partition.event_date") == day)
        .sort(["min.ingested_at", "min.source_file", "min.line_no", "path"])
        .get_column("path")
        .to_list()
    )
    root = delta.table_uri.rstrip("/")
    return [f"{root}/{path}" for path in paths]


def ods_batches(lake: Lake, files: list[str], day: dt.date, borrowed: Sequence[str] = ()) -> Iterator[pl.DataFrame]:
    """ODS rows of one event date, batch by batch, read with pyarrow alone: the date's own
    files, then the lines of ``borrowed`` (the files of D - 1) that list D in ``event_dates``.

    Each row keeps its own ``event_date`` (D - 1 for a borrowed line), which says which of
    its records are D's. Plain pyarrow (not deltalake) because the batches feed a Delta
    write that is running.

    Small files share a batch (up to :data:`BATCH_ROWS` rows): the spans of one call that several
    producers exported (an app's and its gateway's) usually meet in one batch, where DWD makes them
    one row.
    """
    import pyarrow.parquet as pq

    held: list[pl.DataFrame] = []
    for uri, own in [(f, True) for f in files] + [(f, False) for f in borrowed]:  # borrowed: D's records only
        fs, path = lake.filesystem(uri)
        with fs.open_input_file(path) as handle:
            for batch in pq.ParquetFile(handle).iter_batches(batch_size=BATCH_ROWS):
                frame = pl.from_arrow(batch)
                assert isinstance(frame, pl.DataFrame)
                if not own:
                    frame = _listing(frame, day)
                if not frame.height:
                    continue
                if sum(f.height for f in held) + frame.height > BATCH_ROWS:
                    yield pl.concat(held, how="diagonal_relaxed")
                    held = []
                held.append(frame.with_columns(event_date=pl.lit(day if own else day - dt.timedelta(days=1))))
    if held:
        yield pl.concat(held, how="diagonal_relaxed")


def _listing(frame: pl.DataFrame, day: dt.date) -> pl.DataFrame:
    """The rows whose ``event_dates`` lists ``day`` (none in files written before the column)."""
    if "event_dates" not in frame.columns:
        return frame.clear()
    return frame.filter(pl.col("event_dates").list.contains(pl.lit(day)).fill_null(False))


def borrowed_files(lake: Lake, delta: DeltaTable, day: dt.date) -> list[str]:
    """The files of D - 1 in the opened ODS table that hold lines listing D in ``event_dates``."""
    files = ods_files(delta, day - dt.timedelta(days=1))
    return [uri for uri in files if _listing(read_columns(lake, [uri], ["event_dates"], missing_ok=True), day).height]


def borrowed_arrivals(lake: Lake, files: list[str], day: dt.date) -> pl.Series:
    """``ingested_at`` of the borrowed lines of D (what :func:`ods_batches` yields of ``files``)."""
    frame = read_columns(lake, files, ["ingested_at", "event_dates"], missing_ok=True)
    if not frame.height:
        return pl.Series("ingested_at", [], pl.Datetime("us", "UTC"))
    return _listing(frame, day).get_column("ingested_at")


def read_columns(lake: Lake, files: list[str], columns: list[str], *, missing_ok: bool = False) -> pl.DataFrame:
    """A few columns of the ODS files, read with pyarrow alone (a cheap first pass over a day).

    With ``missing_ok`` a file written before a column existed gives no rows.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = []
    for uri in files:
        fs, path = lake.filesystem(uri)
        with fs.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            if missing_ok and not set(columns) <= set(parquet.schema_arrow.names):
                continue
            parts.append(parquet.read(columns=columns))
    frame = pl.from_arrow(pa.concat_tables(parts)) if parts else pl.DataFrame()
    assert isinstance(frame, pl.DataFrame)
    return frame
