"""OTLP/JSON trace exports (OpenTelemetry Collector ``file`` exporter, ``otlpjsonfile``).

Each line of such a file is one ``ExportTraceServiceRequest`` in the OTLP/JSON
encoding (opentelemetry-proto ``docs/specification.md``, "JSON Protobuf Encoding"):
lowerCamelCase keys, ``traceId``/``spanId`` as case-insensitive hex, enums as
integers, 64-bit integers (``startTimeUnixNano``, ``intValue``) as decimal strings or
numbers, unknown fields ignored. Like the Collector's own decoder this reader also
takes the proto field names (``resource_spans``, ``string_value`` …), base64 ids
(the plain protobuf JSON mapping some exporters write, converted to hex) and the
pre-1.0 ``instrumentationLibrarySpans`` in place of ``scopeSpans``. Where the spans of a
line are is :mod:`warehouse.sources.otlp_spans`, which ``strata collect`` uses too.

A line yields one record per *call span*: a span that a producer dialect
(:mod:`warehouse.sources.dialects`: OpenInference, LiteLLM, OpenLLMetry, OpenLIT, then the
GenAI conventions — any span with a ``gen_ai.*`` attribute of its own) recognises as a call;
HTTP or database spans and a producer's child spans of a call are no requests: asked with ``spans``
(the DWD build), the reader gives them as rows of their own for ``dwd.span`` (``canonical.SPAN_FIELDS``).
Each field is read from the sources its dialect declares, first present wins; the table below is the GenAI
conventions' (the other dialects are written as changes to it). Attributes are
looked up on the span, then its scope, then its resource, so resource attributes
(``tenant.id``, ``server.address`` …) apply to every span under them and span
attributes win. Every field is text, exactly as the source wrote the value (typing
and range checks happen in DWD against the contract), except where noted below. An
empty ``user_id`` or ``tenant_id`` is none.

======================  =========================================================
field                   source (first present wins)
======================  =========================================================
request_id              ``gen_ai.response.id``, ``gen_ai.request.id`` (vLLM), spanId (lower-case hex)
trace_id                traceId, lower-case hex (empty → null)
span_id, parent_span_id spanId, parentSpanId, lower-case hex
retry_of                ``gen_ai.request.retry_of`` *(custom)*
attempt                 ``gen_ai.request.attempt`` *(custom)*; else ``http.request.resend_count`` + 1
ts                      startTimeUnixNano → RFC 3339 UTC, microseconds (``…T02:00:00.123456+00:00``)
duration_ms             (endTimeUnixNano − startTimeUnixNano) / 1e6, exact decimal text
ttft_ms                 ``gen_ai.response.time_to_first_chunk`` (client), ``gen_ai.server.time_to_first_token``,
                        ``gen_ai.latency.time_to_first_token`` (vLLM); seconds → ms (a value that is no number: next)
queue_ms                ``gen_ai.latency.time_in_queue`` (vLLM), seconds → ms
preprocess_ms           ``gen_ai.latency.time_in_preprocess`` *(custom)*, seconds → ms
inference_ms            ``gen_ai.latency.time_in_model_inference`` (vLLM), seconds → ms
postprocess_ms          ``gen_ai.latency.time_in_postprocess`` *(custom)*, seconds → ms
tenant_id               ``strata.tenant_id`` on the *resource* only (what ``strata collect`` stamps from the
                        receiver token: a client cannot override it; under a gateway token's
                        ``strata.gateway`` mark the span's team first, when the mark lists it); else the team
                        attribute: ``metadata.user_api_key_team_id`` (LiteLLM), ``tenant.id`` *(custom)*, empty
                        text naming none; else the source's tenant (``strata ingest --tenant``,
                        ``STRATA_DEFAULT_TENANT``); else the resource's ``service.name``; else null (DWD
                        quarantines it as ``tenant_id.required``)
user_id                 ``user.id``, ``enduser.id`` (deprecated semconv)
api_key_id              ``api_key.id`` *(custom)*
operation               ``gen_ai.operation.name`` (``text_completion`` → ``completion``, others as written)
model                   ``gen_ai.request.model``, ``gen_ai.response.model``
model_version           ``gen_ai.response.model`` when it differs from the request model, else ``model.version``
provider                ``gen_ai.provider.name``, ``gen_ai.system`` (deprecated semconv)
server                  ``server.address``
server_instance         ``service.instance.id`` (a resource attribute: one process lifetime of the server)
prompt_template_version ``prompt_template.version`` *(custom)*
pipeline_version        ``pipeline.version`` *(custom)*
input_tokens            ``gen_ai.usage.input_tokens``, ``gen_ai.usage.prompt_tokens`` (deprecated semconv)
output_tokens           ``gen_ai.usage.output_tokens``, ``gen_ai.usage.completion_tokens`` (deprecated)
cached_input_tokens     ``gen_ai.usage.cache_read.input_tokens``, ``gen_ai.usage.cache_read_input_tokens``,
                        ``gen_ai.usage.input_tokens.cached``, ``gen_ai.usage.cached_tokens`` (vLLM)
batch_size              ``gen_ai.server.batch_size`` *(custom)*
status_code             ``http.response.status_code``, ``http.status_code``; else for a span with status
                        ERROR: the ``Error code: NNN`` of its status message, else the status the error
                        class stands for (table below), else null; unset/OK → ``200``
error_type              ``error.type`` in the contract's vocabulary (table below); a name the table does not
                        know is kept (``<class 'x.Y'>`` and ``x.Y`` written ``Y``); an ERROR span without
                        one: the status's word, else ``_OTHER``
finish_reason           first element of ``gen_ai.response.finish_reasons``
cache_hit               ``gen_ai.response.cache_hit`` *(custom)*, ``true``/``false``
attributes              JSON object (string → string) of the span's own attributes whose value
                        no field above carries (an unused alias, a seconds value that is not a
                        number, a multi-element ``finish_reasons``, ``gen_ai.conversation.id``,
                        ``gen_ai.usage.reasoning.output_tokens`` stay), plus ``otel.parent_span_id``
                        and (when request_id is not the span id) ``otel.span_id``, lower-case hex,
                        which put a workflow's calls back in order; null when none remain
======================  =========================================================

Errors of a failed call (``error.type`` as the OpenAI and Anthropic SDKs' instrumentations write
it: the exception's class name; an HTTP status as text is read as that status):

==============================================  ======  ====================
error class                                     status  error_type
==============================================  ======  ====================
``BadRequestError``                             400     ``invalid_request``
``AuthenticationError``                         401     ``authentication``
``PermissionDeniedError``                       403     ``permission_denied``
``NotFoundError``                               404     ``not_found``
``ConflictError``                               409     ``conflict``
``UnprocessableEntityError``                    422     ``invalid_request``
``RateLimitError``                              429     ``rate_limited``
``InternalServerError``                         500     ``upstream_error``
``APITimeoutError``, ``TimeoutError``           —       ``timeout``
``APIConnectionError``, ``ConnectError``        —       ``connection_error``
==============================================  ======  ====================

"—": no HTTP answer came, so the status is null (unless the span states one). A status known
(from the span or its message) also names the error when the class is unknown to the table:
400/422 ``invalid_request``, 401, 403, 404, 409 as above, 408/504 ``timeout``, 429 ``rate_limited``,
other 5xx ``upstream_error``; an unknown class with no status keeps its name and a null status,
never a guessed one.

Attribute values become text as follows: ``stringValue``/``bytesValue`` as written,
``intValue`` and ``doubleValue`` as their decimal text (the JSON literal as written),
``boolValue`` as ``true``/``false``, ``arrayValue``/``kvlistValue`` as compact JSON.

Errors. A line that is not UTF-8, not JSON, or not a trace export (no
``resourceSpans`` list, a broken structure under it, or a field of the walk to the spans named
in two spellings) yields one row whose
``parse_error`` is ``invalid UTF-8`` / ``invalid JSON`` / ``not an OTLP trace export``
(the latter followed by ``: <where>`` for a broken structure) and whose fields are
null (JSON ``NaN``/``Infinity`` literals and unpaired ``\\ud800``-style surrogate
escapes count as ``invalid JSON``). A valid export without call spans (a workflow's parent span the
exporter sent alone) is no malformed line but a trace-only one: it yields one row whose ``parse_error``
is :data:`TRACE_ONLY`, which ODS and DWD count apart. A GenAI span whose start or end time is not an unsigned
integer gets ``invalid span: …`` beside its (otherwise filled) fields. ``_line`` is the index of the input line
every row came from; rows are in line order, then document order.

Unlike canonical JSONL, lines are not cut at ``MAX_LINE_BYTES``: a Collector writes a
whole batch of spans per line, so long lines are normal here.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from warehouse.sources import dialects
from warehouse.sources.canonical import LINK_FIELDS, REQUEST_FIELDS, SPAN_FIELDS
from warehouse.sources.dialects import Dialect, Source
from warehouse.sources.otlp_spans import (
    RESOURCE_SPANS,
    NotTraceExport,
    attributes,
    key_values,
    message,
    resource_spans,
    scope_spans,
    spans,
)

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_FIXED64_MAX = (1 << 64) - 1
_HEX = re.compile(r"[0-9a-fA-F]+")
_UINT = re.compile(r"[0-9]+")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")

_RESEND_COUNT = "http.request.resend_count"
_RECEIVER_TENANT = "strata.tenant_id"
#: The receiver's mark of a gateway token's resources: the teams it may name (``*``: any), comma-separated.
GATEWAY = "strata.gateway"
#: A span's team attribute, first non-empty wins: the tenant a gateway's span names.
TEAM_KEYS = dialects.team_keys()
_SERVICE_NAME = "service.name"
_STATUS_ERROR = {2, "2", "STATUS_CODE_ERROR"}
_ERROR_CODE = re.compile(r"Error code: ([1-5][0-9]{2})\b")
_CLASS_NAME = re.compile(r"^<class '([^']+)'>$")
#: Error class → (HTTP status it stands for, error_type); see the module docstring.
ERROR_CLASSES: dict[str, tuple[int | None, str]] = {
    "BadRequestError": (400, "invalid_request"),
    "AuthenticationError": (401, "authentication"),
    "PermissionDeniedError": (403, "permission_denied"),
    "NotFoundError": (404, "not_found"),
    "ConflictError": (409, "conflict"),
    "UnprocessableEntityError": (422, "invalid_request"),
    "RateLimitError": (429, "rate_limited"),
    "InternalServerError": (500, "upstream_error"),
    "APITimeoutError": (None, "timeout"),
    "TimeoutError": (None, "timeout"),
    "APIConnectionError": (None, "connection_error"),
    "ConnectError": (None, "connection_error"),
}
_STATUS_ERRORS = {
    400: "invalid_request",
    401: "authentication",
    403: "permission_denied",
    404: "not_found",
    408: "timeout",
    409: "conflict",
    422: "invalid_request",
    429: "rate_limited",
    504: "timeout",
}
_STATUS_NOT_ERROR = {0, 1, "0", "1", "STATUS_CODE_UNSET", "STATUS_CODE_OK"}

_COLUMNS: tuple[str, ...] = ("parse_error", *REQUEST_FIELDS, *LINK_FIELDS)
#: The columns of :func:`parse_otlp_lines` with ``spans``: every span's, ``_kind`` saying which it is.
_SPAN_COLUMNS: tuple[str, ...] = (
    "_kind",
    *_COLUMNS,
    *(f for f in SPAN_FIELDS if f not in _COLUMNS),
)
#: ``_kind`` of a call span (a ``dwd.request`` record) and of any other span (a ``dwd.span`` record).
CALL, SPAN = "call", "span"
_SPAN_STATUS = {0: "unset", 1: "ok", 2: "error", "STATUS_CODE_UNSET": "unset", "STATUS_CODE_OK": "ok"}
_SPAN_STATUS |= {str(k): v for k, v in list(_SPAN_STATUS.items()) if isinstance(k, int)}
_SPAN_STATUS["STATUS_CODE_ERROR"] = "error"

# AnyValue kinds (JSON keys; proto field names are accepted too, see _get).
_VALUE_KINDS = ("stringValue", "intValue", "doubleValue", "boolValue", "arrayValue", "kvlistValue", "bytesValue")


class _NotJSON(Exception):
    pass


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


_SNAKE: dict[str, str] = {}


def _get(obj: dict[str, Any], name: str) -> Any:
    """Field ``name`` (lowerCamelCase) of a message, also accepted under its proto name."""
    if name in obj:
        return obj[name]
    snake = _SNAKE.get(name)
    if snake is None:
        snake = _SNAKE[name] = _snake(name)
    return obj.get(snake)


def _list(obj: dict[str, Any], name: str, where: str) -> list[Any]:
    value = _get(obj, name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise NotTraceExport(f"{where}.{name} is not a list")
    return value


# ---------------------------------------------------------------------------------- values


def _value_kind(value: dict[str, Any]) -> tuple[str | None, Any]:
    for kind in _VALUE_KINDS:
        v = _get(value, kind)
        if v is not None:
            return kind, v
    return None, None


def _scalar(kind: str, v: Any, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, str)):  # floats were kept as their JSON literal (str)
        return str(v)
    raise NotTraceExport(f"{where}.{kind} is not a scalar")


def _text(value: Any, where: str) -> str | None:
    """An AnyValue as text: scalars as written, arrays and kvlists as JSON; null when empty."""
    kind, v = _value_kind(message(value, where))
    if kind is None:
        return None
    if kind in ("arrayValue", "kvlistValue"):
        return _json_text(value, where)
    return _scalar(kind, v, where)


def _json_text(value: Any, where: str) -> str:
    """An AnyValue as compact JSON (how array elements and kvlist values are written)."""
    kind, v = _value_kind(message(value, where))
    if kind is None:
        return "null"
    if kind == "arrayValue":
        items = _list(message(v, f"{where}.arrayValue"), "values", f"{where}.arrayValue")
        return "[" + ",".join(_json_text(item, f"{where}[{i}]") for i, item in enumerate(items)) + "]"
    if kind == "kvlistValue":
        entries = _list(message(v, f"{where}.kvlistValue"), "values", f"{where}.kvlistValue")
        return (
            "{"
            + ",".join(
                json.dumps(k, ensure_ascii=False) + ":" + _json_text(val, f"{where}.{k}")
                for k, val in _key_values(entries, f"{where}.kvlistValue.values")
            )
            + "}"
        )
    text = _scalar(kind, v, where)
    if isinstance(v, bool) and kind == "boolValue":
        return text
    if kind in ("intValue", "doubleValue") and not isinstance(v, bool) and _JSON_NUMBER.fullmatch(text):
        return text
    return json.dumps(text, ensure_ascii=False)


def _key_values(entries: list[Any], where: str) -> Iterator[tuple[str, Any]]:
    for entry in key_values(entries, where):
        yield entry["key"], entry.get("value")


def _attributes(obj: dict[str, Any], where: str) -> dict[str, Any]:
    """``{key: AnyValue}`` of a message's ``attributes`` (a repeated key: the last wins)."""
    return {entry["key"]: entry.get("value") for entry in attributes(obj, where)}


# ------------------------------------------------------------------------- conversions


def _hex_id(value: Any, size: int) -> str | None:
    """A trace/span id as lower-case hex; base64 ids converted; anything else as written."""
    if value is None or value == "":
        return None
    text = str(value)
    if len(text) == 2 * size and _HEX.fullmatch(text):
        return text.lower()
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return text
    return raw.hex() if len(raw) == size else text


def _nanos(value: Any) -> int | None:
    """A fixed64 nanosecond time; None when absent or zero; ValueError when not an unsigned integer."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        ns = value
    elif isinstance(value, str) and _UINT.fullmatch(value):
        ns = int(value)
    else:
        raise ValueError(value)
    if ns > _FIXED64_MAX:
        raise ValueError(value)
    return ns or None


def _rfc3339(ns: int) -> str:
    return (_EPOCH + dt.timedelta(microseconds=ns // 1000)).isoformat(timespec="microseconds")


def _decimal_text(d: Decimal) -> str:
    text = format(d.normalize(), "f")
    return "0" if text in ("-0", "0") else text


def _seconds_to_ms(value: str) -> str | None:
    if not _JSON_NUMBER.fullmatch(value):
        return None
    return _decimal_text(Decimal(value).scaleb(3))


# ---------------------------------------------------------------------------------- spans


def _inherited(resource: dict[str, Any], scope: dict[str, Any], where: str) -> dict[str, Any]:
    """Resource attributes overlaid with scope attributes, empty values left out."""
    merged = {}
    for level, attrs in (("resource", resource), ("scope", scope)):
        for key, value in attrs.items():
            if _value_kind(message(value, f"{where}.{level}.{key}"))[0] is not None:
                merged[key] = value
    return merged


class _Lookup:
    """Attribute lookup on the span, then its scope and resource; records which span keys were used."""

    def __init__(self, span: dict[str, Any], inherited: dict[str, Any], where: str):
        self.span, self.inherited, self.where = span, inherited, where
        self.used: set[str] = set()

    def raw(self, key: str) -> tuple[str | None, Any]:
        if key in self.span and _value_kind(message(self.span[key], f"{self.where}.{key}"))[0] is not None:
            return "span", self.span[key]
        if key in self.inherited:
            return "inherited", self.inherited[key]
        return None, None

    def text(self, key: str) -> str | None:
        level, value = self.raw(key)
        return None if level is None else _text(value, f"{self.where}.{key}")

    def use(self, key: str) -> None:
        self.used.add(key)

    def first(self, keys: tuple[str, ...]) -> str | None:
        for key in keys:
            text = self.text(key)
            if text is not None:
                self.use(key)
                return text
        return None


class _Reader:
    """One span read in its dialect: each canonical field from its sources (:mod:`.dialects`), first present wins."""

    def __init__(self, span: dict[str, Any], look: _Lookup, dialect: Dialect, start: int | None):
        self.span, self.look, self.dialect, self.start = span, look, dialect, start

    def field(self, name: str) -> str | None:
        for source in self.dialect.fields.get(name, ()):
            value = self.value(source, empty_is_none=name in _ID_FIELDS)
            if value is not None:
                return value
        return None

    def value(self, source: Source, *, empty_is_none: bool = False) -> str | None:
        """A source's value as text, or ``None``; a plain attribute read whole is marked used."""
        if source.plain:
            text = self.look.text(source.key)
            if text is None or (empty_is_none and text == ""):
                return None
            self.look.use(source.key)
            return text
        if source.event:
            return self._event_ms(source.key)
        if source.when is not None and self.look.text(source.when[0]) not in source.when[1]:
            return None
        text = self.look.text(source.key)
        if text is None or (empty_is_none and text == ""):
            return None
        if source.inside is not None:  # a value inside the attribute, which holds more: left to ``attributes``
            text = _inner(text, source)
        else:
            converted = _converted(text, source)
            if converted is not None:
                self.look.use(source.key)
            text = converted
        if text is None or (empty_is_none and text == ""):
            return None
        return text if source.inside is None else _converted(text, source)

    def _event_ms(self, name: str) -> str | None:
        """Milliseconds from the span's start to its first event named ``name``."""
        if self.start is None:
            return None
        for i, event in enumerate(_list(self.span, "events", f"{self.look.where}.events")):
            event = message(event, f"{self.look.where}.events[{i}]")
            if _get(event, "name") == name:
                try:
                    at = _nanos(_get(event, "timeUnixNano"))
                except ValueError:
                    return None
                return None if at is None or at < self.start else _decimal_text(Decimal(at - self.start).scaleb(-6))
        return None


#: Fields where an empty text is no value (an empty user id is no user, an empty team no tenant).
_ID_FIELDS = frozenset({"user_id", "tenant_id"})


def _converted(text: str, source: Source) -> str | None:
    """A source's text after its unit, host and value map; ``None`` where it cannot be converted."""
    if source.unit == "s":
        return _seconds_to_ms(text)
    if source.host:
        from urllib.parse import urlsplit

        try:
            return urlsplit(text).hostname
        except ValueError:
            return None
    return source.values.get(text, text)


def _inner(text: str, source: Source) -> str | None:
    """The scalar at ``source.path`` inside a JSON or Python-literal text, as text; ``None`` when absent."""
    try:
        value: Any = json.loads(text) if source.inside == "json" else dialects.literal(text)
    except (ValueError, RecursionError):
        return None
    for step in source.path:
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def _finish_reason(reader: _Reader) -> str | None:
    look = reader.look
    key = next((s.key for s in reader.dialect.fields.get("finish_reason", ()) if look.raw(s.key)[0]), None)
    if key is None:
        return None
    value = look.raw(key)[1]
    where = f"{look.where}.{key}"
    kind, v = _value_kind(message(value, where))
    if kind != "arrayValue":
        look.use(key)
        return _text(value, where)
    items = _list(message(v, where), "values", where)
    if len(items) <= 1:
        look.use(key)
    return _text(items[0], f"{where}[0]") if items else None


def _error_name(text: str) -> str:
    """``<class 'openai.RateLimitError'>`` and ``openai.RateLimitError`` → ``RateLimitError``."""
    found = _CLASS_NAME.match(text)
    return (found.group(1) if found else text).rsplit(".", 1)[-1]


def _status_and_error(
    span: dict[str, Any], look: _Lookup, status: str | None, error: str | None
) -> tuple[str | None, str | None]:
    """``status_code`` and ``error_type`` of a span (the error table of the module docstring)."""
    span_status = message(_get(span, "status"), f"{look.where}.status")
    code = _get(span_status, "code")
    if not isinstance(code, (int, str)):
        code = None if code is None else "?"
    failed = code in _STATUS_ERROR
    if error is not None and error.isdigit() and len(error) == 3:
        status = status or error  # error.type may be the HTTP status itself
        error = None
    known = ERROR_CLASSES.get(_error_name(error)) if error is not None else None
    if status is None and failed:
        status_message = _get(span_status, "message")
        found = _ERROR_CODE.search(status_message) if isinstance(status_message, str) else None
        if found:
            status = found.group(1)
        elif known is not None and known[0] is not None:
            status = str(known[0])
    elif status is None and (code is None or code in _STATUS_NOT_ERROR) and error is None:
        status = "200"  # any other span status code: unknown, left null
    number = int(status) if status is not None and status.isdigit() else None
    if known is not None:
        error = known[1]
    elif error is not None:
        error = _error_name(error)
    elif failed or (number is not None and number >= 400):
        error = _STATUS_ERRORS.get(number or 0) or ("upstream_error" if number and number >= 500 else "_OTHER")
    return status, error


def gateway_allows(gateway: str, team: str) -> bool:
    """Whether a gateway token's teams (``strata.gateway``: comma-separated, or ``*``) hold ``team``."""
    return gateway == "*" or team in gateway.split(",")


def _level(dialect: Dialect, resource: dict[str, Any]) -> str:
    """The level a span sees its call at: its dialect's, except that a gateway's span sent under an ordinary
    token's stamp (``strata.tenant_id`` without the ``strata.gateway`` mark) is a client's, so that it cannot
    lend its tenant to another tenant's call it names (the gateway's tenant wins a call's row)."""
    if dialect.level != dialects.LEVELS[0] and _RECEIVER_TENANT in resource and GATEWAY not in resource:
        return dialects.LEVELS[0]
    return dialect.level


def _tenant(team: str | None, resource: dict[str, Any], tenant: str | None) -> str | None:
    """A span's tenant: the receiver's (a gateway's listed team before it), else its team (the dialect's
    ``tenant_id``), the source's, the service's (see the module docstring). A team attribute is no claim under
    an ordinary token's stamp."""
    stamps = {
        k: _text(resource[k], f"resource.{k}") for k in (_RECEIVER_TENANT, GATEWAY, _SERVICE_NAME) if k in resource
    }
    receiver, gateway = stamps.get(_RECEIVER_TENANT), stamps.get(GATEWAY)
    if receiver and gateway is not None and team is not None and gateway_allows(gateway, team):
        return team
    return receiver or team or tenant or stamps.get(_SERVICE_NAME)


#: Fields read straight from their sources: every canonical field but those that need more than the first
#: present value (ids and times from the span itself, the model pair, the finish reason, status and error).
_PLAIN_FIELDS = tuple(
    f
    for f in REQUEST_FIELDS
    if f
    not in {
        "request_id",
        "trace_id",
        "span_id",
        "parent_span_id",
        "ts",
        "duration_ms",
        "model",
        "model_version",
        "finish_reason",
        "status_code",
        "error_type",
        "attributes",
    }
)


def _span_row(
    span: dict[str, Any], look: _Lookup, dialect: Dialect, resource: dict[str, Any], tenant: str | None
) -> dict[str, str | None]:
    row: dict[str, str | None] = dict.fromkeys(_COLUMNS)
    errors: list[str] = []
    try:
        start = _nanos(_get(span, "startTimeUnixNano"))
    except ValueError:
        start = None
        errors.append("startTimeUnixNano is not an unsigned integer")
    try:
        end = _nanos(_get(span, "endTimeUnixNano"))
    except ValueError:
        end = None
        errors.append("endTimeUnixNano is not an unsigned integer")
    if start is not None:
        row["ts"] = _rfc3339(start)
        if end is not None:
            row["duration_ms"] = _decimal_text(Decimal(end - start).scaleb(-6))

    reader = _Reader(span, look, dialect, start)
    for name in _PLAIN_FIELDS:
        row[name] = reader.field(name)
    row["tenant_id"] = _tenant(row["tenant_id"], resource, tenant)

    row["request_id"] = reader.field("request_id") or _hex_id(_get(span, "spanId"), 8)
    row["trace_id"] = _hex_id(_get(span, "traceId"), 16)
    row["_level"] = _level(dialect, resource)
    row["_span_id"], row["_parent_span_id"] = _hex_id(_get(span, "spanId"), 8), _hex_id(_get(span, "parentSpanId"), 8)
    row["span_id"], row["parent_span_id"] = row["_span_id"], row["_parent_span_id"]
    if row["attempt"] is None:
        resends = look.text(_RESEND_COUNT)
        if resends is not None and _UINT.fullmatch(resends):
            row["attempt"] = str(int(resends) + 1)
            look.use(_RESEND_COUNT)

    # the response model is carried by model or model_version, or the same as the request model
    requested, responded = reader.field("model"), reader.field("response_model")
    row["model"] = requested if requested is not None else responded
    if requested is not None and responded is not None and responded != requested:
        row["model_version"] = responded
    else:
        row["model_version"] = reader.field("model_version")
    row["finish_reason"] = _finish_reason(reader)

    row["status_code"], row["error_type"] = _status_and_error(
        span, look, reader.field("status_code"), reader.field("error_type")
    )

    rest = {k: _text(v, f"{look.where}.{k}") for k, v in look.span.items() if k not in look.used}
    rest = {k: v for k, v in rest.items() if v is not None}
    for key, span_id in (("otel.span_id", row["_span_id"]), ("otel.parent_span_id", row["_parent_span_id"])):
        if span_id is not None and span_id != row["request_id"]:  # the request id is the span id when
            rest[key] = span_id  # the span names no response id
    row["attributes"] = json.dumps(rest, ensure_ascii=False, separators=(",", ":")) if rest else None
    if errors:
        row["parse_error"] = "invalid span: " + "; ".join(errors)
    return row


def _document_rows(
    doc: Any, tenant: str | None, others: list[dict[str, str | None]] | None = None
) -> list[dict[str, str | None]]:
    """The call spans' rows of an export; every other span's row goes to ``others`` when given."""
    if not isinstance(doc, dict) or not any(isinstance(doc.get(name), list) for name in RESOURCE_SPANS):
        raise NotTraceExport()
    rows = []
    for where_r, rs in resource_spans(doc):
        resource = _attributes(message(rs.get("resource"), f"{where_r}.resource"), f"{where_r}.resource")
        for where_s, ss in scope_spans(rs, where_r)[1]:
            scope_message = message(ss.get("scope"), f"{where_s}.scope")
            scope = _attributes(scope_message, f"{where_s}.scope")
            scope_name = scope_name_of(scope_message)
            inherited = _inherited(resource, scope, where_s)
            for p, span in enumerate(spans(ss, where_s)):
                where_p = f"{where_s}.spans[{p}]"
                attrs = _attributes(span, where_p)
                name = _get(span, "name")
                name = name if isinstance(name, str) else ""
                dialect = dialects.dialect_of(scope_name, name, attrs)
                look = _Lookup(attrs, inherited, where_p)
                if dialect is not None and dialect.is_call(
                    name, look.text(dialect.call_kind[0]) if dialect.call_kind else None
                ):
                    rows.append(_span_row(span, look, dialect, resource, tenant))
                elif others is not None:
                    others.append(_other_span_row(span, name, look, dialect or dialects.GEN_AI, resource, tenant))
    return rows


def _other_span_row(
    span: dict[str, Any], name: str, look: _Lookup, dialect: Dialect, resource: dict[str, Any], tenant: str | None
) -> dict[str, str | None]:
    """The ``dwd.span`` record of a span that is no call: its place in the trace, its service and instance,
    its times and status, its user (its dialect's user keys, as :func:`span_user` reads them) and its own
    attributes."""
    row: dict[str, str | None] = dict.fromkeys(_SPAN_COLUMNS)
    row["_kind"] = SPAN
    errors: list[str] = []
    times = []
    for key in ("startTimeUnixNano", "endTimeUnixNano"):
        try:
            times.append(_nanos(_get(span, key)))
        except ValueError:
            times.append(None)
            errors.append(f"{key} is not an unsigned integer")
    start, end = times
    if start is not None:
        row["ts"] = _rfc3339(start)
        if end is not None:
            row["duration_ms"] = _decimal_text(Decimal(end - start).scaleb(-6))
    row["trace_id"], row["span_id"] = _hex_id(_get(span, "traceId"), 16), _hex_id(_get(span, "spanId"), 8)
    row["parent_span_id"] = _hex_id(_get(span, "parentSpanId"), 8)
    row["name"] = name or None
    row["service"] = look.text(_SERVICE_NAME)
    row["server_instance"] = _Reader(span, look, dialect, start).field("server_instance")
    row["tenant_id"] = _tenant(None, resource, tenant)
    row["user_id"] = _user_of(_Reader(span, look, dialect, start), name)
    code = _get(message(_get(span, "status"), f"{look.where}.status"), "code")
    row["status"] = _SPAN_STATUS.get(code, "unset") if isinstance(code, (int, str)) else "unset"
    rest = {k: _text(v, f"{look.where}.{k}") for k, v in look.span.items()}
    rest = {k: v for k, v in rest.items() if v is not None}
    row["attributes"] = json.dumps(rest, ensure_ascii=False, separators=(",", ":")) if rest else None
    if errors:
        row["parse_error"] = "invalid span: " + "; ".join(errors)
    return row


def scope_name_of(scope: dict[str, Any]) -> str:
    """An ``InstrumentationScope``'s name (``""`` when it has none)."""
    name = _get(scope, "name")
    return name if isinstance(name, str) else ""


def span_user(span: dict[str, Any], inherited: dict[str, Any], scope: str) -> str | None:
    """The end-user id of a span: its dialect's user keys, a child span's own (a span of no dialect is read in
    the GenAI conventions). ``inherited`` is :func:`_inherited` of its resource and scope; ``forget`` asks this."""
    attrs = _attributes(span, "span")
    name = _get(span, "name")
    name = name if isinstance(name, str) else ""
    dialect = dialects.dialect_of(scope, name, attrs) or dialects.GEN_AI
    return _user_of(_Reader(span, _Lookup(attrs, inherited, "span"), dialect, None), name)


def _user_of(reader: _Reader, name: str) -> str | None:
    """A span's end-user id: a producer's child span of a call names it its own way (``child_users``)."""
    dialect = reader.dialect
    if name in dialect.child_spans:
        return next((u for u in (reader.value(s, empty_is_none=True) for s in dialect.child_users) if u), None)
    return reader.field("user_id")


def _reject_constant(name: str) -> Any:
    raise _NotJSON(name)


def _line_rows(
    line: bytes | None, tenant: str | None, others: list[dict[str, str | None]] | None = None
) -> list[dict[str, str | None]]:
    """The rows of one line (at least one); its other spans' rows go to ``others`` when given."""
    if line is None:
        return [_error_row("invalid JSON")]
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return [_error_row("invalid UTF-8")]
    try:
        # Floats stay as their JSON literal so numbers keep the text the source wrote.
        doc = json.loads(text, parse_float=str, parse_constant=_reject_constant)
    except (ValueError, _NotJSON, RecursionError):
        return [_error_row("invalid JSON")]
    spans: list[dict[str, str | None]] = []
    try:
        rows = _document_rows(doc, tenant, spans if others is not None else None)
    except NotTraceExport as e:
        return [_error_row("not an OTLP trace export" + (f": {e}" if str(e) else ""))]
    except RecursionError:
        return [_error_row("not an OTLP trace export: nested too deeply")]
    for row in (*rows, *spans):  # JSON escapes can hold unpaired surrogates, which are not text
        try:
            "".join(v for v in row.values() if v is not None).encode("utf-8")
        except UnicodeEncodeError:
            return [_error_row("invalid JSON: unpaired surrogate escape")]
    if others is not None:
        others.extend(spans)
    return rows or [_error_row(TRACE_ONLY)]


#: The ``parse_error`` of a valid export holding no GenAI span: a trace-only line, which carries no
#: request and is not malformed (ODS keeps it as a line that parses; DWD counts it in the books apart).
TRACE_ONLY = "no GenAI spans"


def export_problem(line: bytes) -> str | None:
    """Why the reader would keep ``line`` as a malformed line rather than read its spans, else ``None``.

    The receiver asks this of each JSON body before it answers, so that a body answered 2xx is
    read span for span when it lands; a valid export without GenAI spans is no problem here.
    """
    rows = _line_rows(line, None)
    reason = rows[0]["parse_error"] if len(rows) == 1 else None
    return None if reason is None or reason == TRACE_ONLY or reason.startswith("invalid span") else reason


def _error_row(reason: str) -> dict[str, str | None]:
    row: dict[str, str | None] = dict.fromkeys(_COLUMNS)
    row["parse_error"] = reason
    return row


def parse_otlp_lines(raw: pa.Array, *, tenant: str | None = None, spans: bool = False) -> pl.DataFrame:
    """Spans of OTLP-JSON trace export lines mapped onto the canonical request fields.

    ``raw`` holds one export per element (binary, large_binary or string). The result has
    ``_line`` (index of the input line), ``parse_error``, every canonical request field and the
    call's links (``canonical.LINK_FIELDS``) as text: one row per GenAI span, or one row with a
    ``parse_error`` for a line that holds none (see the module docstring). ``tenant`` is the
    source's tenant, for spans that name none. With ``spans`` (the DWD build) every other span of a
    line is a row too, after its calls: ``_kind`` is :data:`CALL` for the rows above (the trace-only row of
    a line without calls included) and :data:`SPAN` for those, which fill the ``canonical.SPAN_FIELDS``.
    """
    import polars as pl
    import pyarrow as pa

    if isinstance(raw, pa.ChunkedArray):
        raw = raw.combine_chunks()
    if pa.types.is_string(raw.type) or pa.types.is_large_string(raw.type):
        raw = raw.cast(pa.large_binary())
    names = _SPAN_COLUMNS if spans else _COLUMNS
    lines: list[int] = []
    columns: dict[str, list[str | None]] = {c: [] for c in names}
    others: list[dict[str, str | None]] | None = [] if spans else None
    for i, line in enumerate(raw.to_pylist()):
        rows = _line_rows(line, tenant, others)
        if others:
            rows = [*({**row, "_kind": CALL} for row in rows), *others]
            others.clear()
        elif spans:
            rows = [{**row, "_kind": CALL} for row in rows]
        for row in rows:
            lines.append(i)
            for c in names:
                columns[c].append(row.get(c))
    return pl.DataFrame({"_line": lines, **columns}, schema={"_line": pl.Int64, **{c: pl.String for c in names}})
