"""The receiver's spool: group commit, segments rolled by size and age, converted off the request path,
landed whole and in order."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from pathlib import Path

import pytest

from warehouse.sources.collector import spool as spool_module
from warehouse.sources.collector.spool import Spool


def _landed(landing: Path) -> list[Path]:
    return sorted((landing / "otlp").rglob("*.otlp.jsonl"))


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
    spool = Spool(
        tmp_path / "spool",
        tmp_path / "landing",
        segment_bytes=1000,
        segment_seconds=3600,
        convert=lambda record: record,
    )
    spool.start()
    lines = [f'{{"resourceSpans":[],"n":{i:04d}}}'.encode() for i in range(100)]
    futures = [spool.append(line) for line in lines]
    concurrent.futures.wait(futures, timeout=30)
    assert all(f.done() and f.exception() is None for f in futures)
    assert len(syncs) < len(lines) / 4  # group commit
    for i in range(30):  # one at a time: each its own commit, and a segment closes once past 1,000 bytes
        line = f'{{"resourceSpans":[],"pad":"{"x" * 80}","n":{i:04d}}}'.encode()
        spool.append(line).result(timeout=10)
        lines.append(line)
    spool.close()
    landed = _landed(tmp_path / "landing")
    assert len(landed) >= 3
    assert b"".join(p.read_bytes() for p in landed) == b"".join(line + b"\n" for line in lines)
    assert not list((tmp_path / "spool").rglob("*.jsonl"))


def test_a_segment_lands_when_it_is_old_enough(tmp_path: Path) -> None:
    spool = Spool(
        tmp_path / "spool",
        tmp_path / "landing",
        segment_bytes=1 << 20,
        segment_seconds=0.2,
        convert=lambda record: record,
    )
    spool.start()
    try:
        spool.append(b'{"resourceSpans":[]}').result(timeout=10)
        deadline = time.monotonic() + 10
        # the landed file appears (renamed) a moment before its segment is deleted and stops counting
        while (not _landed(tmp_path / "landing") or spool.pending_bytes()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p.read_bytes() for p in _landed(tmp_path / "landing")] == [b'{"resourceSpans":[]}\n']
        assert spool.pending_bytes() == 0
    finally:
        spool.close()


def test_a_closed_segment_counts_against_the_bound_until_its_conversion_lands_it(tmp_path: Path) -> None:
    release = threading.Event()

    def slow_convert(record: bytes) -> bytes:  # the converter thread, behind the request path
        release.wait(10)
        return record.upper()

    spool = Spool(
        tmp_path / "spool", tmp_path / "landing", segment_bytes=10, segment_seconds=3600, convert=slow_convert
    )
    spool.start()
    try:
        spool.append(b"first record").result(timeout=10)  # durable and answered while no conversion ran
        spool.append(b"second").result(timeout=10)
        assert spool.pending_bytes() > len(b"first record" + b"second") and not _landed(tmp_path / "landing")
        release.set()
        deadline = time.monotonic() + 10
        while spool.pending_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [p.read_bytes() for p in _landed(tmp_path / "landing")] == [b"FIRST RECORD\n", b"SECOND\n"]
    finally:
        release.set()
        spool.close()


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
    spool = Spool(
        tmp_path / "spool",
        tmp_path / "landing",
        segment_bytes=1 << 20,
        segment_seconds=3600,
        convert=lambda record: record,
    )
    spool.start()
    try:
        first = spool.append(b"first")
        time.sleep(0.05)
        second = spool.append(b"second")
        assert not first.done() and not second.done()  # answered only once synced
        concurrent.futures.wait([first, second], timeout=10)
        assert most[0] == 2 and first.exception() is None and second.exception() is None
    finally:
        spool.close()
    assert [p.read_bytes() for p in _landed(tmp_path / "landing")] == [b"first\nsecond\n"]
