"""The conversion written straight from protobuf's wire bytes (:mod:`warehouse.sources.collector.wire`) against
the reference conversion of the parsed message (``decode``, itself held to ``json_format.MessageToDict``): the
same bytes for what the OpenTelemetry SDK sends, and for wire forms it does not cover, the reference's."""

from __future__ import annotations

import math
from typing import Any

import pytest

from warehouse.sources.collector import wire
from warehouse.sources.collector.encoding import PROTOBUF, BadData, accept, decode, line_of, receiver_attributes


def _sdk_body(resource: dict[str, Any]) -> bytes:
    """What the SDK's OTLP/HTTP exporter posts for a few spans of every attribute kind it has."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(resource))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("genai", "1.2", schema_url="https://opentelemetry.io/schemas/1.30.0")
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 812,
        "gen_ai.usage.output_tokens": 0,
        "big": 2**63 - 1,
        "negative": -(2**63),
        "small negative": -1,
        "ratio": 0.1,
        "huge": 1e300,
        "nan": math.nan,
        "inf": -math.inf,
        "zero": 0.0,
        "cache_hit": False,
        "stream": True,
        "gen_ai.response.finish_reasons": ("stop", "length"),
        "ints": [1, -2, 3],
        "floats": [0.5, 2.0],
        "bools": [True, False],
        "raw": b"\x00\xff binary",
        "empty": "",
        'quote " backslash \\ newline \n tab \t nul \x00 bell \x07': 'value with " and \\ and \n and \u2028',
        "unicode ключ 🔑": "значение ✓ 😀 é",
        "long value": "x" * 300,
        "k" * 200: "a key over 127 bytes",
    }
    with tracer.start_as_current_span("workflow", kind=SpanKind.INTERNAL) as parent:
        parent.add_event("started", {"step": 1, "note": "first"})
        for i in range(3):
            with tracer.start_as_current_span(
                f"chat gpt-4o {i}",
                kind=SpanKind.CLIENT,
                attributes={**attributes, "gen_ai.response.id": f"chatcmpl-{i}", "user.id": f"u{i % 2}"},
                links=[Link(parent.get_span_context(), {"link.kind": "parent"})],
            ) as span:
                span.add_event("gen_ai.choice", {"index": i})
                if i == 2:
                    span.set_status(Status(StatusCode.ERROR, "rate limited"))
                    span.record_exception(ValueError("boom"))
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


@pytest.mark.parametrize(
    "resource, tenant",
    [
        ({"service.name": "gateway", "tenant.id": "t1"}, None),
        ({"service.name": "gateway"}, "acme"),
        ({"service.name": "gateway", "tenant.id": "acme"}, "acme"),
        ({"service.name": "gateway", "tenant.id": "mallory"}, "acme"),  # every span rejected: no line
        ({"service.name": "gateway", "tenant.id": 'a"quoted\ntenant'}, 'a"quoted\ntenant'),
    ],
)
def test_the_sdks_protobuf_converts_to_the_same_bytes_as_the_parsed_message(
    resource: dict[str, Any], tenant: str | None
) -> None:
    body = _sdk_body(resource)
    expected = decode(body, PROTOBUF, tenant).line
    accepted = accept(body, PROTOBUF, tenant)
    assert (line_of(accepted.record) if accepted.record else None) == expected
    if tenant is None or b"tenant.id" not in body:  # no span to drop: the writer has the body as sent
        assert (
            wire.otlp_json(body, receiver_attributes(tenant)) == expected
        )  # written from the wire, not by the fallback
    for _ in range(2):  # the caches hold attributes now: the same again
        assert (line_of(accepted.record) if accepted.record else None) == expected


def test_spans_claiming_another_tenant_are_left_out_of_the_written_line() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(_sdk_body({"service.name": "gateway"}))
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].attributes.add(key="tenant.id").value.string_value = "mallory"
    spans[1].attributes.add(key="tenant.id").value.string_value = "acme"
    body = request.SerializeToString()
    accepted = accept(body, PROTOBUF, "acme")
    assert (accepted.spans, accepted.rejected) == (len(spans), 1)
    assert line_of(accepted.record or b"") == decode(body, PROTOBUF, "acme").line
    assert b"mallory" not in (line_of(accepted.record or b"") or b"")


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _request(*spans: bytes, resource: bytes | None = b"") -> bytes:
    """A request of one resource and scope holding these span bytes (``resource=None``: no resource)."""
    scope = _field(1, b"\x0a\x01s") + b"".join(_field(2, span) for span in spans)
    resource_field = b"" if resource is None else _field(1, resource)
    return _field(1, resource_field + _field(2, scope))


def _spans() -> tuple[bytes, ...]:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    def span(**fields: object) -> bytes:
        return Span(**fields).SerializeToString()  # type: ignore[arg-type]

    def attribute(key: str, value: AnyValue) -> bytes:
        return _field(9, KeyValue(key=key, value=value).SerializeToString())

    return (
        span(kind=3) + span(name="out of order"),
        span(name="first") + span(name="last wins"),
        span(status={"code": 2}) + span(status={"message": "merged"}),  # a message twice: merged
        span(name="unknown field") + _varint(100 << 3) + _varint(7),
        span(name="a") + attribute("k", AnyValue(string_value="x")) + span(kind=2) + attribute("k2", AnyValue()),
        span(name="oneof twice") + _field(9, _field(1, b"k") + _field(2, b"\x0a\x01x\x18\x05")),
        span(name="key-value out of order") + _field(9, _field(2, b"\x0a\x01x") + _field(1, b"k")),
        span(name="trace_id", trace_id=b"\x01" * 16) + span(trace_id=b"\x02" * 16),
        _field(5, b"not utf-8 \xff"),
    )


@pytest.mark.parametrize("span", _spans(), ids=range(len(_spans())))
def test_a_wire_form_the_writer_does_not_cover_is_converted_from_the_parsed_message(span: bytes) -> None:
    body = _request(span)
    with pytest.raises((LookupError, ValueError)):  # wire.NotCanonical, or an unknown field's tag
        wire.otlp_json(body, receiver_attributes(None))
    try:
        record = accept(body, PROTOBUF, None).record
    except BadData:  # refused on the request path, as protobuf refuses it (invalid UTF-8)
        return
    assert line_of(record or b"") == decode(body, PROTOBUF, None).line


def test_resources_and_scopes_without_spans_are_left_out_and_a_missing_resource_is_made() -> None:
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    span = Span(name="s", kind=Span.SPAN_KIND_INTERNAL).SerializeToString()
    empty_scope = _field(1, _field(1, _field(1, b"\x0a\x01e")))
    cases = [
        _request(span, resource=None),  # the receiver's attributes make a resource, after scopeSpans
        _request(span, resource=b"\x10\x03"),  # a resource with no attributes, only a dropped count
        _request(span) + empty_scope,  # a resource without scope: left out
        _request(Span(name="z").SerializeToString() + b"\x30\x00"),  # a zero written out (kind): as if absent
        _field(1, _field(2, _field(1, b"")) + _field(2, _field(2, span)) + _field(3, b"https://schema")),
        b"",
    ]
    for body in cases:
        for tenant in (None, "acme"):
            expected = decode(body, PROTOBUF, tenant).line
            assert wire.otlp_json(body, receiver_attributes(tenant)) == expected
            assert line_of(accept(body, PROTOBUF, tenant).record or b"P\x00\x00") == expected
