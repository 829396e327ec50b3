"""Deterministic gzip files: same bytes in, same file out (mtime 0, no file name)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
from isal import isal_zlib

#: Compression level: 1 is ~3x faster than the default and only ~10% larger on these logs.
GZIP_LEVEL = 1


@dataclass(frozen=True)
class WrittenFile:
    """A file written under the output root, as listed in the manifest."""

    path: str  # relative, with forward slashes
    lines: int
    sha256: str


def gzip_bytes(pieces: Iterable[bytes | memoryview], level: int = GZIP_LEVEL) -> bytes:
    """One gzip member of the concatenated ``pieces`` (mtime 0, no name).

    Deflated with ISA-L: at level 1 it is ~3.4x faster than zlib's level 1 on these logs, and
    its output is smaller. Same input, same library, same bytes.
    """
    z = isal_zlib.compressobj(level, isal_zlib.DEFLATED, 31)
    out = [z.compress(p) for p in pieces]
    out.append(z.flush())
    return b"".join(out)


def write_file(root: Path, rel: str, blob: bytes, lines: int) -> WrittenFile:
    """Write ``blob`` to ``root/rel`` atomically (temp file + rename) and describe it."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, path)
    return WrittenFile(rel, lines, hashlib.sha256(blob).hexdigest())


class LineBuffer:
    """The bytes of a polars String series of lines, as zero-copy slices of its buffers.

    Polars stores strings as Arrow *views*: each value is (length, buffer, offset), and a
    freshly built column lays consecutive values out back to back in its data buffers.
    So the bytes of lines ``[a, b)`` are a few contiguous runs of those buffers, handed to
    zlib without ever being copied. (Correct whatever the layout: a value that does not
    follow its predecessor just starts a new run.) ``patches`` replaces whole lines by
    position with other bytes — fault lines, which may not be valid UTF-8.
    """

    def __init__(self, lines: pl.Series, patches: dict[int, bytes] | None = None) -> None:
        arr = lines.to_arrow(compat_level=pl.CompatLevel.newest())
        chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
        self._keep = arr  # keeps the buffers alive
        self._bufs: list[memoryview] = []
        located = [self._locate(chunk) for chunk in chunks if len(chunk)]
        empty = np.zeros(0, dtype=np.int64)
        self._bid = np.concatenate([x[0] for x in located]) if located else empty
        self._start = np.concatenate([x[1] for x in located]) if located else empty
        end = self._start + (np.concatenate([x[2] for x in located]) if located else empty)
        self._end = end
        n = len(self._bid)
        run_start = np.ones(n, dtype=bool)  # a run of contiguous bytes starts at this line
        run_start[1:] = (self._bid[1:] != self._bid[:-1]) | (self._start[1:] != end[:-1])
        self._patches = patches or {}
        for p in self._patches:
            run_start[p] = True
            if p + 1 < n:
                run_start[p + 1] = True
        self._run_start = run_start

    def _locate(self, chunk: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(buffer id, start, length) of every value of one Arrow string chunk."""
        bufs = chunk.buffers()
        n, off = len(chunk), chunk.offset
        base = len(self._bufs)
        if pa.types.is_string_view(chunk.type) or pa.types.is_binary_view(chunk.type):
            views = np.frombuffer(bufs[1], dtype=np.int32).reshape(-1, 4)[off : off + n]
            length = views[:, 0].astype(np.int64)
            inline = length <= 12  # short values live inside the view itself
            self._bufs.append(memoryview(bufs[1]))
            self._bufs.extend(memoryview(b) for b in bufs[2:])
            bid = np.where(inline, base, base + 1 + views[:, 2].astype(np.int64))
            start = np.where(inline, (off + np.arange(n, dtype=np.int64)) * 16 + 4, views[:, 3].astype(np.int64))
            return bid, start, length
        if not pa.types.is_large_string(chunk.type):
            chunk = chunk.cast(pa.large_string())
            bufs, off = chunk.buffers(), chunk.offset
        offsets = np.frombuffer(bufs[1], dtype=np.int64)[off : off + n + 1]
        self._bufs.append(memoryview(bufs[2]) if bufs[2] is not None else memoryview(b""))
        return np.full(n, base, dtype=np.int64), offsets[:-1].copy(), np.diff(offsets)

    def pieces(self, start: int, end: int) -> list[bytes | memoryview]:
        """Byte pieces of lines ``[start, end)``, patched lines substituted."""
        if end <= start:
            return []
        firsts = np.concatenate([[start], start + 1 + np.flatnonzero(self._run_start[start + 1 : end])])
        lasts = np.concatenate([firsts[1:], [end]])
        out: list[bytes | memoryview] = []
        for a, b in zip(firsts.tolist(), lasts.tolist()):
            patch = self._patches.get(a)
            if patch is not None:
                out.append(patch)
            else:
                out.append(self._bufs[self._bid[a]][self._start[a] : self._end[b - 1]])
        return out
