"""Canonical JSONL (what the AI service and the generator write), parsed with DuckDB.

One vectorized pass per batch of lines: UTF-8 check, JSON check, then every field
extracted as text in a single JSON parse per line.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from warehouse.duck import connect
from warehouse.sources.canonical import MAX_LINE_BYTES


def parse_json_lines(raw: pa.Array, fields: Sequence[str]) -> pl.DataFrame:
    """Fields of each JSON-object line as text, plus ``parse_error`` (null when the line parsed).

    One row per input line, in input order. Non-scalar values (e.g. ``attributes``)
    come back as their JSON text.
    """
    con = connect()
    con.register("lines", pa.table({"i": np.arange(len(raw), dtype=np.int64), "raw": raw}))
    paths = "[" + ", ".join(f"'$.\"{f}\"'" for f in fields) + "]"
    parsed = con.sql(f"""
        SELECT i, parse_error,
               CASE WHEN parse_error IS NULL THEN json_extract_string(s, {paths}) END AS v
        FROM (
            SELECT i, s,
                   CASE WHEN n > {MAX_LINE_BYTES} THEN 'oversized line (> {MAX_LINE_BYTES} bytes)'
                        WHEN s IS NULL THEN 'invalid UTF-8'
                        WHEN NOT json_valid(s) THEN 'invalid JSON'
                        WHEN json_type(s) <> 'OBJECT' THEN 'not a JSON object'
                   END AS parse_error
            FROM (SELECT i, octet_length(raw) AS n,
                         CASE WHEN octet_length(raw) <= {MAX_LINE_BYTES} THEN try(decode(raw)) END AS s
                  FROM lines)
        )
        ORDER BY i
    """).pl()
    con.close()
    return parsed.select(
        "parse_error", *[pl.col("v").list.get(n, null_on_oob=True).alias(f) for n, f in enumerate(fields)]
    )
