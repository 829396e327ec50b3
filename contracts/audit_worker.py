"""The GX audit in a worker process that the processes of one user share.

Importing Great Expectations is 3–4 s of pure Python. In the writer's process it would hold
the GIL while the data streams; in a worker it runs on its own interpreter. And a worker
shared by processes pays it once: a scheduled task, a CLI command, is a short process whose
own audit of a small day took a quarter of the time its GX import did (a cold DWD build: 1.0 s
of work, 4.5 s with a private worker's import).

The worker listens on a Linux abstract socket named for the user and this code's version (no
file anywhere, gone with the process) and answers only peers of its own user (``SO_PEERCRED``):
requests are pickles. The first process that needs it starts it, detached, and it exits after
:data:`IDLE_S` seconds without an audit; a worker that died is replaced on the next audit. Audits
from several processes take turns (GX is not thread-safe); each takes a fraction of a second on
the ≤ 20,000-row samples ``publish`` sends. Where there are no abstract sockets (not Linux), each
process starts a private worker instead.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
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

from contracts.gx_audit import AuditResult
from contracts.model import Contract

#: A shared worker exits after this long without an audit.
IDLE_S = 300.0
#: How long a process waits for a worker it started to listen.
_START_S = 30.0
_PACKAGE = Path(__file__).resolve().parent
_lock = threading.Lock()
_private: socket.socket | None = None


def warm_up() -> None:
    """Make sure a worker runs (it imports GX at once), without waiting for it."""
    with _lock:
        if _address():
            _connect().close()
        else:
            _private_connection()


def pid() -> int:
    """Process id of the worker that serves this process."""
    return int(_request(("pid",)))


def audit(sample: pa.Table, contract: Contract, *, now: datetime | None = None) -> AuditResult:
    """:func:`contracts.gx_audit.audit` of ``sample``, run in the worker."""
    status, payload = _request(("audit", sample, contract, now))
    if status == "error":
        raise payload
    return payload


def _request(message: tuple[Any, ...]) -> Any:
    """Send one request and return the answer, replacing a worker that died once."""
    global _private
    with _lock:
        for attempt in (1, 2):
            try:
                if _address():
                    with _connect() as conn:
                        return _exchange(conn, message)
                return _exchange(_private_connection(), message)
            except (BrokenPipeError, ConnectionResetError, EOFError) as exc:
                _private = None
                if attempt == 2:
                    raise RuntimeError("the GX audit worker died twice during an audit (does `python -c "
                                       "'import great_expectations'` work?)") from exc
    raise AssertionError("unreachable")


def _exchange(conn: socket.socket, message: tuple[Any, ...]) -> Any:
    with conn.makefile("wb") as out:
        pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
    with conn.makefile("rb") as answers:
        return pickle.load(answers)


@functools.lru_cache(maxsize=1)
def _address() -> str | None:
    """The shared worker's abstract socket name: this user, this interpreter and this code."""
    if not sys.platform.startswith("linux"):
        return None
    version = hashlib.sha256(sys.executable.encode())
    for path in sorted(_PACKAGE.glob("*.py")):  # a changed checkout gets a worker of its own
        version.update(path.read_bytes())
    return f"\0strata-gx-audit-{os.getuid()}-{version.hexdigest()[:16]}"


def _connect() -> socket.socket:
    """A connection to the shared worker, started first when none listens."""
    address = _address()
    assert address is not None
    started: float | None = None
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(address)
            return conn
        except (ConnectionRefusedError, FileNotFoundError):
            conn.close()
        if started is None:
            started = time.monotonic()
            _spawn(["--serve", address.lstrip("\0")])  # argv holds no NUL: the worker puts it back
        elif time.monotonic() - started > _START_S:
            raise RuntimeError(f"the GX audit worker did not start within {_START_S:.0f} s")
        time.sleep(0.02)


def _private_connection() -> socket.socket:
    """This process's own worker, over a socket pair (where there are no abstract sockets)."""
    global _private
    if _private is None:
        ours, theirs = socket.socketpair()
        _spawn(["--fd", str(theirs.fileno())], pass_fds=(theirs.fileno(),))
        theirs.close()
        _private = ours
    return _private


def _spawn(args: list[str], pass_fds: tuple[int, ...] = ()) -> None:
    """Start a worker detached from this process: no inherited pipes (a scheduler waiting on a task's
    output would wait for the worker too), its own session, one thread of numeric work."""
    path = os.pathsep.join(p for p in (str(_PACKAGE.parent), os.environ.get("PYTHONPATH", "")) if p)
    threads = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    shared = not pass_fds  # a private worker's errors may go where its process's go
    subprocess.Popen([sys.executable, "-m", "contracts.audit_worker", *args], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if shared else None, pass_fds=pass_fds,
                     start_new_session=shared, cwd="/", env={**os.environ, **threads, "PYTHONPATH": path})


# ---- the worker -------------------------------------------------------------------------------


class _Worker:
    """Answers requests one at a time, and knows when it was last asked."""

    def __init__(self) -> None:
        self.turn = threading.Lock()
        self.last = time.monotonic()  # of the last request or connection
        self.busy = 0

    def serve(self, conn: socket.socket) -> None:
        """Answer the requests on one connection until it closes."""
        with conn, conn.makefile("rb") as requests, conn.makefile("wb") as answers:
            while True:
                try:
                    message = pickle.load(requests)
                except (EOFError, OSError, pickle.UnpicklingError):
                    return
                with self.turn:
                    self.busy += 1
                    try:
                        answer = self.answer(message)
                    finally:
                        self.busy -= 1
                        self.last = time.monotonic()
                try:
                    data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:  # noqa: BLE001 - an exception that does not pickle
                    data = pickle.dumps(("error", RuntimeError(repr(answer[1]))))
                try:
                    answers.write(data)
                    answers.flush()
                except OSError:
                    return

    @staticmethod
    def answer(message: tuple[Any, ...]) -> Any:
        if message[0] == "pid":
            return os.getpid()
        from contracts.gx_audit import audit as gx_audit

        _, sample, contract, now = message
        try:
            return ("ok", gx_audit(sample, contract, now=now))
        except Exception as exc:  # noqa: BLE001 - handed back to the caller
            return ("error", exc)


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
        except socket.timeout:
            continue
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
        if uid != os.getuid():  # requests are pickles: only this user's processes may send them
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
