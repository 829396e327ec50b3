"""Comparing whole lakes: the tables a run leaves, without the run's own metadata."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from warehouse.settings import Settings
from warehouse.storage.lake import Lake
from warehouse.tables import all_tables

#: Columns that say when and in which run a row was written, not what it holds.
RUN_METADATA = {"ingested_at", "landed_at", "batch_id", "quarantined_at", "checked_at", "forgotten_at"}


def contents(settings: Settings) -> dict[str, object]:
    """Every table's rows, sorted, without run metadata; ``ops.audit_log`` as its set of
    (table, partition, outcome), which a crashed attempt and its re-run both leave."""
    out: dict[str, object] = {}
    for table in all_tables():
        if Lake(settings).open_table(table) is None:
            continue
        frame = Lake(settings).read_frame(table)
        if table.name == "ops.audit_log":
            out[table.name] = set(frame.select("table_name", "partition", "status").iter_rows())
            continue
        frame = frame.drop([c for c in frame.columns if c in RUN_METADATA])
        sortable = [c for c in frame.columns if not isinstance(frame.schema[c], (pl.List, pl.Struct))]
        out[table.name] = frame.sort(sortable, nulls_last=True).rows()
    return out


def differences(mine: dict[str, object], theirs: dict[str, object]) -> list[str]:
    """Tables that differ, with a hint of how."""
    found = []
    for name in sorted(set(mine) | set(theirs)):
        a, b = mine.get(name), theirs.get(name)
        if a != b:
            size = (len(a) if a is not None else None, len(b) if b is not None else None)  # type: ignore[arg-type]
            found.append(f"{name}: {size[0]} vs {size[1]} rows")
    return found


def assert_no_trace(root: Path, text: str) -> None:
    """No file under ``root`` holds ``text``: Parquet and gzip files decoded (compressed pages would hide it)."""
    for path in root.rglob("*"):
        if path.suffix == ".parquet":
            assert text not in repr(pq.read_table(path).to_pylist()), path
        elif path.is_file():
            data = path.read_bytes()
            assert text.encode() not in (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data), path
