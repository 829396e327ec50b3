"""The byte-level removal of spans from an OTLP/JSON export line: the rest stays the same text."""

from __future__ import annotations

import json

import pytest

from warehouse.sources.span_erasure import NotReadable, remove_spans


def _span(name: str, user: str | None = None, start: int = 1000) -> str:
    attrs = f'[{{"key":"user.id","value":{{"stringValue":"{user}"}}}}]' if user else "[]"
    return f'{{"name":"{name}", "startTimeUnixNano":"{start}","attributes":{attrs}}}'


def _users(line: bytes) -> list[str]:
    doc = json.loads(line)
    return [
        s["name"]
        for rs in doc.get("resourceSpans", doc.get("resource_spans", []))
        for ss in next(rs[k] for k in ("scopeSpans", "scope_spans", "instrumentationLibrarySpans") if k in rs)
        for s in ss["spans"]
    ]


def _of(user: str):
    return lambda who, _start: who == user


def test_the_other_spans_keep_their_exact_text_and_order() -> None:
    a1, b1, a2, b2 = _span("a1", "A"), _span("b1", "B"), _span("a2", "A"), _span("b2", "B")
    line = f'{{"resourceSpans":[{{"resource":{{}},"scopeSpans":[{{"spans":[{a1}, {b1},{a2} ,  {b2}]}}]}}]}}'.encode()

    out = remove_spans(line, _of("A"))

    assert out == f'{{"resourceSpans":[{{"resource":{{}},"scopeSpans":[{{"spans":[{b1} ,  {b2}]}}]}}]}}'.encode()
    assert remove_spans(line, _of("nobody")) is line
    assert remove_spans(line, lambda who, _s: who in ("A", "B")) is None  # nothing left: drop the line


def test_a_user_inherited_from_the_resource_or_scope_takes_its_spans_and_empty_shells_go() -> None:
    mine = '{"attributes":[{"key":"enduser.id","value":{"stringValue":"A"}}]}'
    scope_of_a = f'{{"scope":{mine},"spans":[{_span("a1")}, {_span("b-own", "B")}]}}'
    resource_of_a = f'{{"resource":{mine},"scopeSpans":[{{"spans":[{_span("a2")}]}}]}}'
    other = f'{{"resource":{{}},"scopeSpans":[{{"spans":[{_span("b1", "B")}]}},{scope_of_a}]}}'
    line = f'{{"resourceSpans":[{resource_of_a},{other}]}}'.encode()

    out = remove_spans(line, _of("A"))

    assert out is not None and _users(out) == ["b1", "b-own"]  # a span's own user wins over its scope's
    assert b'"a2"' not in out and out.count(b'"resource"') == 1  # the resource of A alone is gone
    kept_scope = f'{{"scope":{mine},"spans":[{_span("b-own", "B")}]}}'
    kept = f'{{"resource":{{}},"scopeSpans":[{{"spans":[{_span("b1", "B")}]}},{kept_scope}]}}'
    assert out == f'{{"resourceSpans":[{kept}]}}'.encode()


@pytest.mark.parametrize(
    ("resources", "scopes"),
    [
        ("resource_spans", "scope_spans"),
        ("resourceSpans", "instrumentationLibrarySpans"),
        ("resourceSpans", "instrumentation_library_spans"),
        ("resourceSpans", "scopeSpans"),
    ],
)
def test_every_spelling_the_reader_takes(resources: str, scopes: str) -> None:
    line = f'{{"{resources}":[{{"{scopes}":[{{"spans":[{_span("a", "A")},{_span("b", "B")}]}}]}}]}}'.encode()

    out = remove_spans(line, _of("A"))

    assert out == f'{{"{resources}":[{{"{scopes}":[{{"spans":[{_span("b", "B")}]}}]}}]}}'.encode()


def test_the_start_time_is_offered_and_escaped_keys_and_odd_text_survive() -> None:
    odd = '{"name":"b, ]} \\" \\u00e9","startTimeUnixNano":"5","attributes":[]}'
    spans = f"{_span('a', 'A', 4)},{odd},{_span('late', 'A', 9)}"
    line = f'{{"resource\\u0053pans":[{{"scopeSpans":[{{"spans":[{spans}]}}]}}]}}\r'.encode()

    out = remove_spans(line, lambda who, start: who == "A" and start is not None and start < 7)

    assert (
        out == f'{{"resource\\u0053pans":[{{"scopeSpans":[{{"spans":[{odd},{_span("late", "A", 9)}]}}]}}]}}\r'.encode()
    )


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b'{"resourceMetrics":[]}',
        b'{"resourceSpans":[{"scopeSpans":{}}]}',
        b'{"resourceSpans":[{"scopeSpans":[],"scope_spans":[]}]}',  # the reader takes neither: no export
    ],
)
def test_a_line_that_is_not_a_trace_export_is_refused(line: bytes) -> None:
    with pytest.raises(NotReadable):
        remove_spans(line, _of("A"))
