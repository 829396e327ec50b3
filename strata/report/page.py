"""The report as one self-contained HTML page: plotly.js embedded once, every chart an SVG plot, no request
leaves the page (it opens from ``file://`` with no network).

Plotly (the ``plotly`` wheel ships ``plotly.min.js``, so nothing is fetched from a CDN or npm) draws every
trace used here as SVG; the page carries each chart's numbers as the figure's JSON, so a browser test reads
back what was drawn.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import time

from strata.report.sections import SECTIONS, Section
from strata.report.view import LakeView
from warehouse.settings import Settings

#: The page's style: readable at a laptop's width, one column of sections, tables that scroll when wide.
CSS = """
:root { color-scheme: light; --ink: #1d2433; --muted: #5b6475; --line: #e3e6ec; --card: #fff; --bg: #f5f6f8; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header { padding: 20px 32px 12px; background: var(--card); border-bottom: 1px solid var(--line); }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 0; color: var(--muted); }
nav { margin-top: 10px; display: flex; flex-wrap: wrap; gap: 6px 14px; }
nav a { color: #1f5fbf; text-decoration: none; }
main { max-width: 1280px; margin: 0 auto; padding: 16px 24px 40px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 14px 18px;
          margin: 0 0 16px; }
section h2 { margin: 0 0 2px; font-size: 17px; }
section h3 { margin: 14px 0 6px; font-size: 14px; }
section > p.note { margin: 0 0 8px; color: var(--muted); }
.tables p.note { margin: 0 0 8px; color: var(--muted); font-size: 12px; max-width: 1100px; }
.chart { min-height: 120px; }
.tables { overflow-x: auto; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--line); text-align: left; white-space: nowrap; }
th { color: var(--muted); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
footer { color: var(--muted); text-align: center; padding: 0 0 24px; font-size: 12px; }
"""

#: What :func:`script_json` escapes: "<" and ">" (no ``</script>``, ``<!--`` or ``<script`` can end or bend the
#: script element), "&" (nor an entity or ``]]>``), and U+2028/U+2029 (line ends to JavaScript before ES2019).
SCRIPT_ESCAPES = str.maketrans({c: f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"})

#: What every chart is drawn with: no tool bar over the titles (hover still shows the numbers), resized with the window.
CONFIG = {"displayModeBar": False, "responsive": True}


def render(settings: Settings, start: dt.date, end: dt.date) -> bytes:
    """The page of ``start`` … ``end`` (inclusive), as UTF-8 bytes."""
    from plotly.offline import get_plotlyjs

    began = time.monotonic()
    lake = LakeView.open(settings, start, end)
    sections = [section(lake) for section in SECTIONS]
    body = "".join(_section(s) for s in sections)
    nav = "".join(f'<a href="#{s.id}">{html.escape(s.title)}</a>' for s in sections)
    title = f"Strata report, {start} to {end}"
    made = lake.made.strftime("%Y-%m-%d %H:%M UTC")
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style>"
        # plotly.js, embedded: the page needs nothing but itself
        f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
        f"<header><h1>{html.escape(title)}</h1><p>lake {html.escape(settings.lake_uri)} · made {made} in "
        f"{time.monotonic() - began:.1f} s · users by pseudonym only</p><nav>{nav}</nav></header>"
        f"<main>{body}</main><footer>strata report · charts drawn with plotly.js (embedded)</footer></body></html>"
    )
    return page.encode()


def _section(section: Section) -> str:
    charts = "".join(_chart(chart_id, figure) for chart_id, figure in section.charts.items())
    tables = f'<div class="tables">{"".join(section.tables)}</div>' if section.tables else ""
    return (
        f'<section id="{section.id}"><h2>{html.escape(section.title)}</h2>'
        f'<p class="note">{html.escape(section.note)}</p>{charts}{tables}</section>'
    )


def script_json(text: str) -> str:
    """JSON ``text`` made safe to embed in a ``<script>`` element: the characters of :data:`SCRIPT_ESCAPES` as
    ``\\uXXXX`` escapes, which the HTML parser does not read and JavaScript reads back as the same string.
    (They occur only inside JSON strings, so the value is unchanged.) Plotly escapes some of them itself;
    this does not depend on which."""
    return text.translate(SCRIPT_ESCAPES)


def _chart(chart_id: str, figure: object) -> str:
    """One chart's div and the script that draws it (its figure's JSON, numbers included)."""
    import plotly.io as pio

    return (
        f'<div class="chart" id="chart-{chart_id}" data-chart="{chart_id}"></div>'
        f"<script>(function(){{var f={script_json(pio.to_json(figure, validate=False, engine='json'))};"
        f'Plotly.newPlot("chart-{chart_id}",f.data,f.layout,{json.dumps(CONFIG)});}})();</script>'
    )
