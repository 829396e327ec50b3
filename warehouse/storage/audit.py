"""The audit log: one row in ``ops.audit_log`` per write attempt — those a crash cut short too.

A table's commit and its audit row are two commits, so a process killed between them would
leave a published version without its row. Each attempt therefore leaves a note in the lake
(``ops/_attempts/<id>.json``) before it writes and stamps its id on its Delta commit; the
note goes once the row is written. A later run finds the notes of attempts that died, looks
for their stamp in the table's history, and records each as published (the commit landed) or
failed (it did not) — exactly once, because the row carries the id. Commands run side by
side: a note appears whole (written aside and renamed, or one PUT), and a recovery passes over
notes that end while it reads the folder.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict, cast

import polars as pl
import pyarrow.compute as pc
import pyarrow.fs as pafs

from warehouse.storage.lake import Lake
from warehouse.storage.objectstore import is_object_store
from warehouse.tables import OPS_AUDIT_LOG, Table, table

#: A note of an attempt on another machine is taken as abandoned after this long.
ABANDONED_AFTER = dt.timedelta(hours=6)
#: The suffix of a local note while it is being written (never read as a note).
_STAGED = ".part"


class _Note(TypedDict):
    """What an attempt's note holds (JSON): enough for a later run to tell it died and record it."""

    id: str
    table: str
    partition: str
    pid: int
    host: str
    started_at: str  # ISO 8601
    #: The tables the write was computed from, at their versions (see :attr:`Attempt.reads`).
    reads: NotRequired[dict[str, int]]


@dataclass
class Attempt:
    """One write attempt of one table, from its note to its row."""

    lake: Lake = field(repr=False)
    table: Table
    partition: str
    #: The lake tables the rows were computed from, each at the Delta version read (an ADS build's sources):
    #: recorded with the attempt, since retention and vacuum remove old versions. Empty: none recorded.
    reads: Mapping[str, int] = field(default_factory=dict)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    _clock: float = field(default_factory=time.perf_counter)

    def begin(self) -> Attempt:
        """Leave the note, before anything is written."""
        fs, folder = _folder(self.lake)
        fs.create_dir(folder, recursive=True)
        note: _Note = {
            "id": self.id,
            "table": self.table.name,
            "partition": self.partition,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": self.started_at.isoformat(),
        }
        if self.reads:  # a crashed attempt's row, written by recovery, names them too
            note["reads"] = dict(self.reads)
        path = f"{folder}/{self.id}.json"
        # Another command's recovery may list the folder at any moment: a note appears whole. An object
        # store's PUT is visible only once complete; a local file is written aside and renamed.
        staged = path if is_object_store(self.lake.settings.lake_uri) else f"{path}{_STAGED}"
        with fs.open_output_stream(staged) as out:
            out.write(json.dumps(note).encode())
        if staged != path:
            fs.move(staged, path)
        return self

    def end(
        self,
        status: str,
        version: int | None,
        *,
        rows_in: int = 0,
        rows_published: int = 0,
        rows_rejected: int = 0,
        rules: list[str] | None = None,
        message: str = "",
    ) -> float:
        """Write the attempt's row, then drop its note; returns its duration in ms."""
        duration_ms = (time.perf_counter() - self._clock) * 1000
        record(
            self.lake,
            attempt_id=self.id,
            table_name=self.table.name,
            partition=self.partition,
            delta_version=version,
            status=status,
            rows_in=rows_in,
            rows_published=rows_published,
            rows_rejected=rows_rejected,
            rules_failed=rules or [],
            started_at=self.started_at,
            duration_ms=duration_ms,
            message=message,
            reads=self.reads,
        )
        fs, folder = _folder(self.lake)
        fs.delete_file(f"{folder}/{self.id}.json")
        return duration_ms


def _folder(lake: Lake) -> tuple[pafs.FileSystem, str]:
    fs, root = lake.filesystem(lake.settings.lake_uri)
    return fs, f"{root.rstrip('/')}/ops/_attempts"


def record(
    lake: Lake,
    *,
    attempt_id: str,
    table_name: str,
    partition: str,
    delta_version: int | None,
    status: str,
    rows_in: int,
    rows_published: int,
    rows_rejected: int,
    rules_failed: list[str],
    started_at: dt.datetime,
    duration_ms: float,
    message: str,
    reads: Mapping[str, int] | None = None,
) -> None:
    """Append one row to ``ops.audit_log`` (conformed to its contract, never audited itself); ``reads``
    (table → Delta version) fill ``read_tables`` and ``read_versions``, null when there are none."""
    from contracts import conform

    contract = OPS_AUDIT_LOG.contract
    row = pl.DataFrame(
        [
            {
                "table_name": table_name,
                "partition": partition,
                "delta_version": delta_version,
                "status": status,
                "rows_in": rows_in,
                "rows_published": rows_published,
                "rows_rejected": rows_rejected,
                "rules_failed": rules_failed,
                "started_at": started_at,
                "duration_ms": duration_ms,
                "message": message[:4000],
                "attempt_id": attempt_id,
                "read_tables": list(reads) if reads else None,
                "read_versions": list(reads.values()) if reads else None,
            }
        ],
        schema_overrides={
            "rules_failed": pl.List(pl.String),
            "delta_version": pl.Int64,
            "read_tables": pl.List(pl.String),
            "read_versions": pl.List(pl.Int64),
        },
    )
    lake.commit(
        OPS_AUDIT_LOG,
        conform(row, contract),
        mode="append",
        partition_by=contract.partition_columns,
        description=contract.description,
    )


def recover_once(lake: Lake) -> None:
    """:func:`recover`, once per step's handle."""
    if not lake.recovered:
        recover(lake)


def recover(lake: Lake) -> int:
    """Record the attempts whose process died between their commit and their row; how many."""
    lake.recovered = True
    fs, folder = _folder(lake)
    if fs.get_file_info(folder).type == pafs.FileType.NotFound:
        return 0
    recovered = 0
    for info in fs.get_file_info(pafs.FileSelector(folder)):
        if (
            info.base_name.endswith(_STAGED)
            and info.mtime is not None
            and dt.datetime.now(dt.UTC) - info.mtime.astimezone(dt.UTC) > ABANDONED_AFTER
        ):
            _drop(fs, info.path)  # a note its writer died writing: it wrote nothing after it
        if not info.base_name.endswith(".json"):
            continue
        try:
            with fs.open_input_stream(info.path) as stream:
                note: _Note = json.loads(stream.read())
        except FileNotFoundError:
            continue  # its attempt ended since the listing: the note went with its row
        if not _abandoned(note):
            continue
        if not _recorded(lake, note["id"]):
            version, rows = _stamped(lake, table(note["table"]), note["id"])
            record(
                lake,
                attempt_id=note["id"],
                table_name=note["table"],
                partition=note["partition"],
                delta_version=version,
                status="published" if version is not None else "failed",
                rows_in=rows,
                rows_published=rows,
                rows_rejected=0,
                rules_failed=[],
                started_at=dt.datetime.fromisoformat(note["started_at"]),
                duration_ms=0.0,
                message="recorded after the writing process died"
                + ("" if version is not None else " before its commit"),
                reads=note.get("reads"),
            )
        _drop(fs, info.path)
        recovered += 1
    return recovered


def _drop(fs: pafs.FileSystem, path: str) -> None:
    """Delete a note; one already gone (another recovery's, or its writer's) is fine."""
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


def _abandoned(note: _Note) -> bool:
    if note["host"] != socket.gethostname():
        return dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(note["started_at"]) > ABANDONED_AFTER
    try:
        os.kill(note["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _recorded(lake: Lake, attempt_id: str) -> bool:
    if lake.open_table(OPS_AUDIT_LOG) is None:
        return False
    return cast(int, lake.snapshot(OPS_AUDIT_LOG).count_rows(filter=pc.field("attempt_id") == attempt_id)) > 0


def _stamped(lake: Lake, target: Table, attempt_id: str) -> tuple[int | None, int]:
    """The version of the target's commit stamped with the attempt, and the rows it added."""
    delta = lake.open_table(target)
    if delta is None:
        return None, 0
    for commit in delta.history(limit=200):
        if commit.get("strata.attempt") == attempt_id:
            return commit["version"], int((commit.get("operationMetrics") or {}).get("num_added_rows", 0))
    return None, 0
