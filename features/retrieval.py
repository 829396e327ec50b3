"""Point-in-time training sets: a feature service's features as of each entity row's instant.

Feast's offline store (DuckDB over the DWS Delta tables) does the as-of join: for each row,
the entity's latest features at or before ``event_timestamp`` and within the view's TTL; a row
with none keeps its place with nulls.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl

from warehouse.settings import Settings


@dataclass(frozen=True)
class HistoricalFeatures:
    """Entity rows with the service's features, and where those features come from."""

    frame: pl.DataFrame
    features: list[str]
    #: The DWS table the service's (first) feature view reads, e.g. ``dws.user_features``.
    source_table: str
    ttl: dt.timedelta


def historical_features(settings: Settings, entity_rows: pl.DataFrame, service: str) -> HistoricalFeatures:
    """Features of ``service`` for ``entity_rows`` (its join key and ``event_timestamp``), point in time."""
    import pandas as pd

    from features.store import applied_store

    store, _ = applied_store(settings)
    feature_service = store.get_feature_service(service)
    projection = feature_service.feature_view_projections[0]
    view = store.get_feature_view(projection.name)
    found = pl.from_arrow(store.get_historical_features(
        entity_df=pd.DataFrame(entity_rows.to_pandas()), features=feature_service).to_arrow())
    assert isinstance(found, pl.DataFrame)
    source = view.batch_source.path.rstrip("/").split("/")
    return HistoricalFeatures(found, [f.name for f in projection.features], f"{source[-2]}.{source[-1]}", view.ttl)
