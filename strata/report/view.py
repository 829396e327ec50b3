"""What the report reads the lake through: one DuckDB cursor, the date range, the tables there are."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

import polars as pl

from strata.report.charts import plotly_text
from warehouse.settings import Settings
from warehouse.tables import Table, all_tables

if TYPE_CHECKING:
    import duckdb

    from warehouse.storage.lake import Lake


@dataclasses.dataclass
class LakeView:
    """What the sections read through: one DuckDB cursor on the lake, the range, the tables there are, and
    when the page is made (what freshness is judged at), as a reader of the report's, not the writers' lake
    handle ``warehouse.storage.lake.Lake``."""

    settings: Settings
    con: duckdb.DuckDBPyConnection
    start: dt.date
    end: dt.date
    present: frozenset[str]
    handle: Lake
    made: dt.datetime

    @classmethod
    def open(cls, settings: Settings, start: dt.date, end: dt.date) -> LakeView:
        """The lake's reader and the names of the tables that exist in it."""
        from warehouse.storage.duck import lake_reader
        from warehouse.storage.lake import Lake

        handle = Lake(settings)
        present = frozenset(t.name for t in all_tables() if handle.exists(t))
        return cls(settings, lake_reader(settings), start, end, present, handle, dt.datetime.now(dt.UTC))

    def rows(self, name: str) -> int:
        """How many rows the table holds now: the sum of its files' row counts in its Delta log, so no data
        file is read (a lake of billions of rows on S3 costs what its log costs). Counted by DuckDB when a
        file's count is missing (a writer that kept no statistics) or may be too high (deletion vectors)."""
        delta = self.handle.open_table(Table(name))
        if delta is None:
            return 0
        files = pl.DataFrame(delta.get_add_actions(flatten=True))
        counts = files.get_column("num_records") if "num_records" in files.columns else None
        if counts is None or counts.null_count() or "deletionVectors" in (delta.protocol().writer_features or ()):
            row = self.con.sql(f"SELECT count(*) FROM {self.scan(name)}").fetchone()
            return int(row[0]) if row else 0
        return int(counts.sum())

    def scan(self, name: str) -> str:
        """The table as a DuckDB relation, read through its Delta log."""
        return f"delta_scan('{Table(name).uri(self.settings)}')"

    @property
    def days(self) -> str:
        """A SQL predicate: ``event_date`` within the report's range."""
        return f"event_date BETWEEN DATE '{self.start}' AND DATE '{self.end}'"

    def frame(self, sql: str) -> pl.DataFrame:
        """The rows of ``sql``, as the lake holds them (for :func:`table_html`, which escapes them itself)."""
        return self.con.sql(sql).pl()

    def chart_frame(self, sql: str) -> pl.DataFrame:
        """The rows of ``sql`` for a chart: every string through :func:`plotly_text`, so a name from the
        logs (a tenant, a model, a version) is drawn as the text it is."""
        frame = self.frame(sql)
        return frame.with_columns(pl.col(pl.String).map_elements(plotly_text, return_dtype=pl.String))

    def missing(self, *names: str) -> str | None:
        """A line saying which of ``names`` are not built yet, or None when all exist."""
        absent = [n for n in names if n not in self.present]
        return f"Not built yet ({', '.join(absent)} does not exist in the lake)." if absent else None
