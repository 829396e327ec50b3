"""Write–audit–publish against real Delta tables in a temporary lake (no mocks).

Each test states one promise of :func:`warehouse.publish.publish`: one publish is one
Delta version plus one audit-log row; bad rows come back with their rule ids; a failed
audit, a failing stream or a killed writer changes nothing a reader can see; a partition
replace touches exactly its partition and is idempotent.
"""

from __future__ import annotations

import datetime as dt
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl
import pytest
from conftest import REPO
from deltalake import DeltaTable

from warehouse.settings import Settings, load_settings
from warehouse.storage.lake import Lake
from warehouse.storage.publish import (
    AuditFailed,
    Data,
    Invariant,
    InvariantFailure,
    PublishResult,
    Tally,
    keeps_every_row,
    publish,
)
from warehouse.tables import OPS_AUDIT_LOG, Table, table

DAY1, DAY2 = dt.date(2026, 1, 1), dt.date(2026, 1, 2)
NOW = dt.datetime(2026, 1, 3, tzinfo=dt.UTC)
UTC = dt.UTC


@pytest.fixture
def settings(strata_env: Path) -> Settings:
    return load_settings()


# ---------------------------------------------------------------- helpers


def books(day: dt.date, *names: str, ods: int = 10) -> pl.DataFrame:
    """ops.books rows for ``day``, one per DWD table name (balanced)."""
    return pl.DataFrame(
        [
            {
                "table_name": n,
                "event_date": day,
                "ods_rows": ods,
                "dwd_rows": ods - 1,
                "duplicates": 1,
                "quarantined": 0,
                "malformed": 0,
                "suppressed": 0,
                "trace_only": 0,
                "balanced": True,
            }
            for n in names
        ],
        schema_overrides={"event_date": pl.Date},
    )


def publish_books(
    settings: Settings, data: Data, day: dt.date, *, invariants: Sequence[Invariant] = (), expectations: bool = False
) -> PublishResult:
    """``data`` published as the ``ops.books`` partition of ``day``, checked at NOW (the GX suite when asked)."""
    return publish(
        Lake(settings),
        table("ops.books"),
        data,
        partitions=[{"event_date": day}],
        invariants=invariants,
        now=NOW,
        expectations=expectations,
    )


def feedback(day: dt.date, start: int, n: int, *, batch: str = "b1") -> pl.DataFrame:
    """``n`` valid dwd.feedback rows of ``day`` with distinct keys from ``start``."""
    base = dt.datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
    return pl.DataFrame(
        {
            "request_id": [f"req-{i:06d}" for i in range(start, start + n)],
            "ts": [base + dt.timedelta(seconds=i) for i in range(start, start + n)],
            "event_date": [day] * n,
            "kind": ["thumb", "review", "flag"] * (n // 3) + ["thumb"] * (n % 3),
            "value": [f"v{i}" for i in range(start, start + n)],
            "source": ["ui"] * n,
            "source_file": ["landing/feedback.jsonl"] * n,
            "line_no": list(range(start + 1, start + n + 1)),
            "batch_id": [batch] * n,
        },
        schema_overrides={"ts": pl.Datetime("us", "UTC"), "event_date": pl.Date},
    )


def contents(settings: Settings, table: Table) -> pl.DataFrame:
    """The table's current rows, sorted by every column (row order is not part of a Delta table)."""
    df = Lake(settings).read_frame(table)
    return df.sort(df.columns, nulls_last=True)


def data_files(settings: Settings, table: Table) -> list[str]:
    """The data files the current version references."""
    return sorted(DeltaTable(table.uri(settings)).file_uris())


def commits(settings: Settings, table: Table) -> int:
    """Number of commits in the table's log."""
    return len(DeltaTable(table.uri(settings)).history())


def audit_log(settings: Settings) -> pl.DataFrame:
    """ops.audit_log in the order the attempts started (empty before the first attempt)."""
    if Lake(settings).version(OPS_AUDIT_LOG) is None:
        return pl.DataFrame()
    return contents(settings, OPS_AUDIT_LOG).sort("started_at")


def same_rows(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    return a.columns == b.columns and a.sort(a.columns, nulls_last=True).equals(b.sort(b.columns, nulls_last=True))


# ---------------------------------------------------------------- 1. one version, one audit row


def test_publish_commits_one_version_and_one_audit_row(settings: Settings) -> None:
    # the full audit, GX suite included
    first = publish_books(settings, books(DAY1, "dwd.request", "dwd.feedback"), DAY1, expectations=True)
    assert first.version == 0 and Lake(settings).version(table("ops.books")) == 0
    assert commits(settings, table("ops.books")) == 1
    log = audit_log(settings)
    assert log.height == 1
    row = log.row(0, named=True)
    assert row | {"started_at": None, "duration_ms": None, "attempt_id": None} == {
        "table_name": "ops.books",
        "partition": "event_date = '2026-01-01'",
        "delta_version": 0,
        "status": "published",
        "rows_in": 2,
        "rows_published": 2,
        "rows_rejected": 0,
        "rules_failed": [],
        "started_at": None,
        "duration_ms": None,
        "message": "",
        "attempt_id": None,
        # only an ADS build records the versions it read (strata explain)
        "read_tables": None,
        "read_versions": None,
    }
    # The attempt's id is stamped on its commit too, so a crash between the two can be repaired.
    assert DeltaTable(table("ops.books").uri(settings)).history(1)[0]["strata.attempt"] == row["attempt_id"]

    # A second publish with one bad row: one more version, one more audit row with the counts.
    bad = books(DAY2, "dwd.request", "dwd.feedback", "dwd.quarantine").with_columns(
        ods_rows=pl.when(pl.col("table_name") == "dwd.quarantine").then(-5).otherwise(pl.col("ods_rows"))
    )
    second = publish_books(settings, bad, DAY2)
    assert second.version == 1 and Lake(settings).version(table("ops.books")) == 1
    assert commits(settings, table("ops.books")) == 2
    assert (second.rows_in, second.rows_published, second.rows_rejected) == (3, 2, 1)
    log = audit_log(settings)
    assert log.height == 2
    row = log.row(1, named=True)
    assert (row["table_name"], row["partition"], row["status"], row["delta_version"]) == (
        "ops.books",
        "event_date = '2026-01-02'",
        "published",
        1,
    )
    assert (row["rows_in"], row["rows_published"], row["rows_rejected"]) == (3, 2, 1)
    assert row["rules_failed"] == ["ods_rows.min"]
    assert row["started_at"] <= dt.datetime.now(UTC) and row["duration_ms"] > 0
    assert contents(settings, table("ops.books")).height == 4


# ---------------------------------------------------------------- 2. row checks route bad rows back


def test_row_checks_reject_bad_rows_and_publish_only_good_ones(settings: Settings) -> None:
    jan = dt.date(2026, 1, 1)
    prices = pl.DataFrame(
        {
            "model": ["gpt-a", "gpt-b", "gpt-c", "gpt-d", "gpt-a", "gpt-e"],
            "effective_from": [jan, jan, None, jan, jan, jan],
            "input_price_per_1k": [0.5, 0.1, 0.2, -0.3, 0.9, 0.0],
            "output_price_per_1k": [1.5, 0.2, 0.4, 0.6, 1.9, 0.0],
        },
        schema_overrides={"effective_from": pl.Date},
    )
    result = publish(Lake(settings), table("dwd.model_price"), prices, mode="overwrite", now=NOW, expectations=False)

    rejected = {r["model"]: (r["input_price_per_1k"], r["rules"]) for r in result.rejected.iter_rows(named=True)}
    assert rejected == {
        "gpt-c": (0.2, ["effective_from.required"]),
        "gpt-d": (-0.3, ["input_price_per_1k.min"]),
        "gpt-a": (0.9, ["primary_key.unique"]),  # the second gpt-a row; the first one stays
    }
    assert (result.rows_in, result.rows_published, result.rows_rejected) == (6, 3, 3)
    published = contents(settings, table("dwd.model_price"))
    assert published.select("model", "input_price_per_1k").rows() == [("gpt-a", 0.5), ("gpt-b", 0.1), ("gpt-e", 0.0)]
    assert published.get_column("cached_input_price_per_1k").is_null().all()  # optional column filled with nulls


def test_row_checks_reject_values_outside_the_allowed_set(settings: Settings) -> None:
    good = feedback(DAY1, 0, 4)
    bad = pl.concat(
        [
            feedback(DAY1, 10, 1).with_columns(kind=pl.lit("emoji")),  # not in [thumb, review, flag]
            feedback(DAY1, 11, 1).with_columns(line_no=pl.lit(0, pl.Int64)),  # line_no minimum is 1
            feedback(DAY1, 12, 1).with_columns(ts=pl.lit(None, pl.Datetime("us", "UTC"))),
            good.head(1).with_columns(value=pl.lit("again")),  # same (request_id, kind, ts)
        ]
    )
    result = publish(
        Lake(settings),
        table("dwd.feedback"),
        pl.concat([good, bad]),
        partitions=[{"event_date": DAY1}],
        now=NOW,
        expectations=False,
    )
    got = {(r["request_id"], r["value"]): r["rules"] for r in result.rejected.iter_rows(named=True)}
    assert got == {
        ("req-000010", "v10"): ["kind.allowed_values"],
        ("req-000011", "v11"): ["line_no.min"],
        ("req-000012", "v12"): ["ts.required"],
        ("req-000000", "again"): ["primary_key.unique"],
    }
    assert same_rows(contents(settings, table("dwd.feedback")), good)
    assert audit_log(settings).row(0, named=True)["rules_failed"] == [
        "kind.allowed_values",
        "line_no.min",
        "primary_key.unique",
        "ts.required",
    ]


# ---------------------------------------------------------------- 3. a failed audit changes nothing


def _snapshot(settings: Settings, table: Table) -> tuple[int | None, list[tuple], list[str]]:
    """What a reader sees: the version, the sorted rows and the data files it references."""
    return Lake(settings).version(table), contents(settings, table).rows(), data_files(settings, table)


def test_failed_invariant_leaves_table_unchanged(settings: Settings) -> None:
    publish_books(settings, books(DAY1, "dwd.request", "dwd.feedback"), DAY1)
    publish_books(settings, books(DAY2, "dwd.request"), DAY2)
    before = _snapshot(settings, table("ops.books"))
    assert before[0] == 1
    seen: list[Tally] = []

    def nothing_rejected(tally: Tally) -> InvariantFailure | None:
        seen.append(tally)
        if tally.rows_rejected == 0:
            return None
        names = pl.concat(tally.rejected).get_column("table_name").to_list()
        return InvariantFailure("books.no_rejects", f"{tally.rows_rejected} row(s) rejected", names)

    replacement = pl.concat([books(DAY1, "dwd.request", ods=99), books(DAY1, "dwd.Bad_name", ods=99)])
    with pytest.raises(AuditFailed) as err:
        publish_books(settings, replacement, DAY1, invariants=[nothing_rejected])
    message = str(err.value)
    assert "ops.books" in message and "event_date = '2026-01-01'" in message
    assert "books.no_rejects" in message and "'dwd.Bad_name'" in message
    assert err.value.rules == ["books.no_rejects"] and err.value.table == "ops.books"
    # the invariant saw the whole stream's tally
    assert [(t.rows_in, t.rows_published, t.rows_rejected) for t in seen] == [(2, 1, 1)]

    assert _snapshot(settings, table("ops.books")) == before  # version, rows and files all unchanged
    assert commits(settings, table("ops.books")) == 2
    failed = audit_log(settings).row(-1, named=True)
    assert (failed["table_name"], failed["status"], failed["rules_failed"]) == (
        "ops.books",
        "failed",
        ["books.no_rejects"],
    )
    assert (failed["rows_in"], failed["rows_published"], failed["rows_rejected"]) == (2, 0, 1)
    assert failed["delta_version"] is None  # nothing was committed by this attempt
    assert "books.no_rejects" in failed["message"]


@pytest.mark.parametrize("rows", [0, 1001], ids=["below", "above"])
def test_row_count_bounds_refuse_publish(settings: Settings, rows: int) -> None:
    publish_books(settings, books(DAY1, "dwd.request"), DAY1)
    before = _snapshot(settings, table("ops.books"))
    names = [f"dwd.t{i}" for i in range(rows)]
    frame = books(DAY1, *names) if rows else books(DAY1, "dwd.request").clear()
    with pytest.raises(AuditFailed) as err:
        # ops.books needs 1..1000 rows per write; the empty write would otherwise wipe the partition
        publish_books(settings, frame, DAY1, expectations=rows == 0)
    assert err.value.rules == ["table.row_count"]
    assert "ops.books" in str(err.value) and f"{rows} rows published" in str(err.value)
    assert _snapshot(settings, table("ops.books")) == before
    failed = audit_log(settings).row(-1, named=True)
    assert (failed["status"], failed["rules_failed"], failed["rows_in"]) == ("failed", ["table.row_count"], rows)


def test_failed_expectation_suite_leaves_table_unchanged(settings: Settings) -> None:
    publish_books(settings, books(DAY1, "dwd.request"), DAY1)
    before = _snapshot(settings, table("ops.books"))
    # Each batch is fine on its own; only the suite, which audits the whole stream, sees the
    # key (dwd.request, 2026-01-01) twice.
    stream = iter([books(DAY1, "dwd.request", ods=50), books(DAY1, "dwd.feedback", "dwd.request", ods=60)])
    with pytest.raises(AuditFailed) as err:
        publish_books(settings, stream, DAY1, expectations=True)
    assert err.value.rules == ["primary_key.unique"]
    message = str(err.value)
    assert "ops.books" in message and "primary_key.unique" in message and "'dwd.request'" in message
    assert _snapshot(settings, table("ops.books")) == before
    failed = audit_log(settings).row(-1, named=True)
    assert (failed["status"], failed["rules_failed"], failed["rows_in"]) == ("failed", ["primary_key.unique"], 3)


def test_check_time_now_applies_to_conform_and_audit(settings: Settings) -> None:
    """Rows that pass the row checks at ``now`` must not be refused by a later wall-clock check."""
    day = dt.date(2100, 1, 1)
    later = dt.datetime(2100, 1, 1, 18, tzinfo=UTC)
    result = publish(
        Lake(settings), table("dwd.feedback"), feedback(day, 0, 3), partitions=[{"event_date": day}], now=later
    )
    assert result.rows_published == 3 and result.version == 0


# ---------------------------------------------------------------- 4. partition replace


def test_partition_replace_is_exact_and_idempotent(settings: Settings) -> None:
    publish_books(settings, books(DAY1, "dwd.request", "dwd.feedback", ods=10), DAY1)
    publish_books(settings, books(DAY2, "dwd.request", "dwd.feedback", ods=20), DAY2)
    day1 = contents(settings, table("ops.books")).filter(pl.col("event_date") == DAY1)
    assert day1.height == 2

    new_day2 = books(DAY2, "dwd.request", ods=77)
    r = publish_books(settings, new_day2, DAY2)
    assert r.version == 2
    after = contents(settings, table("ops.books"))
    assert same_rows(after.filter(pl.col("event_date") == DAY1), day1)  # untouched
    assert same_rows(after.filter(pl.col("event_date") == DAY2), new_day2)  # exactly the new rows
    assert after.height == 3

    again = publish_books(settings, new_day2, DAY2)
    assert again.version == 3
    assert contents(settings, table("ops.books")).equals(after)

    # a replace scoped by two columns (as dwd does for the books) leaves the sibling row alone
    one = books(DAY1, "dwd.feedback", ods=5)
    publish(
        Lake(settings),
        table("ops.books"),
        one,
        partitions=[{"event_date": DAY1, "table_name": "dwd.feedback"}],
        now=NOW,
        expectations=False,
    )
    final = contents(settings, table("ops.books"))
    assert same_rows(
        final.filter(pl.col("event_date") == DAY1), pl.concat([day1.filter(pl.col("table_name") == "dwd.request"), one])
    )
    assert same_rows(final.filter(pl.col("event_date") == DAY2), new_day2)


# ---------------------------------------------------------------- 5. streaming


def test_stream_commits_once(settings: Settings) -> None:
    parts = [feedback(DAY1, 0, 5), feedback(DAY1, 5, 7), feedback(DAY1, 12, 1)]
    pulled: list[int] = []

    def frames() -> Iterator[pl.DataFrame]:
        for i, part in enumerate(parts):
            pulled.append(i)
            yield part

    result = publish(
        Lake(settings), table("dwd.feedback"), frames(), partitions=[{"event_date": DAY1}], now=NOW, expectations=False
    )
    assert pulled == [0, 1, 2]
    assert result.version == 0 and commits(settings, table("dwd.feedback")) == 1
    assert (result.rows_in, result.rows_published) == (13, 13)
    assert same_rows(contents(settings, table("dwd.feedback")), pl.concat(parts))
    assert audit_log(settings).height == 1


class SourceBroke(RuntimeError):
    pass


def test_stream_error_midway_commits_nothing_and_propagates(settings: Settings) -> None:
    publish(
        Lake(settings),
        table("dwd.feedback"),
        feedback(DAY1, 0, 4),
        partitions=[{"event_date": DAY1}],
        now=NOW,
        expectations=False,
    )
    before = _snapshot(settings, table("dwd.feedback"))

    def frames() -> Iterator[pl.DataFrame]:
        yield feedback(DAY1, 100, 50, batch="b2")
        yield feedback(DAY1, 150, 50, batch="b2")
        raise SourceBroke("landing file vanished after 100 rows")

    with pytest.raises(SourceBroke, match="landing file vanished after 100 rows"):
        publish(
            Lake(settings),
            table("dwd.feedback"),
            frames(),
            partitions=[{"event_date": DAY1}],
            now=NOW,
            expectations=False,
        )
    assert _snapshot(settings, table("dwd.feedback")) == before
    assert commits(settings, table("dwd.feedback")) == 1
    failed = audit_log(settings).row(-1, named=True)
    assert (failed["status"], failed["delta_version"], failed["rows_published"]) == ("failed", None, 0)
    assert "SourceBroke" in failed["message"]


# ---------------------------------------------------------------- 6. a killed writer


WRITER = r"""
import datetime as dt, time
import polars as pl
from warehouse.settings import load_settings
from warehouse.storage.lake import Lake
from warehouse.storage.publish import publish
from warehouse.tables import DWD_FEEDBACK

day = dt.date(2026, 1, 2)
base = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
B = 50_000

def frames():
    for b in range(100_000):
        i = pl.int_range(b * B, (b + 1) * B, eager=True).alias("i").to_frame()
        yield i.select(
            request_id=pl.format("req-{}-{}", pl.col("i"), pl.col("i").hash(7)),
            ts=pl.lit(base) + pl.duration(microseconds=pl.col("i")),
            event_date=pl.lit(day), kind=pl.lit("review"), value=pl.col("i").hash(11).cast(pl.String),
            source=pl.lit("api"), source_file=pl.lit("landing/big.jsonl"), line_no=pl.col("i") + 1,
            batch_id=pl.lit("killed"))
        if b == 0:
            print("started", flush=True)
        time.sleep(0.01)

publish(Lake(load_settings()), DWD_FEEDBACK, frames(), partitions=[{"event_date": day}], expectations=False,
        now=dt.datetime(2026, 1, 3, tzinfo=dt.timezone.utc))
print("finished", flush=True)
"""


def _table_files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def test_killed_writer_leaves_nothing_visible(settings: Settings) -> None:
    old = pl.concat([feedback(DAY1, 0, 3), feedback(DAY2, 3, 3)])
    publish(
        Lake(settings),
        table("dwd.feedback"),
        old,
        partitions=[{"event_date": DAY1}, {"event_date": DAY2}],
        now=NOW,
        expectations=False,
    )
    before = _snapshot(settings, table("dwd.feedback"))
    log_before = audit_log(settings)
    root = Path(table("dwd.feedback").uri(settings))
    files_before = _table_files(root)

    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER],
        cwd=REPO,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([writer.stdout], [], [], 60)
        assert ready, "writer did not start within 60 s"
        assert writer.stdout is not None and writer.stdout.readline().strip() == "started", writer.stderr.read()
        deadline = time.monotonic() + 60
        while not (_table_files(root) - files_before):  # the write is under way: a data file is on disk
            assert writer.poll() is None, f"writer ended before it was killed: {writer.stderr.read()}"
            assert time.monotonic() < deadline, "no data file appeared within 60 s"
            time.sleep(0.02)
        assert writer.poll() is None, "writer finished before it could be killed"
        os.kill(writer.pid, signal.SIGKILL)
        assert writer.wait(30) == -signal.SIGKILL
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        writer.stdout.close()  # type: ignore[union-attr]
        writer.stderr.close()  # type: ignore[union-attr]

    assert _table_files(root) - files_before, "the killed write left no partial file (was it in progress?)"
    assert _snapshot(settings, table("dwd.feedback")) == before  # version, rows, referenced files
    assert audit_log(settings).equals(log_before)

    new = feedback(DAY2, 100, 4, batch="after-kill")
    result = publish(
        Lake(settings), table("dwd.feedback"), new, partitions=[{"event_date": DAY2}], now=NOW, expectations=False
    )
    assert result.version == before[0] + 1
    assert same_rows(contents(settings, table("dwd.feedback")), pl.concat([feedback(DAY1, 0, 3), new]))


def test_rows_outside_the_replaced_partition_are_refused_even_on_a_new_table(strata_env: Path) -> None:
    settings = load_settings()
    rows = pl.DataFrame(
        {
            "table_name": ["dwd.request", "dwd.request"],
            "event_date": [dt.date(2026, 1, 1), dt.date(2026, 1, 2)],
            "ods_rows": [1, 1],
            "dwd_rows": [1, 1],
            "duplicates": [0, 0],
            "quarantined": [0, 0],
            "malformed": [0, 0],
            "balanced": [True, True],
        }
    )
    with pytest.raises(Exception, match=r"(?i)invalid data|partition|predicate"):
        publish(
            Lake(settings),
            table("ops.books"),
            rows,
            partitions=[{"event_date": dt.date(2026, 1, 1)}],
            expectations=False,
        )
    assert Lake(settings).open_table(table("ops.books")) is None


def test_a_table_that_keeps_every_row_publishes_nothing_when_a_row_is_refused(settings: Settings) -> None:
    def quarantine(line_no: list[int]) -> pl.DataFrame:
        n = len(line_no)
        return pl.DataFrame(
            {
                "event_date": [dt.date(2026, 1, 1)] * n,
                "target_table": ["dwd.request"] * n,
                "request_id": [f"r{i}" for i in range(n)],
                "rules": [["ts.type"]] * n,
                "raw_line": [b"{}"] * n,
                "source_file": ["a.jsonl"] * n,
                "line_no": line_no,
                "batch_id": ["b1"] * n,
                "quarantined_at": [dt.datetime(2026, 1, 1, tzinfo=dt.UTC)] * n,
            }
        )

    keep_all = [keeps_every_row("quarantine.keeps_every_row")]
    partition = [{"event_date": dt.date(2026, 1, 1), "target_table": "dwd.request"}]
    first = publish(
        Lake(settings),
        table("dwd.quarantine"),
        quarantine([1, 2]),
        partitions=partition,
        expectations=False,
        invariants=keep_all,
    )
    with pytest.raises(AuditFailed) as err:  # line_no 0 breaks line_no.min: the row would be lost
        publish(
            Lake(settings),
            table("dwd.quarantine"),
            quarantine([1, 0, 3]),
            partitions=partition,
            expectations=False,
            invariants=keep_all,
        )
    assert err.value.rules == ["quarantine.keeps_every_row"] and "line_no.min" in str(err.value)
    assert Lake(settings).version(table("dwd.quarantine")) == first.version
    assert Lake(settings).read_frame(table("dwd.quarantine")).height == 2
