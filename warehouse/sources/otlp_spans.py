"""The spans of an OTLP/JSON ``ExportTraceServiceRequest``: resource spans → scope spans → spans.

One definition of where a body's spans are, for the receiver (which counts and re-stamps them
before it answers) and the reader (which makes rows of them when the line lands), so that a
body ``strata collect`` answers 2xx for is read span for span. Like the Collector's decoder it
takes each field under its JSON name (lowerCamelCase) or its proto name (snake_case), mixed
freely, and the pre-1.0 ``instrumentationLibrarySpans`` in place of ``scopeSpans``. A message
that names one of these fields in two spellings is no export: which of the two counts would be
a guess. A field that is absent or ``null`` is empty, as protobuf's JSON mapping reads it.
"""

from __future__ import annotations

from typing import Any

#: The spellings of ``ExportTraceServiceRequest.resource_spans``.
RESOURCE_SPANS = ("resourceSpans", "resource_spans")
#: The spellings of ``ResourceSpans.scope_spans``, the pre-1.0 name included.
SCOPE_SPANS = ("scopeSpans", "scope_spans", "instrumentationLibrarySpans", "instrumentation_library_spans")


class NotTraceExport(ValueError):
    """The document is JSON but not (a well-formed) ``ExportTraceServiceRequest``; the message says where."""


def message(value: Any, where: str) -> dict[str, Any]:
    """A message field's value (``{}`` when absent); raises :class:`NotTraceExport` when it is no object."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NotTraceExport(f"{where} is not an object")
    return value


def repeated(obj: dict[str, Any], spellings: tuple[str, ...], where: str) -> tuple[str, list[Any]]:
    """(the spelling ``obj`` uses, the list) of a repeated field; the first spelling and ``[]`` when absent."""
    used = None
    for name in spellings:
        if name in obj:
            if used is not None:
                raise NotTraceExport(f"{where} names both {used} and {name}: one field, spelled two ways")
            used = name
    if used is None:
        return spellings[0], []
    value = obj[used]
    if value is None:
        return used, []
    if not isinstance(value, list):
        raise NotTraceExport(f"{where}.{used} is not a list")
    return used, value


def resource_spans(request: Any) -> list[tuple[str, dict[str, Any]]]:
    """(where, message) of each ``ResourceSpans`` of a request; raises :class:`NotTraceExport` when it is no
    JSON object or its structure is broken."""
    if not isinstance(request, dict):
        raise NotTraceExport("the document is not a JSON object")
    used, found = repeated(request, RESOURCE_SPANS, "the request")
    return [(f"{used}[{r}]", message(rs, f"{used}[{r}]")) for r, rs in enumerate(found)]


def scope_spans(resource: dict[str, Any], where: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """(the spelling used, (where, message) of each ``ScopeSpans``) of one ``ResourceSpans``."""
    used, found = repeated(resource, SCOPE_SPANS, where)
    return used, [(f"{where}.{used}[{s}]", message(ss, f"{where}.{used}[{s}]")) for s, ss in enumerate(found)]


def spans(scope: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The spans of one ``ScopeSpans``; raises :class:`NotTraceExport` unless each is an object."""
    found = repeated(scope, ("spans",), where)[1]
    if not all(isinstance(span, dict) for span in found):
        raise NotTraceExport(f"{where}.spans holds an element that is not an object")
    return found


def key_values(entries: list[Any], where: str) -> list[dict[str, Any]]:
    """``entries``, once each is a ``KeyValue`` (an object with a string ``key``)."""
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise NotTraceExport(f"{where}[{i}] is not a KeyValue")
    return entries


def attributes(owner: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The ``attributes`` (``KeyValue``\\s) of a resource, scope or span."""
    return key_values(repeated(owner, ("attributes",), where)[1], f"{where}.attributes")


def count(request: Any) -> int:
    """How many spans a request holds: what the receiver answers for, and the reader reads."""
    return sum(
        len(spans(scope, where_s))
        for where, resource in resource_spans(request)
        for where_s, scope in scope_spans(resource, where)[1]
    )
