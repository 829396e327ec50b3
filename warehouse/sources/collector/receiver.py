"""The OTLP/HTTP trace receiver: a raw ASGI application, served by uvicorn.

``POST /v1/traces`` takes ``application/x-protobuf`` and ``application/json`` bodies, plain or gzip, and
answers as OTLP/HTTP says: 200 with an ``ExportTraceServiceResponse`` (a partial success when spans were
rejected) once its spool record is on disk; 400 for a body that is not a trace export (a protobuf body is
parsed on the request path, and converted to OTLP/JSON only by the ingest that lands its segment); 401
without an accepted token (when tokens are configured); 404 for ``/v1/logs`` and ``/v1/metrics``, which
Strata does not take yet, and any other path; 405 for another method; 408 for a body that stops arriving for
``BODY_IDLE_S``; 413 for a body over the limit (decompressed); 415 for another Content-Type or
Content-Encoding; 503 with ``Retry-After`` while the spool holds more than its bound or the bodies in memory
pass theirs, and when the disk refuses a write. Error answers carry a ``google.rpc.Status`` in the request's
encoding.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from contracts.errors import InputError
from warehouse.settings import CollectSettings, ConfigError, Settings
from warehouse.sources.collector.encoding import (
    JSON,
    PROTOBUF,
    BadData,
    accept,
    decode,
    export_response,
    status_body,
)
from warehouse.sources.collector.spool import Spool, spool_dir
from warehouse.sources.collector.tokens import Tokens, load_tokens

log = logging.getLogger(__name__)
TRACES = "/v1/traces"
_NOT_YET = {"/v1/logs": "logs", "/v1/metrics": "metrics"}
#: Bodies (read or decompressed) held in memory at once, as a multiple of the body limit.
MEMORY_BODIES = 4
#: Connections served at once; uvicorn answers 503 beyond them.
CONNECTIONS = 512
#: Seconds a body may pause between two of its chunks before the request is answered 408 and closed: a
#: connection that sent its headers and then nothing would otherwise hold one of the ``CONNECTIONS``.
BODY_IDLE_S = 10.0
#: Seconds a sender is asked to wait when the receiver is full.
RETRY_AFTER_S = 5

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class _Disconnected(Exception):
    """The sender went away before its body arrived: there is no one to answer."""


class _Refused(Exception):
    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


@dataclass
class Receiver:
    """The ASGI application; its lifespan starts and closes the spool."""

    spool: Spool
    max_body_bytes: int
    spool_max_bytes: int
    tokens: Tokens | None = None
    #: Body bytes (as sent and decompressed) in memory now.
    _held: int = field(default=0, init=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                decode(b"", PROTOBUF, None), export_response(PROTOBUF)  # import the protos before the first request
                self.spool.start()
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                self.spool.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower().decode("latin-1")
        answer_as = PROTOBUF if content_type == PROTOBUF else JSON
        try:
            status, body = await self._export(scope, headers, content_type, receive)
        except _Disconnected:
            return
        except _Refused as refused:
            extra = [(b"retry-after", str(refused.retry_after).encode())] if refused.retry_after else []
            if refused.status == 405:
                extra.append((b"allow", b"POST"))
            if refused.status == 408:  # the rest of its body, if it ever comes, is no request
                extra.append((b"connection", b"close"))
            await _answer(
                send, refused.status, answer_as, status_body(answer_as, refused.status, refused.message), extra
            )
            return
        await _answer(send, status, answer_as, body)

    async def _export(
        self, scope: Scope, headers: dict[bytes, bytes], content_type: str, receive: Receive
    ) -> tuple[int, bytes]:
        path = scope["path"]
        if path in _NOT_YET:
            raise _Refused(404, f"Strata takes traces only: {_NOT_YET[path]} are not received yet (POST {TRACES})")
        if path != TRACES:
            raise _Refused(404, f"no such endpoint {path}: OTLP traces go to POST {TRACES}")
        if scope["method"] != "POST":
            raise _Refused(405, f"{TRACES} takes POST only")
        tenant = gateway = None
        if self.tokens is not None:
            token = self.tokens.check(headers.get(b"authorization"))
            if token is None:
                raise _Refused(401, "send 'Authorization: Bearer <token>' with a token of the receiver's tokens file")
            tenant, gateway = token.tenant, token.gateway
        if content_type not in (PROTOBUF, JSON):
            raise _Refused(415, f"Content-Type must be {PROTOBUF} or {JSON}, not {content_type or 'none'!r}")
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding not in (b"identity", b"gzip"):
            raise _Refused(415, f"Content-Encoding must be gzip or none, not {encoding.decode('latin-1')!r}")
        if self.spool.pending_bytes() >= self.spool_max_bytes:
            raise _Refused(503, "the receiver's spool is full until the landing zone takes its segments", RETRY_AFTER_S)
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            raise _Refused(413, f"the body is over the receiver's limit of {self.max_body_bytes} bytes")
        body = await self._read(receive)
        held = len(body)
        try:
            if encoding == b"gzip":
                body = self._gunzip(body)
                self._held += len(body)
                held += len(body)
            checked = accept(body, content_type, tenant, gateway)
            if checked.record is not None:
                await self.spool.write(checked.record)
        except BadData as exc:
            raise _Refused(400, str(exc)) from None
        except OSError as exc:
            log.warning("strata collect: the spool refused a write: %s", exc)
            raise _Refused(503, "the receiver could not write its spool", RETRY_AFTER_S) from None
        finally:
            self._held -= held
        return 200, export_response(content_type, checked.rejected, checked.message)

    async def _read(self, receive: Receive) -> bytes:
        """The body as sent, counted against the body limit and the memory bound while it arrives."""
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                try:
                    async with asyncio.timeout(BODY_IDLE_S):
                        event = await receive()
                except TimeoutError:
                    raise _Refused(408, f"no byte of the body came for {BODY_IDLE_S:g} s") from None
                if event["type"] == "http.disconnect":
                    raise _Disconnected
                chunk = event.get("body", b"")
                if size + len(chunk) > self.max_body_bytes:
                    raise _Refused(413, f"the body is over the receiver's limit of {self.max_body_bytes} bytes")
                if self._held + len(chunk) > MEMORY_BODIES * self.max_body_bytes:
                    raise _Refused(503, "the receiver holds as many bodies as it may; retry shortly", 1)
                self._held += len(chunk)
                size += len(chunk)
                chunks.append(chunk)
                if not event.get("more_body", False):
                    return b"".join(chunks)
        except BaseException:
            self._held -= size
            raise

    def _gunzip(self, data: bytes) -> bytes:
        """Inflate every gzip member of ``data``, refusing past the body limit without inflating further."""
        parts: list[bytes] = []
        size = 0
        while data:
            inflate = zlib.decompressobj(wbits=31)
            try:
                part = inflate.decompress(data, self.max_body_bytes + 1 - size)
            except zlib.error as exc:
                raise BadData(f"the body is not valid gzip: {exc}") from None
            size += len(part)
            if size > self.max_body_bytes:
                raise _Refused(
                    413, f"the decompressed body is over the receiver's limit of {self.max_body_bytes} bytes"
                )
            if not inflate.eof:
                raise BadData("the gzip body is truncated")
            parts.append(part)
            data = inflate.unused_data
        return b"".join(parts)


async def _answer(
    send: Send, status: int, content_type: str, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_receiver(settings: Settings, collect: CollectSettings) -> Receiver:
    """The receiver of these settings (its spool under ``$STRATA_HOME/collect/spool``); checks the files it names."""
    for name, path in (("STRATA_COLLECT_TLS_CERT", collect.tls_cert), ("STRATA_COLLECT_TLS_KEY", collect.tls_key)):
        if path is not None and not path.is_file():
            raise ConfigError(f"{name} names {path}, which is not a file")
    spool = Spool(
        spool_dir(settings.home),
        settings.landing_dir,
        segment_bytes=collect.segment_bytes,
        segment_seconds=collect.segment_seconds,
    )
    tokens = load_tokens(collect.tokens_file) if collect.tokens_file is not None else None
    return Receiver(spool, collect.max_body_bytes, collect.spool_max_bytes, tokens)


def receiver_from_env() -> Receiver:
    """The receiver of the process environment's settings: what each uvicorn worker serves.

    A worker of ``--workers N`` (a process uvicorn spawned) dies with its master: SIGTERM, so it
    answers what is in flight and hands its segments over, and the port is free for a restart.
    """
    import multiprocessing

    from warehouse.processes import die_with_parent
    from warehouse.settings import load_collect_settings, load_settings

    master = multiprocessing.parent_process()
    if master is not None and master.pid is not None:
        die_with_parent(master.pid)
    return build_receiver(load_settings(), load_collect_settings())


def check_address(host: str, port: int) -> None:
    """Refuse, before anything starts, an address this process cannot listen on — a port another process
    holds, a host not of this machine — with an :class:`InputError` naming it and the setting that
    changes it (uvicorn would end with its own ``[Errno 98]`` lines). Bound as uvicorn binds, then freed."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise InputError(
                    f"port {port} of {host} is in use by another process (a strata collect already running?): "
                    "stop it, or set another port in STRATA_COLLECT_PORT",
                    argument="port",
                ) from None
            raise InputError(
                f"cannot listen on {host}:{port}: {e.strerror or e}; STRATA_COLLECT_HOST sets the address",
                argument="host",
            ) from None


def serve(settings: Settings, collect: CollectSettings, announce: Callable[[], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM, then answer what is in flight, hand the open segments over and return.
    ``announce`` is called once the settings' files and the address are checked, before serving.

    With several workers each is its own process with its own spool segments (named by its
    process id) and bounds; they share the port. The settings reach them through the environment.
    A connection has :data:`~.headers.HEADER_TIMEOUT_S` to send its request headers, and at most
    :data:`~.headers.WAITING` of a process may be sending them (:mod:`.headers`).
    """
    import uvicorn

    from warehouse.sources.collector.headers import HeaderDeadlineProtocol

    build_receiver(settings, collect)  # refuse bad files here, once, not in every worker
    check_address(collect.host, collect.port)
    if announce is not None:
        announce()
    uvicorn.run(
        f"{__name__}:receiver_from_env",
        factory=True,
        workers=collect.workers,
        host=collect.host,
        port=collect.port,
        lifespan="on",
        log_level="warning",
        access_log=False,
        server_header=False,
        limit_concurrency=CONNECTIONS,
        http=HeaderDeadlineProtocol,
        timeout_graceful_shutdown=30,
        ssl_certfile=str(collect.tls_cert) if collect.tls_cert else None,
        ssl_keyfile=str(collect.tls_key) if collect.tls_key else None,
    )
