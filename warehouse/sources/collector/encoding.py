"""OTLP/HTTP trace bodies → spool records on the request path, OTLP/JSON lines when the ingest converts a segment.

The request path (:func:`accept`) does only what a durable, correct answer needs: a protobuf
body is parsed (a validity check, and the tenant check a partial success needs) and spooled
as sent; a JSON body is decoded and spooled as the line it becomes. :func:`line_of` turns a
record into its line when ``strata ingest`` converts its segment (:mod:`.segments`), off the receiver.

A JSON body's spans are where the ingest's reader finds them (:mod:`warehouse.sources.otlp_spans`: JSON or
proto field names, the pre-1.0 ``instrumentationLibrarySpans``), so what is answered 2xx lands span for span:
a JSON body the reader would keep as one malformed line (a value of the wrong kind, an attribute that is no
``KeyValue``) is refused with the reader's reason. A JSON body is kept as sent (its line breaks, which JSON
allows only as whitespace, become spaces) unless the receiver has to change it. A protobuf body becomes the
OTLP/JSON encoding of the same ``ExportTraceServiceRequest`` (opentelemetry-proto ``docs/specification.md``,
"JSON Protobuf Encoding"): lowerCamelCase keys, enums as integers, 64-bit integers as decimal strings, default
values left out, and ``traceId`` / ``spanId`` / ``parentSpanId`` as hex where protobuf's own JSON mapping
writes base64; each of its resources then carries ``strata.converted_from = "protobuf"``, so the line in ODS
says that it was converted.

A token that names a tenant puts ``strata.tenant_id`` on every resource. Spans that claim
another tenant (``tenant.id`` on their resource or on the span) are rejected, and the answer
is a partial success that says how many. A gateway's token (:mod:`.tokens`) puts ``strata.gateway``
(its teams) there too, and its spans name their tenant by their team attribute
(:data:`~warehouse.sources.otlp.TEAM_KEYS`, looked up as the reader does: on the span, its scope, its
resource): the spans naming a team outside its teams (nor its default tenant) are the rejected ones. Only the
receiver writes ``strata.tenant_id``, ``strata.gateway`` and ``strata.converted_from``: a sender's own are
dropped (its JSON body is then re-encoded).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec

from contracts.errors import InputError
from warehouse.sources import otlp_spans
from warehouse.sources.collector import wire
from warehouse.sources.otlp import GATEWAY, TEAM_KEYS, export_problem, gateway_allows

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
CONVERTED_FROM = "strata.converted_from"
TENANT = "strata.tenant_id"
_CLAIMED_TENANT = "tenant.id"
#: Resource attributes only the receiver writes: a sender's own are dropped, so ODS can trust them.
_OURS = (TENANT, GATEWAY, CONVERTED_FROM)

#: HTTP status → google.rpc.Code of the Status body an error answer carries.
_RPC_CODES = {400: 3, 401: 16, 404: 12, 405: 12, 413: 8, 415: 3, 429: 8, 503: 14}


class BadData(InputError):
    """The body is not a trace export in the encoding its Content-Type names (HTTP 400)."""


@dataclass(frozen=True)
class Decoded:
    """What a request body becomes: the line to spool (``None`` when no span is left), and the counts."""

    line: bytes | None
    spans: int
    rejected: int = 0
    message: str = ""


@dataclass(frozen=True)
class Accepted:
    """What the request path makes of a body: the spool record (``None`` when no span is left), and the counts."""

    record: bytes | None
    spans: int
    rejected: int = 0
    message: str = ""


#: A record's first byte: the line itself follows, or a protobuf body as sent (after its tenant).
_LINE, _PROTOBUF_BODY = b"L", b"P"


def accept(body: bytes, content_type: str, tenant: str | None, gateway: str | None = None) -> Accepted:
    """The spool record of a trace export body, without converting it; raises :class:`BadData` as :func:`decode`."""
    if content_type == PROTOBUF:
        spans, rejected = _drop_other_tenants(_parse(body), tenant, gateway)
        claim = ((tenant or "") + (f" {gateway}" if gateway else "")).encode()
        record = _PROTOBUF_BODY + len(claim).to_bytes(2, "big") + claim + body if spans > rejected else None
        return Accepted(record, spans, rejected, _rejected_message(rejected, gateway))
    decoded = decode(body, content_type, tenant, gateway)
    return Accepted(
        None if decoded.line is None else _LINE + decoded.line, decoded.spans, decoded.rejected, decoded.message
    )


def line_of(record: bytes) -> bytes | None:
    """The OTLP/JSON line of a record :func:`accept` made (a protobuf body is converted here)."""
    kind = record[:1]
    if kind == _LINE:
        return record[1:]
    if kind != _PROTOBUF_BODY or len(record) < 3:
        raise BadData(f"not a spool record (kind {kind!r})")
    size = int.from_bytes(record[1:3], "big")
    tenant, _, gateway = record[3 : 3 + size].decode().partition(" ")  # see :func:`accept`
    return _converted(record[3 + size :], tenant or None, gateway or None)


def _converted(body: bytes, tenant: str | None, gateway: str | None) -> bytes | None:
    """``decode(body, PROTOBUF, tenant, gateway).line``, written straight from the wire bytes (:mod:`.wire`) where
    it can be: several times faster, the same bytes. Spans claiming another tenant are deleted from the parsed
    message first, which is then serialized again; a body the writer does not cover is converted by :func:`decode`."""
    if any(ours.encode() in body for ours in _OURS):
        return decode(body, PROTOBUF, tenant, gateway).line  # a sender's own receiver attributes, to drop
    kept = body
    claims = TEAM_KEYS if gateway is not None else (_CLAIMED_TENANT,)
    if tenant is not None and any(key.encode() in body for key in claims):
        message = _parse(body)
        if _drop_other_tenants(message, tenant, gateway)[1]:
            kept = message.SerializeToString()
    try:
        return wire.otlp_json(kept, receiver_attributes(tenant, gateway))
    except (LookupError, ValueError):  # wire.NotCanonical, an unknown field, a body cut short
        return decode(body, PROTOBUF, tenant, gateway).line


def receiver_attributes(tenant: str | None, gateway: str | None = None) -> bytes:
    """The JSON ``KeyValue``\\s (comma-separated) a converted body's resources end with: its tenant, a gateway's
    teams, its conversion."""
    return msgspec.json.encode(_stamps(tenant, gateway, converted=True))[1:-1]


def _stamps(tenant: str | None, gateway: str | None, *, converted: bool) -> list[dict[str, Any]]:
    """The receiver's attributes of every resource, in the order they are written."""
    stamps = [] if tenant is None else [{"key": TENANT, "value": {"stringValue": tenant}}]
    if tenant is not None and gateway is not None:
        stamps.append({"key": GATEWAY, "value": {"stringValue": gateway}})
    if converted:
        stamps.append({"key": CONVERTED_FROM, "value": {"stringValue": "protobuf"}})
    return stamps


def decode(body: bytes, content_type: str, tenant: str | None, gateway: str | None = None) -> Decoded:
    """The OTLP/JSON line for a trace export body; raises :class:`BadData` for anything else."""
    if content_type == PROTOBUF:
        message = _parse(body)
        spans, rejected = _drop_other_tenants(message, tenant, gateway)
        line = _restamp(_message_json(message), tenant, gateway, converted=True).line
        return Decoded(line, spans, rejected, _rejected_message(rejected, gateway))
    try:
        request = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise BadData(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise BadData("the body is not JSON this receiver reads: it is nested too deeply") from None
    try:
        if tenant is None and not _claims_ours(request):
            spans = otlp_spans.count(request)
            line = body.replace(b"\r", b" ").replace(b"\n", b" ").strip() if spans else None
            decoded = Decoded(line, spans)
        else:
            decoded = _restamp(request, tenant, gateway, converted=False)
    except otlp_spans.NotTraceExport as exc:
        raise BadData(f"the body is not an OTLP/JSON ExportTraceServiceRequest: {exc}") from None
    problem = None if decoded.line is None else export_problem(decoded.line)
    if problem is not None:  # the reader would keep it as one malformed line, not as its spans
        raise BadData(f"the body is not an OTLP/JSON ExportTraceServiceRequest Strata reads: {problem}")
    return decoded


def _claims_ours(request: Any) -> bool:
    """Whether a resource carries an attribute only the receiver writes (then the line is re-encoded without it)."""
    return any(
        a.get("key") in _OURS
        for where, resource_spans in otlp_spans.resource_spans(request)
        for a in otlp_spans.attributes(otlp_spans.message(resource_spans.get("resource"), where), f"{where}.resource")
    )


def _parse(body: bytes) -> Any:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    message = ExportTraceServiceRequest()
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise BadData(f"the body is not a protobuf ExportTraceServiceRequest: {exc}") from None
    return message


def _drop_other_tenants(message: Any, tenant: str | None, gateway: str | None) -> tuple[int, int]:
    """(spans, rejected) of a parsed request, the rejected spans deleted: those claiming a tenant not the token's
    (a team outside a gateway token's teams)."""
    spans = rejected = 0
    for resource_spans in message.resource_spans:
        claimed = _claimed_tenant(resource_spans.resource.attributes)
        resource_teams = _proto_teams(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            spans += len(scope_spans.spans)
            if tenant is None:
                continue
            if gateway is not None:
                scope_teams = _proto_teams(scope_spans.scope.attributes)
                for i in reversed(range(len(scope_spans.spans))):
                    team = _team((_proto_teams(scope_spans.spans[i].attributes), scope_teams, resource_teams))
                    if not _admits(tenant, gateway, team):
                        del scope_spans.spans[i]
                        rejected += 1
            elif claimed is not None and claimed != tenant:
                rejected += len(scope_spans.spans)
                del scope_spans.spans[:]
                continue
            for i in reversed(range(len(scope_spans.spans))):
                if _claimed_tenant(scope_spans.spans[i].attributes) not in (None, tenant):
                    del scope_spans.spans[i]
                    rejected += 1
    return spans, rejected


def _claimed_tenant(attributes: Any) -> str | None:
    """:func:`_string_attr` of ``tenant.id`` on protobuf ``KeyValue``\\s: what the OTLP/JSON line would say."""
    for kv in attributes:
        if kv.key == _CLAIMED_TENANT and kv.HasField("value"):
            return _value_text(kv.value)
    return None


def _value_text(value: Any) -> str:
    """A protobuf ``AnyValue`` as :func:`_string_attr` writes it."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return str(value.string_value)
    if kind == "int_value":
        return str(value.int_value)
    return json.dumps(_message_json(value), sort_keys=True)


def _proto_teams(attributes: Any) -> dict[str, str]:
    """The team attributes (:data:`TEAM_KEYS`) set among protobuf ``KeyValue``\\s, as text."""
    return {kv.key: _value_text(kv.value) for kv in attributes if kv.key in TEAM_KEYS and kv.value.WhichOneof("value")}


def _json_teams(attributes: list[Any]) -> dict[str, str]:
    """:func:`_proto_teams` of OTLP/JSON ``KeyValue``\\s."""
    return {
        key: text
        for a in attributes
        if (key := a.get("key")) in TEAM_KEYS and a.get("value") and (text := _string_attr([a], key)) is not None
    }


def _team(levels: Sequence[dict[str, str]]) -> str | None:
    """The team a span names: the first non-empty team attribute, each looked up on the span, then its scope, then
    its resource (``levels``), as the reader does (:func:`warehouse.sources.otlp._tenant`)."""
    for key in TEAM_KEYS:
        text = next((level[key] for level in levels if key in level), "")
        if text:
            return text
    return None


def _admits(tenant: str, gateway: str, team: str | None) -> bool:
    """Whether a gateway token admits a span naming ``team`` (none: its default tenant)."""
    return team is None or team == tenant or gateway_allows(gateway, team)


_INT64_TYPES = frozenset({3, 4, 6, 16, 18})  # int64, uint64, fixed64, sfixed64, sint64: decimal strings
_MESSAGE, _BYTES, _DOUBLE, _FLOAT = 11, 12, 1, 2
_converters: dict[Any, Callable[[Any], Any]] = {}


def _message_json(message: Any) -> dict[str, Any]:
    """A message in the OTLP/JSON encoding: what ``json_format.MessageToDict(…, use_integers_for_enums=True)``
    writes, with hex ids; generic over the fields set (``ListFields``), about 5× faster than it."""
    out = {}
    for field, value in message.ListFields():
        convert = _converters.get(field)
        if convert is None:
            convert = _converters[field] = _converter(field)
        out[field.json_name] = convert(value)
    return out


def _key_value(kv: Any) -> dict[str, Any]:
    """:func:`_message_json` of a ``KeyValue`` (the bulk of a request: every attribute), written out."""
    out: dict[str, Any] = {"key": kv.key} if kv.key else {}
    if kv.HasField("value"):
        out["value"] = _message_json(kv.value)  # ListFields beats WhichOneof + getattr on an AnyValue
    if kv.key_strindex:
        out["keyStrindex"] = kv.key_strindex
    return out


#: The fields :func:`_key_value` writes; a test holds the installed protos to them.
KEY_VALUE_FIELDS = frozenset({"key", "value", "key_strindex"})


def _converter(field: Any) -> Callable[[Any], Any]:
    """How a field's value is written in OTLP/JSON (a list of them for a repeated field)."""
    one: Callable[[Any], Any]
    if field.type == _MESSAGE:
        one = _key_value if field.message_type.full_name == "opentelemetry.proto.common.v1.KeyValue" else _message_json
    elif field.type == _BYTES:
        one = bytes.hex if field.name in wire.HEX_FIELDS else _base64
    elif field.type in _INT64_TYPES:
        one = str
    elif field.type in (_DOUBLE, _FLOAT):
        one = wire.finite
    else:  # strings, bools, 32-bit integers, enums (as integers)
        return (lambda v: list(v)) if field.is_repeated else (lambda v: v)
    return (lambda v: [one(x) for x in v]) if field.is_repeated else one


def _base64(value: bytes) -> str:
    return base64.b64encode(value).decode()


#: The spellings of the ``AnyValue`` kinds a tenant claim is compared as, first present wins (as the reader reads it).
_CLAIM_KINDS = ("stringValue", "string_value", "intValue", "int_value")


def _string_attr(attributes: list[Any], key: str) -> str | None:
    for attr in attributes:
        if isinstance(attr, dict) and attr.get("key") == key and isinstance(attr.get("value"), dict):
            value = next((attr["value"][kind] for kind in _CLAIM_KINDS if kind in attr["value"]), None)
            return str(value) if isinstance(value, (str, int)) else json.dumps(attr["value"], sort_keys=True)
    return None


def _restamp(request: dict[str, Any], tenant: str | None, gateway: str | None, *, converted: bool) -> Decoded:
    """Mark every resource (tenant, gateway, conversion) and drop the spans that claim another tenant or a team
    outside a gateway's (a converted request's were dropped from the message already). Raises
    :class:`otlp_spans.NotTraceExport`."""
    spans = rejected = 0
    kept = []
    for where, resource_spans in otlp_spans.resource_spans(request):
        resource = resource_spans["resource"] = otlp_spans.message(resource_spans.get("resource"), f"{where}.resource")
        attributes = [a for a in otlp_spans.attributes(resource, f"{where}.resource") if a.get("key") not in _OURS]
        claimed = _string_attr(attributes, _CLAIMED_TENANT)
        resource_teams = _json_teams(attributes)
        scopes_key, scopes = otlp_spans.scope_spans(resource_spans, where)
        for where_s, scope_spans in scopes:
            all_spans = otlp_spans.spans(scope_spans, where_s)
            spans += len(all_spans)
            if tenant is None or converted:
                continue
            if gateway is not None:
                scope = otlp_spans.message(scope_spans.get("scope"), f"{where_s}.scope")
                scope_teams = _json_teams(otlp_spans.attributes(scope, f"{where_s}.scope"))
                scope_spans["spans"] = [
                    s
                    for s in all_spans
                    if _admits(
                        tenant,
                        gateway,
                        _team((_json_teams(otlp_spans.attributes(s, where_s)), scope_teams, resource_teams)),
                    )
                ]
            elif claimed is not None and claimed != tenant:
                scope_spans["spans"] = []
            else:
                scope_spans["spans"] = [
                    s
                    for s in all_spans
                    if _string_attr(otlp_spans.attributes(s, where_s), _CLAIMED_TENANT) in (None, tenant)
                ]
            rejected += len(all_spans) - len(scope_spans["spans"])
        attributes.extend(_stamps(tenant, gateway, converted=converted))
        resource["attributes"] = attributes
        resource_spans[scopes_key] = [scope_spans for _, scope_spans in scopes if scope_spans.get("spans")]
        if resource_spans[scopes_key]:
            kept.append(resource_spans)
    request[otlp_spans.repeated(request, otlp_spans.RESOURCE_SPANS, "the request")[0]] = kept
    line = msgspec.json.encode(request) if kept else None
    return Decoded(line, spans, rejected, _rejected_message(rejected, gateway))


def _rejected_message(rejected: int, gateway: str | None) -> str:
    if not rejected:
        return ""
    if gateway is not None:
        return (
            f"{rejected} span(s) name a team ({', '.join(TEAM_KEYS)}) outside the gateway token's teams "
            f"({gateway}) and other than its default tenant"
        )
    return f"{rejected} span(s) name a tenant.id other than the token's tenant"


def export_response(content_type: str, rejected: int = 0, message: str = "") -> bytes:
    """An ``ExportTraceServiceResponse`` body (with ``partial_success`` when spans were rejected)."""
    if content_type == JSON:
        if not rejected:
            return b"{}"
        return json.dumps({"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}}).encode()
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return cast(bytes, response.SerializeToString())


def status_body(content_type: str, status: int, message: str) -> bytes:
    """A ``google.rpc.Status`` body, as the spec wants an error answer to carry."""
    code = _RPC_CODES.get(status, 2)
    if content_type == PROTOBUF:
        from google.rpc.status_pb2 import Status

        return cast(bytes, Status(code=code, message=message).SerializeToString())
    return json.dumps({"code": code, "message": message}).encode()
