"""Online lookups straight from the online store Feast reads, batched, without importing Feast.

:class:`OnlineReader` answers exactly what ``FeatureStore.get_online_features(...).to_dict()``
answers (a test holds it to that) but reads all requested entities in one query (SQLite) or
one pipeline (Redis) — Feast's SDK reads one entity at a time — and decodes the common value
types without building protos. The reader keeps its connection, so a service creates it once.
"""

from __future__ import annotations

import datetime as dt
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contracts import load_feast
from contracts.errors import InputError
from features.online_store import connect_sqlite, mmh3_field, redis_client, table_name
from features.repo.definitions import ENTITIES, feature_names, feature_tables, join_key, view_name
from features.store import PROJECT, sqlite_path
from warehouse.errors import NotYet
from warehouse.settings import Settings


class NotMaterialized(NotYet):
    """No online store holds features yet: materialize them first."""


_unpack_double = struct.Struct("<d").unpack_from
_unpack_float = struct.Struct("<f").unpack_from


def _varint(b: bytes) -> int:
    n = shift = 0
    for byte in b[1:]:
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return n - (1 << 64) if n >> 63 else n


def decode(value: bytes | None) -> Any:
    """The Python value Feast gives for a serialized ``ValueProto`` (None when empty or absent)."""
    if not value:
        return None
    tag = value[0]
    if tag == 0x29 and len(value) == 9:
        return _unpack_double(value, 1)[0]
    if tag == 0x20:
        return _varint(value)
    if tag == 0x35 and len(value) == 5:
        return _unpack_float(value, 1)[0]
    return _decode_with_feast(value)


def _decode_with_feast(value: bytes) -> Any:
    load_feast()
    from feast.protos.feast.types.Value_pb2 import Value
    from feast.type_map import feast_value_type_to_python_type

    proto = Value()
    proto.ParseFromString(value)
    return feast_value_type_to_python_type(proto)


@dataclass(frozen=True)
class View:
    name: str
    key: str
    features: tuple[str, ...]


def views_of(entity: str) -> list[View]:
    """The feature views of an entity (``user``, ``tenant``, ``model_version``) or of a view name."""
    found = []
    for table in feature_tables():
        key = join_key(table)
        if entity in (ENTITIES[key][0], view_name(table)):
            found.append(View(view_name(table), key, tuple(feature_names(table))))
    if not found:
        known = sorted({name for name, _ in ENTITIES.values()} | {view_name(t) for t in feature_tables()})
        raise InputError(f"no feature view for {entity!r}: use one of {known}")
    return found


def _entity_key(key: str, value: str) -> bytes:
    import pyarrow as pa

    from features.encoding import entity_keys

    return entity_keys(key, pa.array([value]))[0]


class OnlineReader:
    """Batched reads of one online store (the settings' SQLite file or Redis database)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._local = threading.local()

    def _sqlite(self) -> Any:
        con = getattr(self._local, "con", None)
        if con is None:
            path = sqlite_path(self.settings)
            if not path.exists():
                raise NotMaterialized(f"no online store at {path}: materialize the features first", step="materialize")
            con = self._local.con = connect_sqlite(path)
        return con

    def _redis(self) -> Any:
        client = getattr(self._local, "redis", None)
        if client is None:
            client = self._local.redis = redis_client(self.settings.redis_url)
        return client

    def read(
        self, view: View, keys: Sequence[str], features: Sequence[str] | None = None
    ) -> tuple[dict[str, list[Any]], list[dt.datetime | None]]:
        """``{join key: keys, feature: values…}`` as the Feast SDK's ``to_dict()``, and each entity's time."""
        wanted = list(features or view.features)
        unknown = [f for f in wanted if f not in view.features]
        if unknown:
            raise InputError(f"feature view {view.name} has no feature(s) {unknown}", argument="features")
        import pyarrow as pa

        from features.encoding import entity_keys

        encoded = entity_keys(view.key, pa.array(list(keys), pa.string()))
        if self.settings.online_store == "redis":
            rows, times = self._read_redis(view, encoded, wanted)
        else:
            rows, times = self._read_sqlite(view, encoded, wanted)
        out: dict[str, list[Any]] = {view.key: list(keys)}
        for j, name in enumerate(wanted):
            out[name] = [row[j] if row is not None else None for row in rows]
        return out, times

    def _read_sqlite(
        self, view: View, encoded: list[bytes], wanted: list[str]
    ) -> tuple[list[list[Any] | None], list[dt.datetime | None]]:
        index = {name: j for j, name in enumerate(wanted)}
        found: dict[bytes, tuple[list[Any], list[int]]] = {}
        sql = (
            f'SELECT entity_key, feature_name, value, event_ts FROM "{table_name(PROJECT, view.name)}" '
            f"WHERE entity_key IN ({','.join('?' * len(encoded))})"
        )
        params: list[Any] = list(encoded)
        if len(wanted) < len(view.features):
            sql += f" AND feature_name IN ({','.join('?' * len(wanted))})"
            params += wanted
        for key, name, value, ts in self._sqlite().execute(sql, params):
            j = index.get(name)
            if j is None:
                continue
            entry = found.get(key)
            if entry is None:
                entry = found[key] = ([None] * len(wanted), [ts])
            entry[0][j] = decode(value)
            entry[1][0] = ts
        rows, times = [], []
        for key in encoded:
            entry = found.get(key)
            rows.append(entry[0] if entry else None)
            times.append(dt.datetime.fromtimestamp(int(entry[1][0]), tz=dt.UTC) if entry else None)
        return rows, times

    def _read_redis(
        self, view: View, encoded: list[bytes], wanted: list[str]
    ) -> tuple[list[list[Any] | None], list[dt.datetime | None]]:
        from features.online_store import _nanos

        fields = [mmh3_field(view.name, f) for f in wanted] + [f"_ts:{view.name}".encode()]
        with self._redis().pipeline(transaction=False) as pipe:
            for key in encoded:
                pipe.hmget(key + PROJECT.encode(), fields)
            replies = pipe.execute()
        rows: list[list[Any] | None] = []
        times: list[dt.datetime | None] = []
        for reply in replies:
            if reply[-1] is None:
                rows.append(None)
                times.append(None)
                continue
            rows.append([decode(v) for v in reply[:-1]])
            nanos = _nanos(reply[-1])
            times.append(dt.datetime.fromtimestamp(nanos / 1e9, tz=dt.UTC))
        return rows, times


_readers: dict[tuple[Any, ...], OnlineReader] = {}


def reader(settings: Settings) -> OnlineReader:
    """A shared reader for these settings' online store (its connections are kept)."""
    ident = (settings.online_store, str(sqlite_path(settings)), settings.redis_url)
    found = _readers.get(ident)
    if found is None:
        found = _readers[ident] = OnlineReader(settings)
    return found


def entity_value(settings: Settings, entity: str, raw_id: str, *, pseudonymize: bool = True) -> str:
    """The join-key value of an entity: a raw user id becomes its pseudonym (keyed HMAC)."""
    if entity == "user" and pseudonymize:
        from warehouse.privacy import pseudonym

        return pseudonym(settings.require_pseudonym_key(), raw_id)
    return raw_id


def get_online_features(
    settings: Settings,
    entity: str,
    raw_id_or_key: str,
    features: Sequence[str] | None = None,
    *,
    pseudonymize: bool = True,
    with_times: bool = False,
) -> dict[str, Any]:
    """One entity's online features: ``{feature: value}`` (None where nothing is stored), over all
    the entity's views; with ``with_times`` also ``{feature + "__ts": event time}``. A raw user id
    is pseudonymized with the configured key first (``pseudonymize=False``: it already is one)."""
    key = entity_value(settings, entity, raw_id_or_key, pseudonymize=pseudonymize)
    out: dict[str, Any] = {}
    wanted = set(features) if features else None
    for view in views_of(entity):
        names = [f for f in view.features if wanted is None or f in wanted]
        if not names:
            continue
        values, times = reader(settings).read(view, [key], names)
        for name in names:
            out[name] = values[name][0]
            if with_times:
                out[f"{name}__ts"] = times[0]
    if wanted is not None and (missing := sorted(wanted - {k for k in out if not k.endswith("__ts")})):
        raise InputError(f"{entity} has no feature(s) {missing}", argument="features")
    return out
