"""The GX audit in a worker process that the processes of one user share.

Importing Great Expectations is 3–4 s of pure Python. In the writer's process it would hold
the GIL while the data streams; in a worker it runs on its own interpreter. And a worker
shared by processes pays it once: a scheduled task, a CLI command, is a short process whose
own audit of a small day took a quarter of the time its GX import did (a cold DWD build: 1.0 s
of work, 4.5 s with a private worker's import).

The worker listens on a Linux abstract socket named for the user and this code's version (no
file anywhere, gone with the process). Any local user can compute that name and bind it while no
worker runs, so each side checks the other's user (``SO_PEERCRED``) before it reads or sends a
byte, and messages are JSON and Arrow IPC (:mod:`contracts.audit_wire`), which run no code when
read. The first process that needs it starts it, detached, and it exits after :data:`IDLE_S`
seconds without an audit; a worker that died is replaced on the next audit. Audits from several
processes take turns (GX is not thread-safe); each takes a fraction of a second on the ≤ 20,000-row
samples ``publish`` sends. Where there are no abstract sockets (not Linux), or the name is held by
another user's socket, a process starts a private worker instead, over a socket pair.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from contracts import audit_wire
from contracts.errors import TransientError
from contracts.gx_audit import AuditResult
from contracts.model import Contract

#: A shared worker exits after this long without an audit.
IDLE_S = 300.0
#: How long a process waits for a worker it started to listen.
_START_S = 30.0
#: How long the name may stay refused after the worker started for it exited (it found the name
#: taken): the worker that took it listens right after it binds; a socket that never listens is
#: another user's.
_TAKEN_S = 1.0
_PACKAGE = Path(__file__).resolve().parent
_lock = threading.Lock()
_private: socket.socket | None = None
_foreign = False  # the shared name is held by another user's socket: this process audits privately
_log = logging.getLogger(f"strata.{__name__}")


def warm_up() -> None:
    """Make sure a worker runs (it imports GX at once), without waiting for it."""
    with _lock:
        conn = _connect()
        if conn is None:
            _private_connection()
        else:
            conn.close()


def pid() -> int:
    """Process id of the worker that serves this process."""
    return int(_request({"op": "pid"})["pid"])


def audit(sample: pa.Table, contract: Contract, *, now: datetime | None = None) -> AuditResult:
    """:func:`contracts.gx_audit.audit` of ``sample``, run in the worker; the worker's error is
    raised as its own type where that is built in, else as its nearest built-in type."""
    answer = _request(
        {"op": "audit", "contract": audit_wire.contract_text(contract), "now": audit_wire.encode(now)}, sample
    )
    if "error" in answer:
        raise audit_wire.exception(answer["error"])
    result = audit_wire.decode(answer["result"])
    assert isinstance(result, AuditResult)
    return result


def _request(header: dict[str, Any], table: pa.Table | None = None) -> dict[str, Any]:
    """Send one request and return the answer's header, replacing a worker that died once."""
    global _private
    with _lock:
        for attempt in (1, 2):
            try:
                conn = _connect()
                if conn is None:
                    return _exchange(_private_connection(), header, table)
                with conn:
                    return _exchange(conn, header, table)
            except (BrokenPipeError, ConnectionResetError, EOFError) as exc:
                _private = None
                if attempt == 2:
                    raise TransientError(
                        "the GX audit worker died twice during an audit (does `python -c "
                        "'import great_expectations'` work?)"
                    ) from exc
    raise AssertionError("unreachable")


def _exchange(conn: socket.socket, header: dict[str, Any], table: pa.Table | None) -> dict[str, Any]:
    audit_wire.send(conn, header, table)
    return audit_wire.receive(conn)[0]


@functools.lru_cache(maxsize=1)
def _address() -> str | None:
    """The shared worker's abstract socket name: this user, this interpreter and this code."""
    if not sys.platform.startswith("linux"):
        return None
    version = hashlib.sha256(sys.executable.encode())
    for path in sorted(_PACKAGE.glob("*.py")):  # a changed checkout gets a worker of its own
        version.update(path.read_bytes())
    return f"\0strata-gx-audit-{os.getuid()}-{version.hexdigest()[:16]}"


def _peer_uid(conn: socket.socket) -> int:
    """The user of the process at the other end of a Unix socket (of the listener, for a client)."""
    return int(struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1])


def _connect() -> socket.socket | None:
    """A connection to the shared worker, started first when none listens; None where there is
    no shared worker to be had: no abstract sockets, or the name is held by another user's socket
    (then this process audits in a private worker from now on)."""
    address = _address()
    if address is None or _foreign:
        return None
    started: float | None = None
    worker: subprocess.Popen[bytes] | None = None
    exited: float | None = None
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.setblocking(False)  # a full backlog fails at once (a listener that never accepts)
        try:
            conn.connect(address)
        except (ConnectionRefusedError, FileNotFoundError):
            conn.close()
        except BlockingIOError:
            conn.close()
            _refuse(address, "its listener's queue is full")
            return None
        else:
            uid = _peer_uid(conn)
            if uid == os.getuid():
                conn.setblocking(True)
                return conn
            conn.close()  # nothing read, nothing sent
            _refuse(address, f"it is held by uid {uid}")
            return None
        now = time.monotonic()
        if worker is None:
            started = now
            worker = _spawn(["--serve", address.lstrip("\0")])  # argv holds no NUL: the worker puts it back
        elif exited is None and worker.poll() is not None:
            exited = now
        elif exited is not None and now - exited > _TAKEN_S:
            _refuse(address, "a socket that does not listen holds it")
            return None
        elif started is not None and now - started > _START_S:
            raise TransientError(f"the GX audit worker did not start within {_START_S:.0f} s")
        time.sleep(0.02)


def _refuse(address: str, why: str) -> None:
    global _foreign
    _foreign = True
    _log.warning(
        "the GX audit worker's socket name @%s cannot be used (%s): this process audits in a "
        "private worker (3-4 s to import Great Expectations)",
        address.lstrip("\0"),
        why,
    )


def _private_connection() -> socket.socket:
    """This process's own worker, over a socket pair (where there is no shared worker to be had)."""
    global _private
    if _private is None:
        ours, theirs = socket.socketpair()
        _spawn(["--fd", str(theirs.fileno())], pass_fds=(theirs.fileno(),))
        theirs.close()
        _private = ours
    return _private


def _spawn(args: list[str], pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    """Start a worker detached from this process: no inherited pipes (a scheduler waiting on a task's
    output would wait for the worker too), its own session, one thread of numeric work."""
    path = os.pathsep.join(p for p in (str(_PACKAGE.parent), os.environ.get("PYTHONPATH", "")) if p)
    threads = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    shared = not pass_fds  # a private worker's errors may go where its process's go
    return subprocess.Popen(
        [sys.executable, "-m", "contracts.audit_worker", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if shared else None,
        pass_fds=pass_fds,
        start_new_session=shared,
        cwd="/",
        env={**os.environ, **threads, "PYTHONPATH": path},
    )


# ---- the worker -------------------------------------------------------------------------------


class _Worker:
    """Answers requests one at a time, and knows when it was last asked."""

    def __init__(self) -> None:
        self.turn = threading.Lock()
        self.last = time.monotonic()  # of the last request or connection
        self.busy = 0

    def serve(self, conn: socket.socket) -> None:
        """Answer the requests on one connection until it closes."""
        with conn:
            while True:
                try:
                    header, table = audit_wire.receive(conn)
                except (EOFError, OSError, ValueError):  # closed, or not a message (JSON, Arrow)
                    return
                with self.turn:
                    self.busy += 1
                    try:
                        answer = self.answer(header, table)
                    finally:
                        self.busy -= 1
                        self.last = time.monotonic()
                try:
                    audit_wire.send(conn, answer)
                except OSError:
                    return

    @staticmethod
    def answer(header: dict[str, Any], table: pa.Table | None) -> dict[str, Any]:
        if header.get("op") == "pid":
            return {"pid": os.getpid()}
        from contracts.gx_audit import audit as gx_audit

        try:
            if header.get("op") != "audit" or table is None:
                raise ValueError(f"not a GX audit worker request: {header.get('op')!r}")
            contract, now = audit_wire.contract_from(header["contract"]), audit_wire.decode(header["now"])
            return {"result": audit_wire.encode(gx_audit(table, contract, now=now))}
        except Exception as exc:  # handed back to the caller
            return {"error": audit_wire.error(exc)}


def _import_gx() -> None:
    import gc

    # Importing GX builds a large, long-lived object graph: collecting while it grows costs
    # a fifth of the import, and frozen objects are never scanned again.
    gc.disable()
    from contracts.gx_audit import warm_up as gx_warm_up

    gx_warm_up()
    gc.freeze()
    gc.enable()


def _serve_shared(address: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address)
    except OSError:
        return  # another worker took the name first: it serves
    listener.listen(64)  # clients queue here while GX imports
    _import_gx()
    worker = _Worker()
    listener.settimeout(1.0)
    while worker.busy or time.monotonic() - worker.last < IDLE_S:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        if _peer_uid(conn) != os.getuid():  # only this user's processes are answered
            conn.close()
            continue
        conn.settimeout(None)
        worker.last = time.monotonic()
        threading.Thread(target=worker.serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.stdout = sys.stderr  # anything GX prints goes nowhere near a socket
    if sys.argv[1] == "--serve":
        _serve_shared("\0" + sys.argv[2])
    else:
        _import_gx()
        _Worker().serve(socket.socket(fileno=int(sys.argv[2])))
