"""Feast definitions of Strata's features: entity → source → feature view → feature service.

Everything is derived from the DWS table contracts: one feature view per ``dws.*`` table,
its entity found by the table's key column, its fields typed by :func:`contracts.feast_fields`,
its source the table's Delta log read by the ``duckdb`` offline store. Nothing here names a
DWS feature column, so a contract change reaches Feast on the next apply. Tables of other
layers that services read online (the batch scores) are listed in :data:`SERVED` with their
key, timestamp and features.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from contracts import load_feast
from contracts.errors import ContractError
from warehouse.settings import Settings
from warehouse.storage.objectstore import is_object_store
from warehouse.tables import Table, all_tables

#: Join key → (entity name, description). A Feast entity has a single join key.
ENTITIES: dict[str, tuple[str, str]] = {
    "user_pseudonym": ("user", "A user, by the HMAC pseudonym of their id."),
    "tenant_id": ("tenant", "A tenant (customer organisation)."),
    "model_key": ("model_version", "A served model version, as model@version."),
}
#: How far back a feature row still counts in point-in-time joins: the 7-day window plus a
#: day of slack, so a user's latest row stays valid across a day without traffic.
TTL = dt.timedelta(days=8)
#: Columns of a DWS table that are not features.
TIME_COLUMNS = ("feature_ts", "event_date")
#: Tables outside DWS served online too: table → (entity key, timestamp column, features).
SERVED: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "ads.user_risk_scores": ("user_pseudonym", "scored_at", ("score", "model_name", "model_version")),
}
#: Feature service → the view whose every feature it serves (one per consuming model).
SERVICES: dict[str, str] = {"user_risk_v1": "user_features"}


def feature_tables() -> list[Table]:
    """The tables Feast serves: every ``dws.*`` table with a contract, and the :data:`SERVED` ones."""
    tables = all_tables()
    return [t for t in tables if t.layer == "dws"] + [t for t in tables if t.name in SERVED]


def timestamp_column(table: Table) -> str:
    """The column that says when a row's values became known (point-in-time joins use it)."""
    return SERVED[table.name][1] if table.name in SERVED else "feature_ts"


def join_key(table: Table) -> str:
    """The table's entity key: its one primary-key column besides ``feature_ts``."""
    if table.name in SERVED:
        return SERVED[table.name][0]
    keys = [k for k in table.contract.primary_key if k not in TIME_COLUMNS]
    if len(keys) != 1 or keys[0] not in ENTITIES:
        raise ContractError(
            f"{table} is keyed by {keys}: a feature view needs exactly one entity key of "
            f"{sorted(ENTITIES)} besides feature_ts (change its contract)"
        )
    return keys[0]


def feature_names(table: Table) -> list[str]:
    """The table's feature columns: everything but its key and time columns."""
    if table.name in SERVED:
        return list(SERVED[table.name][2])
    key = join_key(table)
    return [c.name for c in table.contract.columns if c.name != key and c.name not in TIME_COLUMNS]


def view_name(table: Table) -> str:
    return table.name.split(".", 1)[1]


def definitions(settings: Settings) -> list[Any]:
    """The Feast objects to apply, for the lake of ``settings``."""
    load_feast()
    from feast import Entity, FeatureService, FeatureView, FileSource, ValueType
    from feast.data_format import DeltaFormat

    from contracts import feast_fields

    tables = feature_tables()
    used = {join_key(t) for t in tables}
    entities = {
        key: Entity(name=name, join_keys=[key], value_type=ValueType.STRING, description=text)
        for key, (name, text) in ENTITIES.items()
        if key in used
    }
    # The store's endpoint only for a lake on it: Feast hands an endpoint to a local Delta read, which fails.
    endpoint = (settings.s3_endpoint_url or None) if is_object_store(settings.lake_uri) else None
    views = {}
    for table in tables:
        name = view_name(table)
        source = FileSource(
            name=f"{name}_source",
            path=table.uri(settings),
            file_format=DeltaFormat(),
            timestamp_field=timestamp_column(table),
            s3_endpoint_override=endpoint,
            description=f"The Delta table {table.name}",
        )
        views[name] = FeatureView(
            name=name,
            entities=[entities[join_key(table)]],
            ttl=TTL,
            source=source,
            online=True,
            schema=feast_fields(table.contract, feature_names(table)),
            tags={"table": table.name, "contract_version": table.contract.version},
            description=table.contract.description or "",
        )
    services = [
        FeatureService(name=service, features=[views[view]], tags={"model": service.rsplit("_v", 1)[0]})
        for service, view in SERVICES.items()
        if view in views
    ]
    return [*entities.values(), *views.values(), *services]
