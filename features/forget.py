"""Erasure in the online stores: a user's keys leave SQLite and Redis.

Called by ``strata forget`` after the lake forgot the user (``strata.pipeline.forget``), so
the warehouse never needs to know the feature layer exists. SQLite deletes with
``secure_delete`` and checkpoints its write-ahead log, so the bytes do not linger in free
pages; Redis drops the entity's hash (all its views at once).
"""

from __future__ import annotations

import pyarrow as pa

from features.encoding import entity_keys
from features.online_store import connect_sqlite, redis_client, table_name
from features.repo.definitions import feature_tables, join_key, view_name
from features.store import PROJECT, sqlite_path
from warehouse.settings import Settings

#: The entity key that holds a user.
USER_KEY = "user_pseudonym"


def forget_user(settings: Settings, pseudonym: str) -> dict[str, int]:
    """Remove one user's online values; returns removed rows (SQLite) or keys (Redis) per store."""
    key = entity_keys(USER_KEY, pa.array([pseudonym]))[0]
    views = [view_name(t) for t in feature_tables() if join_key(t) == USER_KEY]
    removed: dict[str, int] = {}
    path = sqlite_path(settings)
    if path.exists():
        con = connect_sqlite(path)
        try:
            con.execute("PRAGMA secure_delete = ON")
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            count = 0
            with con:
                for view in views:
                    if table_name(PROJECT, view) in tables:
                        count += con.execute(f'DELETE FROM "{table_name(PROJECT, view)}" WHERE entity_key = ?',
                                             [key]).rowcount
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            removed["online_sqlite"] = count
        finally:
            con.close()
    if settings.online_store == "redis":
        client = redis_client(settings.redis_url)
        try:
            removed["online_redis"] = int(client.delete(key + PROJECT.encode()))
        finally:
            client.close()
    return removed
