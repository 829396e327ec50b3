"""Erasure in the online stores: a user's keys leave every store Strata ever materialized to.

Called by ``strata forget`` after the lake forgot the user (``strata.pipeline.forget``), so
the warehouse never needs to know the feature layer exists. The stores are the configured
one and every one ``materialized.json`` names (a SQLite file or Redis database written to
before the configuration changed): a user forgotten only where the store is now would stay
served wherever it was. SQLite deletes with ``secure_delete``, checkpoints its write-ahead
log and vacuums (a page freed by a connection without ``secure_delete`` keeps its bytes), so
the user's bytes do not linger in free pages; Redis drops the entity's hash (all its views
at once).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa

from contracts.errors import TransientError
from features.encoding import entity_keys
from features.materialize import stores_written
from features.online_store import connect_sqlite, redis_client, table_name
from features.repo.definitions import feature_tables, join_key, view_name
from features.store import PROJECT, sqlite_path
from warehouse.settings import Settings

#: The entity key that holds a user.
USER_KEY = "user_pseudonym"


class StoreUnreachable(TransientError):
    """An online store written to before cannot be reached: the user is not forgotten there yet."""


def forget_user(settings: Settings, pseudonym: str) -> dict[str, int]:
    """Remove one user's online values from every store ever written; returns removed rows
    (SQLite) or keys (Redis) per store kind, summed over the stores of that kind."""
    key = entity_keys(USER_KEY, pa.array([pseudonym]))[0]
    views = [view_name(t) for t in feature_tables() if join_key(t) == USER_KEY]
    removed: dict[str, int] = {}
    stores = stores_written(settings)
    home_file = f"sqlite:{sqlite_path(settings)}"  # written by Feast's own materialize too
    for store in stores + ([home_file] if home_file not in stores else []):
        if store.startswith("sqlite:"):
            path = Path(store.removeprefix("sqlite:"))
            if path.exists():
                removed["online_sqlite"] = removed.get("online_sqlite", 0) + _forget_sqlite(path, key, views)
        else:
            removed["online_redis"] = removed.get("online_redis", 0) + _forget_redis(settings, store, key)
    return removed


def _forget_sqlite(path: Path, key: bytes, views: list[str]) -> int:
    con = connect_sqlite(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        count = 0
        with con:
            for view in views:
                if table_name(PROJECT, view) in tables:
                    count += con.execute(
                        f'DELETE FROM "{table_name(PROJECT, view)}" WHERE entity_key = ?', [key]
                    ).rowcount
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        # Pages freed before (by Feast's own connections, which do not zero them) may still hold the
        # user's bytes: rebuild the file, in memory, so no free page is left.
        con.execute("PRAGMA temp_store = MEMORY")
        con.execute("VACUUM")
        return count
    finally:
        con.close()


def _forget_redis(settings: Settings, store: str, key: bytes) -> int:
    client = redis_client(redis_url(settings, store))
    try:
        return int(client.delete(key + PROJECT.encode()))
    except Exception as exc:  # any client error: say which store and what to do
        raise StoreUnreachable(
            f"the online store {store} (configured, or materialized to before) could not be reached "
            f"({type(exc).__name__}: {exc}); "
            "the user is forgotten in the lake but not there yet: run forget again once it is reachable (with "
            "STRATA_REDIS_URL naming it if it needs a password), or drop its entry from materialized.json if that "
            "store is gone for good"
        ) from exc
    finally:
        client.close()


def redis_url(settings: Settings, store: str) -> str:
    """A URL for a Redis store by its id (``redis://host:port/db``, no password: the state file
    never holds one): the configured URL's scheme and credentials when it names the same host."""
    wanted, current = urlsplit(store), urlsplit(settings.redis_url)
    if (current.hostname, current.port or 6379) == (wanted.hostname, wanted.port or 6379):
        return urlunsplit((current.scheme, current.netloc, wanted.path, current.query, ""))
    return store
