"""Protobuf ``ExportTraceServiceRequest`` wire bytes → its OTLP/JSON line, written straight from the bytes.

What :func:`warehouse.sources.collector.encoding.decode` makes of a protobuf body (the message
parsed, each set field turned into a dict entry, the dicts encoded), byte for byte, at several
times its speed: no message objects and no dicts, one walk over the wire format that appends
the JSON text of each field, keyed by tag in tables built once from the installed protos'
descriptors. It covers the wire form encoders write — each message's fields in increasing field
number, a repeated field's elements together, no unknown field, valid UTF-8 — and raises
:class:`NotCanonical` for anything else (a field out of order or repeated, merged or last-wins
semantics, an unknown field, a field kind the trace protos do not use, a truncated or malformed
body), on which the caller converts the parsed message instead.

The line it writes: resources and scopes without spans are left out, a resource's attributes
end with the receiver's (``strata.tenant_id`` when a token names the tenant, ``strata.gateway``
for a gateway's token, ``strata.converted_from``). Bodies that carry one of them already, or a
tenant claim while a token names the tenant, are for the caller to handle (they need the message).
"""

from __future__ import annotations

import binascii
import re
import struct
from typing import Any

import msgspec

#: Field kinds (one branch of :func:`_fields` each); ``_ONEOF`` kinds are written even when zero.
(
    _KEY_VALUES,
    _MSG,
    _MSGS,
    _STR,
    _STR_ONEOF,
    _STRS,
    _HEX,
    _B64,
    _B64_ONEOF,
    _UINT32,
    _INT32,
    _BOOL,
    _BOOL_ONEOF,
    _INT64,
    _INT64_ONEOF,
    _UINT64,
    _FIXED64,
    _SFIXED64,
    _DOUBLE_ONEOF,
    _FIXED32,
    _UNSUPPORTED,
) = range(21)
#: Every field of a message that is all one ``oneof`` orders as this number: a second one is out of order.
_ONEOF_NUMBER = 1 << 30
#: Bytes fields OTLP/JSON writes as hex (every other bytes field is base64, as in protobuf's JSON).
HEX_FIELDS = frozenset({"trace_id", "span_id", "parent_span_id"})
#: Bytes JSON escapes (msgspec writes the rest of a string as it is).
_ESCAPE = re.compile(rb'[\x00-\x1f"\\]')
_DOUBLE = struct.Struct("<d")
_LEN, _VARINT, _I64, _I32 = 2, 0, 1, 5
_U32, _U64 = (1 << 32) - 1, (1 << 64) - 1
#: An attribute's JSON by its wire bytes: most attributes of a stream of spans repeat (operation, model,
#: provider, service, finish reasons), and one dict lookup replaces their walk; and the JSON that starts an
#: attribute, by its key. Each cleared when it holds ``_CACHED``.
_KEY_VALUE_JSON: dict[bytes, bytes] = {}
_KEY_HEADS: dict[bytes, bytes] = {}
_CACHED = 1 << 14

#: A field as :func:`_fields` reads it: its number, kind, ``,"jsonName":`` (``[`` after it when repeated,
#: ``"`` when a string) and its message's table.
_Field = tuple[int, int, bytes, "dict[int, Any]"]


class NotCanonical(ValueError):
    """The body is not in the wire form this writer covers; convert the parsed message instead."""


def otlp_json(body: bytes, stamps: bytes) -> bytes | None:
    """The OTLP/JSON line of an ``ExportTraceServiceRequest``'s wire bytes (``None``: no span in it).

    ``stamps`` are the JSON ``KeyValue``\\s every resource's attributes end with, comma-separated.
    """
    if not _TABLES:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        _table(ExportTraceServiceRequest.DESCRIPTOR)
    out: list[bytes] = [b'{"resourceSpans":[']
    kept = 0
    pos, end = 0, len(body)
    while pos < end:
        pos, stop = _length_delimited(body, pos, end, 0x0A)
        mark = len(out)
        if kept:
            out.append(b",")
        if _resource_spans(body, pos, stop, out, stamps):
            kept += 1
        else:
            del out[mark:]
        pos = stop
    if not kept:
        return None
    out.append(b"]}")
    return b"".join(out)


def _length_delimited(data: bytes, pos: int, end: int, tag: int) -> tuple[int, int]:
    """(start, end) of the value of the length-delimited field with this one-byte tag at ``pos``."""
    if data[pos] != tag:
        raise NotCanonical(f"field tag {data[pos]} where {tag} was expected")
    n = data[pos + 1]
    pos += 2
    if n > 0x7F:
        n, pos = _varint(data, pos, n)
    stop = pos + n
    if stop > end:
        raise NotCanonical("a field runs past its message")
    return pos, stop


def _resource_spans(data: bytes, pos: int, end: int, out: list[bytes], stamps: bytes) -> bool:
    """Append a ``ResourceSpans``; ``False`` when it holds no span (the caller drops what was appended)."""
    out.append(b"{")
    mark = len(out)
    resource = scopes = False
    kept = 0
    while pos < end:
        tag = data[pos]
        if tag == 0x0A and not resource and not scopes:
            pos, stop = _length_delimited(data, pos, end, tag)
            _resource(data, pos, stop, out, stamps)
            resource = True
        elif tag == 0x12:
            pos, stop = _length_delimited(data, pos, end, tag)
            if not scopes:
                out.append(b',"scopeSpans":[')
                scopes = True
            at = len(out)
            if kept:
                out.append(b",")
            if _scope_spans(data, pos, stop, out):
                kept += 1
            else:
                del out[at:]
        else:  # schema_url, the last field (anything else is out of order or unknown there)
            if scopes:
                out.append(b"]")
                scopes = False
            _fields(data, pos, end, _TABLES["opentelemetry.proto.trace.v1.ResourceSpans"], out, 2)
            break
        pos = stop
    if scopes:
        out.append(b"]")
    if not kept:
        return False
    if not resource:  # the receiver's attributes make one, after the fields present
        out.append(b',"resource":{"attributes":[' + stamps + b"]}")
    out[mark] = out[mark][1:]
    out.append(b"}")
    return True


def _resource(data: bytes, pos: int, end: int, out: list[bytes], stamps: bytes) -> None:
    """Append a ``Resource``, its attributes ending with the receiver's (an ``attributes`` entry of their
    own after the fields present when it has none)."""
    out.append(b',"resource":{')
    mark = len(out)
    key_value = _TABLES["opentelemetry.proto.common.v1.KeyValue"]
    attributes = False
    while pos < end and data[pos] == 0x0A:
        pos, stop = _length_delimited(data, pos, end, 0x0A)
        out.append(b",{" if attributes else b',"attributes":[{')
        attributes = True
        at = len(out)
        _fields(data, pos, stop, key_value, out, 0)
        if len(out) > at:
            out[at] = out[at][1:]
        out.append(b"}")
        pos = stop
    if attributes:
        out.append(b"," + stamps + b"]")
    _fields(data, pos, end, _TABLES["opentelemetry.proto.resource.v1.Resource"], out, 1)
    if not attributes:
        out.append(b',"attributes":[' + stamps + b"]")
    out[mark] = out[mark][1:]
    out.append(b"}")


def _scope_spans(data: bytes, pos: int, end: int, out: list[bytes]) -> bool:
    """Append a ``ScopeSpans`` (``False``, appending nothing: it holds no span)."""
    spans = pos
    if spans < end and data[spans] == 0x0A:  # its scope comes first
        spans = _length_delimited(data, spans, end, 0x0A)[1]
    if spans >= end or data[spans] != 0x12:
        return False
    out.append(b"{")
    mark = len(out)
    _fields(data, pos, end, _TABLES["opentelemetry.proto.trace.v1.ScopeSpans"], out, 0)
    out[mark] = out[mark][1:]
    out.append(b"}")
    return True


def _varint(data: bytes, pos: int, first: int) -> tuple[int, int]:
    """A varint whose first byte (``first``, > 0x7F) is read already: (value, position after it)."""
    value, shift = first & 0x7F, 7
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value > _U64:
                raise NotCanonical("a varint over 64 bits")
            return value, pos
        shift += 7
        if shift > 63:
            raise NotCanonical("a varint over 10 bytes")


# Over 80 lines on purpose: the hot loop, one inline branch per field kind (helpers measured 2-3% slower per span).
def _fields(data: bytes, pos: int, end: int, fields: dict[int, _Field], out: list[bytes], last: int) -> None:
    """Append ``,"jsonName":value`` for each field of a message's bytes ``data[pos:end]`` (fields numbered
    above ``last``). The hot loop: every span field and attribute passes here."""
    array = 0  # the number of the repeated field whose JSON array is open
    while pos < end:
        tag = data[pos]
        pos += 1
        if tag > 0x7F:
            tag, pos = _varint(data, pos, tag)
        number, kind, prefix, table = fields[tag]  # KeyError: an unknown field or wire type
        if number > last:
            if array:
                out.append(b"]")
                array = 0
            last = number
            first = True
        elif number == array:
            first = False
        else:
            raise NotCanonical(f"field {number} after field {last}")
        if kind <= _B64_ONEOF:  # length-delimited
            n = data[pos]
            pos += 1
            if n > 0x7F:
                n, pos = _varint(data, pos, n)
            stop = pos + n
            if stop > end:
                raise NotCanonical("a field runs past its message")
            if kind == _KEY_VALUES:  # the attributes, all at once: the most frequent field by far
                texts = []
                while True:
                    chunk = data[pos:stop]
                    text = _KEY_VALUE_JSON.get(chunk)
                    if text is None:
                        text = _key_value(chunk, table)
                        if len(_KEY_VALUE_JSON) >= _CACHED:
                            _KEY_VALUE_JSON.clear()
                        _KEY_VALUE_JSON[chunk] = text
                    texts.append(text)
                    pos = stop
                    if pos >= end or data[pos] != tag:
                        break
                    # _length_delimited, inlined: in this loop a call costs as much as the rest of it
                    n = data[pos + 1]
                    pos += 2
                    if n > 0x7F:
                        n, pos = _varint(data, pos, n)
                    stop = pos + n
                    if stop > end:
                        raise NotCanonical("a field runs past its message")
                out.append(prefix)
                out.append(b",".join(texts))
                out.append(b"]")
                continue
            elif kind in (_MSGS, _MSG):
                if first:
                    out.append(prefix)
                    if kind == _MSGS:
                        array = number
                else:
                    out.append(b",{")
                at = len(out)
                _fields(data, pos, stop, table, out, 0)
                if len(out) > at:
                    out[at] = out[at][1:]
                out.append(b"}")
            elif kind <= _STRS:
                if not n and kind == _STR:
                    pos = stop
                    continue
                if kind != _STRS:
                    out.append(prefix)
                elif first:
                    out.append(prefix)
                    array = number
                else:
                    out.append(b',"')
                text = data[pos:stop]
                if _ESCAPE.search(data, pos, stop) is None and (text.isascii() or text.decode()):
                    out.append(text)
                    out.append(b'"')
                else:
                    out.append(msgspec.json.encode(text.decode())[1:])
            else:
                if not n and kind != _B64_ONEOF:
                    pos = stop
                    continue
                out.append(prefix)
                if kind == _HEX:
                    out.append(binascii.hexlify(data[pos:stop]))
                else:
                    out.append(binascii.b2a_base64(data[pos:stop], newline=False))
                out.append(b'"')
            pos = stop
        elif kind <= _UINT64:  # varint
            value = data[pos]
            pos += 1
            if value > 0x7F:
                value, pos = _varint(data, pos, value)
            if kind == _UINT32:
                value &= _U32
            elif kind == _INT32:
                value &= _U32
                if value > 0x7FFFFFFF:
                    value -= 1 << 32
            elif kind != _UINT64 and value > 0x7FFFFFFFFFFFFFFF:  # int64 and bool as int64
                value -= 1 << 64
            if not value and kind != _INT64_ONEOF and kind != _BOOL_ONEOF:
                continue
            out.append(prefix)
            if kind in (_BOOL, _BOOL_ONEOF):
                out.append(b"true" if value else b"false")
            elif kind >= _INT64:
                out.append(b'"%d"' % value)
            else:
                out.append(b"%d" % value)
        elif kind <= _DOUBLE_ONEOF:  # 64-bit
            stop = pos + 8
            if stop > end:
                raise NotCanonical("a field runs past its message")
            if kind == _DOUBLE_ONEOF:
                out.append(prefix)
                out.append(msgspec.json.encode(finite(_DOUBLE.unpack_from(data, pos)[0])))
            else:
                value = int.from_bytes(data[pos:stop], "little", signed=kind == _SFIXED64)
                if value:
                    out.append(prefix)
                    out.append(b'"%d"' % value)
            pos = stop
        elif kind == _FIXED32:
            stop = pos + 4
            if stop > end:
                raise NotCanonical("a field runs past its message")
            value = int.from_bytes(data[pos:stop], "little")
            if value:
                out.append(prefix)
                out.append(b"%d" % value)
            pos = stop
        else:
            raise NotCanonical(f"field {number}: a kind this writer does not cover")
    if array:
        out.append(b"]")


def _key_value(data: bytes, table: dict[int, _Field]) -> bytes:
    """A ``KeyValue``'s JSON object from its wire bytes: a key with a string or an integer value written
    straight (the key's part looked up), any other through :func:`_fields`."""
    size = len(data)
    n = data[1] if size > 1 else 0
    at = n + 2  # the value's tag
    if data[0] == 0x0A and 0 < n < 0x80 and size > at + 3 and data[at] == 0x12 and data[at + 1] == size - at - 2:
        key = data[2:at]
        head = _KEY_HEADS.get(key)
        if head is None:
            if len(_KEY_HEADS) >= _CACHED:
                _KEY_HEADS.clear()
            head = _KEY_HEADS[key] = b'{"key":' + msgspec.json.encode(key.decode()) + b',"value":{'
        kind = data[at + 2]
        if kind == 0x0A and data[at + 3] == size - at - 4:  # a string value, to the end
            text = data[at + 4 :]
            if _ESCAPE.search(text) is None and (text.isascii() or text.decode()):
                return head + b'"stringValue":"' + text + b'"}}'
        elif kind == 0x18:  # an integer value, to the end
            value, pos = data[at + 3], at + 4
            if value > 0x7F:
                value, pos = _varint(data, pos, value)
            if pos == size:
                return head + b'"intValue":"%d"}}' % (value - (1 << 64) if value >> 63 else value)
    fields: list[bytes] = []
    _fields(data, 0, size, table, fields, 0)
    return b"{" + b"".join(fields)[1:] + b"}"


def finite(value: float) -> float | str:
    """A double as JSON can hold it: NaN and the infinities as protobuf's JSON strings."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return value


#: Each message's table, by full name, once built (message types refer to each other, so filled in place).
_TABLES: dict[str, dict[int, _Field]] = {}


def _table(descriptor: Any) -> dict[int, _Field]:
    """The fields of a message type by tag (``number << 3 | wire type``)."""
    table = _TABLES.get(descriptor.full_name)
    if table is not None:
        return table
    table = _TABLES[descriptor.full_name] = {}
    one_oneof = len(descriptor.oneofs) == 1 and len(descriptor.oneofs[0].fields) == len(descriptor.fields)
    for field in descriptor.fields:
        kind, wire = _kind(field, one_oneof)
        name = field.json_name.encode()
        prefix = b',"%s":' % name
        if kind == _KEY_VALUES:
            prefix += b"["
        elif kind in (_MSG, _MSGS):
            prefix += b"[{" if kind == _MSGS else b"{"
        elif kind in (_STR, _STR_ONEOF, _HEX, _B64, _B64_ONEOF):
            prefix += b'"'  # the value follows its opening quote
        elif kind == _STRS:
            prefix += b'["'
        number = _ONEOF_NUMBER if one_oneof else field.number
        sub = _table(field.message_type) if field.message_type is not None else {}
        table[field.number << 3 | wire] = (number, kind, prefix, sub)
    return table


def _kind(field: Any, one_oneof: bool) -> tuple[int, int]:
    """A field's kind and wire type; a kind the trace protos do not use is ``_UNSUPPORTED``."""
    repeated, oneof = field.is_repeated, field.containing_oneof is not None
    if (oneof and not one_oneof) or (field.has_presence and not oneof and field.message_type is None):
        return _UNSUPPORTED, _LEN  # optional scalars, oneofs beside other fields
    kinds: dict[int, tuple[int, int, int, int]] = {  # type → (kind, repeated, oneof, wire type)
        11: (_MSG, _MSGS, _MSG, _LEN),
        9: (_STR, _STRS, _STR_ONEOF, _LEN),
        12: (_HEX if field.name in HEX_FIELDS else _B64, _UNSUPPORTED, _B64_ONEOF, _LEN),
        13: (_UINT32, _UNSUPPORTED, _UNSUPPORTED, _VARINT),
        5: (_INT32, _UNSUPPORTED, _UNSUPPORTED, _VARINT),
        14: (_INT32, _UNSUPPORTED, _UNSUPPORTED, _VARINT),
        8: (_BOOL, _UNSUPPORTED, _BOOL_ONEOF, _VARINT),
        3: (_INT64, _UNSUPPORTED, _INT64_ONEOF, _VARINT),
        4: (_UINT64, _UNSUPPORTED, _UNSUPPORTED, _VARINT),
        6: (_FIXED64, _UNSUPPORTED, _UNSUPPORTED, _I64),
        16: (_SFIXED64, _UNSUPPORTED, _UNSUPPORTED, _I64),
        1: (_UNSUPPORTED, _UNSUPPORTED, _DOUBLE_ONEOF, _I64),
        7: (_FIXED32, _UNSUPPORTED, _UNSUPPORTED, _I32),
    }
    plain, many, in_oneof, wire = kinds.get(field.type, (_UNSUPPORTED,) * 3 + (_LEN,))
    if many == _MSGS and field.message_type.full_name == "opentelemetry.proto.common.v1.KeyValue":
        many = _KEY_VALUES
    return (many if repeated else in_oneof if oneof else plain), wire
