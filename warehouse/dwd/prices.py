"""Model prices: versioned reference data, so cost is computed and re-computable.

``prices.csv`` (model, effective_from, input/output/cached price per 1k tokens, and
optionally ``bills_refusals``) is loaded into ``dwd.model_price`` (one Delta version per
load). A request's cost uses the price row in effect at its timestamp.

The billing rule: a request refused before inference — answered with a 4xx status, such
as an invalid request (400) or a rate limit (429) — of a priced model costs 0, as providers bill
it, whatever usage its producer reported (LiteLLM reports none on failures), unless its price row
sets ``bills_refusals``. Every other request is billed for its tokens, failures after inference
started (5xx) included; an unpriced model's cost is null.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from warehouse.settings import Settings
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_MODEL_PRICE

_COLUMNS = {
    "model": pl.String,
    "effective_from": pl.Date,
    "input_price_per_1k": pl.Float64,
    "output_price_per_1k": pl.Float64,
    "cached_input_price_per_1k": pl.Float64,
    "bills_refusals": pl.Boolean,
}
_OPTIONAL = frozenset({"cached_input_price_per_1k", "bills_refusals"})
#: Statuses of a request refused before inference (not billed unless the price row says so).
REFUSED = range(400, 500)


def load_prices(settings: Settings, csv_path: Path) -> int:
    """Replace the price table with the contents of ``csv_path``; returns the Delta version.

    A file with a missing column or a bad row changes nothing (see :mod:`warehouse.dwd.reference`).
    """
    from warehouse.dwd.reference import read_checked
    from warehouse.storage.publish import publish

    frame = read_checked(csv_path, DWD_MODEL_PRICE, "price", optional=_OPTIONAL)
    result = publish(Lake(settings), DWD_MODEL_PRICE, frame, mode="overwrite")
    assert result.version is not None and not result.rows_rejected
    return result.version


def read_prices(lake: Lake) -> pl.DataFrame:
    """The current price table (empty when none was loaded)."""
    if lake.open_table(DWD_MODEL_PRICE) is None:
        return pl.DataFrame(schema=_COLUMNS)
    prices = lake.read_frame(DWD_MODEL_PRICE)
    # A price table loaded before a column was added reads that column as null.
    return prices.with_columns(pl.lit(None, _COLUMNS[c]).alias(c) for c in _COLUMNS if c not in prices.columns).select(
        list(_COLUMNS)
    )


def with_cost(requests: pl.DataFrame, prices: pl.DataFrame) -> pl.DataFrame:
    """Add ``cost_usd`` from the price in effect at each request's ``ts`` under the billing rule
    (null when unpriced).

    The as-of join runs on the few columns it needs, not on the whole (wide) frame.
    """
    if prices.is_empty():
        return requests.with_columns(cost_usd=pl.lit(None, pl.Float64))
    keyed = (
        prices.with_columns(_from=pl.col("effective_from").cast(pl.Datetime("us")).dt.replace_time_zone("UTC"))
        .sort("_from")
        .drop("effective_from")
    )
    narrow = requests.select(
        "model",
        "input_tokens",
        "cached_input_tokens",
        "output_tokens",
        "status_code",
        _i=pl.int_range(pl.len()),
        _at=pl.col("ts").fill_null(pl.datetime(1970, 1, 1, time_zone="UTC")),
    ).sort("_at")
    joined = narrow.join_asof(
        keyed, left_on="_at", right_on="_from", by="model", strategy="backward", check_sortedness=False
    )
    tokens_in = pl.col("input_tokens").cast(pl.Float64, strict=False)
    cached = pl.col("cached_input_tokens").cast(pl.Float64, strict=False).fill_null(0)
    tokens_out = pl.col("output_tokens").cast(pl.Float64, strict=False).fill_null(0)
    cost = (
        (tokens_in - cached).clip(lower_bound=0) * pl.col("input_price_per_1k")
        + cached * pl.col("cached_input_price_per_1k").fill_null(pl.col("input_price_per_1k"))
        + tokens_out * pl.col("output_price_per_1k")
    ) / 1000
    status = pl.col("status_code").cast(pl.Int64, strict=False)
    refused = status.is_between(REFUSED.start, REFUSED.stop - 1).fill_null(False)
    priced = pl.col("input_price_per_1k").is_not_null()
    cost = pl.when(refused & priced & ~pl.col("bills_refusals").fill_null(False)).then(0.0).otherwise(cost)
    return requests.with_columns(cost_usd=joined.sort("_i").select(cost).to_series())
