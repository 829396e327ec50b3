"""Tenant quotas: versioned reference data, so quota use is computed and re-computable.

``quotas.csv`` (tenant_id, effective_from, daily_request_quota, daily_token_quota) is
loaded into ``dwd.tenant_quota`` (one Delta version per load, like prices). The quota of
a tenant on a day is the row in effect that day (the latest ``effective_from`` on or
before it); an empty quota cell means no quota of that kind. ``ads.tenant_daily`` compares
each day's use with it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from warehouse.settings import Settings
from warehouse.tables import DWD_TENANT_QUOTA

_COLUMNS = {"tenant_id": pl.String, "effective_from": pl.Date, "daily_request_quota": pl.Int64,
            "daily_token_quota": pl.Int64}
_OPTIONAL = {"daily_request_quota", "daily_token_quota"}


def load_quotas(settings: Settings, csv_path: Path) -> int:
    """Replace the quota table with the contents of ``csv_path``; returns the Delta version."""
    from contracts import split_rows
    from warehouse.storage.publish import publish

    try:
        frame = pl.read_csv(csv_path, infer_schema=False)
    except Exception as exc:  # polars raises several types for unreadable CSV
        raise ValueError(f"{csv_path}: not a readable quota CSV: {exc}") from None
    missing = sorted(set(_COLUMNS) - _OPTIONAL - set(frame.columns))
    if missing:
        raise ValueError(f"{csv_path}: missing quota column(s) {missing}; expected {list(_COLUMNS)}")
    extra = sorted(set(frame.columns) - set(_COLUMNS))
    if extra:
        raise ValueError(f"{csv_path}: unknown quota column(s) {extra}; expected {list(_COLUMNS)}")
    frame = frame.with_columns(pl.lit(None, pl.String).alias(c) for c in _OPTIONAL if c not in frame.columns)
    # Cells stay text here: the contract's row checks type them and name a cell that is no date or number.
    frame = frame.select(list(_COLUMNS)).with_columns(pl.col(c).str.strip_chars().replace("", None) for c in _COLUMNS)
    rejected = split_rows(frame, DWD_TENANT_QUOTA.contract).rejected
    if rejected.height:  # a quota list is loaded whole or not at all
        lines = [f"line {i + 2}: {row}" for i, row in zip(
            frame.with_row_index().join(rejected, on=list(_COLUMNS), nulls_equal=True)["index"].to_list(),
            rejected.head(3).to_dicts())]
        raise ValueError(f"{csv_path}: {rejected.height} quota row(s) break the contract, nothing loaded:\n  "
                         + "\n  ".join(lines[:3]))
    result = publish(settings, DWD_TENANT_QUOTA, frame, mode="overwrite")
    assert result.version is not None
    return result.version
