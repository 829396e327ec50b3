"""Canonical JSONL (what the AI service and the generator write), parsed with DuckDB.

DuckDB's JSON file reader parses each line once, in parallel, and is by far the fastest
parser here, so lines reach it as a file: the file's own bytes when the caller has them
(ingest), the lines concatenated as they are when every line is already known to be a
JSON object (DWD), or the lines joined by newlines otherwise. The reader's rows are
checked to line up with the input, and the few lines it could not read (malformed,
blank, oversized) are checked one by one to say why. When anything does not line up,
every line is checked and extracted one by one, which is slower but always right.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa

from warehouse.sources.canonical import MAX_LINE_BYTES
from warehouse.storage.duck import SCRATCH_THREADS, scratch

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

#: Bytes DuckDB's NDJSON reader treats as an empty line (it yields no row for one).
_BLANK = b" \t\n\v\f\r"


def _checked(con: DuckDBPyConnection, raw: pa.Array, fields: Sequence[str]) -> pl.DataFrame:
    """``i`` (the line's position), ``parse_error`` per line, and ``v`` (the fields' text)."""
    con.register("lines", pa.table({"raw": raw}))
    try:
        paths = "[" + ", ".join(f"'$.\"{f}\"'" for f in fields) + "]"
        values = f"CASE WHEN ok THEN json_extract_string(s, {paths}) END" if fields else "NULL::VARCHAR[]"
        # A valid document is an object exactly when its first non-blank character is '{'. The
        # rows come back in input order (DuckDB preserves insertion order; no sort needed).
        return (
            con.sql(f"""
            SELECT CASE WHEN n > {MAX_LINE_BYTES} THEN 'oversized line (> {MAX_LINE_BYTES} bytes)'
                        WHEN s IS NULL THEN 'invalid UTF-8'
                        WHEN NOT ok THEN 'invalid JSON'
                        WHEN ltrim(s)[1] <> '{{' THEN 'not a JSON object'
                   END AS parse_error,
                   {values} AS v
            FROM (
                SELECT n, s, coalesce(json_valid(s), false) AS ok
                FROM (SELECT octet_length(raw) AS n,
                             CASE WHEN octet_length(raw) <= {MAX_LINE_BYTES} THEN try(decode(raw)) END AS s
                      FROM lines)
            )
        """)
            .pl()
            .with_row_index("i")
        )
    finally:
        con.unregister("lines")


def _contiguous(lines: pa.Array) -> tuple[np.ndarray, pa.Buffer]:
    """Offsets (from 0) and the data of ``lines``, whose values lie back to back in memory."""
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    if lines.type != pa.large_binary():
        lines = lines.cast(pa.large_binary())
    offsets = np.frombuffer(lines.buffers()[1], np.int64)[lines.offset : lines.offset + len(lines) + 1]
    data = lines.buffers()[2]
    start = int(offsets[0]) if len(offsets) else 0
    size = int(offsets[-1]) - start if len(offsets) else 0
    return offsets - start, (data.slice(start, size) if data is not None else pa.py_buffer(b""))


def _as_ndjson(lines: pa.Array) -> pa.Buffer:
    """The lines, each followed by ``\\n``, as one contiguous buffer."""
    offsets, data = _contiguous(lines)
    return pa.py_buffer(np.insert(np.frombuffer(data, np.uint8), offsets[1:], 10))


@contextmanager
def _files(folder: Path, *parts: pa.Buffer | memoryview | bytes) -> Iterator[list[str]]:
    """The byte strings written to files in ``folder``, removed afterwards."""
    paths: list[str] = []
    try:
        for part in parts:
            fd, path = tempfile.mkstemp(prefix="parse-", suffix=".json", dir=folder)
            paths.append(path)
            with os.fdopen(fd, "wb") as handle:
                handle.write(part)
        yield paths
    finally:
        for path in paths:
            os.unlink(path)


def _read(
    con: DuckDBPyConnection, paths: list[str], fields: Sequence[str], *, lenient: bool, largest: int
) -> pl.DataFrame:
    """The fields (as text) of every JSON document in the files, in order."""
    columns = "{" + ", ".join(f"'{f}': 'VARCHAR'" for f in fields) + "}"
    fmt = "newline_delimited" if lenient else "unstructured"
    files = "[" + ", ".join(f"'{p}'" for p in paths) + "]"
    return con.sql(f"""SELECT * FROM read_json({files}, format = '{fmt}', columns = {columns},
                       ignore_errors = {str(lenient).lower()}, maximum_object_size = {max(largest + 64, 1 << 21)})
                    """).pl()


def _read_objects(con: DuckDBPyConnection, lines: pa.Array, fields: Sequence[str], folder: Path) -> pl.DataFrame | None:
    """Fields of lines that are all JSON objects, read from their bytes as they lie in memory
    (objects delimit themselves); None when the reader refused them or did not line up."""
    offsets, data = _contiguous(lines)
    if not len(lines):
        return None
    # One file per parsing thread, cut at line boundaries: the reader parses a file per thread.
    cuts = [
        int(offsets[np.searchsorted(offsets, offsets[-1] * k // SCRATCH_THREADS)]) for k in range(SCRATCH_THREADS + 1)
    ]
    parts = [data.slice(low, high - low) for low, high in itertools.pairwise(cuts) if high > low]
    try:
        with _files(folder, *parts) as paths:
            frame = _read(con, paths, fields, lenient=False, largest=int(np.diff(offsets).max()))
    except Exception:  # the reader refused a line the checks passed: fall back
        return None
    return frame if _lines_up(con, lines, frame, fields) else None


def _blank(offsets: np.ndarray, data: pa.Buffer) -> np.ndarray:
    """Which lines are empty or only whitespace (the NDJSON reader skips them)."""
    blank: np.ndarray = np.diff(offsets) == 0
    if len(data):
        first = np.frombuffer(data, np.uint8)[np.minimum(offsets[:-1], len(data) - 1)]
        for i in np.flatnonzero(np.isin(first, np.frombuffer(_BLANK, np.uint8)) & ~blank):
            blank[i] = not bytes(data[offsets[i] : offsets[i + 1]]).strip(_BLANK)
    return blank


def _read_lines(
    con: DuckDBPyConnection,
    raw: pa.Array,
    fields: Sequence[str],
    ndjson: pa.Buffer | memoryview | bytes | None,
    folder: Path,
) -> pl.DataFrame | None:
    """Every line's parse error and fields via the NDJSON reader; None if it did not line up."""
    n = len(raw)
    offsets, data = _contiguous(raw)
    lengths = np.diff(offsets)
    blank, oversized = _blank(offsets, data), lengths > MAX_LINE_BYTES
    read_rows = ~blank
    if ndjson is None or oversized.any():  # the lines the reader would see, without the oversized ones
        read_rows &= ~oversized
        ndjson = _as_ndjson(raw.filter(pa.array(read_rows)))
    placed = np.flatnonzero(read_rows)
    try:
        with _files(folder, ndjson) as paths:
            read = _read(con, paths, fields, lenient=True, largest=int(lengths[read_rows].max(initial=0)))
    except Exception:  # fall back to line-by-line checks
        return None
    if read.height != len(placed):
        return None
    # The reader gives a line that is not a JSON object (or not UTF-8) a row of nulls, and
    # after a truncated line it loses the next one too: rows of nulls, and the lines it never
    # saw, are checked and extracted one by one, which also says what is wrong with them.
    good = np.zeros(n, bool)
    good[placed] = ~read.select(pl.all_horizontal(pl.all().is_null())).to_series().to_numpy()
    suspect = np.flatnonzero(~good)
    sample = placed[good[placed]]
    sample = sample[:: max(1, len(sample) // 64)]
    if not _lines_up(con, raw.take(pa.array(sample)), read.filter(pl.Series(np.isin(placed, sample))), fields):
        return None
    fixed = _by_path(con, raw.take(pa.array(suspect)), fields)
    if len(placed) == n:  # every line has its row: put the suspects' rows in place
        rows = read.with_columns(pl.repeat(None, n, dtype=pl.String, eager=True).alias("parse_error"))
        return rows.select([rows.get_column(c).scatter(suspect, fixed.get_column(c)) for c in fixed.columns])
    rows = read.with_columns(i=pl.Series(placed.astype(np.uint32))).filter(pl.Series(good[placed]))
    fixed = fixed.with_columns(i=pl.Series(suspect.astype(np.uint32)))
    return pl.concat([rows, fixed], how="diagonal").sort("i").select("parse_error", *fields)


def parse_json_lines(
    raw: pa.Array,
    fields: Sequence[str],
    *,
    folder: Path,
    checked_ok: bool = False,
    ndjson: pa.Buffer | memoryview | bytes | None = None,
) -> pl.DataFrame:
    """Fields of each JSON-object line as text, plus ``parse_error`` (null when the line parsed).

    One row per input line, in input order. Non-scalar values (e.g. ``attributes``)
    come back as their JSON text. ``checked_ok`` says every line already passed these
    checks (ODS ran them when it landed the line). ``ndjson`` is the lines' bytes as they
    were in their file (each line ended by ``\\n``), when the caller has them: no copy.
    ``folder`` is where the reader's input files go (a scratch folder under ``STRATA_HOME``:
    they hold raw lines).
    """
    con = scratch()
    con.execute(f"SET temp_directory = '{str(folder)!s}'".replace("'", "''", 0))  # DuckDB's spills stay there too
    if not len(raw) or not fields:
        return _by_path(con, raw, fields)
    if checked_ok:
        read = _read_objects(con, raw, fields, folder)
        if read is not None:
            return read.select(pl.lit(None, pl.String).alias("parse_error"), pl.all())
    read = _read_lines(con, raw, fields, ndjson, folder)
    return read if read is not None else _by_path(con, raw, fields)


def _lines_up(con: DuckDBPyConnection, lines: pa.Array, read: pl.DataFrame, fields: Sequence[str]) -> bool:
    """Whether the reader's rows are the given lines in order (checked on an even sample of ids)."""
    if read.height != len(lines):
        return False
    if "request_id" not in fields or not len(lines):
        return True
    step = max(1, len(lines) // 64)
    sample = np.arange(0, len(lines), step)
    expect = _checked(con, lines.take(pa.array(sample)), ("request_id",))
    return expect.get_column("v").list.get(0).equals(read.get_column("request_id").gather_every(step))


def _by_path(con: DuckDBPyConnection, raw: pa.Array, fields: Sequence[str]) -> pl.DataFrame:
    """Every field extracted path by path in the checking pass (few lines, or the fallback)."""
    checked = _checked(con, raw, fields)
    ok = pl.col("parse_error").is_null()
    return checked.select(
        "parse_error",
        *[pl.when(ok).then(pl.col("v").list.get(n, null_on_oob=True)).alias(f) for n, f in enumerate(fields)],
    )
