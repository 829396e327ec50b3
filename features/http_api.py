"""The feature server's HTTP API: Feast's own app, cut down to the lookups Strata serves, with limits.

Feast's app also answers writes — ``/push``, ``/write-to-online-store`` (a value written with a
time in the future is never replaced again, not even by ``materialize --full``), ``/materialize``
and ``/materialize-incremental`` (an old range rolls the online values back) — and routes Strata
does not use (vector search, ``/chat``, its docs and static files). Only the lookup and the health
check stay (``allow_writes`` brings the four writes back); a removed route answers 404, a route
asked with another method 405. Every request body has a size limit, a lookup names at most
``max_entities`` entities, and a lookup Feast would answer with a 500 (an entity value of the
wrong type, an unknown or missing key, key lists of different lengths, no features, a feature or
feature service the registry does not hold, a feature asked for twice) is refused with a 4xx that
says why. Whatever else Feast raises is answered here too (its own status for its errors, else
500): past Feast's handler the server would drop the keep-alive connection unannounced, and the
client's next request on it would be reset. The lookups themselves are
Feast's: the same protocol and answers.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from contracts import load_feast

#: (path, method) of what is always served, and of the writes ``allow_writes`` adds.
READ_ROUTES = frozenset({("/get-online-features", "POST"), ("/health", "GET")})
WRITE_ROUTES = frozenset(
    {
        ("/push", "POST"),
        ("/write-to-online-store", "POST"),
        ("/materialize", "POST"),
        ("/materialize-incremental", "POST"),
    }
)
MAX_BODY_BYTES = 1 << 20
MAX_ENTITIES = 1000
_LOOKUP = "/get-online-features"
log = logging.getLogger(f"strata.{__name__}")

Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Limits:
    """What one request may carry."""

    max_body: int = MAX_BODY_BYTES
    max_entities: int = MAX_ENTITIES


@dataclass(frozen=True)
class Catalog:
    """What a lookup may name, read from the registry when the app is built: each entity key's
    Python type (None: not checked), the keys each feature view and feature service needs, and
    each feature view's features."""

    key_types: dict[str, type | None]
    view_keys: dict[str, frozenset[str]]
    service_keys: dict[str, frozenset[str]]
    view_features: dict[str, frozenset[str]]

    @classmethod
    def of(cls, store: Any) -> Catalog:
        from feast.value_type import ValueType

        python = {ValueType.STRING: str, ValueType.INT64: int, ValueType.INT32: int}
        feature_views = store.list_feature_views()
        views = {fv.name: frozenset(fv.join_keys) for fv in feature_views}
        services = {
            fs.name: frozenset().union(*(views.get(p.name, frozenset()) for p in fs.feature_view_projections))
            for fs in store.list_feature_services()
        }
        features = {fv.name: frozenset(f.name for f in fv.features) for fv in feature_views}
        return cls({e.join_key: python.get(e.value_type) for e in store.list_entities()}, views, services, features)


def lookup_problem(request: Any, catalog: Catalog, max_entities: int) -> tuple[int, str] | None:
    """Why a decoded ``/get-online-features`` body is refused (status, message), or None. What
    Feast's own request model refuses (not an object, an entity's values not a list) is left to it."""
    entities = request.get("entities") if isinstance(request, dict) else None
    if not isinstance(entities, dict) or not all(isinstance(v, list) for v in entities.values()):
        return None
    known = sorted(catalog.key_types)
    unknown = sorted(set(entities) - set(known))
    if unknown:
        return 422, f"unknown entity key(s) {unknown}: the keys are {known}"
    lengths = {len(v) for v in entities.values()}
    if len(lengths) > 1:
        return 422, "every entity key needs one value per entity: the key lists differ in length"
    count = lengths.pop() if lengths else 0
    if count == 0:
        return 422, f"no entity to look up: give a list of values for one of {known}"
    if count > max_entities:
        return 413, f"{count:,} entities in one request: at most {max_entities:,}"
    for key, values in entities.items():
        kind = catalog.key_types[key]
        if kind is None:
            continue
        for value in values:
            if type(value) is not kind:  # exactly: a bool is no int
                return 422, f"{key} takes {kind.__name__} values, not {json.dumps(value)[:60]}"
    return _features_problem(request, catalog, set(entities))


def _features_problem(request: dict[str, Any], catalog: Catalog, given: set[str]) -> tuple[int, str] | None:
    features, service = request.get("features"), request.get("feature_service")
    if not features and not service:
        return 422, 'name the features ("view:feature", …) or a feature_service'
    needed: set[str] = set()
    if isinstance(features, list):  # items that are no string: Feast's request model says so
        refs = [ref for ref in features if isinstance(ref, str)]
        problem = _refs_problem(refs, catalog, request.get("full_feature_names") is True)
        if problem:
            return 422, problem
        for ref in refs:
            needed |= catalog.view_keys[ref.split(":", 1)[0]]
    if isinstance(service, str):
        if service not in catalog.service_keys:
            return 422, f"unknown feature_service {service!r}: the services are {sorted(catalog.service_keys)}"
        needed |= catalog.service_keys[service]
    missing = sorted(needed - given)
    return (422, f"the features asked for need the entity key(s) {missing}") if missing else None


def _refs_problem(refs: list[str], catalog: Catalog, full_names: bool) -> str | None:
    """Why feature references Feast would answer with a 500 are refused: one that names no
    ``view:feature`` of the registry, or two the answer would name alike (the same reference, or
    without ``full_feature_names`` the same feature of two views)."""
    for ref in refs:
        view, colon, feature = ref.partition(":")
        if not colon:
            return f'a feature is named "view:feature", not {ref!r}'
        if view not in catalog.view_features:
            return f"unknown feature {ref!r}: no feature view {view!r}; the views are {sorted(catalog.view_features)}"
        if feature not in catalog.view_features[view]:
            return f"unknown feature {ref!r}: the features of {view} are {sorted(catalog.view_features[view])}"
    named = Counter(ref if full_names else ref.partition(":")[2] for ref in refs)
    twice = sorted({ref for ref in refs if named[ref if full_names else ref.partition(":")[2]] > 1})
    if not twice:
        return None
    return f"feature(s) {twice} asked for more than once" + (
        "" if full_names else " by name (the answer names a feature without its view unless full_feature_names is true)"
    )


def build_app(store: Any, *, allow_writes: bool = False, limits: Limits = Limits(), registry_ttl_s: int = 60) -> Any:
    """Feast's feature-server app over ``store``, with only the allowed routes, behind the limits."""
    load_feast()
    from feast.feature_server import get_app
    from feast.permissions.server.utils import (
        ServerType,
        init_auth_manager,
        init_security_manager,
        str_to_auth_manager_type,
    )

    auth_type = str_to_auth_manager_type(store.config.auth_config.type)  # as Feast's own start_server
    init_security_manager(auth_type=auth_type, fs=store)
    init_auth_manager(auth_type=auth_type, server_type=ServerType.REST, auth_config=store.config.auth_config)
    app = get_app(store, registry_ttl_sec=registry_ttl_s)
    allowed = READ_ROUTES | (WRITE_ROUTES if allow_writes else frozenset())
    app.router.routes[:] = [r for r in app.router.routes if _served(r, allowed)]
    app.add_middleware(_Guard, limits=limits, catalog=Catalog.of(store))
    return app


def _served(route: Any, allowed: frozenset[tuple[str, str]]) -> bool:
    """Whether every method of a route is allowed (websockets and mounts have none: never)."""
    methods = set(getattr(route, "methods", None) or ()) - {"HEAD"}
    return bool(methods) and all((getattr(route, "path", None), m) in allowed for m in methods)


class _Guard:
    """ASGI middleware: the body limit on every request, the lookup checks on ``/get-online-features``."""

    def __init__(self, app: ASGIApp, limits: Limits, catalog: Catalog) -> None:
        self.app, self.limits, self.catalog = app, limits, catalog

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit():
            await _refuse(send, 400, "Content-Length is not a number", close=True)
            return
        body = None if int(declared) > self.limits.max_body else await _read(receive, self.limits.max_body)
        if body is None:
            await _refuse(
                send, 413, f"the request body is over the limit of {self.limits.max_body:,} bytes", close=True
            )
            return
        if scope["path"] == _LOOKUP and scope["method"] == "POST":
            try:
                request = json.loads(body)
            except ValueError:
                request = None  # Feast's request model says what is wrong with it (422)
            problem = lookup_problem(request, self.catalog, self.limits.max_entities)
            if problem:
                await _refuse(send, *problem)
                return
        await _answered(self.app, scope, _replay(body, receive), send)


async def _answered(app: ASGIApp, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
    """Run ``app``; an error it raises before answering is answered here: Feast's own status for
    its errors, else 500. (Past this middleware the server would drop the keep-alive connection
    unannounced, and the client's next request on it would be reset.)"""
    from feast.errors import FeastError

    started = False

    async def sending(message: Message) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await app(scope, receive, sending)
    except Exception as exc:
        if started:
            raise
        status = exc.http_status_code() if isinstance(exc, FeastError) else 500
        log.log(
            logging.ERROR if status >= 500 else logging.INFO,
            "%s %s: %s",
            scope["method"],
            scope["path"],
            exc,
            exc_info=status >= 500,
        )
        await _refuse(send, status, str(exc))


async def _read(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None once it grows over ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body already read, then whatever the connection says next."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _refuse(send: Send, status: int, message: str, close: bool = False) -> None:
    """Answer ``{"detail": message}``; ``close``: the body was left unread, so the connection ends."""
    body = json.dumps({"detail": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": headers + ([(b"connection", b"close")] if close else []),
        }
    )
    await send({"type": "http.response.body", "body": body})
