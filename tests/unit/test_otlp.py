"""The OTLP/JSON adapter: GenAI spans of Collector file exports → canonical request fields."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from fixtures_otlp import any_value, key_value, nanos, otlp_export_line, span

from warehouse.sources.canonical import LINK_FIELDS, REQUEST_FIELDS
from warehouse.sources.otlp import parse_otlp_lines
from warehouse.sources.timestamps import parse_ts

UTC = dt.UTC
_FLOAT_FIELDS = {"duration_ms", "ttft_ms", "queue_ms", "preprocess_ms", "inference_ms", "postprocess_ms"}


def _records() -> list[dict[str, Any]]:
    full = {
        "request_id": "req-0001",
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": "00f067aa0ba902b7",
        "parent_span_id": "b7ad6b7169203331",
        "retry_of": None,
        "attempt": 1,
        "ts": dt.datetime(2026, 1, 1, 10, 0, 0, 123456, tzinfo=dt.timezone(dt.timedelta(hours=8))),
        "duration_ms": 1234.567,
        "ttft_ms": 123.4,
        "queue_ms": 5.25,
        "preprocess_ms": 1.5,
        "inference_ms": 1200.0,
        "postprocess_ms": 0.75,
        "tenant_id": "tenant-a",
        "user_id": "user-42",
        "api_key_id": "key-7",
        "operation": "chat",
        "model": "llama-3.1-8b",
        "model_version": "2024-09-a",
        "provider": "vllm",
        "server": "vllm-sg-01",
        "server_instance": "vllm-sg-01-7f3a9c",
        "prompt_template_version": "tpl-3",
        "pipeline_version": "serve-1.8.2",
        "input_tokens": 812,
        "output_tokens": 64,
        "cached_input_tokens": 512,
        "batch_size": 16,
        "status_code": 200,
        "error_type": None,
        "finish_reason": "stop",
        "cache_hit": True,
        "attributes": {"region": "ap-southeast-1", "client": "sdk-py/1.2"},
    }
    retry = {
        **full,
        "request_id": "req-0002",
        "span_id": "00f067aa0ba902b8",
        "server_instance": "vllm-sg-01-9b1e04",
        "retry_of": "req-0001",
        "attempt": 2,
        "operation": "completion",
        "ts": dt.datetime(2026, 1, 1, 2, 0, 1, tzinfo=UTC),
        "duration_ms": 30000.0,
        "status_code": 504,
        "error_type": "timeout",
        "finish_reason": None,
        "output_tokens": 0,
        "cache_hit": False,
        "attributes": {},
    }
    sparse = {f: None for f in REQUEST_FIELDS} | {
        "request_id": "req-0003",
        "ts": dt.datetime(2025, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "tenant_id": "tenant-b",
        "operation": "embeddings",
        "model": "bge-m3",
        "input_tokens": 40,
        "status_code": 200,
        "server": "triton-use-02",
    }
    return [full, retry, sparse]


def _expected_text(field: str, value: Any) -> Any:
    if value is None:
        return None
    if field == "ts":
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _parse(lines: list[bytes]) -> pl.DataFrame:
    return parse_otlp_lines(pa.array(lines, type=pa.large_binary()))


def _line(spans: list[dict[str, Any]], resource: list[dict[str, Any]] | None = None) -> bytes:
    doc = {
        "resourceSpans": [
            {"resource": {"attributes": resource or []}, "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}
        ]
    }
    return json.dumps(doc).encode()


def _genai_span(span_id: str = "00f067aa0ba902b7", **attrs: Any) -> dict[str, Any]:
    base = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
    return {
        "traceId": "4BF92F3577B34DA6A3CE929D0E0E4736",
        "spanId": span_id,
        "name": "chat m",
        "kind": 3,
        "startTimeUnixNano": "1767232800000000000",
        "endTimeUnixNano": "1767232800250000000",
        "attributes": [key_value(k, v) for k, v in (base | attrs).items()],
    }


def test_schema_and_column_order() -> None:
    out = _parse([otlp_export_line(_records()[:1])])
    assert out.columns == ["_line", "parse_error", *REQUEST_FIELDS, *LINK_FIELDS]
    assert out.schema["_line"] == pl.Int64
    assert all(out.schema[c] == pl.String for c in out.columns[1:])


def test_round_trip_maps_every_field() -> None:
    records = _records()
    out = _parse([otlp_export_line(records)])
    assert out.height == len(records)
    assert out.get_column("parse_error").null_count() == out.height
    assert out.get_column("_line").to_list() == [0] * len(records)
    for record, row in zip(records, out.iter_rows(named=True)):
        for field in REQUEST_FIELDS:
            got, want = row[field], record[field]
            if field == "span_id" and want is None:  # a span has an id whatever the record says
                want = span(record)["spanId"]
            if field == "attributes":
                attributes = {
                    k: v
                    for k, v in (json.loads(got) if got is not None else {}).items()
                    if k not in ("otel.span_id", "otel.parent_span_id")
                }
                assert attributes == (want or {}), field
            elif field in _FLOAT_FIELDS and want is not None:
                assert float(got) == pytest.approx(want, abs=1e-6), field
            else:
                assert got == _expected_text(field, want), field
    # the text is canonical: DWD's timestamp parser reads it back to the same instant
    ts = out.select(parse_ts(pl.col("ts"))).to_series().to_list()
    assert ts == [r["ts"].astimezone(UTC) for r in records]


def test_exact_decimal_text_for_times() -> None:
    out = _parse([otlp_export_line(_records()[:1])])
    row = out.row(0, named=True)
    assert row["ts"] == "2026-01-01T02:00:00.123456+00:00"
    assert row["duration_ms"] == "1234.567"
    assert row["ttft_ms"] == "123.4"
    assert row["inference_ms"] == "1200"


def test_resource_attributes_are_inherited_and_span_attributes_win() -> None:
    resource = [
        key_value("tenant.id", "tenant-r"),
        key_value("server.address", "gpu-01"),
        key_value("user.id", "resource-user"),
        key_value("service.name", "gw"),
    ]
    spans = [_genai_span("00000000000000a1"), _genai_span("00000000000000a2", **{"user.id": "span-user"})]
    out = _parse([_line(spans, resource)])
    assert out.get_column("tenant_id").to_list() == ["tenant-r", "tenant-r"]
    assert out.get_column("server").to_list() == ["gpu-01", "gpu-01"]
    assert out.get_column("user_id").to_list() == ["resource-user", "span-user"]
    # resource attributes never land in the span's own attributes map
    assert out.get_column("attributes").to_list() == [None, None]


def test_int_value_as_json_string_or_number() -> None:
    span = _genai_span()
    span["attributes"] += [
        {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "812"}},
        {"key": "gen_ai.usage.output_tokens", "value": {"intValue": 64}},
        {"key": "http.response.status_code", "value": {"intValue": "429"}},
    ]
    span["startTimeUnixNano"] = 1767232800000000000  # a number is accepted too
    row = _parse([_line([span])]).row(0, named=True)
    assert (row["input_tokens"], row["output_tokens"], row["status_code"]) == ("812", "64", "429")
    assert row["ts"] == "2026-01-01T02:00:00.000000+00:00"
    assert row["duration_ms"] == "250"


def test_span_identity_and_model_mapping() -> None:
    span = _genai_span(
        **{
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.operation.name": "text_completion",
            "gen_ai.system": "openai",
        }
    )
    row = _parse([_line([span])]).row(0, named=True)
    assert row["request_id"] == "00f067aa0ba902b7"  # no gen_ai.response.id: the span id
    assert row["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"  # lower-case hex
    assert (row["model"], row["model_version"]) == ("gpt-4o", "gpt-4o-2024-08-06")
    assert (row["operation"], row["provider"]) == ("completion", "openai")
    assert row["status_code"] == "200"  # status unset


@pytest.mark.parametrize(
    ("error_type", "message", "status", "error"),
    [
        ("RateLimitError", "Error code: 429 - {'error': 'slow down'}", "429", "rate_limited"),
        ("<class 'openai.RateLimitError'>", "", "429", "rate_limited"),  # one util-genai release writes this
        ("openai.BadRequestError", "bad", "400", "invalid_request"),
        ("InternalServerError", "Error code: 503 - overloaded", "503", "upstream_error"),
        ("APITimeoutError", "Request timed out.", None, "timeout"),
        ("timeout", "deadline exceeded", None, "timeout"),  # already the contract's word
        ("MyToolError", "it broke", None, "MyToolError"),  # unknown: its name kept, no guessed status
        ("429", "", "429", "rate_limited"),  # error.type as the HTTP status
        (None, "Error code: 404 - gone", "404", "not_found"),
        (None, "", None, "_OTHER"),
    ],
)
def test_a_failed_call_has_its_status_and_error_from_the_error_table(
    error_type: str | None, message: str, status: str | None, error: str
) -> None:
    attrs = {} if error_type is None else {"error.type": error_type}
    span = _genai_span(**attrs)
    span["status"] = {"code": 2, "message": message}
    row = _parse([_line([span])]).row(0, named=True)
    assert (row["status_code"], row["error_type"]) == (status, error)


def test_an_http_status_on_the_span_wins_and_the_error_keeps_the_vocabulary() -> None:
    span = _genai_span(**{"error.type": "RateLimitError", "http.response.status_code": 503})
    span["status"] = {"code": 2, "message": "Error code: 429"}
    row = _parse([_line([span])]).row(0, named=True)
    assert (row["status_code"], row["error_type"]) == ("503", "rate_limited")


def test_current_conventions_ttft_and_parent_span_are_read() -> None:
    span = _genai_span(
        **{
            "gen_ai.response.time_to_first_chunk": 0.25,
            "gen_ai.response.id": "chatcmpl-1",
            "gen_ai.conversation.id": "conv-9",
            "gen_ai.usage.cache_read_input_tokens": 7,
        }
    )
    span["parentSpanId"] = "00000000000000b1"
    row = _parse([_line([span])]).row(0, named=True)
    assert (row["ttft_ms"], row["request_id"], row["cached_input_tokens"]) == ("250", "chatcmpl-1", "7")
    assert json.loads(row["attributes"]) == {
        "gen_ai.conversation.id": "conv-9",
        "otel.span_id": "00f067aa0ba902b7",
        "otel.parent_span_id": "00000000000000b1",
    }


def test_the_tenant_comes_from_the_receiver_then_the_span_then_the_source_then_the_service() -> None:
    receiver = [key_value("strata.tenant_id", "acme"), key_value("service.name", "svc")]
    spoof = _genai_span("00000000000000a1", **{"tenant.id": "other", "strata.tenant_id": "evil"})
    plain = _genai_span("00000000000000a2")
    lines = [
        _line([spoof], receiver),
        _line([spoof]),
        _line([plain], [key_value("service.name", "svc")]),
        _line([plain]),
    ]
    assert _parse(lines).get_column("tenant_id").to_list() == ["acme", "other", "svc", None]
    tenant = parse_otlp_lines(pa.array(lines, pa.large_binary()), tenant="src").get_column("tenant_id").to_list()
    assert tenant == ["acme", "other", "src", "src"]


def test_seconds_attributes_become_milliseconds() -> None:
    span = _genai_span()
    span["attributes"] += [
        {"key": "gen_ai.latency.time_to_first_token", "value": {"doubleValue": 0.0421}},
        {"key": "gen_ai.latency.time_in_queue", "value": {"doubleValue": 2}},
        {"key": "gen_ai.latency.time_in_preprocess", "value": {"stringValue": "n/a"}},
    ]
    row = _parse([_line([span])]).row(0, named=True)
    assert (row["ttft_ms"], row["queue_ms"], row["preprocess_ms"]) == ("42.1", "2000", None)
    assert json.loads(row["attributes"]) == {"gen_ai.latency.time_in_preprocess": "n/a"}  # kept, not lost


def test_non_genai_spans_are_skipped() -> None:
    http_child = {
        "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
        "spanId": "1111111111111111",
        "parentSpanId": "00f067aa0ba902b7",
        "name": "POST /v1/chat",
        "kind": 3,
        "startTimeUnixNano": "1767232800000000000",
        "endTimeUnixNano": "1767232800100000000",
        "attributes": [
            key_value("http.request.method", "POST"),
            {"key": "http.response.status_code", "value": any_value(200)},
        ],
    }
    out = _parse([_line([http_child, _genai_span(), http_child])])
    assert out.height == 1
    assert out.row(0, named=True)["request_id"] == "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"\xff\xfe{}", "invalid UTF-8"),
        (b'{"resourceSpans": [', "invalid JSON"),
        (b"", "invalid JSON"),
        (b"[1, 2]", "not an OTLP trace export"),
        (b'{"request_id": "r1", "ts": 1}', "not an OTLP trace export"),
        (b'{"resourceMetrics": []}', "not an OTLP trace export"),
        (b'{"resourceSpans": []}', "no GenAI spans"),
        (b"[" * 20_000 + b"]" * 20_000, "invalid JSON"),
        (
            b'{"resourceSpans": [], "resource_spans": []}',
            "not an OTLP trace export: the request names both resourceSpans and resource_spans: "
            "one field, spelled two ways",
        ),
        (
            b'{"resourceSpans": [{"scopeSpans": [], "instrumentationLibrarySpans": []}]}',
            "not an OTLP trace export: resourceSpans[0] names both scopeSpans and instrumentationLibrarySpans: "
            "one field, spelled two ways",
        ),
    ],
)
def test_malformed_line_yields_one_row_with_its_reason(line: bytes, reason: str) -> None:
    good = otlp_export_line(_records()[:2])
    out = _parse([good, line, good])
    bad = out.filter(pl.col("_line") == 1)
    assert bad.height == 1
    assert bad.row(0, named=True)["parse_error"] == reason
    assert bad.select(REQUEST_FIELDS).row(0) == (None,) * len(REQUEST_FIELDS)
    assert out.filter(pl.col("_line") != 1).get_column("parse_error").null_count() == 4


def test_broken_structure_is_not_an_export() -> None:
    line = b'{"resourceSpans": [{"scopeSpans": [{"spans": [42]}]}]}'
    row = _parse([line]).row(0, named=True)
    assert row["parse_error"].startswith("not an OTLP trace export: ")
    assert row["request_id"] is None


def test_bad_start_time_flags_the_span() -> None:
    span = _genai_span()
    span["startTimeUnixNano"] = "yesterday"
    row = _parse([_line([span])]).row(0, named=True)
    assert row["parse_error"].startswith("invalid span")
    assert row["request_id"] == "00f067aa0ba902b7" and row["ts"] is None


def test_multiple_spans_per_line_keep_their_line() -> None:
    records = _records()
    lines = [
        otlp_export_line(records[:2]),
        b"{oops",
        otlp_export_line(records[2:]),
        _line([_genai_span("00000000000000b1"), _genai_span("00000000000000b2")]),
    ]
    out = _parse(lines)
    assert out.get_column("_line").to_list() == [0, 0, 1, 2, 3, 3]
    assert out.get_column("request_id").to_list() == [
        "req-0001",
        "req-0002",
        None,
        "req-0003",
        "00000000000000b1",
        "00000000000000b2",
    ]


def test_string_and_chunked_input() -> None:
    line = otlp_export_line(_records()[:1]).decode()
    out = parse_otlp_lines(pa.chunked_array([pa.array([line], pa.string()), pa.array([line], pa.string())]))
    assert out.get_column("_line").to_list() == [0, 1]


def test_empty_input() -> None:
    out = _parse([])
    assert out.height == 0 and out.columns == ["_line", "parse_error", *REQUEST_FIELDS, *LINK_FIELDS]


def test_nanos_helper_is_exact() -> None:
    ts = dt.datetime(2026, 1, 1, 2, 0, 0, 123456, tzinfo=UTC)
    assert nanos(ts) == 1767232800123456000


def test_a_gateway_span_is_at_the_gateway_level_only_where_no_ordinary_token_stamped_it() -> None:
    """A LiteLLM call span wins its call's tenant at the gateway level; sent under an ordinary token's stamp it is
    a client's, so a sender cannot lend its tenant to a call of another tenant by naming its ids."""
    span = {**_genai_span(**{"llm.request.type": "completion"}), "name": "litellm_request"}

    def level(resource: list[dict[str, Any]]) -> str:
        doc = json.loads(_line([span], resource))
        doc["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"] = "litellm"
        return _parse([json.dumps(doc).encode()]).get_column("_level").item()

    stamped = [key_value("strata.tenant_id", "acme")]
    assert level([]) == "gateway"  # a file, or a receiver without tokens
    assert level([*stamped, key_value("strata.gateway", "*")]) == "gateway"  # a gateway token's
    assert level(stamped) == "client"  # an ordinary token's


def test_spans_that_are_no_call_come_with_spans() -> None:
    """The DWD build asks for every span: a workflow's parent around a call is a row of its own (``_kind``
    ``span``) with its place in the trace, service, instance, status and user; the call keeps its columns."""
    parent = {
        "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
        "spanId": "b7ad6b7169203331",
        "name": "answer question",
        "startTimeUnixNano": "1767232799900000000",
        "endTimeUnixNano": "1767232800400000000",
        "status": {"code": 2},
        "attributes": [key_value("user.id", "user-42"), key_value("retrieval.query", "q")],
    }
    call = _genai_span() | {"parentSpanId": "b7ad6b7169203331"}
    resource = [key_value("service.name", "rag-app"), key_value("service.instance.id", "pod-1/boot-2")]
    line = _line([parent, call], resource)
    plain = _parse([line])
    assert plain.height == 1 and "_kind" not in plain.columns  # ODS's parse is as it was
    out = parse_otlp_lines(pa.array([line], type=pa.large_binary()), spans=True)
    assert out.get_column("_kind").to_list() == ["call", "span"]
    called, other = out.row(0, named=True), out.row(1, named=True)
    assert (called["span_id"], called["parent_span_id"], called["server_instance"]) == (
        "00f067aa0ba902b7",
        "b7ad6b7169203331",
        "pod-1/boot-2",
    )
    assert {k: other[k] for k in ("span_id", "parent_span_id", "name", "service", "server_instance")} == {
        "span_id": "b7ad6b7169203331",
        "parent_span_id": None,
        "name": "answer question",
        "service": "rag-app",
        "server_instance": "pod-1/boot-2",
    }
    assert (other["status"], other["user_id"], other["duration_ms"], other["request_id"]) == (
        "error",
        "user-42",
        "500",
        None,
    )
    # a line of no call: its trace-only row (the books of dwd.request), then its spans
    alone = parse_otlp_lines(pa.array([_line([parent], resource)], type=pa.large_binary()), spans=True)
    assert alone.select("_kind", "parse_error").rows() == [("call", "no GenAI spans"), ("span", None)]
