"""Erasure in the landing zone: a forgotten user's lines leave the files they were landed from.

``strata forget`` knows each of the user's ODS rows by its file (``source_file``,
``file_sha256``) and line (``line_no``). Every such file that lies under the landing zone
(``STRATA_LANDING_DIR``) and still holds the bytes it was landed with is rewritten without
those lines (gzip stays gzip), aside and renamed into place; a file left with no line is
deleted. The ledger (``ops.landed_files``) gets a row for the rewritten file's new hash, a
copy of the old one's, so a re-ingest of the landing folder still skips it. Files landed
from elsewhere are the caller's to manage and are left alone.

``strata collect``'s spool segments in the landing zone are converted first, as an ingest would
(:func:`warehouse.sources.collector.segments.convert_pending`): a segment left beside its
converted file by an ingest cut short is then deleted, so it can never bring a removed line back
as a fresh conversion. A segment not yet ingested has no ODS row to name its lines: like any
landing file not yet ingested, its lines are found by the first forget after its ingest;
:func:`unlanded` counts those files and segments so that ``strata forget`` can say so.

This runs before the ODS rows are removed: a forget that crashes in between finds the rows
again on its re-run, and the file, whose hash no longer matches them, is left as rewritten.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from warehouse.sources.collector.segments import convert_pending
from warehouse.sources.collector.spool import segments_held, spool_dir
from warehouse.sources.files import Lines, discover, load, split_lines
from warehouse.sources.formats import HEAD_BYTES, SUFFIXES, head, otlp_signal
from warehouse.storage.lake import Lake
from warehouse.storage.publish import publish
from warehouse.tables import OPS_LANDED_FILES, Table

log = logging.getLogger(f"strata.{__name__}")
#: The columns of an ODS row that say where in the landing zone it came from.
LINEAGE = ["source_file", "file_sha256", "line_no"]


def rewrite_landed(lake: Lake, table: Table, rows: pl.DataFrame) -> int:
    """Rewrite the landing files of ``rows`` (an ODS table's ``LINEAGE``) without those lines, or
    with a row's ``raw_line`` in place of its line where ``rows`` has one (an export line left with
    others' spans); returns how many files were rewritten or deleted.

    A file an earlier erasure rewrote (its hash one the ledger recorded for it) no longer numbers
    its lines as its ODS rows do: there a row's line is found by its text, ``old_line``."""
    zone = lake.settings.landing_dir.resolve()
    if zone.is_dir():
        for _, error in convert_pending([zone]).failed:
            log.warning("landing zone: %s", error)
    changed = 0
    for (source_file, sha), group in rows.group_by(["source_file", "file_sha256"]):
        path = Path(str(source_file))
        if not path.is_absolute():
            path = zone / path
        if not path.resolve().is_relative_to(zone) or not path.is_file():
            continue
        raw = path.read_bytes()
        current = hashlib.sha256(raw).hexdigest()
        lines = split_lines(load(path).content)
        if current == sha:
            replaced = _replacements(group)
        elif "old_line" in group.columns and _ledger_has(lake, table, current):
            replaced = _replacements(group, _numbers_now(lines, group))
        else:
            continue  # changed by someone else since it was landed
        if not replaced:
            continue  # (its rows' lines left it before)
        drop = {line_no for line_no, line in replaced.items() if line is None}
        kept = b"".join(_line_as_kept(lines, i, replaced) for i in range(len(lines)) if i + 1 not in drop)
        if not kept:
            path.unlink()
        else:
            data = gzip.compress(kept, mtime=0) if raw[:2] == b"\x1f\x8b" else kept
            staged = path.with_name(f".{path.name}.forget-{os.getpid()}")
            staged.write_bytes(data)
            staged.replace(path)
            _record_rewrite(lake, table, current, hashlib.sha256(data).hexdigest(), len(lines) - len(drop))
        changed += 1
    return changed


def _replacements(rows: pl.DataFrame, now: dict[int, int] | None = None) -> dict[int, bytes | None]:
    """Line number → its new text, or None where the line goes; line numbers as landed, or mapped
    through ``now`` to the file's (a row missing from it has left the file)."""
    lines = rows.get_column("raw_line") if "raw_line" in rows.columns else pl.repeat(None, rows.height, eager=True)
    changes = dict(zip(rows.get_column("line_no").to_list(), lines.to_list(), strict=True))
    return changes if now is None else {now[n]: line for n, line in changes.items() if n in now}


def _numbers_now(lines: Lines, rows: pl.DataFrame) -> dict[int, int]:
    """Each row's line number as landed → the number of the line of the file that holds its text
    (``old_line``), each line of the file taken once, in order."""
    wanted: dict[bytes, list[int]] = {}
    for line_no, text in sorted(rows.select("line_no", "old_line").iter_rows()):
        wanted.setdefault(text, []).append(line_no)
    now: dict[int, int] = {}
    for i in range(len(lines)):
        block = bytes(lines.block(i, i + 1))
        waiting = wanted.get(block[:-1] if block.endswith(b"\n") else block)
        if waiting:
            now[waiting.pop(0)] = i + 1
    return now


def _ledger_has(lake: Lake, table: Table, sha: str) -> bool:
    """Whether the ledger knows a file of ``table`` by this hash (landed so, or rewritten so by an erasure)."""
    if lake.open_table(OPS_LANDED_FILES) is None:
        return False
    found = lake.read_frame(
        OPS_LANDED_FILES,
        columns=["file_sha256"],
        filters=[("file_sha256", "=", sha), ("table_name", "=", table.name)],
    )
    return not found.is_empty()


def _line_as_kept(lines: Lines, i: int, replaced: dict[int, bytes | None]) -> bytes | memoryview:
    """Line ``i`` (0-based) as the file holds it, or its new text ended as it was ended."""
    block = lines.block(i, i + 1)
    new = replaced.get(i + 1)
    return block if new is None else new + (b"\n" if block[-1:].tobytes() == b"\n" else b"")


def _record_rewrite(lake: Lake, table: Table, old: str, new: str, lines: int) -> None:
    """The ledger row of a rewritten file: its landing's, under the new hash, with the lines left."""
    if lake.open_table(OPS_LANDED_FILES) is None:
        return
    before = lake.read_frame(OPS_LANDED_FILES, filters=[("file_sha256", "=", old), ("table_name", "=", table.name)])
    if before.is_empty():
        return
    publish(
        lake,
        OPS_LANDED_FILES,
        before.head(1).with_columns(file_sha256=pl.lit(new), lines=pl.lit(lines)),
        mode="append",
        expectations=False,
    )


@dataclass(frozen=True)
class Unlanded:
    """What no ingest has landed yet, so no forget could read it: it may hold any user's lines."""

    #: Files under the landing zone that an ingest of it would land and none has (by path).
    files: int
    #: Spool segments a receiver of this ``STRATA_HOME`` holds (open, or closed and not yet handed over).
    segments: int


def unlanded(lake: Lake) -> Unlanded:
    """Count the landing zone's files no ingest has landed, and the receiver's spool segments."""
    zone = lake.settings.landing_dir.resolve()
    files = 0
    if zone.is_dir():
        landed_paths: set[str] = set()
        if lake.open_table(OPS_LANDED_FILES) is not None:
            ledger = lake.read_frame(OPS_LANDED_FILES, columns=["source_file"])
            landed_paths = set(ledger.get_column("source_file").to_list())
        for path in discover([zone], SUFFIXES["lines"] + SUFFIXES["otlp"]):
            is_export = path.name.endswith(SUFFIXES["otlp"])  # landed only if an OTLP trace export
            if str(path) not in landed_paths and (not is_export or otlp_signal(head(path, HEAD_BYTES)) == "traces"):
                files += 1
    return Unlanded(files, segments_held(spool_dir(lake.settings.home)))
