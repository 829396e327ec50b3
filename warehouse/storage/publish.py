"""Write–audit–publish: the one way every layer table is written.

compute (caller) → conform to the contract's Arrow schema → row checks (bad rows go
back to the caller, who quarantines them) → audit (the contract's expectation suite
plus the caller's invariants, such as the books balancing) → commit one Delta version
that replaces exactly the logical date's partition(s).

Data may come as one frame or as a stream of frames, so a large partition never sits
in memory at once: batches are checked and written as they come, and the commit — the
only step that makes anything visible — happens after the audit passed at the end of
the stream. A failed audit or a crash commits nothing: the published table keeps its
version and contents. The error names the table, the rule and example offending values.
Every attempt appends a row to ``ops.audit_log``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypeVar

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from contracts.errors import InputError
from contracts.model import Contract
from warehouse.storage import audit
from warehouse.storage.lake import Lake, partition_predicate
from warehouse.storage.memory import detach
from warehouse.tables import Table

T = TypeVar("T")
#: The expectation suite runs on an even sample of at most this many published rows;
#: every row has already passed the vectorized row checks.
AUDIT_SAMPLE_ROWS = 20_000


@dataclass(frozen=True)
class InvariantFailure:
    """A caller-side rule that the data broke, with examples a person can look at."""

    rule: str
    message: str
    examples: Sequence[object] = ()


@dataclass
class Tally:
    """Counts of one publish so far, handed to invariants at the end of the stream."""

    rows_in: int = 0
    rows_published: int = 0
    rejected: list[pl.DataFrame] = field(default_factory=list)

    @property
    def rows_rejected(self) -> int:
        return sum(r.height for r in self.rejected)

    def rejected_frame(self) -> pl.DataFrame:
        """The refused rows in one frame (their input columns and ``rules``)."""
        if not self.rejected:
            return pl.DataFrame(schema={"rules": pl.List(pl.String)})
        return pl.concat(self.rejected, how="diagonal_relaxed")


Invariant: TypeAlias = Callable[[Tally], "InvariantFailure | None"]


def keeps_every_row(rule: str) -> Invariant:
    """An invariant for tables that must keep every row they are given (ODS, the quarantine).

    A row check refusing one of their rows is a bug, and nothing may be published then.
    """

    def check(tally: Tally) -> InvariantFailure | None:
        if not tally.rows_rejected:
            return None
        rejected = pl.concat(tally.rejected, how="diagonal_relaxed")
        rules = sorted(set(rejected.get_column("rules").explode().drop_nulls().to_list()))
        examples = rejected.get_column("source_file").head(3).to_list() if "source_file" in rejected.columns else []
        return InvariantFailure(rule, f"{tally.rows_rejected} row(s) broke {rules}", examples)

    return check


class AuditFailed(InputError):
    """The audit gate refused to publish; nothing was committed."""

    def __init__(self, table: str, partition: str, failures: Sequence[tuple[str, str, Sequence[object]]]):
        self.table, self.partition, self.failures = table, partition, list(failures)
        detail = "; ".join(
            f"{rule}: {message}" + (f" (e.g. {', '.join(map(repr, list(examples)[:3]))})" if examples else "")
            for rule, message, examples in self.failures
        )
        super().__init__(f"audit of {table} [{partition}] failed, nothing published — {detail}")

    @property
    def rules(self) -> list[str]:
        return sorted({rule for rule, _, _ in self.failures})


@dataclass
class PublishResult:
    """What a publish did: the committed version and the rows that were set aside."""

    table: str
    partition: str
    version: int | None
    rows_in: int
    rows_published: int
    rejected: pl.DataFrame
    duration_ms: float
    audit_result: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def rows_rejected(self) -> int:
        return self.rejected.height


def prefetch(frames: Iterable[T], depth: int = 1) -> Iterator[T]:
    """Compute the next frame(s) in a background thread while the writer encodes this one.

    The work on both sides (polars, DuckDB, the Delta writer) releases the GIL, so the
    two cores overlap. An error in the producer is raised here, in order. The thread never
    outlives the stream, even one its consumer abandons: a thread still inside DuckDB or Arrow
    when the interpreter exits aborts the process ("terminate called without an active
    exception", duckdb/duckdb#13904).
    """
    import queue
    import threading

    box: queue.Queue[Any] = queue.Queue(maxsize=depth)  # frames, the producer's exception, then `done`
    done = object()
    stop = threading.Event()

    def offer(item: object) -> bool:
        while not stop.is_set():
            try:
                box.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for frame in frames:
                if not offer(frame):
                    return
            offer(done)
        except BaseException as exc:
            offer(exc)

    worker = threading.Thread(target=produce, name="strata-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item = box.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


class _Sample:
    """An even, deterministic sample of a stream: every k-th row, k doubling as needed."""

    def __init__(self, limit: int) -> None:
        self.limit, self.stride, self.rows, self._offset = limit, 1, 0, 0
        self.parts: list[pa.Table] = []

    def add(self, table: pa.Table) -> None:
        start = (-self._offset) % self.stride
        self._offset += table.num_rows
        if start < table.num_rows:
            picked = table.slice(start).take(np.arange(0, table.num_rows - start, self.stride))
            self.parts.append(picked)
            self.rows += picked.num_rows
        while self.rows > self.limit:
            merged = pa.concat_tables(self.parts)
            self.parts = [merged.take(np.arange(0, merged.num_rows, 2))]
            self.rows = self.parts[0].num_rows
            self.stride *= 2

    def table(self, schema: pa.Schema) -> pa.Table:
        return pa.concat_tables(self.parts) if self.parts else schema.empty_table()


Piece: TypeAlias = pl.DataFrame | pa.Table | pa.RecordBatch
#: What :func:`publish` takes: one piece, or a stream of pieces (polars frames, or Arrow
#: tables and record batches as DuckDB, dbt and ONNX Runtime produce them).
Data: TypeAlias = Piece | Iterable[Piece]


def _pieces(data: Data) -> Iterable[Piece]:
    if isinstance(data, (pl.DataFrame, pa.Table, pa.RecordBatch)):
        return [data]
    return prefetch(data)


def _frame(piece: Piece) -> pl.DataFrame:
    if isinstance(piece, pl.DataFrame):
        return piece
    frame = pl.from_arrow(piece)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _arrow(piece: Piece) -> pa.Table:
    if isinstance(piece, pl.DataFrame):
        return piece.to_arrow()
    return pa.Table.from_batches([piece]) if isinstance(piece, pa.RecordBatch) else piece


def publish(
    lake: Lake,
    table: Table,
    data: Data,
    *,
    partitions: Sequence[Mapping[str, object]] = (),
    mode: Mode = "replace_partitions",
    invariants: Sequence[Invariant] = (),
    now: dt.datetime | None = None,
    expectations: bool = True,
    checked: bool = False,
    reads: Mapping[str, int] | None = None,
) -> PublishResult:
    """Check ``data`` against the table's contract, audit it and commit it atomically.

    Rows that break a row rule are not published; they come back in ``result.rejected``
    (their input columns and ``rules``) for the caller to quarantine. With ``checked`` the
    caller has run the row checks already (a build transform does, to quarantine as it
    goes): the rows are only conformed to the schema. ``reads`` (table → Delta version) are
    the tables the rows were computed from, recorded in the attempt's row. Raises :class:`AuditFailed` when the
    audit refuses.

    The phases, each its own function: :func:`conform_and_check` streams the rows,
    :func:`audit_verdict` judges them once the stream ends, :func:`commit_audited` commits only
    when that verdict is clean, :func:`record_published` / :func:`record_failed` write the
    attempt's row in ``ops.audit_log``.
    """
    owned = [dict(p) for p in partitions]  # the caller's mappings stay theirs
    audit.recover_once(lake)  # attempts a crash cut short get their row first
    if expectations:
        from contracts.audit_worker import warm_up

        warm_up()  # GX imports in the worker while the data streams
    label = ", ".join(sorted(partition_predicate(p) for p in partitions)) or "(all)"
    attempt = audit.Attempt(lake, table, label, dict(reads or {})).begin()
    stream = Stream(table.contract, checked=checked, now=now, sample=expectations)
    gate = AuditGate(table.name, label, stream, invariants, now)
    try:
        with _locked(lake, table, mode, owned):
            version = commit_audited(
                lake, table, stream.batches(data), gate, mode=mode, partitions=owned, attempt=attempt.id
            )
    except Exception as exc:
        record_failed(attempt, stream.tally, exc)
        raise
    rejected = stream.tally.rejected_frame()
    duration_ms = record_published(attempt, stream.tally, version, rejected)
    verdict = gate.verdict
    return PublishResult(
        table.name,
        label,
        version,
        stream.tally.rows_in,
        stream.tally.rows_published,
        rejected,
        duration_ms,
        verdict.result if verdict is not None else {},
    )


Mode = Literal["replace_partitions", "append", "overwrite"]
#: One audit failure: (rule, message, example values).
Failure = tuple[str, str, Sequence[object]]


class Stream:
    """Phase 1, conform and check: the rows as Arrow batches of the contract's schema, counted
    (:class:`Tally`) and sampled for the audit as they pass; rows that break a row rule are set
    aside in the tally."""

    def __init__(self, contract: Contract, *, checked: bool, now: dt.datetime | None, sample: bool) -> None:
        from contracts import arrow_schema

        self.contract, self.checked, self.now = contract, checked, now
        self.schema = arrow_schema(contract)
        self.tally = Tally()
        self._sample = _Sample(AUDIT_SAMPLE_ROWS) if sample else None

    def batches(self, data: Data) -> pa.RecordBatchReader:
        """``data``, piece by piece, conformed: memory follows the piece, not the table."""
        return pa.RecordBatchReader.from_batches(
            self.schema,
            conform_and_check(
                _pieces(data), self.contract, self.tally, self._sample, checked=self.checked, now=self.now
            ),
        )

    def sample(self) -> pa.Table | None:
        """The even sample of the published rows for the expectation suite (None: no suite)."""
        return None if self._sample is None else self._sample.table(self.schema)


def conform_and_check(
    pieces: Iterable[Piece],
    contract: Contract,
    tally: Tally,
    sample: _Sample | None,
    *,
    checked: bool = False,
    now: dt.datetime | None = None,
) -> Iterator[pa.RecordBatch]:
    """Each piece conformed to the contract's Arrow schema, after the row checks (unless the
    caller ran them: ``checked``); counts go to ``tally``, refused rows to ``tally.rejected``."""
    from contracts import conform, split_rows

    for piece in pieces:
        tally.rows_in += piece.height if isinstance(piece, pl.DataFrame) else piece.num_rows
        if checked:
            rows = conform(_arrow(piece), contract, check_values=False)
        else:
            split = split_rows(_frame(piece), contract, now=now)
            if split.rejected.height:
                tally.rejected.append(detach(split.rejected))
            # The row checks just passed these rows: conform only casts and checks the schema.
            rows = conform(split.valid, contract, check_values=False)
        tally.rows_published += rows.num_rows
        if sample is not None:
            sample.add(rows)
        yield from rows.to_batches()


@dataclass(frozen=True)
class Verdict:
    """Phase 2's outcome: the rules the rows broke (none: publish) and the suite's own result."""

    failures: list[Failure]
    result: dict[str, Any] = field(default_factory=dict)


def audit_verdict(
    contract: Contract,
    sample: pa.Table | None,
    tally: Tally,
    invariants: Sequence[Invariant] = (),
    now: dt.datetime | None = None,
) -> Verdict:
    """Phase 2, audit: the contract's row-count bounds, its expectation suite on ``sample`` (when
    given) and the caller's invariants, judged on the whole stream's tally."""
    from contracts.audit_worker import audit as run_suite

    failures: list[Failure] = []
    result: dict[str, Any] = {}
    low, high = contract.row_count.minimum, contract.row_count.maximum
    if (low is not None and tally.rows_published < low) or (high is not None and tally.rows_published > high):
        failures.append(
            ("table.row_count", f"{tally.rows_published} rows published, expected between {low} and {high}", ())
        )
    if sample is not None and sample.num_rows:
        suite = run_suite(sample, contract, now=now)
        result = suite.result
        failures += [
            (f.rule, f"{f.expectation} failed on {f.unexpected_count} sampled row(s)", f.examples)
            for f in suite.failures
            if f.rule != "table.row_count"
        ]
    for invariant in invariants:
        broken = invariant(tally)
        if broken is not None:
            failures.append((broken.rule, broken.message, broken.examples))
    return Verdict(failures, result)


class AuditGate:
    """The audit as the commit's last check: run once the stream has ended, it raises
    :class:`AuditFailed` — the one place an audit stops a writer — and keeps its verdict."""

    def __init__(
        self, table: str, partition: str, stream: Stream, invariants: Sequence[Invariant], now: dt.datetime | None
    ) -> None:
        self.table, self.partition, self.stream, self.invariants, self.now = table, partition, stream, invariants, now
        self.verdict: Verdict | None = None

    def __call__(self) -> None:
        self.verdict = audit_verdict(
            self.stream.contract, self.stream.sample(), self.stream.tally, self.invariants, self.now
        )
        if self.verdict.failures:
            raise AuditFailed(self.table, self.partition, self.verdict.failures)


def commit_audited(
    lake: Lake,
    table: Table,
    batches: pa.RecordBatchReader,
    gate: Callable[[], None],
    *,
    mode: Mode,
    partitions: Sequence[dict[str, object]],
    attempt: str,
) -> int:
    """Phase 3, commit: one Delta version of ``batches``, made only if ``gate`` — run after the
    last batch, before the log entry — returns; its error (:class:`AuditFailed`) is raised as is."""
    contract = table.contract
    return lake.commit(
        table,
        batches,
        mode=mode,
        partitions=partitions,
        partition_by=contract.partition_columns,
        description=contract.description,
        attempt=attempt,
        check=gate,
    )


def record_published(attempt: audit.Attempt, tally: Tally, version: int, rejected: pl.DataFrame) -> float:
    """Phase 4, record: the attempt's row for a commit; returns the attempt's duration in ms."""
    rules = sorted(set(rejected.get_column("rules").explode().drop_nulls().to_list())) if rejected.height else []
    return attempt.end(
        "published",
        version,
        rows_in=tally.rows_in,
        rows_rejected=tally.rows_rejected,
        rows_published=tally.rows_published,
        rules=rules,
    )


def record_failed(attempt: audit.Attempt, tally: Tally, error: Exception) -> None:
    """Phase 4, record: the attempt's row for a write that committed nothing — a refused audit,
    a failing stream, a commit a concurrent writer refused. Should the audit log fail too, its
    error is added to ``error`` as a note: the caller's error is the one raised."""
    refused = error if isinstance(error, AuditFailed) else None
    try:
        attempt.end(
            "failed",
            None,
            rows_in=tally.rows_in,
            rows_rejected=tally.rows_rejected,
            rules=refused.rules if refused else [],
            message=str(error) if refused else f"{type(error).__name__}: {error}",
        )
    except Exception as log_error:
        error.add_note(f"ops.audit_log could not record this attempt either: {type(log_error).__name__}: {log_error}")


def republish(
    lake: Lake,
    table: Table,
    change: Callable[[pl.DataFrame], pl.DataFrame],
    partitions: Sequence[Mapping[str, object]] = (),
) -> tuple[int, int]:
    """Rewrite ``partitions`` of ``table`` (the whole table when none are named) through
    ``change``, one batch of its current rows at a time, as one commit; (rows before, after).

    For corrections of published rows (erasure, late labels): the rows go through the same
    path as any write — conformed to the contract, so the table keeps its exact Arrow types
    (a Delta delete or MERGE would rewrite them with types of its own), and logged — and the
    files the commit added are checked to carry exactly those types.
    """
    owned = [dict(p) for p in partitions]
    mode: Mode = "replace_partitions" if owned else "overwrite"
    with _locked(lake, table, mode, owned):
        selected = None
        for partition in owned:
            term = None
            for column, value in partition.items():
                term = (pc.field(column) == value) if term is None else term & (pc.field(column) == value)
            selected = term if selected is None else selected | term
        batches = lake.snapshot(table).to_batches(filter=selected, batch_size=REWRITE_ROWS)
        counts = [0, 0]

        def changed() -> Iterator[pl.DataFrame]:
            for batch in batches:
                before = pl.from_arrow(batch)
                assert isinstance(before, pl.DataFrame)
                after = change(before)
                counts[0] += before.height
                counts[1] += after.height
                yield after

        result = publish(lake, table, changed(), partitions=owned, mode=mode, expectations=False, checked=True)
        lake.check_file_types(table, result.version)
    return counts[0], counts[1]


#: Rows rewritten per batch by :func:`republish`.
REWRITE_ROWS = 128 * 1024


@contextmanager
def _locked(lake: Lake, table: Table, mode: Mode, partitions: Sequence[dict[str, object]]) -> Iterator[None]:
    """The locks of one write, those the step did not take already (a build holds its partitions).
    The first write of a table is serialized on its own lock, so two writers never both create it."""
    write: list[tuple[Table, dict[str, object] | None]] = []
    if mode == "overwrite":
        write.append((table, None))
    elif mode == "replace_partitions":
        write += [(table, partition) for partition in partitions]
    with lake.hold(write=write, read=[table]):
        if lake.open_table(table) is not None:
            yield
            return
        with lake.hold(write=[(table, {"_": "create"})]):
            yield
