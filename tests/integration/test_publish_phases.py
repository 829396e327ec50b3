"""The phases of write–audit–publish, one at a time: conform and check, audit, commit, record."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from warehouse.storage import audit
from warehouse.storage.lake import Lake
from warehouse.storage.publish import (
    AuditFailed,
    AuditGate,
    InvariantFailure,
    Stream,
    Tally,
    audit_verdict,
    commit_audited,
    conform_and_check,
    record_failed,
)
from warehouse.tables import DWD_FEEDBACK, OPS_BOOKS

DAY = dt.date(2026, 1, 1)
UTC = dt.UTC


def feedback(n: int, *, bad: int = 0) -> pl.DataFrame:
    """``n`` dwd.feedback rows of DAY; the last ``bad`` have no request id (a row rule)."""
    base = dt.datetime(2026, 1, 1, 12, tzinfo=UTC)
    return pl.DataFrame(
        {
            "request_id": [f"req-{i}" if i < n - bad else None for i in range(n)],
            "ts": [base + dt.timedelta(seconds=i) for i in range(n)],
            "event_date": [DAY] * n,
            "kind": ["thumb"] * n,
            "value": [f"v{i}" for i in range(n)],
            "source": ["ui"] * n,
            "source_file": ["f.jsonl"] * n,
            "line_no": list(range(1, n + 1)),
            "batch_id": ["b1"] * n,
        },
        schema_overrides={"ts": pl.Datetime("us", "UTC"), "event_date": pl.Date},
    )


def test_conform_and_check_streams_conformed_batches_and_tallies_refused_rows() -> None:
    tally = Tally()
    batches = list(conform_and_check([feedback(5, bad=2), feedback(3)], DWD_FEEDBACK.contract, tally, None))
    assert sum(b.num_rows for b in batches) == 6
    assert (tally.rows_in, tally.rows_published, tally.rows_rejected) == (8, 6, 2)
    assert all(b.schema.field("request_id").type == pa.string() for b in batches)
    assert tally.rejected_frame().get_column("rules").explode().unique().to_list()


def test_audit_verdict_collects_row_count_and_invariant_failures() -> None:
    tally = Tally(rows_in=3, rows_published=3)
    clean = audit_verdict(DWD_FEEDBACK.contract, None, tally)
    assert clean.failures == []
    broken = audit_verdict(
        DWD_FEEDBACK.contract,
        None,
        tally,
        [lambda t: InvariantFailure("books.balance", f"{t.rows_published} ≠ 4", ["x"])],
    )
    assert broken.failures == [("books.balance", "3 ≠ 4", ["x"])]


def test_the_audit_gate_raises_the_refusal_and_keeps_its_verdict() -> None:
    stream = Stream(DWD_FEEDBACK.contract, checked=False, now=None, sample=False)
    gate = AuditGate("dwd.feedback", "(all)", stream, [lambda t: InvariantFailure("r.one", "no")], None)
    with pytest.raises(AuditFailed, match=r"r\.one: no"):
        gate()
    assert gate.verdict is not None and gate.verdict.failures[0][0] == "r.one"


def test_commit_audited_commits_nothing_when_the_gate_refuses(strata_env: Path) -> None:
    from warehouse.settings import load_settings

    settings = load_settings()
    stream = Stream(DWD_FEEDBACK.contract, checked=False, now=None, sample=False)
    gate = AuditGate("dwd.feedback", "(all)", stream, [lambda t: InvariantFailure("r.one", "no")], None)
    with pytest.raises(AuditFailed):  # the gate's own error, not the writer's DeltaError
        commit_audited(
            Lake(settings),
            DWD_FEEDBACK,
            stream.batches(feedback(4)),
            gate,
            mode="replace_partitions",
            partitions=[{"event_date": DAY}],
            attempt="a1",
        )
    assert Lake(settings).open_table(DWD_FEEDBACK) is None
    assert stream.tally.rows_published == 4  # the whole stream passed before the gate
    version = commit_audited(
        Lake(settings),
        DWD_FEEDBACK,
        Stream(DWD_FEEDBACK.contract, checked=False, now=None, sample=False).batches(feedback(4)),
        lambda: None,
        mode="replace_partitions",
        partitions=[{"event_date": DAY}],
        attempt="a2",
    )
    assert version == 0 and Lake(settings).read(DWD_FEEDBACK).num_rows == 4


def test_record_failed_leaves_a_row_and_never_masks_the_callers_error(
    strata_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from warehouse.settings import load_settings

    settings = load_settings()
    refused = AuditFailed("ops.books", "(all)", [("books.balance", "off by one", [])])
    record_failed(audit.Attempt(Lake(settings), OPS_BOOKS, "(all)").begin(), Tally(rows_in=2), refused)
    row = Lake(settings).read_frame(audit.OPS_AUDIT_LOG).row(0, named=True)
    assert (row["status"], row["rules_failed"], row["rows_in"]) == ("failed", ["books.balance"], 2)

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(audit, "record", broken)
    error = ValueError("the stream failed")
    record_failed(audit.Attempt(Lake(settings), OPS_BOOKS, "(all)").begin(), Tally(), error)
    assert error.__notes__ == ["ops.audit_log could not record this attempt either: OSError: disk full"]
