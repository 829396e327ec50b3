"""Canonical timestamp text → UTC instants.

The canonical ``ts`` is RFC 3339 with an offset (``Z``, ``+08:00``, …) or epoch
milliseconds. Anything else (a naive time, garbage) parses to null, which DWD
reports as rule ``ts.type``.
"""

from __future__ import annotations

import polars as pl

_EPOCH_MS = r"^-?\d{1,16}$"


def parse_ts(text: pl.Expr) -> pl.Expr:
    """``Datetime(us, UTC)`` of canonical timestamp text; null when it is not canonical."""
    epoch = pl.from_epoch(text.cast(pl.Int64, strict=False), time_unit="ms").dt.replace_time_zone("UTC")
    rfc3339 = (
        text.str.replace(r"Z$", "+00:00")
        .str.replace(" ", "T", literal=True)
        .str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%:z", strict=False, time_unit="us", time_zone="UTC")
    )
    return pl.when(text.str.contains(_EPOCH_MS)).then(epoch.dt.cast_time_unit("us")).otherwise(rfc3339)
