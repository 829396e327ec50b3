"""Canonical JSONL (what the AI service and the generator write), parsed with DuckDB.

Every line is checked (UTF-8, JSON, an object, not oversized) in one vectorized pass.
A few fields are extracted in that same pass; many fields are read by DuckDB's JSON
reader from the good lines written back out as NDJSON, which is about 2.5× faster than
extracting thirty paths per line — and checked to line up with the input row for row.
"""

from __future__ import annotations

import os
import tempfile
from typing import Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.duck import scratch
from warehouse.sources.canonical import MAX_LINE_BYTES

#: Up to this many fields are extracted path by path; more go through the NDJSON reader.
_PATHS_UP_TO = 4


def _checked(con, raw: pa.Array, fields: Sequence[str]) -> pl.DataFrame:
    """``i`` (the line's position), ``parse_error`` per line, and ``v`` (the fields' text)."""
    con.register("lines", pa.table({"raw": raw}))
    paths = "[" + ", ".join(f"'$.\"{f}\"'" for f in fields) + "]"
    values = f"CASE WHEN ok THEN json_extract_string(s, {paths}) END" if fields else "NULL::VARCHAR[]"
    # A valid document is an object exactly when its first non-blank character is '{'. The
    # rows come back in input order (DuckDB preserves insertion order; no sort needed).
    return con.sql(f"""
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
    """).pl().with_row_index("i")


def _as_ndjson(lines: pa.Array) -> pa.Buffer:
    """The lines, each followed by ``\n``, as one contiguous buffer."""
    lines = lines.cast(pa.large_binary()) if lines.type != pa.large_binary() else lines
    empty, newline = pa.scalar(b"", pa.large_binary()), pa.scalar(b"\n", pa.large_binary())
    joined = pc.binary_join_element_wise(lines, empty, newline)
    offsets = np.frombuffer(joined.buffers()[1], np.int64)[joined.offset: joined.offset + len(joined) + 1]
    return joined.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def _read_fields(con, lines: pa.Array, fields: Sequence[str]) -> pl.DataFrame | None:
    """Fields of good lines via DuckDB's NDJSON reader; None if the rows did not line up."""
    columns = "{" + ", ".join(f"'{f}': 'VARCHAR'" for f in fields) + "}"
    fd, path = tempfile.mkstemp(prefix="strata-", suffix=".ndjson")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(_as_ndjson(lines))
        frame = con.sql(f"""SELECT * FROM read_json('{path}', format = 'newline_delimited', columns = {columns},
                            maximum_object_size = {2 * MAX_LINE_BYTES})""").pl()
    except Exception:  # noqa: BLE001 - the reader refused a line the checks passed: fall back
        return None
    finally:
        os.unlink(path)
    return frame if frame.height == len(lines) else None


def parse_json_lines(raw: pa.Array, fields: Sequence[str], *, checked_ok: bool = False) -> pl.DataFrame:
    """Fields of each JSON-object line as text, plus ``parse_error`` (null when the line parsed).

    One row per input line, in input order. Non-scalar values (e.g. ``attributes``)
    come back as their JSON text. ``checked_ok`` says every line already passed these
    checks (ODS ran them when it landed the line), so only the fields are read.
    """
    con = scratch()
    try:
        if len(fields) <= _PATHS_UP_TO:
            return _by_path(con, raw, fields)
        if checked_ok:
            read = _read_fields(con, raw, fields)
            if read is not None and _lines_up(con, raw, read, fields):
                return read.select(pl.lit(None, pl.String).alias("parse_error"), pl.all())
        checked = _checked(con, raw, ())
        ok = checked.get_column("parse_error").is_null()
        good = pc.filter(raw, pa.array(ok.to_numpy()))
        read = _read_fields(con, good, fields)
        if read is None or not _lines_up(con, good, read, fields):
            return _by_path(con, raw, fields)
        placed = pl.concat([checked.filter(ok).select("i"), read], how="horizontal")
        return checked.select("i", "parse_error").join(placed, on="i", how="left", maintain_order="left").drop("i")
    finally:
        con.unregister("lines")


def _lines_up(con, lines: pa.Array, read: pl.DataFrame, fields: Sequence[str]) -> bool:
    """Whether the reader's rows are the given lines in order (checked on an even sample of ids)."""
    if read.height != len(lines):
        return False
    if "request_id" not in fields or not len(lines):
        return True
    step = max(1, len(lines) // 64)
    expect = _checked(con, lines.take(pa.array(np.arange(0, len(lines), step))), ("request_id",))
    return expect.get_column("v").list.get(0).equals(read.get_column("request_id").gather_every(step))


def _by_path(con, raw: pa.Array, fields: Sequence[str]) -> pl.DataFrame:
    """Every field extracted path by path in the checking pass (few fields, or the fallback)."""
    checked = _checked(con, raw, fields)
    ok = pl.col("parse_error").is_null()
    return checked.select(
        "parse_error",
        *[pl.when(ok).then(pl.col("v").list.get(n, null_on_oob=True)).alias(f) for n, f in enumerate(fields)],
    )
