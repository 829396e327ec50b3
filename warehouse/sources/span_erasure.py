"""Removing some spans from an OTLP/JSON export line, leaving every other byte as it was.

One export line carries the spans of many users. Erasing one of them (``strata forget``, the
suppression of a forgotten user's old records at ingest) must not touch the others: their
spans stay the same JSON text, in the same order. So the line is not parsed and written
again; a small scanner finds the byte range of every element of
``resourceSpans[*].scopeSpans[*].spans[*]`` — and of the other spellings the reader
(:mod:`warehouse.sources.otlp_spans`, the one definition of where a body's spans are) accepts:
the proto names (``resource_spans``, ``scope_spans``) and the pre-1.0
``instrumentationLibrarySpans`` — and the chosen elements are cut out with their separating
commas.

Whose a span is, is read as the reader reads a record's ``user_id`` (:func:`.otlp.span_user`: the
user keys of the span's dialect, on the span, else inherited from its scope, then its resource). Any span counts,
GenAI call or not (an HTTP child span of the user's request is theirs too). A scope left with
no span is removed, and a resource left with no scope, so no empty shell names what was there;
a line left with no span at all is ``None`` (the caller drops the line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from warehouse.sources import otlp
from warehouse.sources.otlp_spans import RESOURCE_SPANS, SCOPE_SPANS, NotTraceExport

#: Decides per span from its user id (or None) and its start time in Unix nanoseconds (or None).
Choice = Callable[[str | None, int | None], bool]

_WS = re.compile(rb"[ \t\n\r]*")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_SCALAR = re.compile(rb"[^,\]\}\s]+")


class NotReadable(ValueError):
    """The line is not an OTLP/JSON trace export the reader reads: no span can be told apart."""


@dataclass
class _Node:
    """A JSON value's byte range; an object's members (a repeated key: the last wins) or an array's elements."""

    start: int
    end: int
    members: dict[str, _Node] = field(default_factory=dict)
    elements: list[_Node] = field(default_factory=list)
    kind: str = "scalar"


def _skip(buf: bytes, pos: int) -> int:
    found = _WS.match(buf, pos)
    assert found is not None
    return found.end()


def _value(buf: bytes, pos: int) -> _Node:
    """The value starting at ``pos`` (no leading white space); the buffer is known to be valid JSON."""
    opening = buf[pos : pos + 1]
    if opening == b"{":
        node, pos = _Node(pos, 0, kind="object"), _skip(buf, pos + 1)
        while buf[pos : pos + 1] != b"}":
            key = _STRING.match(buf, pos)
            assert key is not None
            text = key.group()
            name = json.loads(text) if b"\\" in text else text[1:-1].decode()
            pos = _skip(buf, _skip(buf, key.end()) + 1)  # past the colon
            node.members[name] = member = _value(buf, pos)
            pos = _skip(buf, member.end)
            if buf[pos : pos + 1] == b",":
                pos = _skip(buf, pos + 1)
        node.end = pos + 1
        return node
    if opening == b"[":
        node, pos = _Node(pos, 0, kind="array"), _skip(buf, pos + 1)
        while buf[pos : pos + 1] != b"]":
            node.elements.append(element := _value(buf, pos))
            pos = _skip(buf, element.end)
            if buf[pos : pos + 1] == b",":
                pos = _skip(buf, pos + 1)
        node.end = pos + 1
        return node
    scalar = (_STRING if opening == b'"' else _SCALAR).match(buf, pos)
    assert scalar is not None
    return _Node(pos, scalar.end())


def _member(node: _Node, spellings: tuple[str, ...]) -> _Node | None:
    """A field of an object under whichever of its ``spellings`` it uses (:func:`.otlp_spans.repeated`'s rule:
    two spellings of one field are no export)."""
    used = [name for name in spellings if name in node.members]
    if len(used) > 1:
        raise NotReadable(f"{' and '.join(used)}: one field, spelled two ways")
    return node.members[used[0]] if used else None


def _present(node: _Node | None, buf: bytes) -> bool:
    return node is not None and buf[node.start : node.end] != b"null"


def _list(node: _Node | None, buf: bytes) -> list[_Node]:
    if not _present(node, buf):
        return []
    assert node is not None
    if node.kind != "array":
        raise NotReadable("a span list is not a list")
    return node.elements


def _loads(buf: bytes, node: _Node | None) -> dict[str, Any]:
    if not _present(node, buf):
        return {}
    assert node is not None
    value = json.loads(buf[node.start : node.end], parse_float=str)
    if not isinstance(value, dict):
        raise NotReadable("a message is not an object")
    return value


def _array_text(buf: bytes, array: _Node, kept: list[bytes | None]) -> bytes:
    """The array's text with ``kept[i]`` in place of element ``i`` (None: left out, with its comma).

    Each element kept but the first keeps the separator that preceded it, so the array reads as
    it was written, less what was removed.
    """
    elements = array.elements
    out = [buf[array.start : elements[0].start]]
    first = True
    for i, text in enumerate(kept):
        if text is None:
            continue
        if not first:
            out.append(buf[elements[i - 1].end : elements[i].start])
        out.append(text)
        first = False
    out.append(buf[elements[-1].end : array.end])
    return b"".join(out)


def _start(span: dict[str, Any]) -> int | None:
    try:
        return otlp._nanos(otlp._get(span, "startTimeUnixNano"))
    except ValueError:
        return None


def remove_spans(line: bytes, drop: Choice) -> bytes | None:
    """``line`` without the spans ``drop`` chooses: the line itself when it chooses none, ``None`` when
    no span is left. Raises :class:`NotReadable` for a line that is not a readable trace export."""
    try:
        json.loads(line)  # valid JSON, so the scanner may trust its structure
        doc = _value(line, _skip(line, 0))
        return _without(line, doc, drop)
    except NotReadable:
        raise
    except (ValueError, RecursionError, NotTraceExport, UnicodeDecodeError) as exc:
        raise NotReadable(f"not an OTLP trace export: {exc}") from exc


def _without(buf: bytes, doc: _Node, drop: Choice) -> bytes | None:
    resources_node = _member(doc, RESOURCE_SPANS) if doc.kind == "object" else None
    if resources_node is None or resources_node.kind != "array":
        raise NotReadable("no resourceSpans list")
    resources: list[bytes | None] = []
    changed = left = False
    for resource_node in resources_node.elements:
        resource = otlp._attributes(_loads(buf, _member(resource_node, ("resource",))), "resource")
        scopes_node = _member(resource_node, SCOPE_SPANS)
        scopes: list[bytes | None] = []
        for scope_node in _list(scopes_node, buf):
            scope_message = _loads(buf, _member(scope_node, ("scope",)))
            scope = otlp._attributes(scope_message, "scope")
            inherited = otlp._inherited(resource, scope, "scope")
            scope_name = otlp.scope_name_of(scope_message)
            spans_node = _member(scope_node, ("spans",))
            spans: list[bytes | None] = []
            for span_node in _list(spans_node, buf):
                span = _loads(buf, span_node)
                gone = drop(otlp.span_user(span, inherited, scope_name), _start(span))
                spans.append(None if gone else buf[span_node.start : span_node.end])
            scopes.append(_rebuilt(buf, scope_node, spans_node, spans))
            left = left or any(s is not None for s in spans)
        resources.append(_rebuilt(buf, resource_node, scopes_node, scopes))
        changed = changed or resources[-1] != buf[resource_node.start : resource_node.end]
    if not changed:
        return buf
    if not left:
        return None
    rebuilt = _rebuilt(buf, doc, resources_node, resources)
    assert rebuilt is not None
    return buf[: doc.start] + rebuilt + buf[doc.end :]


def _rebuilt(buf: bytes, outer: _Node, array: _Node | None, kept: list[bytes | None]) -> bytes | None:
    """``outer``'s text with its ``array`` holding ``kept``: as written when nothing changed, None
    when something was removed and nothing is left."""
    unchanged = buf[outer.start : outer.end]
    if array is None or all(k == buf[e.start : e.end] for k, e in zip(kept, array.elements, strict=True)):
        return unchanged
    if all(k is None for k in kept):
        return None
    return buf[outer.start : array.start] + _array_text(buf, array, kept) + buf[array.end : outer.end]
