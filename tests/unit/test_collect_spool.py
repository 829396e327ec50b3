"""The receiver's spool: group commit, segments rolled by size and age, handed to the landing zone whole,
unparsed and in order."""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from warehouse.sources.collector import spool as spool_module
from warehouse.sources.collector.segments import records
from warehouse.sources.collector.spool import Spool


@contextmanager
def _running(tmp_path: Path, *, segment_bytes: int = 1 << 20, segment_seconds: float = 3600) -> Iterator[Spool]:
    """A spool started in ``tmp_path / "spool"``, handing over to ``tmp_path / "landing"``; closed on leaving."""
    spool = Spool(
        tmp_path / "spool", tmp_path / "landing", segment_bytes=segment_bytes, segment_seconds=segment_seconds
    )
    spool.start()
    try:
        yield spool
    finally:
        spool.close()


def _landed(landing: Path) -> list[Path]:
    return sorted((landing / "otlp").rglob("*.otlp.spool"))


def _records(path: Path) -> list[bytes]:
    return list(records(path.read_bytes(), path.name))


def test_concurrent_appends_share_a_sync_and_segments_roll_by_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs = []
    real = os.fdatasync

    def slow_sync(fd: int) -> None:  # a disk that takes 20 ms a sync: appends queue up meanwhile
        syncs.append(fd)
        time.sleep(0.02)
        real(fd)

    monkeypatch.setattr(spool_module.os, "fdatasync", slow_sync)
    with _running(tmp_path, segment_bytes=1000) as spool:
        lines = [f'{{"resourceSpans":[],"n":{i:04d}}}'.encode() for i in range(100)]
        futures = [spool.append(line) for line in lines]
        concurrent.futures.wait(futures, timeout=30)
        assert all(f.done() and f.exception() is None for f in futures)
        assert len(syncs) < len(lines) / 4  # group commit
        for i in range(30):  # one at a time: each its own commit, and a segment closes once past 1,000 bytes
            line = f'{{"resourceSpans":[],"pad":"{"x" * 80}","n":{i:04d}}}'.encode()
            spool.append(line).result(timeout=10)
            lines.append(line)
    landed = _landed(tmp_path / "landing")
    assert len(landed) >= 3
    assert [r for p in landed for r in _records(p)] == lines  # handed over as written, in order
    assert not list((tmp_path / "spool").rglob("*.otlp.spool"))


def test_a_segment_lands_when_it_is_old_enough(tmp_path: Path) -> None:
    with _running(tmp_path, segment_seconds=0.2) as spool:
        spool.append(b'{"resourceSpans":[]}').result(timeout=10)
        deadline = time.monotonic() + 10
        # the segment appears in the landing zone (renamed) a moment before it stops counting
        while (not _landed(tmp_path / "landing") or spool.pending_bytes()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [_records(p) for p in _landed(tmp_path / "landing")] == [[b'{"resourceSpans":[]}']]
        assert spool.pending_bytes() == 0


def test_a_closed_segment_counts_against_the_bound_until_it_is_in_the_landing_zone(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "otlp").write_bytes(b"")  # the landing zone refuses the hand-over (as a full disk would)
    with _running(tmp_path, segment_bytes=10) as spool:
        spool.append(b"first record").result(timeout=10)  # durable and answered meanwhile
        spool.append(b"second").result(timeout=10)
        time.sleep(0.3)
        assert spool.pending_bytes() > len(b"first record" + b"second") and not _landed(landing)
        (landing / "otlp").unlink()  # the hand-over thread retries each second
        deadline = time.monotonic() + 10
        while spool.pending_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [_records(p) for p in _landed(landing)] == [[b"first record"], [b"second"]]


def test_a_segment_is_copied_when_the_landing_zone_is_on_another_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    real = os.rename

    def rename(source: os.PathLike[str] | str, target: os.PathLike[str] | str) -> None:
        if Path(source).name.endswith(".otlp.spool") and "landing" in str(target):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real(source, target)

    monkeypatch.setattr(spool_module.os, "rename", rename)
    with _running(tmp_path) as spool:
        spool.append(b"across").result(timeout=10)
    [landed] = _landed(tmp_path / "landing")
    assert _records(landed) == [b"across"]
    assert not [p for p in (tmp_path / "landing").rglob("*") if p.name.startswith(".")]
    assert not list((tmp_path / "spool").rglob("*.otlp.spool"))


def test_a_group_is_written_while_the_one_before_it_is_still_syncing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncing, most = [0], [0]
    real = os.fdatasync

    def slow_sync(fd: int) -> None:  # a sync that takes 200 ms: the next group must not wait for it
        syncing[0] += 1
        most[0] = max(most[0], syncing[0])
        time.sleep(0.2)
        real(fd)
        syncing[0] -= 1

    monkeypatch.setattr(spool_module.os, "fdatasync", slow_sync)
    with _running(tmp_path) as spool:
        first = spool.append(b"first")
        time.sleep(0.05)
        second = spool.append(b"second")
        assert not first.done() and not second.done()  # answered only once synced
        concurrent.futures.wait([first, second], timeout=10)
        assert most[0] == 2 and first.exception() is None and second.exception() is None
    assert [_records(p) for p in _landed(tmp_path / "landing")] == [[b"first", b"second"]]
