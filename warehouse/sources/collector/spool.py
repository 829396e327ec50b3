"""The receiver's spool: accepted lines made durable (group commit) and handed to the landing zone.

Lines go to an open segment under ``$STRATA_HOME/collect/spool/date=<day>/``; one writer thread
appends every line that queued up meanwhile, ``fdatasync``\\s once and then wakes the requests
that wait for it, so a request is answered only once its line is on disk and many concurrent
requests share one sync. A segment is closed when it reaches a size or an age and only then
moved to ``<landing>/otlp/date=<day>/`` (a rename, or a copy under a dot-name then a rename
when the landing zone is another file system; the folder is synced after), so ingest never
sees half a segment. Segment names carry the host, the process id, a random id and a sequence
number: receivers sharing a landing zone never collide. They end in ``.otlp.jsonl``, which a
folder ingest reads as OTLP/JSON.

Each open segment is locked (``flock``) by its receiver. At start a receiver lands the
segments a killed predecessor left (unlocked ones), cut back to their last whole line: what
follows it was never acknowledged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import fcntl
import os
import queue
import shutil
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

SUFFIX = ".otlp.jsonl"
_NEW = ".new"
_BATCH_BYTES = 16 << 20


@dataclass
class _Segment:
    path: Path
    fd: int
    opened: float
    size: int = 0


class Spool:
    """Durable appends of whole lines; :meth:`pending_bytes` is what is not yet in the landing zone."""

    def __init__(self, spool_dir: Path, landing_dir: Path, *, segment_bytes: int, segment_seconds: float) -> None:
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
        self._thread: threading.Thread | None = None
        self.landed: list[Path] = []

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Land what a killed predecessor left, then start the writer thread."""
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self._recover()
        self._thread = threading.Thread(target=self._run, name="strata-collect-spool", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Write what is queued, close the open segment and land it."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    # -- the request side ---------------------------------------------------------------------

    def pending_bytes(self) -> int:
        """Bytes accepted or queued that the landing zone does not hold yet."""
        with self._lock:
            open_size = self._segment.size if self._segment else 0
            return self._queued + open_size + sum(s.size for s in self._unlanded)

    def append(self, line: bytes) -> concurrent.futures.Future[None]:
        """Queue one line (no newline); the future is done once it is on disk."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if self._thread is None:
            future.set_exception(OSError("the spool is closed"))
            return future
        with self._lock:
            self._queued += len(line) + 1
        self._queue.put((line + b"\n", future))
        return future

    async def write(self, line: bytes) -> None:
        """:meth:`append`, awaited."""
        await asyncio.wrap_future(self.append(line))

    # -- the writer thread --------------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            timeout = None  # wake for the open segment's age, or to retry landing the closed ones
            if self._segment is not None:
                timeout = max(0.0, self._segment.opened + self.segment_seconds - time.monotonic())
            elif self._unlanded:
                timeout = 1.0
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
            if segment is not None and (segment.size >= self.segment_bytes
                                        or time.monotonic() - segment.opened >= self.segment_seconds):
                self._roll()
            elif self._unlanded:
                self._land_closed()
        self._roll()

    def _commit(self, batch: list[tuple[bytes, concurrent.futures.Future[None]]], size: int) -> None:
        """Append and sync one group; on failure cut the segment back, and every request of it fails."""
        error: OSError | None = None
        try:
            segment = self._segment or self._open()
            try:
                _write_all(segment.fd, b"".join(line for line, _ in batch))
                os.fdatasync(segment.fd)
            except OSError:
                os.ftruncate(segment.fd, segment.size)
                raise
            with self._lock:
                segment.size += size
        except OSError as exc:
            error = exc
        with self._lock:
            self._queued -= size
        for _, future in batch:
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

    def _open(self) -> _Segment:
        self._seq += 1
        day = dt.datetime.now(dt.timezone.utc).date().isoformat()
        folder = self.spool_dir / f"date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self._prefix}-{self._seq:06d}{SUFFIX}"
        # Locked before it bears a name another receiver's recovery looks for (the lock holds across the rename).
        new = path.with_name(path.name + _NEW)
        fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(new, path)
        _sync_dir(folder)
        self._segment = _Segment(path, fd, time.monotonic())
        return self._segment

    def _roll(self) -> None:
        """Close the open segment (an empty one is dropped) and land every closed one."""
        segment = self._segment
        if segment is not None:
            with self._lock:
                self._segment = None
                if segment.size:
                    self._unlanded.append(segment)
            if not segment.size:
                segment.path.unlink()
                os.close(segment.fd)
        self._land_closed()

    def _land_closed(self) -> None:
        while self._unlanded:
            segment = self._unlanded[0]
            try:
                self.landed.append(self._land(segment.path))
            except OSError:
                return  # the landing zone is unreachable: keep it, retry later, let backpressure build
            os.close(segment.fd)  # releases the lock once the segment is gone from the spool
            with self._lock:
                self._unlanded.pop(0)

    def _land(self, path: Path) -> Path:
        target = self.landing_dir / path.relative_to(self.spool_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(path, target)
        except OSError as exc:
            if exc.errno != 18:  # EXDEV: another file system
                raise
            part = target.with_name(f".{target.name}.part")
            shutil.copyfile(path, part)
            with open(part, "rb") as copy:
                os.fsync(copy.fileno())
            os.rename(part, target)
            _sync_dir(target.parent)
            path.unlink()
        _sync_dir(target.parent)
        _sync_dir(path.parent)
        return target

    def _recover(self) -> None:
        """Land the segments nobody holds (a killed receiver's), cut back to their last whole line."""
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
            size = _whole_lines(path)
            os.ftruncate(fd, size)
            os.fsync(fd)
            if size:
                self._unlanded.append(_Segment(path, fd, time.monotonic(), size))
            else:
                path.unlink()
                os.close(fd)
        self._land_closed()


def _whole_lines(path: Path) -> int:
    """Bytes up to and including the last ``\\n`` of a file."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        while end > 0:
            start = max(0, end - (1 << 16))
            f.seek(start)
            cut = f.read(end - start).rfind(b"\n")
            if cut >= 0:
                return start + cut + 1
            end = start
    return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _host() -> str:
    return "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:32] or "host"
