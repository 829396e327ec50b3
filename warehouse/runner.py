"""The one runner of layer builds: input batches → a transform → publish, with the books kept.

A layer build is a :class:`Transform` — a function from one input batch to the rows to
publish, the rows to quarantine and counts, testable without a lake — plus this runner,
which streams the batches through it into :func:`~warehouse.storage.publish.publish`,
reports progress, quarantines what the transform set aside and records the books:

    records = published + duplicates + quarantined + malformed + trace-only

The target partition is committed only when the books balance and the audit passed;
then the quarantine and the books follow, each its own atomic commit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from typing import Protocol

import polars as pl

from warehouse.ops.books import Books, record_books
from warehouse.progress import Progress
from warehouse.storage.lake import Lake
from warehouse.storage.memory import detach
from warehouse.storage.publish import InvariantFailure, Tally, keeps_every_row, publish
from warehouse.tables import DWD_QUARANTINE, OPS_BOOKS, Table


@dataclass
class Counts:
    """What a transform did with its input records (summed over batches)."""

    records: int = 0
    duplicates: int = 0
    malformed: int = 0
    quarantined: int = 0
    #: Published rows that lack a derived value (e.g. requests with usage but no price in effect).
    incomplete: int = 0
    #: Published requests that reported no usage (input tokens: errors, streams without usage), so no cost.
    no_usage: int = 0
    #: Records that parse and carry no request: OTLP lines holding no GenAI span.
    trace_only: int = 0

    def add(self, other: Counts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class Batch:
    """A transform's output for one input batch."""

    #: Rows for the target table, contract-typed and already through the row checks.
    rows: pl.DataFrame
    #: Rows for the quarantine (its contract's columns), each with the rules it broke.
    set_aside: pl.DataFrame | None = None
    counts: Counts = field(default_factory=Counts)


class Transform(Protocol):
    """One input batch → rows to publish, rows to quarantine and counts."""

    def __call__(self, batch: pl.DataFrame, /) -> Batch: ...


@dataclass(frozen=True)
class RunResult:
    """The outcome of one run: the target's new version, the counts and the books."""

    table: Table
    version: int | None
    published: int
    counts: Counts
    books: Books | None
    #: Quarantined rows per rule id.
    rules: dict[str, int]
    #: The run of ``dwd.span`` that a build of requests made beside it (the spans that are no call).
    spans: RunResult | None = None


def claim(
    lake: Lake,
    target: Table,
    day: dt.date,
    *,
    reads: Sequence[Table] = (),
    books: bool = True,
    quarantine: bool = True,
    also: Sequence[Table] = (),
) -> AbstractContextManager[None]:
    """The locks of one build, to hold from its first read to its last commit: the day's
    partitions of the target (and of the tables it ``also`` writes), of the quarantine and of the
    books, and the tables it reads."""
    write: list[tuple[Table, dict[str, object] | None]] = []
    for written in (target, *also):
        write.append((written, {"event_date": day}))
        if quarantine:
            write.append((DWD_QUARANTINE, {"event_date": day, "target_table": written.name}))
        if books:
            write.append((OPS_BOOKS, {"event_date": day, "table_name": written.name}))
    return lake.hold(write=write, read=reads)


def run(
    lake: Lake,
    target: Table,
    transform: Transform,
    batches: Iterable[pl.DataFrame],
    *,
    day: dt.date,
    total: int,
    progress: Progress | None = None,
    now: dt.datetime | None = None,
    books: bool = True,
    quarantine: bool = True,
    suppressed: int = 0,
) -> RunResult:
    """Stream ``batches`` through ``transform`` into ``target``'s partition for ``day``.

    ``total`` is the number of input rows, for progress. With ``books`` the books must
    balance before anything is published, and are recorded in ``ops.books``. With
    ``quarantine`` the rows the transform set aside replace the day's quarantine rows for
    ``target`` (a transform that sets nothing aside passes ``quarantine=False``). The caller
    holds the build's locks (:func:`claim`) on ``lake`` from its first read: the writes here
    find them taken.
    """
    from contracts import arrow_schema

    counts = Counts()
    set_aside: list[pl.DataFrame] = []

    def rows() -> Iterator[pl.DataFrame]:
        done = 0
        for batch in batches:
            done += batch.height
            out = transform(batch)
            counts.add(out.counts)
            if out.set_aside is not None and out.set_aside.height:
                set_aside.append(detach(out.set_aside))
            if progress:
                progress(target.name, done, total)
            yield out.rows

    def balance(tally: Tally) -> InvariantFailure | None:
        kept = _books(target, day, counts, tally.rows_published, suppressed)
        if kept.balanced:
            return None
        return InvariantFailure(
            "books.balance",
            f"records {kept.ods_rows} ≠ published {kept.dwd_rows} + duplicates "
            f"{kept.duplicates} + quarantined {kept.quarantined} + malformed {kept.malformed} + trace-only "
            f"{kept.trace_only}",
        )

    result = publish(
        lake,
        target,
        rows(),
        partitions=[{"event_date": day}],
        now=now,
        checked=True,
        invariants=[balance] if books else [],
    )
    rules: dict[str, int] = {}
    if quarantine:
        empty = pl.DataFrame(arrow_schema(DWD_QUARANTINE.contract).empty_table())
        held = pl.concat(set_aside, how="vertical_relaxed") if set_aside else empty
        # The quarantine is where refused rows go, so no expectation gate may refuse it in turn:
        # its rows are still conformed and checked against its contract.
        publish(
            lake,
            DWD_QUARANTINE,
            held,
            partitions=[{"event_date": day, "target_table": target.name}],
            expectations=False,
            invariants=[keeps_every_row("quarantine.keeps_every_row")],
        )
        per_rule = held.get_column("rules").explode().value_counts()
        rules = dict(zip(per_rule[:, 0].to_list(), per_rule[:, 1].to_list()))
    kept = _books(target, day, counts, result.rows_published, suppressed) if books else None
    if kept is not None:
        record_books(lake, kept)
    return RunResult(target, result.version, result.rows_published, counts, kept, rules)


def _books(target: Table, day: dt.date, counts: Counts, published: int, suppressed: int) -> Books:
    return Books(
        target.name,
        day,
        counts.records,
        published,
        counts.duplicates,
        counts.quarantined,
        counts.malformed,
        suppressed,
        counts.trace_only,
    )
