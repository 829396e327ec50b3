"""The receiver's spool: accepted records made durable (group commit) and handed to the landing zone as they are.

Records go to an open segment under ``$STRATA_HOME/collect/spool/date=<day>/``, each framed by
its length and CRC-32 (:mod:`.segments`); one writer thread appends every record that queued up
meanwhile, ``fdatasync``\\s once and then wakes the requests that wait for it, so a request is
answered only once its record is on disk and many concurrent requests share one sync. A segment
is closed when it reaches a size or an age; then a hand-over thread, off the request path, moves
it unparsed to ``<landing>/otlp/date=<day>/`` — a rename, or across file systems a copy under a
dot-name, fsynced and renamed — and syncs both folders. Until then its bytes count in
:meth:`Spool.pending_bytes`, the bound behind the receiver's backpressure. ``strata ingest``
converts a handed-over segment into the OTLP/JSON lines ODS keeps: the receiver converts
nothing. Names carry the host, the process id, a random id and a sequence number: receivers
sharing a landing zone never collide.

Each segment is locked (``flock``) by its receiver until it is handed over. At start a receiver
hands over the segments a killed predecessor left (unlocked ones), cut back to their last whole
record: what follows it was never acknowledged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import errno
import fcntl
import logging
import os
import queue
import shutil
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.sources.collector.segments import SUFFIX, frame, sync_dir, whole_records, write_aside

log = logging.getLogger(__name__)
_NEW = ".new"
_BATCH_BYTES = 16 << 20
#: Threads that may sync groups at once.
_SYNCERS = 4


def spool_dir(home: Path) -> Path:
    """Where the receivers of a ``STRATA_HOME`` keep their segments until they hand them over."""
    return home / "collect" / "spool"


def segments_held(folder: Path) -> int:
    """Segments holding bytes in a spool folder: open, or closed and not yet handed over."""
    held = 0
    for path in folder.rglob(f"*{SUFFIX}") if folder.is_dir() else ():
        with contextlib.suppress(FileNotFoundError):  # handed over meanwhile
            held += path.stat().st_size > 0
    return held


@dataclass
class _Segment:
    path: Path
    fd: int
    opened: float
    size: int = 0
    #: Its syncs in flight.
    syncs: list[concurrent.futures.Future[None]] = field(default_factory=list)


class Spool:
    """Durable appends of whole records; :meth:`pending_bytes` is what is not yet in the landing zone."""

    def __init__(
        self,
        spool_dir: Path,
        landing_dir: Path,
        *,
        segment_bytes: int,
        segment_seconds: float,
    ) -> None:
        self.spool_dir = spool_dir
        self.landing_dir = landing_dir / "otlp"
        self.segment_bytes = segment_bytes
        self.segment_seconds = segment_seconds
        self._prefix = f"collect-{_host()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._seq = 0
        self._queue: queue.SimpleQueue[tuple[bytes, concurrent.futures.Future[None]] | None] = queue.SimpleQueue()
        self._queued = 0
        self._segment: _Segment | None = None
        self._unlanded: list[_Segment] = []
        self._lock = threading.Lock()
        self._closed = threading.Condition(self._lock)  # a segment was closed, or the spool stops
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._mover: threading.Thread | None = None
        self._syncers: concurrent.futures.ThreadPoolExecutor | None = None

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Take over what a killed predecessor left, then start the writer and the hand-over thread."""
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self._recover()
        self._stopping = False
        self._syncers = concurrent.futures.ThreadPoolExecutor(_SYNCERS, thread_name_prefix="strata-collect-sync")
        self._thread = threading.Thread(target=self._run, name="strata-collect-spool", daemon=True)
        self._mover = threading.Thread(target=self._hand_over_closed, name="strata-collect-handover", daemon=True)
        self._thread.start()
        self._mover.start()

    def close(self) -> None:
        """Write what is queued, close the open segment, and hand every closed one over."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self._syncers is not None:
            self._syncers.shutdown()
        if self._mover is not None:
            with self._closed:
                self._stopping = True
                self._closed.notify()
            self._mover.join()
            self._mover = None

    # -- the request side ---------------------------------------------------------------------

    def pending_bytes(self) -> int:
        """Bytes accepted or queued that the landing zone does not hold yet."""
        with self._lock:
            open_size = self._segment.size if self._segment else 0
            return self._queued + open_size + sum(s.size for s in self._unlanded)

    def append(self, record: bytes) -> concurrent.futures.Future[None]:
        """Queue one record; the future is done once it is on disk."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if self._thread is None:
            future.set_exception(OSError("the spool is closed"))
            return future
        framed = frame(record)
        with self._lock:
            self._queued += len(framed)
        self._queue.put((framed, future))
        return future

    async def write(self, record: bytes) -> None:
        """:meth:`append`, awaited."""
        await asyncio.wrap_future(self.append(record))

    # -- the writer thread --------------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            timeout = None  # wake for the open segment's age
            if self._segment is not None:
                timeout = max(0.0, self._segment.opened + self.segment_seconds - time.monotonic())
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                self._roll()
                continue
            batch = []
            size = 0
            while item is not None:
                batch.append(item)
                size += len(item[0])
                if size >= _BATCH_BYTES:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            stopping = item is None
            if batch:
                self._commit(batch, size)
            segment = self._segment
            if segment is not None and (
                segment.size >= self.segment_bytes or time.monotonic() - segment.opened >= self.segment_seconds
            ):
                self._roll()
        self._roll()

    def _commit(self, batch: list[tuple[bytes, concurrent.futures.Future[None]]], size: int) -> None:
        """Append one group and have a sync thread sync it; a failed write is cut back and fails the group.

        Groups are written in order by this thread only, but their ``fdatasync``\\s may overlap: an
        ``fdatasync`` covers everything written to the file before it, and the file system serves
        concurrent ones in a shared journal commit, at several times the rate of one after another.
        """
        try:
            segment = self._segment or self._open()
            try:
                _write_all(segment.fd, b"".join(framed for framed, _ in batch))
            except OSError:
                os.ftruncate(segment.fd, segment.size)
                raise
        except OSError as exc:
            with self._lock:
                self._queued -= size
            _settle(batch, exc)
            return
        with self._lock:
            self._queued -= size
            segment.size += size
        assert self._syncers is not None
        if len(segment.syncs) > _SYNCERS:
            segment.syncs = [f for f in segment.syncs if not f.done()]
        segment.syncs.append(self._syncers.submit(_sync, segment.fd, batch))

    def _syncs_done(self, segment: _Segment) -> None:
        """Wait for the segment's syncs in flight (before it is closed or handed on)."""
        concurrent.futures.wait(segment.syncs)
        segment.syncs.clear()

    def _open(self) -> _Segment:
        self._seq += 1
        day = dt.datetime.now(dt.UTC).date().isoformat()
        folder = self.spool_dir / f"date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self._prefix}-{self._seq:06d}{SUFFIX}"
        # Locked before it bears a name another receiver's recovery looks for (the lock holds across the rename).
        new = path.with_name(path.name + _NEW)
        fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(new, path)
        sync_dir(folder)
        self._segment = _Segment(path, fd, time.monotonic())
        return self._segment

    def _roll(self) -> None:
        """Close the open segment (an empty one is dropped) and pass it to the hand-over thread."""
        segment = self._segment
        if segment is not None:
            self._syncs_done(segment)
            with self._closed:
                self._segment = None
                if segment.size:
                    self._unlanded.append(segment)
                    self._closed.notify()
            if not segment.size:
                segment.path.unlink()
                os.close(segment.fd)

    # -- the hand-over thread -----------------------------------------------------------------

    def _hand_over_closed(self) -> None:
        """Hand closed segments over in order until the spool stops with none left (or the landing zone refuses)."""
        while True:
            with self._closed:
                while not self._unlanded and not self._stopping:
                    self._closed.wait()
                if not self._unlanded:
                    return
                segment = self._unlanded[0]
            try:
                self._hand_over(segment.path)
            except OSError as exc:
                log.warning("strata collect: cannot hand %s to the landing zone yet: %s", segment.path.name, exc)
                with self._closed:  # keep it, retry later, let backpressure build; a restart takes it over
                    if self._stopping or (self._closed.wait(1.0) and self._stopping):
                        return
                continue
            os.close(segment.fd)  # releases the lock once the segment is in the landing zone
            with self._lock:
                self._unlanded.pop(0)

    def _hand_over(self, path: Path) -> None:
        """Move a closed segment as it is into the landing zone (a rename, else a copy renamed into place)."""
        target = self.landing_dir / path.parent.relative_to(self.spool_dir) / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(path, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            with open(path, "rb") as source:
                write_aside(target, lambda copy: shutil.copyfileobj(source, copy, 1 << 20))
            path.unlink()
        else:
            sync_dir(target.parent)
        sync_dir(path.parent)

    def _recover(self) -> None:
        """Take over the segments nobody holds (a killed receiver's), cut back to their last whole record."""
        for path in self.spool_dir.rglob(f"*{SUFFIX}{_NEW}"):
            with contextlib.suppress(BlockingIOError), open(path, "rb") as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                path.unlink()  # created, never named: it holds nothing
        for path in sorted(self.spool_dir.rglob(f"*{SUFFIX}")):
            fd = os.open(path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)  # a live receiver's open segment
                continue
            size = whole_records(path)
            os.ftruncate(fd, size)
            os.fsync(fd)
            if size:
                self._unlanded.append(_Segment(path, fd, time.monotonic(), size))
            else:
                path.unlink()
                os.close(fd)


def _sync(fd: int, batch: list[tuple[bytes, concurrent.futures.Future[None]]]) -> None:
    """Sync a written group, then answer its requests. A failed sync fails them (the bytes stay in the segment:
    a sender's retry may then land twice, which DWD counts as a duplicate, but nothing answered 200 is lost)."""
    try:
        os.fdatasync(fd)
    except OSError as exc:
        _settle(batch, exc)
    else:
        _settle(batch, None)


def _settle(batch: list[tuple[bytes, concurrent.futures.Future[None]]], error: OSError | None) -> None:
    for _, future in batch:
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _host() -> str:
    return "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:32] or "host"
