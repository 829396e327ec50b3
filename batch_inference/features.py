"""Features for scoring: the entities active on a day, and their features as of an instant.

The features are read from the offline store's own source — the DWS Delta table the feature
service is defined over — through its Delta log (DuckDB's ``delta_scan``), with the offline
store's point-in-time rule: for each entity the latest row whose ``feature_ts`` is at or before
the instant and within the view's TTL; an entity with none gets nulls. One query per chunk of
entities, sized from the lake reader's memory, streams Arrow record batches, so a million
entities never sit in DuckDB's memory at once.

Entities are sharded by the first hex digit of their key, a keyed hash (a pseudonym), so
shard ``i`` of ``n`` (``n`` dividing 16) owns the buckets ``i·16/n … (i+1)·16/n − 1``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from contracts.errors import InputError
from warehouse.settings import Settings, size_bytes
from warehouse.storage.duck import lake_reader
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_REQUEST, Table

BUCKETS = 16


def shard_buckets(shard: tuple[int, int]) -> range:
    """The entity buckets of shard ``i`` of ``n``."""
    index, count = shard
    if count < 1 or BUCKETS % count or not 0 <= index < count:
        raise InputError(
            f"shard {index}/{count}: the shard count must divide {BUCKETS} and 0 <= i < n", argument="shard"
        )
    width = BUCKETS // count
    return range(index * width, (index + 1) * width)


def bucket_sql(column: str) -> str:
    """The SQL expression of an entity key's bucket (its first hex digit)."""
    return f"('0x' || substr({column}, 1, 1))::INTEGER"


def active_entities(lake: Lake, day: dt.date, entity: str, buckets: range) -> pa.Array:
    """Distinct entity keys with a request on ``day`` in these buckets, sorted."""
    if lake.open_table(DWD_REQUEST) is None:
        raise InputError("dwd.request does not exist: build DWD first", step="build_dwd")
    con = lake_reader(lake.settings)
    rows = con.execute(
        f"""
        SELECT DISTINCT {entity} AS entity FROM delta_scan('{DWD_REQUEST.uri(lake.settings)}')
        WHERE event_date = ? AND {entity} IS NOT NULL
          AND {bucket_sql(entity)} BETWEEN ? AND ?
        ORDER BY entity""",
        [day, buckets.start, buckets.stop - 1],
    ).to_arrow_table()
    return rows.column("entity").combine_chunks() if rows.num_rows else pa.array([], pa.string())


def read_as_of(
    lake: Lake,
    source: Table,
    entity: str,
    columns: list[str],
    entities: pa.Array,
    at: dt.datetime,
    ttl: dt.timedelta,
    batch_rows: int,
) -> pa.RecordBatchReader:
    """``entity`` and ``columns`` for every entity (in the order given), as of ``at``.

    One query per run of :func:`chunk_rows` entities, so the reader's memory bounds a chunk and
    not the day's users; each query also keeps to its chunk's key range, which a sorted
    ``entities`` (as :func:`active_entities` gives) makes narrow.
    """
    if lake.open_table(source) is None:
        raise InputError(f"{source} does not exist: build it first")
    con = lake_reader(lake.settings)
    picked = ", ".join(f'f."{c}"' for c in columns)
    query = f"""
        WITH recent AS (
            SELECT "{entity}" AS entity, {", ".join(f'"{c}"' for c in columns)}, feature_ts
            FROM delta_scan('{source.uri(lake.settings)}')
            WHERE feature_ts <= ? AND feature_ts > ? AND event_date BETWEEN ? AND ?
              AND "{entity}" BETWEEN ? AND ? AND "{entity}" IN (SELECT entity FROM wanted)
            QUALIFY row_number() OVER (PARTITION BY "{entity}" ORDER BY feature_ts DESC) = 1
        )
        SELECT w.entity AS "{entity}", {picked}
        FROM wanted w LEFT JOIN recent f USING (entity)
        ORDER BY w.position"""
    since = at - ttl
    step = chunk_rows(lake.settings, source, columns)

    def chunk(low: int) -> pa.RecordBatchReader:
        keys = entities.slice(low, step)
        bounds = pc.min_max(keys)
        con.register("wanted", pa.table({"entity": keys, "position": pa.array(range(len(keys)), pa.int64())}))
        params = [at, since, since.date(), at.date(), bounds["min"].as_py(), bounds["max"].as_py()]
        return con.execute(query, params).to_arrow_reader(batch_rows)

    first = chunk(0)

    def batches() -> Iterator[pa.RecordBatch]:
        yield from first
        for low in range(step, len(entities), step):  # one chunk's query at a time on the cursor
            yield from chunk(low)

    return pa.RecordBatchReader.from_batches(first.schema, batches())


#: What a feature read holds whatever its chunk (the scans' buffers), and the multiple of a
#: chunk's row bytes (key, features, time) it holds on top (the window's and the sort's copies).
#: Measured on two cores, 1M users, 48 features: chunks of 37k entities pass under a 128MB limit
#: and of 296k under 512MB, of 74k and 592k fail; 16k users under 40MB, of 1,024 pass (not 32MB).
_READ_RESERVE = 64_000_000
_READ_COPIES = 5


def chunk_rows(settings: Settings, source: Table, columns: list[str]) -> int:
    """Entities per query of :func:`read_as_of`, so that one query fits the lake reader's memory."""
    kinds = [source.contract.column(c).arrow_type for c in columns]
    # the key (32 hex digits), feature_ts and the position, then each feature
    row = 48 + sum(max(1, t.bit_width // 8) if pa.types.is_primitive(t) else 32 for t in kinds)
    return max(1024, (size_bytes(settings.lake_reader_memory) - _READ_RESERVE) // (row * _READ_COPIES))
