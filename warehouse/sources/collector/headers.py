"""The receiver's HTTP protocol: uvicorn's (httptools) with a deadline on each request's headers.

uvicorn reads a request's headers for as long as the client takes, and counts a connection that
sent half a header line among the connections it serves: 520 such connections, silent, made every
other sender get 503 for as long as they stayed open. Here a connection has ``HEADER_TIMEOUT_S``
from its opening (or, kept alive, from the first byte of its next request) to the end of the
headers, and at most ``WAITING`` connections of a process may be in between: a newer one closes the
oldest, so a sender whose headers arrive at once is served while silent connections pile up.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: Seconds a connection has to send a request's headers, whole.
HEADER_TIMEOUT_S = 5.0
#: Connections of a process still sending their headers; beyond them the oldest is closed.
WAITING = 256


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """A connection closed when its request headers take over ``HEADER_TIMEOUT_S`` or ``WAITING`` newer ones wait."""

    #: The process's connections whose headers are incomplete, oldest first, with the timer of their deadline
    #: (one server a process: each ``--workers`` worker is its own process).
    _waiting: ClassVar[dict[HeaderDeadlineProtocol, asyncio.TimerHandle]] = {}

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait_for_headers()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self not in self._waiting:  # the next request of a kept-alive connection
            self._wait_for_headers()

    def on_headers_complete(self) -> None:
        self._stop_waiting()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _wait_for_headers(self) -> None:
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
