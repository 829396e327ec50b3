"""Landed files: find them, fingerprint them, and split them into byte-exact lines."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa
from isal import igzip
import pyarrow.compute as pc

_GZIP_MAGIC = b"\x1f\x8b"
_DATE_IN_PATH = re.compile(r"(?:^|[/_=-])(\d{4}-\d{2}-\d{2})(?:[/_.]|$)")
#: What a folder search picks up, by what the files will be read as.
SUFFIXES = {
    "lines": (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"),
    "otlp": (".json", ".json.gz"),
    "csv": (".csv", ".csv.gz"),
}


@dataclass(frozen=True)
class LandedFile:
    """One input file, its content hash and its decompressed bytes."""

    path: Path
    sha256: str
    content: bytes

    @property
    def path_date(self) -> str | None:
        """The last ``YYYY-MM-DD`` in the path (e.g. ``date=2026-01-31``), if any."""
        found = _DATE_IN_PATH.findall(self.path.as_posix())
        return found[-1] if found else None


def discover(paths: Iterable[Path], kinds: Iterable[str] = ("lines",)) -> list[Path]:
    """Files named by ``paths``; folders are searched recursively for the suffixes of ``kinds``.

    A folder search takes JSON lines files; ``.json`` (OTLP exports) and ``.csv`` files only
    when the caller reads them so, so a ``manifest.json`` or price list beside the logs is
    not mistaken for logs. A file named explicitly is always taken.
    """
    suffixes = tuple(s for kind in kinds for s in SUFFIXES[kind])
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(suffixes))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")
    return files


def load(path: Path) -> LandedFile:
    """Read a file (gzip recognised by its magic bytes); the hash is of the bytes as landed.

    Gzip is inflated with ISA-L, about 1.7× faster than zlib on the same stream.
    """
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if data[:2] == _GZIP_MAGIC:
        try:
            data = igzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path} is not a readable gzip file: {exc}") from exc
    return LandedFile(path=path, sha256=digest, content=data)


def split_lines(content: bytes) -> pa.LargeBinaryArray:
    """The lines of ``content`` without their ``\\n`` terminator, bytes untouched (``\\r`` kept).

    A final line without a terminator is a line; a trailing terminator adds none.
    """
    if not content:
        return pa.array([], pa.large_binary())
    buf = np.frombuffer(content, np.uint8)
    newlines = np.flatnonzero(buf == 10)
    ends_with_newline = content.endswith(b"\n")
    starts = np.concatenate(([0], newlines + 1))
    if ends_with_newline:
        starts = starts[:-1]
    count = len(starts)
    offsets = np.empty(count + 1, np.int64)
    offsets[:-1] = starts
    offsets[-1] = len(content)
    with_terminator = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(content)]
    )
    if not ends_with_newline:
        last = with_terminator[count - 1].as_py()
        trimmed = pc.binary_slice(with_terminator.slice(0, count - 1), 0, -1)
        return pa.concat_arrays([trimmed, pa.array([last], pa.large_binary())])
    return pc.binary_slice(with_terminator, 0, -1)
