"""Features for scoring: the entities active on a day, and their features as of an instant.

The features are read from the offline store's own source — the DWS Delta table the feature
service is defined over — through its Delta log (DuckDB's ``delta_scan``), with the offline
store's point-in-time rule: for each entity the latest row whose ``feature_ts`` is at or before
the instant and within the view's TTL; an entity with none gets nulls. One query streams
Arrow record batches, so a million entities never sit in memory at once.

Entities are sharded by the first hex digit of their key, a keyed hash (a pseudonym), so
shard ``i`` of ``n`` (``n`` dividing 16) owns the buckets ``i·16/n … (i+1)·16/n − 1``.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from warehouse.settings import Settings
from warehouse.storage import lake
from warehouse.storage.duck import lake_reader
from warehouse.tables import DWD_REQUEST, Table

BUCKETS = 16


def shard_buckets(shard: tuple[int, int]) -> range:
    """The entity buckets of shard ``i`` of ``n``."""
    index, count = shard
    if count < 1 or BUCKETS % count or not 0 <= index < count:
        raise ValueError(f"--shard {index}/{count}: the shard count must divide {BUCKETS} and 0 <= i < n")
    width = BUCKETS // count
    return range(index * width, (index + 1) * width)


def bucket_sql(column: str) -> str:
    """The SQL expression of an entity key's bucket (its first hex digit)."""
    return f"('0x' || substr({column}, 1, 1))::INTEGER"


def active_entities(settings: Settings, day: dt.date, entity: str, buckets: range) -> pa.Array:
    """Distinct entity keys with a request on ``day`` in these buckets, sorted."""
    if lake.open_table(settings, DWD_REQUEST) is None:
        raise LookupError("dwd.request does not exist: build DWD first (strata build dwd --date …)")
    con = lake_reader(settings)
    rows = con.execute(
        f"""
        SELECT DISTINCT {entity} AS entity FROM delta_scan('{DWD_REQUEST.uri(settings)}')
        WHERE event_date = ? AND {entity} IS NOT NULL
          AND {bucket_sql(entity)} BETWEEN ? AND ?
        ORDER BY entity""",
        [day, buckets.start, buckets.stop - 1],
    ).to_arrow_table()
    return rows.column("entity").combine_chunks() if rows.num_rows else pa.array([], pa.string())


def read_as_of(
    settings: Settings,
    source: Table,
    entity: str,
    columns: list[str],
    entities: pa.Array,
    at: dt.datetime,
    ttl: dt.timedelta,
    batch_rows: int,
) -> pa.RecordBatchReader:
    """``entity`` and ``columns`` for every entity (in the order given), as of ``at``."""
    if lake.open_table(settings, source) is None:
        raise LookupError(f"{source} does not exist: build it first")
    con = lake_reader(settings)
    con.register("wanted", pa.table({"entity": entities, "position": pa.array(range(len(entities)), pa.int64())}))
    picked = ", ".join(f'f."{c}"' for c in columns)
    query = f"""
        WITH recent AS (
            SELECT "{entity}" AS entity, {", ".join(f'"{c}"' for c in columns)}, feature_ts
            FROM delta_scan('{source.uri(settings)}')
            WHERE feature_ts <= ? AND feature_ts > ? AND event_date BETWEEN ? AND ?
              AND "{entity}" IN (SELECT entity FROM wanted)
            QUALIFY row_number() OVER (PARTITION BY "{entity}" ORDER BY feature_ts DESC) = 1
        )
        SELECT w.entity AS "{entity}", {picked}
        FROM wanted w LEFT JOIN recent f USING (entity)
        ORDER BY w.position"""
    since = at - ttl
    return con.execute(query, [at, since, since.date(), at.date()]).to_arrow_reader(batch_rows)
