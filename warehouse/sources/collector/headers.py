"""The receiver's HTTP protocol: uvicorn's (httptools) with a deadline on each request's headers.

uvicorn reads a request's headers for as long as the client takes, and counts a connection that
sent half a header line among the connections it serves: 520 such connections, silent, made every
other sender get 503 for as long as they stayed open. Here a connection waiting for a request —
opened, or kept alive after a response — has ``HEADER_TIMEOUT_S`` to start one, and as long again
from its first byte to the end of its headers; at most ``WAITING`` connections of a process may be
waiting so: a newer one closes the oldest, so a sender whose headers arrive at once is served
while silent or idle connections pile up.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: Seconds a connection has to start a request, and then to send its headers, whole.
HEADER_TIMEOUT_S = 5.0
#: Connections of a process waiting for a request's headers; beyond them the oldest is closed.
WAITING = 256


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """A connection closed when a request's headers are late or ``WAITING`` newer connections wait for theirs."""

    #: The process's connections waiting for headers, oldest first, with the timer of their deadline
    #: (one server a process: each ``--workers`` worker is its own process).
    _waiting: ClassVar[dict[HeaderDeadlineProtocol, asyncio.TimerHandle]] = {}

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait_for_headers()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._wait_for_headers()

    def on_headers_complete(self) -> None:
        self._stop_waiting()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        idle = not self.pipeline  # else the next request, read already, starts now
        super().on_response_complete()
        if idle and self not in self._waiting and not self.transport.is_closing():
            self._wait_for_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _wait_for_headers(self) -> None:
        """(Re)start this connection's deadline, as the newest waiting; close the oldest beyond ``WAITING``."""
        self._stop_waiting()
        self._waiting[self] = self.loop.call_later(HEADER_TIMEOUT_S, self._give_up)
        if len(self._waiting) > WAITING:
            next(iter(self._waiting))._give_up()

    def _stop_waiting(self) -> None:
        timer = self._waiting.pop(self, None)
        if timer is not None:
            timer.cancel()

    def _give_up(self) -> None:
        """Close the connection; a response in flight (a pipelined request's) is finished first."""
        self._stop_waiting()
        self.shutdown()
