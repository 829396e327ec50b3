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
    return (
        high.map_elements(lambda v: f"{v:016x}", return_dtype=pl.String)
        + low.map_elements(lambda v: f"{v:016x}", return_dtype=pl.String)
    ).alias("user_pseudonym")


def feature_rows(table: Table, keys: pl.Series, day: dt.date, seed: int = 0) -> pl.DataFrame:
    """One row of ``table`` (a table served as features) per key, its timestamps within ``day``."""
    rng = np.random.default_rng(seed)
    n = len(keys)
    first_hour_us = int(dt.datetime.combine(day, dt.time(1), dt.UTC).timestamp() * 1_000_000)
    columns: dict[str, object] = {}
    for column in table.contract.columns:
        kind = column.arrow_type
        if column.name == keys.name:
            columns[column.name] = keys
        elif pa.types.is_timestamp(kind):
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
    ts = dt.datetime.combine(day, dt.time(12), dt.UTC)
    return pl.DataFrame(
        {
            "request_id": pl.Series(np.arange(n)).cast(pl.String).str.replace("^", "req-"),
            "ts": pl.Series([ts] * n).dt.cast_time_unit("us"),
            "tenant_id": ["t1"] * n,
            "user_pseudonym": keys,
            "model": ["m1"] * n,
            "operation": ["chat"] * n,
            "status_code": pl.Series([200] * n, dtype=pl.Int32),
            "event_date": pl.Series([day] * n, dtype=pl.Date),
            "is_error": [False] * n,
            "is_retry": [False] * n,
            "source": ["jsonl"] * n,
            "source_file": ["/synthetic.jsonl"] * n,
            "line_no": pl.Series(np.arange(1, n + 1)),
            "batch_id": ["synthetic"] * n,
        }
    )


def dwd_requests(
    first: dt.date, days: int, per_day: int, *, users: int = 60_000, tenants: int = 400, seed: int = 0
) -> pa.Table:
    """``per_day`` ``dwd.request`` rows on each of ``days`` days from ``first``, in the contract's schema.

    Skewed like the generator's traffic: user activity is log-normal, tenants group users, eleven
    model versions, chat requests carry a TTFT, ~3 % errors (timeouts, rate limits), 5 % retries.
    """
    from contracts import arrow_schema
    from warehouse.tables import DWD_REQUEST

    rng = np.random.default_rng(seed)
    n = per_day * days
    t0 = int(dt.datetime.combine(first, dt.time(), dt.UTC).timestamp() * 1_000_000)
    ts = np.sort(t0 + rng.integers(0, days * 86_400_000_000, n))
    weights = rng.lognormal(0.0, 1.2, users)  # a long tail of heavy users, none a large share of traffic
    user = rng.choice(users, n, p=weights / weights.sum())
    models = [
        ("aurora-chat-8b", "v2.4"),
        ("gpt-4o-mini", "2024-07-18"),
        ("aurora-code-13b", "v1.3"),
        ("aurora-chat-70b", "v1"),
        ("aurora-chat-70b", "v2"),
        ("text-embedding-3-small", "1"),
        ("bge-reranker-v2", "v2.0"),
        ("safety-clf", "2024.05"),
        ("safety-clf", "2024.06"),
        ("yolo-det-l", "v8.1"),
        ("docscan-ocr", "v5"),
    ]
    m = rng.integers(0, len(models), n)
    chat = m < 5
    err = rng.random(n)
    status = np.where(err < 0.015, 504, np.where(err < 0.03, 429, 200)).astype(np.int32)
    error_type = pl.Series(np.where(status == 504, "timeout", np.where(status == 429, "rate_limited", ""))).replace(
        "", None
    )
    keys = pseudonyms(users, seed)
    frame = pl.DataFrame(
        {
            "request_id": pl.Series(np.arange(n)).cast(pl.String).str.replace("^", "req-"),
            "ts": pl.Series(ts).cast(pl.Datetime("us", "UTC")),
            "duration_ms": rng.lognormal(6, 1, n),
            "ttft_ms": pl.Series(np.where(chat, rng.lognormal(5, 1, n), np.nan)).fill_nan(None),
            "tenant_id": pl.Series(user % tenants).cast(pl.String).str.replace("^", "tenant-"),
            "user_pseudonym": keys.gather(user),
            "operation": pl.Series(np.where(chat, "chat", "rerank")),
            "model": pl.Series([x for x, _ in models]).gather(m),
            "model_version": pl.Series([v for _, v in models]).gather(m),
            "input_tokens": rng.integers(0, 4000, n),
            "output_tokens": rng.integers(0, 1000, n),
            "status_code": status,
            "error_type": error_type,
            "cache_hit": rng.random(n) < 0.2,
            "cost_usd": rng.random(n) * 0.01,
            "is_error": status >= 400,
            "is_retry": rng.random(n) < 0.05,
            "source": pl.Series(["synthetic"]).gather(np.zeros(n, dtype=np.int64)),
            "source_file": pl.Series(["/synthetic.jsonl"]).gather(np.zeros(n, dtype=np.int64)),
            "line_no": np.arange(1, n + 1),
            "batch_id": pl.Series(["synthetic"]).gather(np.zeros(n, dtype=np.int64)),
        }
    ).with_columns(event_date=pl.col("ts").dt.date())
    schema = arrow_schema(DWD_REQUEST.contract)
    for field in schema:
        if field.name not in frame.columns:
            frame = frame.with_columns(pl.lit(None).alias(field.name))
    return frame.select(schema.names).to_arrow().cast(schema)
