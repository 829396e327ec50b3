"""The suppression list: a forgotten user's old records never land again.

``strata forget`` erases what the lake holds, but the same records can come again: an exporter
re-sends a batch, a late file arrives, a receiver's spool segment was still open during the
forget. So each forget appends the user's pseudonym and its time to ``ops.forgotten_users``
(never the raw id; a pseudonym under a key of its own, :func:`list_key`), and every ingest
checks its records against it: a record of a forgotten user whose event time is before their
forget is left out of ODS — an export line keeps the other spans byte for byte
(:mod:`warehouse.sources.span_erasure`), a line left with no record is not stored, the landing
file loses it as a forget would — and counted (``ops.suppressed_records``, the books'
``suppressed``). A record after the forget (the user came back) lands as usual; one whose time
cannot be read is suppressed.

The check costs a hash per distinct user id of a run and a lookup per record, and nothing at
all while the list is empty. Lines that do not parse have no user to check: forget searches
their bytes for the raw id, which the list does not hold.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.privacy import pseudonym
from warehouse.sources.span_erasure import NotReadable, remove_spans
from warehouse.sources.timestamps import parse_ts
from warehouse.storage.lake import Lake
from warehouse.storage.publish import publish
from warehouse.tables import OPS_FORGOTTEN_USERS, OPS_SUPPRESSED_RECORDS, Table

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def list_key(key: bytes) -> bytes:
    """The key of the list's pseudonyms: derived from ``STRATA_PSEUDONYM_KEY``, so the list's pseudonym
    of a user is not the one DWD used, and nothing left anywhere can be joined to it."""
    return hmac.new(key, b"strata: the suppression list of forgotten users", hashlib.sha256).digest()


def add_forgotten(lake: Lake, key: bytes, user_id: str, at: dt.datetime) -> None:
    """Put one user on the suppression list from ``at`` on (a user forgotten before: from ``at`` now).

    The list is written whole, one row per user, so a forget run again after a crash leaves it as
    one clean run would."""
    listed = pseudonym(list_key(key), user_id)
    frame = pl.DataFrame({"user_pseudonym": [listed], "forgotten_at": [at]}).with_columns(
        pl.col("forgotten_at").dt.cast_time_unit("us")
    )
    if lake.open_table(OPS_FORGOTTEN_USERS) is not None:
        others = lake.read_frame(OPS_FORGOTTEN_USERS).filter(pl.col("user_pseudonym") != listed)
        frame = pl.concat([others, frame], how="vertical_relaxed")
    publish(lake, OPS_FORGOTTEN_USERS, frame, mode="overwrite", expectations=False)


def record_suppressed(lake: Lake, rows: list[dict[str, object]]) -> None:
    """Append the counts of records an ingest left out (``ops.suppressed_records`` rows)."""
    if rows:
        publish(lake, OPS_SUPPRESSED_RECORDS, pl.DataFrame(rows), mode="append", expectations=False)


def suppressed_on(lake: Lake, table: Table, day: dt.date) -> int:
    """Records of ``table`` (an ODS table) dated ``day`` that ingests left out: the books' ``suppressed``."""
    delta = lake.open_table(OPS_SUPPRESSED_RECORDS)
    if delta is None:
        return 0
    rows = lake.dataset(delta).to_table(
        columns=["records"], filter=(pc.field("event_date") == day) & (pc.field("table_name") == table.name)
    )
    return int(pc.sum(rows.column(0)).as_py() or 0)


@dataclass
class Kept:
    """A chunk of lines after the suppression: what stays, and how many records were left out."""

    raw: pa.Array
    line_no: pa.Array
    parsed: pl.DataFrame
    #: Records left out, by the date of their event time (None: a time that could not be read).
    suppressed: dict[dt.date | None, int] = field(default_factory=dict)
    #: Line number → its new text, or None for a line left out: what the landing file loses.
    changes: dict[int, bytes | None] = field(default_factory=dict)


@dataclass
class Suppression:
    """The suppression list as one ingest run reads it (under its locks), and the users it looked up."""

    #: The list's key (:func:`list_key`).
    key: bytes
    #: Pseudonym → when that user was (last) forgotten.
    forgotten: dict[str, dt.datetime]
    #: User id → when they were forgotten (None: they were not), for each id seen this run.
    _seen: dict[str, dt.datetime | None] = field(default_factory=dict)

    @classmethod
    def load(cls, lake: Lake) -> Suppression:
        """The list as it is now (empty when no forget ever ran)."""
        if lake.open_table(OPS_FORGOTTEN_USERS) is None:
            return cls(b"", {})
        rows = lake.read_frame(OPS_FORGOTTEN_USERS, columns=["user_pseudonym", "forgotten_at"])
        return cls(list_key(lake.settings.require_pseudonym_key()), dict(rows.iter_rows()))

    def __bool__(self) -> bool:
        return bool(self.forgotten)

    def _forgotten_at(self, user_id: str | None) -> dt.datetime | None:
        if user_id is None:
            return None
        if user_id not in self._seen:
            self._seen[user_id] = self.forgotten.get(pseudonym(self.key, user_id))
        return self._seen[user_id]

    def gone(self, users: pl.Series, ts: pl.Series) -> pl.Series:
        """Which records (their raw user ids, their parsed times) are of forgotten users from before their
        forget (a time that cannot be read counts as before): what the list keeps out of the lake."""
        hits = {u: when for u in users.unique().drop_nulls().to_list() if (when := self._forgotten_at(u)) is not None}
        if not hits:
            return pl.repeat(False, len(users), eager=True)
        forgotten = users.replace_strict(hits, default=None, return_dtype=pl.Datetime("us", "UTC"))
        return forgotten.is_not_null() & (ts.is_null() | (ts < forgotten)).fill_null(True)

    def apply(self, raw: pa.Array, line_no: pa.Array, parsed: pl.DataFrame) -> Kept:
        """``raw`` (a chunk of lines, numbered ``line_no``) without the records of forgotten users from
        before their forget; ``parsed`` is the chunk's record parse (with ``_line`` where a line holds
        several records), which names ``user_id`` and ``ts``."""
        if not self:
            return Kept(raw, line_no, parsed)
        ts = parsed.select(parse_ts(pl.col("ts"))).to_series()
        gone = self.gone(parsed.get_column("user_id"), ts).to_numpy()
        if not gone.any():  # the user came back: their records after the forget land
            return Kept(raw, line_no, parsed)
        suppressed = dict(ts.filter(pl.Series(gone)).dt.date().value_counts().iter_rows())
        several = "_line" in parsed.columns
        lines = parsed.get_column("_line").to_numpy() if several else np.arange(len(raw))
        texts = raw.to_pylist()
        keep = np.ones(len(raw), dtype=bool)
        changes: dict[int, bytes | None] = {}
        with_records = set(lines[~gone].tolist())
        numbers = line_no.to_pylist()
        for i in sorted(set(lines[gone].tolist())):
            left = self._without(texts[i]) if i in with_records else None  # no record left: the line goes
            keep[i] = left is not None
            texts[i] = changes[numbers[i]] = left
        kept = parsed.filter(~pl.Series(gone))
        if several:  # the records' line indexes, renumbered to the lines kept
            index = np.cumsum(keep) - 1
            kept = kept.filter(pl.col("_line").is_in(np.flatnonzero(keep).tolist())).with_columns(
                _line=pl.Series(index[kept.get_column("_line").to_numpy()], dtype=pl.Int64)
            )
        mask = pa.array(keep)
        return Kept(pa.array(texts, type=raw.type).filter(mask), line_no.filter(mask), kept, suppressed, changes)

    def _without(self, line: bytes) -> bytes | None:
        """An export line without the spans of forgotten users from before their forget (None: none left)."""

        def gone(user: str | None, start_ns: int | None) -> bool:
            at = self._forgotten_at(user)
            return at is not None and (start_ns is None or _EPOCH + dt.timedelta(microseconds=start_ns // 1000) < at)

        try:
            return remove_spans(line, gone)
        except NotReadable:
            return None
