"""Writers of one table exclude each other: locks per (table, partition) and per table.

A write of a partition holds the table's lock *shared* and the partition's lock
*exclusive*, so writers of different partitions (dates, shards, files) run side by side
while two writers of one partition take turns. A write that touches every partition
(forget, retention, re-landing, a MERGE, vacuum) holds the table's lock *exclusive*; a
reader that must not see files vanish under it (a build reading ODS) holds it *shared*.
Delta's optimistic commit stays the last line of defence.

A process takes all the locks of a step at once, in one global order, so two steps never
wait on each other in a circle; a lock it already holds is taken again for free
(re-entrant), so ``publish`` inside a build finds its partition held. A second writer waits
up to ``settings.lock_wait`` seconds, then fails with :class:`LockHeld`, which names the
holder (process, host, command, since when).

Two backends, one interface: file locks (``flock``) under ``STRATA_HOME/locks`` — one
machine — and, when ``STRATA_LOCK_URL`` names a Postgres database, session advisory locks
that every worker of a cluster sees. Both are released by the operating system or the
database when a process dies, so a crash never leaves a table locked.

A Postgres lock can also be lost while its process lives: its session is terminated
(``pg_terminate_backend``, a database restart, a network cut), and a second writer gets in.
So every Delta commit first asks :func:`verify` whether this process still holds the locks of
the table it commits to, and fails with :class:`LockLost` — publishing nothing — when it does
not. What is left is the time between that check and the commit itself (writing the last data
file and the log entry); on object storage Delta's conditional commit still refuses the second
of two overlapping commits.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from contracts.errors import ConflictError
from warehouse.settings import Settings
from warehouse.tables import Table

if TYPE_CHECKING:
    import psycopg

#: How often a waiting writer tries again.
_POLL_S = 0.05


class LockHeld(ConflictError):
    """Another process holds a lock this step needs; the message says who and how to wait."""


class LockLost(ConflictError):
    """A lock this process took is no longer held (its Postgres session ended): nothing was committed;
    running the step again is safe."""


@dataclass(frozen=True, order=True)
class Key:
    """One lock: a table (``dwd.request``) or a partition of it (``dwd.request#event_date=2026-01-05``)."""

    name: str

    @staticmethod
    def of(table: Table, partition: dict[str, object] | None = None) -> Key:
        if not partition:
            return Key(table.name)
        return Key(table.name + "#" + ",".join(f"{k}={v}" for k, v in sorted(partition.items())))


class _Backend(Protocol):
    def acquire(self, key: Key, exclusive: bool, deadline: float) -> object | None: ...
    def release(self, handle: object) -> None: ...
    def holders(self, key: Key) -> list[str]: ...
    def lost(self, held: dict[Key, object]) -> list[Key]: ...


def _command() -> str:
    """The command this process runs, without option values (they may name a user)."""
    words = [Path(sys.argv[0]).name if sys.argv else "python"]
    for arg in sys.argv[1:]:
        if arg.startswith("-"):
            break
        words.append(arg)
    return " ".join(words[:4])


def _holder() -> str:
    since = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"pid {os.getpid()} on {socket.gethostname()} ({_command()}) since {since}"


class _Files:
    """``flock`` on one file per key under ``<home>/locks``; holders listed beside it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, key: Key) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", key.name)[:80]
        return self.folder / f"{safe}.{hashlib.sha256(key.name.encode()).hexdigest()[:12]}.lock"

    def acquire(self, key: Key, exclusive: bool, deadline: float) -> object | None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._path(key)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        while True:
            try:
                fcntl.flock(fd, mode)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return None
                time.sleep(_POLL_S)
        badge = path.with_suffix(f".{os.getpid()}.holder")
        badge.write_text(_holder())
        return fd, badge, path

    def release(self, handle: object) -> None:
        fd, badge, _ = cast(tuple[int, Path, Path], handle)
        badge.unlink(missing_ok=True)
        os.close(fd)  # closing the descriptor releases the flock

    def lost(self, held: dict[Key, object]) -> list[Key]:
        """A flock lasts as long as its descriptor; it is lost only if its file was removed (or replaced)
        under it, for then the next writer locks another file of the same name."""
        out = []
        for key, handle in held.items():
            fd, _, path = cast(tuple[int, Path, Path], handle)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                out.append(key)
        return out

    def holders(self, key: Key) -> list[str]:
        out = []
        for badge in self.folder.glob(self._path(key).stem + ".*.holder"):
            pid = int(badge.suffixes[-2].lstrip("."))
            try:
                os.kill(pid, 0)
            except ProcessLookupError:  # a holder that died; the OS already released its lock
                badge.unlink(missing_ok=True)
                continue
            except PermissionError:
                pass
            out.append(badge.read_text())
        return out


#: What a holder's text may not carry inside a SQL comment (``*``, ``/``, ``%``, ``\\``), and its escape.
_COMMENT_SAFE = re.compile(r"[*/%\\]")
_COMMENT_UNSAFE = re.compile(r"\\x([0-9a-f]{2})")


class _Postgres:
    """Session advisory locks in one Postgres database, seen by every worker of a cluster.

    Who holds a lock is read from ``pg_stat_activity``: ``application_name`` is cut at 63 bytes,
    so every statement of the session also carries the whole holder as a leading comment, and its
    ``query`` column (the session's last statement, up to ``track_activity_query_size``) shows it.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = self._connect()

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        import psycopg

        holder = _holder()
        # Comments nest in Postgres and psycopg reads % as a placeholder: neither may pass through.
        self.comment = "/* strata: " + _COMMENT_SAFE.sub(lambda m: f"\\x{ord(m[0]):02x}", holder) + " */ "
        return psycopg.connect(self.url, autocommit=True, application_name=f"strata: {holder}"[:63])

    def _execute(self, query: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        return self.conn.execute(self.comment + query, params).fetchall()

    @staticmethod
    def _id(key: Key) -> int:
        return int.from_bytes(hashlib.blake2b(key.name.encode(), digest_size=8).digest(), "big", signed=True)

    @classmethod
    def _split(cls, key: Key) -> tuple[int, int]:
        """(classid, objid) under which ``pg_locks`` shows the bigint advisory lock of ``key``."""
        lock_id = cls._id(key) & 0xFFFFFFFFFFFFFFFF
        return lock_id >> 32, lock_id & 0xFFFFFFFF

    def acquire(self, key: Key, exclusive: bool, deadline: float) -> object | None:
        import psycopg

        function = "pg_try_advisory_lock" if exclusive else "pg_try_advisory_lock_shared"
        while True:
            try:
                ((got,),) = self._execute(f"SELECT {function}(%s)", (self._id(key),))
            except psycopg.OperationalError:
                if not self.conn.closed:
                    raise
                # The session ended (terminated, a restart) and its locks with it: take a new one. A lock
                # this process still counts as held is lost; :func:`verify` stops its commit.
                self.conn = self._connect()
                continue
            if got:
                return (key, exclusive)
            if time.monotonic() >= deadline:
                return None
            time.sleep(_POLL_S)

    def release(self, handle: object) -> None:
        import psycopg

        key, exclusive = cast(tuple[Key, bool], handle)
        function = "pg_advisory_unlock" if exclusive else "pg_advisory_unlock_shared"
        try:
            self._execute(f"SELECT {function}(%s)", (self._id(key),))
        except psycopg.OperationalError:
            if not self.conn.closed:
                raise  # else the session ended, and the lock with it

    def holders(self, key: Key) -> list[str]:
        rows = self._execute(
            "SELECT a.query, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.classid::bigint = %s "
            "AND l.objid::bigint = %s AND l.pid <> pg_backend_pid()",
            self._split(key),
        )
        out = []
        for query, name in rows:
            whole = re.match(r"/\* strata: (.*?) \*/", query or "")
            out.append(
                _COMMENT_UNSAFE.sub(lambda m: chr(int(m[1], 16)), whole[1])
                if whole
                else (name or "").removeprefix("strata: ")
            )
        return out

    def lost(self, held: dict[Key, object]) -> list[Key]:
        """The keys this session no longer holds: every key when the session itself is gone."""
        import psycopg

        split = {self._split(key): key for key in held}
        try:
            rows = self._execute(
                "SELECT c, o FROM unnest(%s::bigint[], %s::bigint[]) AS t(c, o) WHERE NOT EXISTS ("
                "SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                "AND l.pid = pg_backend_pid() AND l.classid::bigint = t.c AND l.objid::bigint = t.o)",
                ([c for c, _ in split], [o for _, o in split]),
            )
        except psycopg.OperationalError:
            return sorted(held)
        return sorted(split[(c, o)] for c, o in rows)


class _Held:
    """This process's locks: key → (exclusive, count, backend handle). Thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.keys: dict[Key, list[Any]] = {}
        self.backends: dict[str, _Backend] = {}


_held = _Held()


def _backend(settings: Settings) -> _Backend:
    where = settings.lock_url or str(settings.home / "locks")
    backend = _held.backends.get(where)
    if backend is None:
        backend = _held.backends[where] = _Postgres(where) if settings.lock_url else _Files(Path(where))
    return backend


def wanted(write: Iterable[tuple[Table, dict[str, object] | None]] = (), read: Iterable[Table] = ()) -> dict[Key, bool]:
    """The keys (→ exclusive?) of writing these partitions (``None``: the whole table) and reading
    these tables: a partition's own key exclusive, its table's shared."""
    keys: dict[Key, bool] = {}
    for table, partition in write:
        if partition:
            keys.setdefault(Key.of(table), False)
            keys[Key.of(table, partition)] = True
        else:
            keys[Key.of(table)] = True
    for table in read:
        keys.setdefault(Key.of(table), False)
    return keys


@contextmanager
def hold(
    settings: Settings, *, write: Iterable[tuple[Table, dict[str, object] | None]] = (), read: Iterable[Table] = ()
) -> Iterator[None]:
    """Hold the locks for writing these partitions (``None``: the whole table) and reading these
    tables, until the block ends. Waits up to ``settings.lock_wait`` seconds for each."""
    wanted_ = wanted(write, read)
    backend = _backend(settings)
    taken: list[Key] = []
    try:
        with _held.lock:
            for key in sorted(wanted_):  # one global order: no two steps wait on each other in a circle
                exclusive = wanted_[key]
                mine = _held.keys.get(key)
                if mine is not None:
                    if exclusive and not mine[0]:
                        raise RuntimeError(f"lock {key.name} is held shared by this process and cannot be upgraded")
                    mine[1] += 1
                    taken.append(key)
                    continue
                handle = backend.acquire(key, exclusive, time.monotonic() + settings.lock_wait)
                if handle is None:
                    holders = backend.holders(key) or ["another process"]
                    raise LockHeld(
                        f"{key.name} is locked by {'; '.join(holders)}: retry when it is done, or give the "
                        "lock wait (STRATA_LOCK_WAIT, seconds) to wait for it",
                        argument="lock_wait",
                    )
                _held.keys[key] = [exclusive, 1, handle]
                taken.append(key)
        yield
    finally:
        with _held.lock:
            for key in reversed(taken):
                mine = _held.keys[key]
                mine[1] -= 1
                if mine[1] == 0:
                    del _held.keys[key]
                    backend.release(mine[2])


def verify(settings: Settings, table: Table) -> None:
    """Fail with :class:`LockLost` when a lock this process took for ``table`` (the table's or a
    partition's) is no longer held. Called immediately before each commit; costs one query on
    Postgres, two ``stat`` calls per lock on files, nothing when no lock of the table is held."""
    with _held.lock:
        mine = {
            key: entry[2]
            for key, entry in _held.keys.items()
            if key.name == table.name or key.name.startswith(table.name + "#")
        }
        if not mine:
            return
        lost = _backend(settings).lost(mine)
    if lost:
        raise LockLost(
            f"{table.name}: this process no longer holds the lock of {', '.join(k.name for k in lost)} "
            "(its Postgres session ended — terminated, a database restart, a network cut — or its lock "
            "file was removed), so another writer may be at work: nothing was committed; run the step again"
        )


def held(table: Table, partition: dict[str, object] | None = None) -> bool:
    """Whether this process holds the lock of that partition (or that table) exclusively."""
    with _held.lock:
        mine = _held.keys.get(Key.of(table, partition)) or _held.keys.get(Key.of(table))
        return bool(mine and mine[0])
