"""Strata's writers into Feast's online stores, laid out exactly as Feast lays them out.

SQLite: Feast's table ``{project}_{view}`` (``entity_key, feature_name, value, value_text,
vector_value, event_ts, created_ts``; primary key ``(entity_key, feature_name)``), one row
per entity and feature, ``event_ts`` in the epoch seconds Feast's adapter stores. Redis: one
hash per entity at ``serialize_entity_key(…) + project``, a field per feature named by the
murmur3 hash of ``{view}:{feature}`` and ``_ts:{view}`` holding a protobuf ``Timestamp``.
Both writers batch (multi-row ``INSERT``s, one transaction per chunk; pipelined ``HSET``s) and
never replace a stored value with an older one (an equal time replaces: a rebuilt partition's
new values win).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from contracts.errors import InputError


@dataclass
class Chunk:
    """Encoded rows of one view: entity keys, per feature (bytes, text) columns, their times."""

    keys: list[bytes]
    columns: list[tuple[list[bytes], list[str | None]]]
    times: list[dt.datetime]


class Writer(Protocol):
    def write(self, chunk: Chunk) -> int: ...
    def close(self) -> None: ...


def table_name(project: str, view: str) -> str:
    """Feast's SQLite table of a feature view (no view versioning)."""
    return f"{project}_{view}"


def sqlite_epoch(ts: dt.datetime) -> int:
    """``event_ts`` as Feast's SQLite adapter stores it in a UTC process: epoch seconds. (Feast reads
    the naive UTC time as local time both ways, so Strata runs Feast in UTC: see ``store.utc``.)"""
    return int(ts.timestamp())


def connect_sqlite(path: Path) -> sqlite3.Connection:
    """A connection to the online store file, configured as Feast leaves it (its journal mode), with
    ``secure_delete``: a value replaced or deleted is zeroed, so an erased user's bytes never linger
    in free space (an upsert frees the old row's cell)."""
    con = sqlite3.connect(path, timeout=60, check_same_thread=False)
    con.execute("PRAGMA secure_delete = ON")
    return con


#: Rows per ``INSERT`` statement: a multi-row ``VALUES`` costs one statement step per 32 rows.
ROWS_PER_STATEMENT = 32
_COLUMNS = 5


class SqliteWriter:
    """Upserts rows into Feast's table for one view; one transaction per chunk."""

    def __init__(self, path: Path, project: str, view: str, features: Sequence[str]) -> None:
        self.con = connect_sqlite(path)
        self.features = list(features)
        name = '"' + table_name(project, view).replace('"', '""') + '"'
        found = self.con.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", [table_name(project, view)]
        ).fetchone()
        if found is None:
            raise InputError(
                f"the online store {path} has no table {table_name(project, view)}: apply the "
                "Feast definitions first (materializing does)",
                step="materialize",
            )

        def statement(rows: int) -> str:
            return (
                f"INSERT INTO {name} (entity_key, feature_name, value, value_text, event_ts, created_ts) VALUES "
                + ", ".join(["(?, ?, ?, ?, ?, NULL)"] * rows)
                + " ON CONFLICT(entity_key, feature_name) DO UPDATE SET value = excluded.value, value_text = "
                "excluded.value_text, event_ts = excluded.event_ts, created_ts = excluded.created_ts "
                f"WHERE excluded.event_ts >= {name}.event_ts"
            )

        self.many, self.one = statement(ROWS_PER_STATEMENT), statement(1)

    def grid(self, chunk: Chunk) -> np.ndarray:
        """The chunk's rows (key, feature, value, text, event_ts), entity by entity in view order."""
        n, width = len(chunk.keys), len(self.features)
        epochs: dict[dt.datetime, int] = {}
        stamps = [epochs.get(t) or epochs.setdefault(t, sqlite_epoch(t)) for t in chunk.times]
        grid = np.empty((n, width, _COLUMNS), dtype=object)
        grid[:, :, 0] = np.array([*chunk.keys, b""], dtype=object)[:-1, None]  # (a list of bytes stays objects)
        grid[:, :, 1] = np.array(self.features, dtype=object)[None, :]
        for j, (encoded, texts) in enumerate(chunk.columns):
            grid[:, j, 2] = encoded
            grid[:, j, 3] = texts
        grid[:, :, 4] = np.array(stamps, dtype=object)[:, None]
        return grid.reshape(n * width, _COLUMNS)

    def write(self, chunk: Chunk) -> int:
        rows = self.grid(chunk)
        whole = len(rows) // ROWS_PER_STATEMENT * ROWS_PER_STATEMENT
        with self.con:
            self.con.executemany(self.many, rows[:whole].reshape(-1, ROWS_PER_STATEMENT * _COLUMNS).tolist())
            self.con.executemany(self.one, rows[whole:].tolist())
        return len(rows)

    def close(self) -> None:
        self.con.close()


def mmh3_field(view: str, feature: str) -> bytes:
    """The Redis hash field of a feature: Feast's little-endian murmur3 of ``{view}:{feature}``."""
    import mmh3

    return struct.pack("<Q", mmh3.hash(f"{view}:{feature}", signed=False))[:4]


def redis_timestamp(ts: dt.datetime) -> bytes:
    """A protobuf ``Timestamp`` of ``ts``, serialized, as Feast stores it under ``_ts:{view}``."""
    from google.protobuf.timestamp_pb2 import Timestamp

    stamp = Timestamp()
    stamp.FromDatetime(ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC))
    return cast(bytes, stamp.SerializeToString())


def _nanos(stored: bytes | None) -> int:
    from google.protobuf.timestamp_pb2 import Timestamp

    if not stored:
        return -1
    stamp = Timestamp()
    stamp.ParseFromString(stored)
    return cast(int, stamp.seconds * 1_000_000_000 + stamp.nanos)


def redis_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


#: Reads ``_ts:{view}`` (ARGV[1]) of many entity keys in one call (false where absent).
_READ_TIMES_LUA = (
    "local out = {} for i, k in ipairs(KEYS) do out[i] = redis.call('HGET', k, ARGV[1]) or false end return out"
)
#: Entities per script call and per pipelined send: bounds memory and each call's time on the server.
REDIS_BATCH = 4_096


class RedisWriter:
    """Whole entity hashes (``HSET key _ts:{view} ts f1 v1 …``, Feast's layout and field order),
    packed by hiredis and pipelined in one send per batch, after one scripted read of the
    batch's stored times: an entity whose stored time is newer is left alone. (Like Feast's
    writer, the read and the write are separate steps: two concurrent materializations of one
    view could race; Strata runs one at a time.)"""

    def __init__(self, url: str, project: str, view: str, features: Sequence[str]) -> None:
        self.client = redis_client(url)
        self.suffix = project.encode()
        self.ts_field = f"_ts:{view}".encode()
        self.fields = [mmh3_field(view, f) for f in features]
        self.read_times = self.client.register_script(_READ_TIMES_LUA)

    def write(self, chunk: Chunk) -> int:
        written = 0
        for start in range(0, len(chunk.keys), REDIS_BATCH):
            stop = start + REDIS_BATCH
            written += self._write(
                chunk.keys[start:stop], [e[start:stop] for e, _ in chunk.columns], chunk.times[start:stop]
            )
        return written * len(self.fields)

    def _write(self, entity_keys: list[bytes], columns: list[list[bytes]], times: list[dt.datetime]) -> int:
        import hiredis

        keys = [k + self.suffix for k in entity_keys]
        stored = self.read_times(keys=keys, args=[self.ts_field])
        stamps: dict[dt.datetime, tuple[bytes, int]] = {}
        seen: dict[bytes, int] = {}
        keep, stamp_column = [], []
        for i, (ts, before) in enumerate(zip(times, stored)):
            stamp = stamps.get(ts)
            if stamp is None:
                raw = redis_timestamp(ts)
                stamp = stamps[ts] = (raw, _nanos(raw))
            if before and (seen.get(before) or seen.setdefault(before, _nanos(before))) > stamp[1]:
                continue  # the store holds a newer value
            keep.append(i)
            stamp_column.append(stamp[0])
        if not keep:
            return 0
        width = len(self.fields)
        grid = np.empty((len(entity_keys), 4 + 2 * width), dtype=object)
        grid[:, 0] = b"HSET"
        grid[:, 1] = np.array([*keys, b""], dtype=object)[:-1]  # (a trailing item keeps bytes as objects)
        grid[:, 2] = self.ts_field
        grid[:, 4::2] = np.array([*self.fields, b""], dtype=object)[None, :-1]
        for j, encoded in enumerate(columns):
            grid[:, 5 + 2 * j] = encoded
        grid = grid[keep]
        grid[:, 3] = stamp_column
        commands = list(map(hiredis.pack_command, map(tuple, grid.tolist())))
        connection = self.client.connection_pool.get_connection()
        try:
            connection.send_packed_command([b"".join(commands)])
            for _ in commands:
                connection.read_response()
        finally:
            self.client.connection_pool.release(connection)
        return len(keep)

    def close(self) -> None:
        self.client.close()


def prune_sqlite(path: Path, project: str, view: str, keep: set[bytes]) -> int:
    """Delete one view's rows of the entities not in ``keep`` (securely: no bytes left in free
    pages); returns how many entities went."""
    con = connect_sqlite(path)
    try:
        name = '"' + table_name(project, view).replace('"', '""') + '"'
        gone = [k for (k,) in con.execute(f"SELECT DISTINCT entity_key FROM {name}") if k not in keep]
        with con:
            con.executemany(f"DELETE FROM {name} WHERE entity_key = ?", [[k] for k in gone])
        return len(gone)
    finally:
        con.close()


def prune_redis(url: str, project: str, view: str, features: Sequence[str], key_prefix: bytes, keep: set[bytes]) -> int:
    """Drop one view's fields from the hashes of entities (of the join key ``key_prefix`` starts)
    not in ``keep`` (a hash left with no field is gone); returns how many entities lost them."""
    client = redis_client(url)
    suffix = project.encode()
    fields = [f"_ts:{view}".encode(), *(mmh3_field(view, f) for f in features)]
    try:
        gone = [
            k
            for k in client.scan_iter(match=b"*" + suffix, count=REDIS_BATCH)
            if k.startswith(key_prefix) and k[: -len(suffix)] not in keep
        ]
        removed = 0
        for start in range(0, len(gone), REDIS_BATCH):
            pipe = client.pipeline(transaction=False)
            for key in gone[start : start + REDIS_BATCH]:
                pipe.hdel(key, *fields)
            removed += sum(1 for n in pipe.execute() if n)
        return removed
    finally:
        client.close()
