"""The report's two escapes, on strings an attacker who writes a service's logs would send (the browser test in
``tests/e2e/test_report.py`` checks the page they make; this checks each escape whatever plotly does itself)."""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser

import polars as pl

from strata.report.charts import LABEL_CHARS, OTHERS, TOP, axis_label, keep_top, plotly_text
from strata.report.page import script_json

HOSTILE = (
    "</script><script>window.__pwned=1</script>",
    "<!--<script>",
    "</SCRIPT >",
    "]]>&amp;&lt;",
    "a\u2028b\u2029c",
    '<a href="javascript:window.__pwned=1">x</a>',
)


class _Scripts(HTMLParser):
    """The elements an HTML parser sees, and the text of each script."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        if self.tags and self.tags[-1] == "script":
            self.scripts.append(data)


def test_json_in_a_script_element_stays_one_script_with_the_same_value() -> None:
    value = {"data": [{"name": text, "x": list(HOSTILE)} for text in HOSTILE]}
    for raw in (json.dumps(value), json.dumps(value, ensure_ascii=False)):  # with and without \\u escapes
        text = script_json(raw)
        parser = _Scripts()
        parser.feed(f"<script>var f={text};</script><p>after</p>")
        assert parser.tags == ["script", "p"] and parser.scripts == [f"var f={text};"]
        assert json.loads(text) == value
        assert not any(c in text for c in "<>&\u2028\u2029")


def test_plotly_text_leaves_no_markup_and_reads_back_as_sent() -> None:
    for text in HOSTILE:
        shown = plotly_text(text)
        assert "<" not in shown and ">" not in shown and html.unescape(shown) == text


def test_a_tenant_named_others_stays_itself_and_only_the_rest_are_summed() -> None:
    names = ["others", *(f"t{i}" for i in range(TOP + 1))]  # by cost, the largest first
    frame = pl.DataFrame({"tenant_id": [plotly_text(n) for n in names], "cost": range(len(names), 0, -1)})
    drawn = keep_top(frame, "tenant_id", "cost").get_column("tenant_id").to_list()
    assert drawn[:TOP] == ["others", *(f"t{i}" for i in range(TOP - 1))] and drawn[TOP:] == [OTHERS, OTHERS]
    assert not any(plotly_text(name) == OTHERS for name in (OTHERS, *HOSTILE))  # no name from the lake is it


def test_an_axis_label_keeps_a_long_names_start_and_end_and_never_cuts_an_escape() -> None:
    assert axis_label("gpt-4o-mini 2024-07-18") == "gpt-4o-mini 2024-07-18"
    long = "projects/p/locations/us-central1/endpoints/1234567890 v2024-07-18"
    assert axis_label(long) == long[:14] + "…" + long[-13:] and len(axis_label(long)) == LABEL_CHARS
    for name in HOSTILE:  # escaped in, escaped out: the text shortened, then escaped whole (no entity cut)
        shown = axis_label(plotly_text(name * 10))
        text = html.unescape(shown)
        assert len(text) == LABEL_CHARS and text.startswith(name[:5]) and plotly_text(text) == shown
