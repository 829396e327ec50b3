"""The receiver's pure parts: body → spool line, tokens file, settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from warehouse.settings import ConfigError, load_collect_settings
from warehouse.sources.collector import wire
from warehouse.sources.collector.encoding import (
    JSON,
    PROTOBUF,
    BadData,
    accept,
    decode,
    export_response,
    line_of,
    receiver_attributes,
)
from warehouse.sources.collector.tokens import load_tokens

TRACE_ID = bytes.fromhex("5b8efff798038103d269b633813fc60c")
SPAN_ID = bytes.fromhex("eee19b7ec3c1b174")


def _protobuf_request(tenant_of_span: str | None = None) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    attr = resource_spans.resource.attributes.add(key="service.name")
    attr.value.string_value = "gateway"
    spans = resource_spans.scope_spans.add().spans
    for i, tenant in enumerate([None, tenant_of_span]):
        span = spans.add(
            trace_id=TRACE_ID,
            span_id=SPAN_ID,
            parent_span_id=SPAN_ID[::-1],
            name=f"chat {i}",
            kind=3,
            start_time_unix_nano=1_770_000_000_000_000_000 + i,
            end_time_unix_nano=1_770_000_000_100_000_000,
        )
        span.links.add(trace_id=TRACE_ID, span_id=SPAN_ID)
        model = span.attributes.add(key="gen_ai.request.model")
        model.value.string_value = "m1"
        if tenant is not None:
            claim = span.attributes.add(key="tenant.id")
            claim.value.string_value = tenant
    return request.SerializeToString()


def test_a_protobuf_body_becomes_the_otlp_json_line_with_hex_ids_and_a_conversion_mark() -> None:
    decoded = decode(_protobuf_request(), PROTOBUF, tenant=None)
    line = json.loads(decoded.line)
    resource = line["resourceSpans"][0]["resource"]["attributes"]
    assert {"key": "strata.converted_from", "value": {"stringValue": "protobuf"}} in resource
    span = line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert (span["traceId"], span["spanId"], span["parentSpanId"]) == (
        TRACE_ID.hex(),
        SPAN_ID.hex(),
        SPAN_ID[::-1].hex(),
    )
    assert span["links"] == [{"traceId": TRACE_ID.hex(), "spanId": SPAN_ID.hex()}]
    assert span["kind"] == 3 and span["startTimeUnixNano"] == "1770000000000000000"  # enum int, int64 string
    assert b"\n" not in decoded.line and decoded.spans == 2 and decoded.rejected == 0


def test_the_request_path_spools_a_protobuf_body_as_sent_and_its_line_is_made_when_it_lands() -> None:
    body = _protobuf_request(tenant_of_span="other")
    for tenant, counts in ((None, (2, 0)), ("acme", (2, 1)), ("other", (2, 0))):
        accepted = accept(body, PROTOBUF, tenant)
        assert accepted.record is not None and accepted.record.endswith(body)  # parsed, checked, not converted
        decoded = decode(body, PROTOBUF, tenant)
        assert (accepted.spans, accepted.rejected, accepted.message) == (
            decoded.spans,
            decoded.rejected,
            decoded.message,
        )
        assert (accepted.spans, accepted.rejected) == counts and line_of(accepted.record) == decoded.line
    assert accept(body, PROTOBUF, "nobody").record is not None
    json_body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "a"}]}]}]}).encode()
    assert line_of(accept(json_body, JSON, None).record or b"") == json_body
    with pytest.raises(BadData):
        accept(b"\x0a\xff", PROTOBUF, None)


def test_a_json_body_is_kept_as_sent_on_one_line() -> None:
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "a\nb"}]}]}]}, indent=2).encode()
    decoded = decode(body, JSON, tenant=None)
    assert decoded.line == body.replace(b"\n", b" ") and json.loads(decoded.line) == json.loads(body)


def test_a_token_tenant_is_stamped_and_spans_claiming_another_are_rejected() -> None:
    decoded = decode(_protobuf_request(tenant_of_span="other"), PROTOBUF, tenant="acme")
    line = json.loads(decoded.line)
    assert {"key": "strata.tenant_id", "value": {"stringValue": "acme"}} in line["resourceSpans"][0]["resource"][
        "attributes"
    ]
    assert [s["name"] for s in line["resourceSpans"][0]["scopeSpans"][0]["spans"]] == ["chat 0"]
    assert (decoded.spans, decoded.rejected) == (2, 1)
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    response = ExportTraceServiceResponse.FromString(export_response(PROTOBUF, decoded.rejected, decoded.message))
    assert response.partial_success.rejected_spans == 1 and "tenant" in response.partial_success.error_message
    assert json.loads(export_response(JSON, 1, "x")) == {"partialSuccess": {"rejectedSpans": "1", "errorMessage": "x"}}


@pytest.mark.parametrize(
    "body, content_type",
    [
        (b"\x0a\xff\xff", PROTOBUF),
        (b"{nope", JSON),
        (b'{"resourceSpans": 3}', JSON),
        (b"[1]", JSON),
        (b'{"resourceSpans": [{"scopeSpans": 1}]}', JSON),
        (b'{"resourceSpans": [{"scope_spans": [{"spans": [1]}]}]}', JSON),
        (b'{"resourceSpans": [], "resource_spans": []}', JSON),
        (b'{"resourceSpans": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", JSON),
    ],
)
def test_a_body_that_is_no_trace_export_is_bad_data(body: bytes, content_type: str) -> None:
    with pytest.raises(BadData):
        decode(body, content_type, tenant=None)


def test_the_tokens_file_must_be_private_and_well_formed(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(
        "# token tenant\ns3cret-token-0123456789 acme\nanother-token-0123456789\n"
        "gateway-token-0123456789 litellm gateway=team-a,team-b\nany-team-token-0123456789 litellm gateway=*\n"
    )
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_tokens(path)
    path.chmod(0o600)
    tokens = load_tokens(path)

    def check(authorization: bytes | None) -> tuple[str | None, str | None] | None:
        token = tokens.check(authorization)
        return None if token is None else (token.tenant, token.gateway)

    assert check(b"Bearer s3cret-token-0123456789") == ("acme", None)
    assert check(b"Bearer another-token-0123456789") == (None, None)
    assert check(b"Bearer gateway-token-0123456789") == ("litellm", "team-a,team-b")
    assert check(b"Bearer any-team-token-0123456789") == ("litellm", "*")
    assert check(b"Bearer s3cret-token-012345678") is None
    assert check(b"Basic s3cret-token-0123456789") is None
    assert check(None) is None
    for line, error in [
        ("short acme", "line 1"),
        ("gateway-token-0123456789 gateway=team-a", "default tenant first"),
        ("gateway-token-0123456789 litellm team-a", "gateway=<team>"),
        ("gateway-token-0123456789 litellm gateway=team-a,,team-b", "gateway=<team>"),
        ("gateway-token-0123456789 litellm gateway=*,team-a", "gateway=<team>"),
        ("gateway-token-0123456789 litellm gateway=a b", "expected"),
    ]:
        path.write_text(line + "\n")
        with pytest.raises(ConfigError, match=error):
            load_tokens(path)


def test_collect_settings_defaults_and_errors() -> None:
    collect = load_collect_settings({})
    assert (collect.host, collect.port) == ("127.0.0.1", 4318)
    assert collect.max_body_bytes >= 20 << 20  # at least the OpenTelemetry Collector's default
    with pytest.raises(ConfigError, match="go together"):
        load_collect_settings({"STRATA_COLLECT_TLS_CERT": "/x.pem"})
    with pytest.raises(ConfigError, match="STRATA_COLLECT_PORT"):
        load_collect_settings({"STRATA_COLLECT_PORT": "70000"})


def test_the_conversion_writes_what_protobufs_json_mapping_writes_but_with_hex_ids() -> None:
    """Every kind of field the trace protos have, against ``json_format.MessageToDict`` as the reference."""
    import base64

    from google.protobuf.json_format import MessageToDict, ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    values = [
        {"stringValue": "x"},
        {"stringValue": ""},
        {"intValue": "-9007199254740993"},
        {"doubleValue": 0.5},
        {"doubleValue": "NaN"},
        {"doubleValue": "-Infinity"},
        {"boolValue": False},
        {"bytesValue": base64.b64encode(b"\x00\xff").decode()},
        {"intValue": "0"},
        {"arrayValue": {"values": [{"stringValue": "a"}, {"doubleValue": 1e300}]}},
        {"arrayValue": {}},
        {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": True}}]}},
        {},
    ]
    attributes = [{"key": f"a{i}", "value": v} for i, v in enumerate(values)]
    b64 = base64.b64encode
    request = ParseDict(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": attributes, "droppedAttributesCount": 2},
                    "schemaUrl": "https://s",
                    "scopeSpans": [
                        {
                            "scope": {"name": "n", "version": "1", "attributes": attributes[:1]},
                            "schemaUrl": "u",
                            "spans": [
                                {
                                    "traceId": b64(TRACE_ID).decode(),
                                    "spanId": b64(SPAN_ID).decode(),
                                    "parentSpanId": b64(SPAN_ID[::-1]).decode(),
                                    "traceState": "k=v",
                                    "flags": 257,
                                    "name": "chat",
                                    "kind": 3,
                                    "startTimeUnixNano": "18446744073709551615",
                                    "endTimeUnixNano": "1",
                                    "attributes": attributes,
                                    "droppedAttributesCount": 1,
                                    "events": [{"timeUnixNano": "5", "name": "e", "attributes": attributes[:2]}],
                                    "droppedEventsCount": 3,
                                    "links": [
                                        {
                                            "traceId": b64(TRACE_ID).decode(),
                                            "spanId": b64(SPAN_ID).decode(),
                                            "traceState": "t",
                                            "flags": 1,
                                        }
                                    ],
                                    "status": {"code": 2, "message": "boom"},
                                },
                                {"name": "empty"},
                            ],
                        }
                    ],
                }
            ]
        },
        ExportTraceServiceRequest(),
    )
    expected = MessageToDict(request, use_integers_for_enums=True)
    for span in expected["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for obj in [span, *span.get("links", ())]:
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in obj:
                    obj[key] = base64.b64decode(obj[key]).hex()
    decoded = decode(request.SerializeToString(), PROTOBUF, tenant=None)
    line = json.loads(decoded.line)
    line["resourceSpans"][0]["resource"]["attributes"].pop()  # the conversion mark
    assert line == expected
    # the line the receiver lands is written straight from the wire bytes: the same bytes
    assert wire.otlp_json(request.SerializeToString(), receiver_attributes(None)) == decoded.line
    assert line_of(accept(request.SerializeToString(), PROTOBUF, None).record or b"") == decoded.line


def test_the_written_out_key_value_covers_every_field_of_the_installed_protos() -> None:
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue

    from warehouse.sources.collector.encoding import KEY_VALUE_FIELDS

    assert {f.name for f in KeyValue.DESCRIPTOR.fields} == KEY_VALUE_FIELDS


def test_a_senders_own_receiver_attributes_are_dropped() -> None:
    claim = {"key": "strata.tenant_id", "value": {"stringValue": "someone-else"}}
    body = json.dumps(
        {"resourceSpans": [{"resource": {"attributes": [claim]}, "scopeSpans": [{"spans": [{"name": "a"}]}]}]}
    ).encode()
    for tenant in (None, "acme"):
        line = json.loads(decode(body, JSON, tenant=tenant).line)
        kept = line["resourceSpans"][0]["resource"]["attributes"]
        assert claim not in kept and kept == (
            [] if tenant is None else [{"key": "strata.tenant_id", "value": {"stringValue": "acme"}}]
        )
