"""Writing a query's result as CSV, JSON lines or Parquet, batch by batch (memory stays bounded).

A result file is written aside and renamed into place once whole (a failing query leaves the
target as it was), and never inside ``STRATA_HOME``, the lake or the landing zone: a result
written as a table's next Delta commit would rewrite the table.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl
import pyarrow as pa

from contracts.errors import InputError
from warehouse.settings import Settings

#: Formats a result can be written in (``table`` is the console's, see strata/commands/sql.py).
FILE_FORMATS = ("csv", "json", "parquet")


def write(reader: pa.RecordBatchReader, fmt: str, out: BinaryIO) -> int:
    """Write every batch of ``reader`` to ``out`` in ``fmt``; returns the rows written.

    CSV has no nested values: a list or struct cell is written as its JSON text. JSON is
    one object per line.
    """
    if fmt not in FILE_FORMATS:
        raise InputError(f"unknown format {fmt!r}: use one of {', '.join(FILE_FORMATS)}", argument="fmt")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        rows = 0
        with pq.ParquetWriter(out, reader.schema) as writer:
            for batch in reader:
                writer.write_batch(batch)
                rows += batch.num_rows
        return rows
    rows, first = 0, True
    for batch in reader:
        frame = pl.from_arrow(batch)
        assert isinstance(frame, pl.DataFrame)
        if fmt == "csv":
            _flat(frame).write_csv(out, include_header=first)
        else:
            frame.write_ndjson(out)
        rows += batch.num_rows
        first = False
    if first and fmt == "csv":  # no batch at all: still the header
        out.write((",".join(reader.schema.names) + "\n").encode())
    return rows


def target(path: Path, settings: Settings) -> Path:
    """Where a result file may go: ``path`` resolved (a symlink counts where it points), no folder, in a
    folder that exists, outside STRATA_HOME, the lake and the landing zone; else :class:`InputError`."""
    resolved = path.expanduser().resolve()
    kept = [("STRATA_HOME", settings.home), ("the landing zone", settings.landing_dir)]
    if "://" not in settings.lake_uri:
        kept.append(("the lake", Path(settings.lake_uri)))
    for what, folder in kept:
        if resolved.is_relative_to(folder.resolve()):
            raise InputError(f"{path} is inside {what} ({folder}): write results elsewhere", argument="path")
    if resolved.is_dir():
        raise InputError(f"{path} is a folder: name the file to write", argument="path")
    if not resolved.parent.is_dir():
        raise InputError(f"{resolved.parent} is not a folder", argument="path")
    return resolved


def write_file(reader: pa.RecordBatchReader, fmt: str, path: Path) -> int:
    """:func:`write` into a file beside ``path``, renamed onto it once whole; returns the rows written."""
    part = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
    try:
        with open(part, "xb") as handle:
            rows = write(reader, fmt, handle)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return rows


def _flat(frame: pl.DataFrame) -> pl.DataFrame:
    nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
    return frame.with_columns(pl.col(name).map_elements(_json_text, return_dtype=pl.String) for name in nested)


def _json_text(value: Any) -> str:
    if isinstance(value, pl.Series):
        value = value.to_list()
    return json.dumps(value, default=str)
