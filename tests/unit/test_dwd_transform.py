"""The DWD transform alone: hand-written ODS batches in, rows, quarantine rules and counts out.

No Delta table is involved: the ODS rows are made by ODS's own pure row builder from
literal lines, and the transform gets its parser, prices and labels as values.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from warehouse.dwd.transform import DwdTransform, RequestInputs, key_columns, repeats
from warehouse.ods.rows import ods_frame, per_line
from warehouse.sources.canonical import fields_for
from warehouse.sources.files import LandedFile
from warehouse.sources.jsonl import parse_json_lines

DAY = dt.date(2026, 2, 1)
ARRIVED = dt.datetime(2026, 2, 1, 23, 0, tzinfo=dt.UTC)
KEY = b"unit-test-key-0123456789"


def request(request_id: str, **fields: object) -> dict:
    record = {
        "request_id": request_id,
        "ts": "2026-02-01T10:00:00Z",
        "duration_ms": 12.5,
        "tenant_id": "t1",
        "user_id": "alice",
        "operation": "chat",
        "model": "m1",
        "model_version": "v1",
        "input_tokens": 100,
        "output_tokens": 20,
        "status_code": 200,
    }
    record.update(fields)
    return {k: v for k, v in record.items() if v is not None}


@pytest.fixture(autouse=True)
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse files of these tests go to the test's own folder."""
    monkeypatch.setattr(sys.modules[__name__], "SCRATCH", tmp_path)


SCRATCH = Path()


def ods_batch(lines: list[bytes], *, file: str = "a.jsonl", first_line: int = 1) -> pl.DataFrame:
    """ODS rows of ``lines`` as ingest builds them (lenient keys, malformed flag), no table written."""
    raw = pa.array(lines, pa.large_binary())
    keys = per_line(parse_json_lines(raw, ("request_id", "ts"), folder=SCRATCH), len(lines))
    landed = LandedFile(Path(f"/landing/date={DAY}/{file}"), sha256=file * 4, content=b"")
    return ods_frame(
        raw, keys, source="jsonl", file=landed, ingested_at=ARRIVED, batch_id="b1", first_line=first_line
    ).with_columns(event_date=pl.lit(DAY))


def parser(source: str, kind: str):
    assert source == "jsonl"
    return lambda raw, _line_no, _sha, ndjson=None: parse_json_lines(
        raw, fields_for(kind), folder=SCRATCH, checked_ok=True
    )


PRICES = pl.DataFrame(
    {
        "model": ["m1", "m2"],
        "effective_from": [dt.date(2026, 1, 1)] * 2,
        "input_price_per_1k": [0.01, 0.01],
        "output_price_per_1k": [0.02, 0.02],
        "cached_input_price_per_1k": [0.005, None],
        "bills_refusals": [None, True],
    }
)
NO_LABELS = pl.DataFrame(
    schema={
        "request_id": pl.String,
        "feedback_kind": pl.String,
        "feedback_value": pl.String,
        "feedback_ts": pl.Datetime("us", "UTC"),
    }
)


def transform_for(
    batches: list[pl.DataFrame],
    labels: pl.DataFrame = NO_LABELS,
    kind: str = "requests",
) -> DwdTransform:
    keys = pl.concat([b.select(key_columns(kind)) for b in batches])  # the build's first pass
    inputs = RequestInputs(KEY, PRICES, labels) if kind == "requests" else None
    return DwdTransform(kind, DAY, parser, repeats=repeats(keys, kind), now=ARRIVED, requests=inputs)  # type: ignore[arg-type]


def lines(*records: dict) -> list[bytes]:
    return [json.dumps(r).encode() for r in records]


def test_duplicates_within_and_across_batches_keep_the_first_arrival() -> None:
    first = ods_batch(lines(request("r1"), request("r2"), request("r1", duration_ms=99.0)))
    second = ods_batch(lines(request("r2"), request("r3")), file="b.jsonl")
    transform = transform_for([first, second])
    one, two = transform(first), transform(second)
    rows = pl.concat([one.rows, two.rows])
    assert sorted(rows.get_column("request_id").to_list()) == ["r1", "r2", "r3"]
    assert rows.filter(pl.col("request_id") == "r1").get_column("duration_ms").to_list() == [12.5]  # the first
    assert (one.counts.duplicates, two.counts.duplicates) == (1, 1)
    assert one.counts.records == 3 and two.counts.records == 2


def test_each_fault_kind_is_quarantined_with_its_rule() -> None:
    faults = {
        "truncated_json": b'{"request_id": "f1", "ts": "2026-02-01T1',
        "invalid_utf8": b'{"request_id": "f2", "tenant_id": "\xff\xfe"}',
        "oversized_line": b'{"request_id": "f3", "pad": "' + b"x" * (1 << 20) + b'"}',
        "negative_duration": lines(request("f4", duration_ms=-5))[0],
        "far_future_ts": lines(request("f5", ts="2027-06-01T00:00:00Z"))[0],
        "wrong_type": lines(request("f6", input_tokens="many"))[0],
        "missing_required": lines(request("f7", tenant_id=None))[0],
        "bad_timestamp_text": lines(request("f8", ts="yesterday"))[0],
        "epoch_seconds_read_as_ms": lines(request("f9", ts=1769940000))[0],
        "before_the_floor": lines(request("f10", ts="1999-12-31T23:00:00Z"))[0],
        "not_on_its_event_date": lines(request("f11", ts="2026-02-02T01:00:00Z"))[0],
        "infinite_duration": lines(request("f12", duration_ms="Infinity"))[0],
    }
    batch = ods_batch([*faults.values(), *lines(request("ok"))])
    out = transform_for([batch])(batch)
    assert out.rows.get_column("request_id").to_list() == ["ok"]
    assert out.set_aside is not None
    rules = {row["line_no"]: row["rules"] for row in out.set_aside.iter_rows(named=True)}
    expected = [
        ["line.invalid_json"],
        ["line.invalid_utf8"],
        ["line.oversized"],
        ["duration_ms.min"],
        ["ts.event_date", "ts.future"],
        ["input_tokens.type"],
        ["tenant_id.required"],
        ["ts.type"],
        ["ts.event_date", "ts.floor"],
        ["ts.event_date", "ts.floor"],
        ["ts.event_date"],
        ["duration_ms.type"],
    ]
    assert [rules[n] for n in range(1, len(faults) + 1)] == expected
    quarantined = out.set_aside.filter(pl.col("line_no") == 4).row(0, named=True)
    assert quarantined["raw_line"] == faults["negative_duration"]  # byte-exact, with its lineage
    assert quarantined["target_table"] == "dwd.request" and quarantined["source_file"].endswith("a.jsonl")
    c = out.counts
    assert (c.records, c.malformed, c.quarantined, c.duplicates, out.rows.height) == (13, 3, 9, 0, 1)
    assert c.records == out.rows.height + c.duplicates + c.quarantined + c.malformed  # the books balance


def test_rows_are_pseudonymized_priced_flagged_and_labelled_with_the_latest_feedback() -> None:
    batch = ods_batch(
        lines(
            request("r1"),
            request("r2", status_code=429, error_type="rate_limited", retry_of="r1", attempt=2),
            request("r3", model="unpriced"),
        )
    )
    late = pl.DataFrame(
        {
            "request_id": ["r1"],
            "feedback_kind": ["review"],
            "feedback_value": ["abusive"],
            "feedback_ts": [dt.datetime(2026, 2, 3, tzinfo=dt.UTC)],
        }
    )
    out = transform_for([batch], labels=late)(batch)
    rows = {r["request_id"]: r for r in out.rows.iter_rows(named=True)}
    assert "user_id" not in out.rows.columns and len(rows["r1"]["user_pseudonym"]) == 32
    assert rows["r1"]["user_pseudonym"] == rows["r2"]["user_pseudonym"]
    assert rows["r1"]["cost_usd"] == (100 * 0.01 + 20 * 0.02) / 1000
    assert rows["r3"]["cost_usd"] is None and out.counts.incomplete == 1
    assert (rows["r2"]["is_error"], rows["r2"]["is_retry"], rows["r1"]["is_retry"]) == (True, True, False)
    assert rows["r2"]["cost_usd"] == 0.0  # refused before inference (429): not billed
    assert (rows["r1"]["feedback_kind"], rows["r1"]["feedback_value"]) == ("review", "abusive")
    assert rows["r2"]["feedback_kind"] is None
    assert out.rows.schema["ts"] == pl.Datetime("us", "UTC") and out.rows.schema["attempt"] == pl.Int32


def test_refusals_are_billed_only_where_the_price_row_says_so() -> None:
    batch = ods_batch(
        lines(
            request("a", status_code=400, error_type="invalid_request"),
            request("b", status_code=400, error_type="invalid_request", model="m2"),
            request("c", status_code=504, error_type="timeout"),
        )
    )
    cost = {r["request_id"]: r["cost_usd"] for r in transform_for([batch])(batch).rows.iter_rows(named=True)}
    billed = (100 * 0.01 + 20 * 0.02) / 1000
    assert cost == {"a": 0.0, "b": billed, "c": billed}  # a timeout ran inference: billed


def test_feedback_repeats_are_exact_lines_and_distinct_verdicts_are_kept() -> None:
    fb = [
        {"request_id": "r1", "ts": "2026-02-01T12:00:00Z", "kind": "thumb", "value": "up", "source": "app"},
        {"request_id": "r1", "ts": "2026-02-01T13:00:00Z", "kind": "review", "value": "ok", "source": "trust"},
    ]
    batch = ods_batch(lines(fb[0], fb[1], fb[0]))
    out = transform_for([batch], kind="feedback")(batch)
    assert out.rows.select("kind").to_series().to_list() == ["thumb", "review"]
    assert out.counts.duplicates == 1 and out.counts.records == 3


def test_a_null_cost_says_whether_the_price_or_the_usage_is_missing() -> None:
    batch = ods_batch(
        lines(
            request("priced"),
            request("no-price", model="m9"),
            request("failed", status_code=503, error_type="upstream_error", input_tokens=None, output_tokens=None),
            request("stream", input_tokens=None, output_tokens=None),
        )
    )
    out = transform_for([batch])(batch)
    assert out.rows.height == 4
    assert (out.counts.incomplete, out.counts.no_usage) == (1, 2)  # only m9 lacks a price


def test_an_otlp_line_of_no_genai_span_is_trace_only_as_ods_marks_it_now_and_marked_it_before() -> None:
    """A workflow's parent span sent alone parses: ODS keeps it as a good line and DWD counts it trace-only,
    never malformed nor quarantined; a line landed before (ODS said malformed, ``no GenAI spans``) alike."""
    from warehouse.sources.otlp import parse_otlp_lines

    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "workflow", "startTimeUnixNano": "1769940000000000000"}
    raw = pa.array([json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()], pa.large_binary())
    landed = LandedFile(Path(f"/landing/date={DAY}/t.json"), sha256="t" * 64, content=b"")
    now = ods_frame(
        raw, per_line(parse_otlp_lines(raw), 1), source="otlp-json", file=landed, ingested_at=ARRIVED, batch_id="b1"
    ).with_columns(event_date=pl.lit(DAY))
    assert now.select("is_malformed", "parse_error").rows() == [(False, None)]
    before = now.with_columns(is_malformed=pl.lit(True), parse_error=pl.lit("no GenAI spans"))
    for ods in (now, before):
        transform = DwdTransform(
            "requests",
            DAY,
            lambda _source, _kind: lambda raw, _line_no, _sha, ndjson=None: parse_otlp_lines(raw),
            repeats=repeats(ods.select(key_columns("requests")), "requests"),
            now=ARRIVED,
            requests=RequestInputs(KEY, PRICES, NO_LABELS),
        )
        out = transform(ods)
        c = out.counts
        assert (c.records, c.trace_only, c.malformed, c.quarantined, out.rows.height) == (1, 1, 0, 0, 0)
        assert out.set_aside is not None and out.set_aside.height == 0


def test_a_tools_or_agents_call_may_name_no_model_any_other_call_must() -> None:
    batch = ods_batch(
        lines(
            request("tool", operation="execute_tool", model=None, model_version=None, input_tokens=None),
            request("agent", operation="invoke_agent", model=None, model_version=None),
            request("setup", operation="create_agent", model=None),
            request("chat", operation="chat", model=None),
            request("named", operation="execute_tool"),
        )
    )
    out = transform_for([batch])(batch)
    rows = out.rows.sort("request_id")
    assert rows.get_column("request_id").to_list() == ["agent", "named", "setup", "tool"]
    assert rows.get_column("model").to_list() == [None, "m1", None, None]
    assert rows.filter(pl.col("model").is_null()).get_column("cost_usd").is_null().all()  # no model: no price
    assert out.set_aside is not None and out.set_aside.get_column("line_no").to_list() == [4]
    assert out.set_aside.get_column("rules").to_list() == [["model.required"]]
    assert out.counts.quarantined == 1
