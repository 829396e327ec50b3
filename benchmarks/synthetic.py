"""Synthetic rows of the feature and request contracts' shape, for benchmarks at sizes the generator
does not reach (its population stops at 60,000 users) and for scoring tests.

Every column of the contract gets a plausible value of its type and range: pseudonyms are 32
hex digits, rates lie in [0, 1], counts and sums are non-negative.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pyarrow as pa

from warehouse.tables import Table


def pseudonyms(n: int, seed: int = 0) -> pl.Series:
    """``n`` distinct 32-hex-digit keys, as HMAC pseudonyms look."""
    rng = np.random.default_rng(seed)
    high = pl.Series(rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True))
    low = pl.Series(np.arange(n, dtype=np.int64)).cast(pl.UInt64)
    return (high.map_elements(lambda v: f"{v:016x}", return_dtype=pl.String)
            + low.map_elements(lambda v: f"{v:016x}", return_dtype=pl.String)).alias("user_pseudonym")


def feature_rows(table: Table, keys: pl.Series, day: dt.date, seed: int = 0) -> pl.DataFrame:
    """One row of ``table`` (a DWS feature table) per key, ``feature_ts`` within ``day``."""
    rng = np.random.default_rng(seed)
    n = len(keys)
    first_hour_us = int(dt.datetime.combine(day, dt.time(1), dt.timezone.utc).timestamp() * 1_000_000)
    columns: dict[str, object] = {}
    for column in table.contract.columns:
        kind = column.arrow_type
        if column.name == keys.name:
            columns[column.name] = keys
        elif column.name == "feature_ts":
            hours = rng.integers(0, 23, n)  # the end of an hour of the day
            columns[column.name] = pl.Series(first_hour_us + hours * 3_600_000_000).cast(pl.Datetime("us", "UTC"))
        elif column.name == "event_date":
            columns[column.name] = pl.Series([day] * n, dtype=pl.Date)
        elif pa.types.is_integer(kind):
            columns[column.name] = pl.Series(rng.integers(0, 1000, n), dtype=pl.Int64)
        elif pa.types.is_floating(kind):
            top = column.maximum if column.maximum is not None else 5000.0
            columns[column.name] = pl.Series(rng.random(n) * float(top))
        elif pa.types.is_string(kind):
            columns[column.name] = pl.Series([f"{column.name}-{i % 97}" for i in range(n)])
        else:
            columns[column.name] = pl.Series([None] * n)
    return pl.DataFrame(columns)


def request_rows(keys: pl.Series, day: dt.date) -> pl.DataFrame:
    """One ``dwd.request`` row per key on ``day``: the users active that day."""
    n = len(keys)
    ts = dt.datetime.combine(day, dt.time(12), dt.timezone.utc)
    return pl.DataFrame({
        "request_id": pl.Series(np.arange(n)).cast(pl.String).str.replace("^", "req-"),
        "ts": pl.Series([ts] * n).dt.cast_time_unit("us"), "tenant_id": ["t1"] * n, "user_pseudonym": keys,
        "model": ["m1"] * n, "operation": ["chat"] * n, "status_code": pl.Series([200] * n, dtype=pl.Int32),
        "event_date": pl.Series([day] * n, dtype=pl.Date), "is_error": [False] * n,
        "is_retry": [False] * n, "source": ["jsonl"] * n, "source_file": ["/synthetic.jsonl"] * n,
        "line_no": pl.Series(np.arange(1, n + 1)), "batch_id": ["synthetic"] * n,
    })
