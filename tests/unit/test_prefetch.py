"""The producer thread of a prefetched stream: errors in order, and no thread left behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from warehouse.storage.publish import prefetch


def _threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "strata-prefetch"]


def test_frames_come_in_order_and_a_producer_error_after_them() -> None:
    def frames() -> Iterator[int]:
        yield from range(5)
        raise ValueError("bad frame")

    seen: list[int] = []
    with pytest.raises(ValueError, match="bad frame"):
        for frame in prefetch(frames(), depth=2):
            seen.append(frame)
    assert seen == [0, 1, 2, 3, 4] and not _threads()


def test_an_abandoned_stream_leaves_no_thread_running() -> None:
    # A thread still inside DuckDB or Arrow when the interpreter exits aborts the process.
    stream = prefetch(iter(range(1_000)), depth=1)
    assert next(stream) == 0
    stream.close()
    assert not _threads()
