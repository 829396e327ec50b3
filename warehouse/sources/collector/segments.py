"""Spool segments: the file format the receiver writes and hands to the landing zone as it is, and
their conversion, on the ingest side, to the OTLP/JSON lines ODS keeps.

A segment (``*.otlp.spool``) is a sequence of records, each framed by a magic, its length and
its CRC-32. The receiver never parses one again: the conversion of a protobuf body is CPU work
worth about twice the request path, and the receiver is the hot path that must keep up in real
time; converting is batch work, one segment at a time, for ``strata ingest`` (and so the hourly
ingest DAG). :func:`convert_segment` writes a segment's lines (:func:`.encoding.line_of`) beside
it under the name ending ``.otlp.jsonl`` — aside, fsynced, renamed into place, the folder synced
— and only then deletes the segment: a run cut short in between leaves both, and the next run
keeps the converted file and deletes the segment, so no span lands twice.
"""

from __future__ import annotations

import fcntl
import os
import struct
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from contracts.errors import InputError
from warehouse.sources.collector.encoding import line_of

#: A spool segment's name ends so; its converted file's so.
SUFFIX, LANDED_SUFFIX = ".otlp.spool", ".otlp.jsonl"
#: A record's frame: magic, length, CRC-32 of the record.
FRAME = struct.Struct(">4sII")
_MAGIC = b"SPR1"


def frame(record: bytes) -> bytes:
    """A record as a segment holds it."""
    return FRAME.pack(_MAGIC, len(record), zlib.crc32(record)) + record


def whole_records(path: Path) -> int:
    """Bytes up to the end of a file's last whole, intact record: where a write cut off by a kill is cut."""
    end = 0
    with open(path, "rb") as f:
        while len(header := f.read(FRAME.size)) == FRAME.size:
            magic, length, crc = FRAME.unpack(header)
            record = f.read(length)
            if magic != _MAGIC or len(record) != length or zlib.crc32(record) != crc:
                break
            end = f.tell()
    return end


def records(data: bytes, name: str) -> Iterator[bytes]:
    """The records of a closed segment's bytes; raises ``ValueError`` where one is damaged."""
    view, pos = memoryview(data), 0
    while pos < len(data):
        if len(data) - pos < FRAME.size:
            raise InputError(f"{name}: a record is cut short at byte {pos}")
        magic, length, crc = FRAME.unpack_from(data, pos)
        record = view[pos + FRAME.size : pos + FRAME.size + length].tobytes()
        if magic != _MAGIC or len(record) != length or zlib.crc32(record) != crc:
            raise InputError(f"{name}: the record at byte {pos} is damaged")
        pos += FRAME.size + length
        yield record


def _converted_name(segment: Path) -> Path:
    """Where a segment's converted file lies: beside it, ``<name>.otlp.jsonl``."""
    return segment.with_name(segment.name.removesuffix(SUFFIX) + LANDED_SUFFIX)


def convert_segment(segment: Path) -> Path:
    """Convert a closed segment into its OTLP/JSON lines file (:func:`_converted_name`), then delete it.

    Safe to run again and at once: the segment is locked while converted (as the receiver holds it
    until handed over), and a segment whose converted file exists already is only deleted — the
    converted file wins, whether a run was cut short or ``forget`` has rewritten it since. Raises
    :class:`InputError` for a segment holding a damaged or unconvertible record (it is left in place).
    """
    target = _converted_name(segment)
    try:
        fd = os.open(segment, os.O_RDONLY)
    except FileNotFoundError:
        return target  # converted and deleted by another run meanwhile
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(segment).st_ino != os.fstat(fd).st_ino:
                return target
        except FileNotFoundError:
            return target
        if not target.exists():
            _write_lines(segment, fd, target)
        segment.unlink()
        sync_dir(segment.parent)
    finally:
        os.close(fd)
    return target


def _write_lines(segment: Path, fd: int, target: Path) -> None:
    """Write a segment's lines to ``target`` (:func:`write_aside`)."""
    with open(fd, "rb", closefd=False) as f:
        data = f.read()

    def lines(out: BinaryIO) -> None:
        for record in records(data, segment.name):
            line = line_of(record)
            if line is not None:
                out.write(line + b"\n")

    write_aside(target, lines)


def write_aside(target: Path, write: Callable[[BinaryIO], None]) -> None:
    """Have ``write`` fill a dot-named file beside ``target``, fsync it, rename it into place and sync the
    folder: a reader of the folder sees the whole file or none of it, and a crash leaves no half of it."""
    part = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.part")
    try:
        with open(part, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.rename(part, target)
    finally:
        part.unlink(missing_ok=True)
    sync_dir(target.parent)


@dataclass
class Conversion:
    """What converting the segments some ingest paths name did."""

    #: The paths, each segment file named among them replaced by its converted file.
    paths: list[Path] = field(default_factory=list)
    #: Segments that could not be converted, and why (they stay where they are).
    failed: list[tuple[Path, str]] = field(default_factory=list)


def convert_pending(paths: Iterable[Path]) -> Conversion:
    """Convert every segment the paths name or hold (folders searched recursively), in name order."""
    done = Conversion()
    for given in paths:
        path = given.expanduser()
        if path.is_dir():
            for segment in sorted(p for p in path.rglob(f"*{SUFFIX}") if not p.name.startswith(".")):
                _convert_into(done, segment)
            done.paths.append(given)
        elif path.name.endswith(SUFFIX) and path.is_file():
            converted = _convert_into(done, path)
            if converted is not None and converted.exists():
                done.paths.append(converted)
        else:
            done.paths.append(given)
    return done


def _convert_into(done: Conversion, segment: Path) -> Path | None:
    try:
        return convert_segment(segment)
    except InputError as exc:
        done.failed.append((segment, str(exc)))
        return None


def sync_dir(folder: Path) -> None:
    """fsync a folder, so a rename or a deletion in it survives a crash."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
