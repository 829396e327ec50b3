"""A small lake of the tables served as features (DWS, the scores), shaped by their contracts."""

from __future__ import annotations

import datetime as dt

import polars as pl

from benchmarks.synthetic import feature_rows, pseudonyms
from features.repo.definitions import feature_tables, join_key
from warehouse.settings import Settings
from warehouse.storage.lake import Lake
from warehouse.storage.publish import publish
from warehouse.tables import Table

DAY1 = dt.date(2026, 3, 2)
DAY2 = dt.date(2026, 3, 3)


def rows(table: Table, keys: pl.Series, day: dt.date, seed: int) -> pl.DataFrame:
    """Contract-shaped rows, every 7th optional value null (Feast stores an empty value for it)."""
    frame = feature_rows(table, keys.alias(join_key(table)), day, seed=seed)
    optional = [c.name for c in table.contract.columns if not c.required and c.name in frame.columns]
    every7 = pl.int_range(pl.len()) % 7 == seed % 7
    return frame.with_columns([pl.when(every7).then(None).otherwise(pl.col(c)).alias(c) for c in optional[:6]])


def build(settings: Settings, n: int = 120, extra_users: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Two days of rows per served table: every key on day 1, the first half again on day 2. Returns the keys."""
    keys: dict[str, list[str]] = {}
    for i, table in enumerate(feature_tables()):
        series = pseudonyms(n, seed=10 + i)
        if join_key(table) == "user_pseudonym" and extra_users:
            series = pl.concat([series, pl.Series("user_pseudonym", list(extra_users))])
        keys[table.name] = series.to_list()
        for day, part, seed in ((DAY1, series, 1), (DAY2, series.head(n // 2), 2)):
            frame = rows(table, part, day, seed)
            partitions = frame.select(table.partition_columns).unique().to_dicts()
            publish(Lake(settings), table, frame, partitions=partitions, expectations=False, checked=True)
    return keys
