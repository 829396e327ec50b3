"""Canonical request records → OTLP/JSON trace export lines, for round-trip tests.

Writes the conventions :mod:`warehouse.sources.otlp` reads (its module docstring has
the table): ``tenant.id`` and ``server.address`` on the resource (one ``resourceSpans``
per tenant and server), everything else on the span; 64-bit integers as JSON strings
and enums as integers, as the Collector's ``file`` exporter writes them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from decimal import Decimal
from typing import Any

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_OPERATION_NAMES = {"completion": "text_completion"}
# canonical field → (attribute key, AnyValue kind), written on the span
_SPAN_KEYS: dict[str, tuple[str, str]] = {
    "retry_of": ("gen_ai.request.retry_of", "stringValue"),
    "attempt": ("gen_ai.request.attempt", "intValue"),
    "user_id": ("user.id", "stringValue"),
    "api_key_id": ("api_key.id", "stringValue"),
    "model": ("gen_ai.request.model", "stringValue"),
    "provider": ("gen_ai.provider.name", "stringValue"),
    "prompt_template_version": ("prompt_template.version", "stringValue"),
    "pipeline_version": ("pipeline.version", "stringValue"),
    "input_tokens": ("gen_ai.usage.input_tokens", "intValue"),
    "output_tokens": ("gen_ai.usage.output_tokens", "intValue"),
    "cached_input_tokens": ("gen_ai.usage.cache_read.input_tokens", "intValue"),
    "batch_size": ("gen_ai.server.batch_size", "intValue"),
    "status_code": ("http.response.status_code", "intValue"),
    "error_type": ("error.type", "stringValue"),
    "cache_hit": ("gen_ai.response.cache_hit", "boolValue"),
}
# canonical millisecond field → attribute key holding seconds
_SECONDS_KEYS = {
    "ttft_ms": "gen_ai.server.time_to_first_token",
    "queue_ms": "gen_ai.latency.time_in_queue",
    "preprocess_ms": "gen_ai.latency.time_in_preprocess",
    "inference_ms": "gen_ai.latency.time_in_model_inference",
    "postprocess_ms": "gen_ai.latency.time_in_postprocess",
}


def any_value(value: Any, kind: str | None = None) -> dict[str, Any]:
    """An OTLP/JSON AnyValue (ints as strings, as the Collector writes them)."""
    if kind is None:
        kind = (
            "boolValue"
            if isinstance(value, bool)
            else "intValue"
            if isinstance(value, int)
            else "doubleValue"
            if isinstance(value, float)
            else "stringValue"
        )
    if kind == "intValue":
        return {"intValue": str(int(value))}
    if kind == "doubleValue":
        return {"doubleValue": float(value)}
    if kind == "boolValue":
        return {"boolValue": bool(value)}
    return {"stringValue": str(value)}


def key_value(key: str, value: Any, kind: str | None = None) -> dict[str, Any]:
    return {"key": key, "value": any_value(value, kind)}


def nanos(ts: dt.datetime) -> int:
    """Nanoseconds since the epoch of an aware datetime (exact)."""
    return (ts - _EPOCH) // dt.timedelta(microseconds=1) * 1000


def _hex(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[: 2 * size]


def span(record: dict[str, Any]) -> dict[str, Any]:
    """One OTLP span (JSON object) of a canonical request record (without its resource fields)."""
    attrs = [key_value("gen_ai.response.id", record["request_id"])]
    if record.get("operation") is not None:
        op = record["operation"]
        attrs.append(key_value("gen_ai.operation.name", _OPERATION_NAMES.get(op, op)))
    for field, (key, kind) in _SPAN_KEYS.items():
        if record.get(field) is not None:
            attrs.append(key_value(key, record[field], kind))
    if record.get("model") is not None:  # the response names the served model
        attrs.append(key_value("gen_ai.response.model", record["model"]))
    if record.get("model_version") is not None:
        attrs.append(key_value("model.version", record["model_version"]))
    if record.get("finish_reason") is not None:
        attrs.append(
            {
                "key": "gen_ai.response.finish_reasons",
                "value": {"arrayValue": {"values": [{"stringValue": record["finish_reason"]}]}},
            }
        )
    for field, key in _SECONDS_KEYS.items():
        if record.get(field) is not None:
            seconds = Decimal(str(record[field])).scaleb(-3)
            attrs.append({"key": key, "value": {"doubleValue": float(seconds)}})
    for key, value in (record.get("attributes") or {}).items():
        attrs.append(key_value(key, value, "stringValue"))

    start = nanos(record["ts"])
    out: dict[str, Any] = {
        "spanId": record.get("span_id") or _hex("span:" + record["request_id"], 8),
        "name": " ".join(str(record[f]) for f in ("operation", "model") if record.get(f) is not None) or "genai",
        "kind": 3,  # SPAN_KIND_CLIENT
        "startTimeUnixNano": str(start),
    }
    if record.get("trace_id") is not None:
        out = {"traceId": record["trace_id"], **out}
    if record.get("parent_span_id") is not None:
        out["parentSpanId"] = record["parent_span_id"]
    if record.get("duration_ms") is not None:
        out["endTimeUnixNano"] = str(start + int(Decimal(str(record["duration_ms"])).scaleb(6)))
    out["attributes"] = attrs
    status_code = record.get("status_code")
    if (status_code is not None and int(status_code) >= 400) or record.get("error_type") is not None:
        out["status"] = {"code": 2, "message": str(record.get("error_type") or status_code)}
    else:
        out["status"] = {}
    return out


def otlp_export_line(records: list[dict[str, Any]]) -> bytes:
    """One OTLP/JSON ``ExportTraceServiceRequest`` line (no newline) holding ``records`` as spans."""
    groups: dict[tuple[Any, Any, Any], list[dict[str, Any]]] = {}
    for record in records:
        place = (record.get("tenant_id"), record.get("server"), record.get("server_instance"))
        groups.setdefault(place, []).append(span(record))
    resource_spans = []
    for (tenant, server, instance), spans in groups.items():
        attrs = [key_value("service.name", "ai-gateway")]
        if instance is not None:
            attrs.append(key_value("service.instance.id", instance))
        if tenant is not None:
            attrs.append(key_value("tenant.id", tenant))
        if server is not None:
            attrs.append(key_value("server.address", server))
        resource_spans.append(
            {
                "resource": {"attributes": attrs},
                "scopeSpans": [{"scope": {"name": "strata.tests", "version": "1"}, "spans": spans}],
            }
        )
    return json.dumps({"resourceSpans": resource_spans}, ensure_ascii=False, separators=(",", ":")).encode()
