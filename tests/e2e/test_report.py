"""``strata report`` as a person opens it: in headless Chromium, offline, every chart drawn with the lake's numbers.

The lake: a generated week at the scale where every pattern the operators' marts look for is planted (DWD and
the ADS marts of every day; DWS, the online store and its consistency check, a registered model and its scores
of the last two), plus one client's retry storm landed as a file of its own, plus a hostile evening before the
week: requests whose tenant, model, version, provider, server and error type are script and markup payloads
(what whoever writes a service's logs controls), which its own page must show as text. (Late in the day: the
lake's first request stays within the cold-start lookback of the instances serving when the week begins.) The page
and the dbt docs page are opened from ``file://`` in Debian's Chromium (``tests/browser.py``); any console
error, uncaught exception or failed load fails the test. A screenshot of the report is kept in the test's folder.
The data-quality table is read cell by cell against SQL on the lake, and every chart's labels are measured
where Chromium drew them: inside the chart, none over another.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from contracts.errors import InputError
from strata import pipeline
from strata.report.charts import LABEL_CHARS, OTHERS
from strata.report.operators import (
    CAPACITY_MODELS,
    DRIFT_SHOWN,
    capacity,
    cold_starts,
    retry_waste,
    server_drift,
    token_anomalies,
    workflows,
)
from strata.report.sections import quality
from strata.report.view import LakeView
from synthetic_workload import generate
from tests.browser import CHROMIUM, MISSING, Page, chromium
from tests.small_model import register_a_model
from warehouse.ads.build import build
from warehouse.ops.reports import report_uri
from warehouse.settings import Settings, load_settings
from warehouse.storage.duck import lake_reader
from warehouse.storage.lake import Lake
from warehouse.storage.publish import AuditFailed, publish
from warehouse.tables import OPS_BOOKS, Table

START = dt.date(2026, 3, 2)
DAYS = [START + dt.timedelta(days=i) for i in range(7)]
END = DAYS[-1]
#: The days built through DWS, the online store and the scores (every day is built through DWD and ADS).
FEATURE_DAYS = DAYS[-2:]
#: The generator's requests a day: the smallest at which every operators' pattern stands out (docs/ads.md).
REQUESTS_PER_DAY = 40_000
WEEK_START = END - dt.timedelta(days=6)
KEY = "test-key-not-a-secret-0123456789"
#: What whoever writes a service's logs can put in its tenant, model, version, provider, server and error type:
#: script break-outs, tags and links plotly's pseudo-HTML would render, a template, an entity, line separators.
PAYLOADS = (
    "</script><script>window.__pwned=1</script>",
    '<img src=x onerror="window.__pwned=1">',
    '<a href="javascript:window.__pwned=1">x</a>',
    "{{constructor.constructor('window.__pwned=1')()}}",
    '<a href="https://example.com/">tenant-001</a>',
    "<!--<script>\u2028\u2029 %{x} &amp; <b>bold</b><br><span style='font-size:0'>hid</span>",
)
#: The day of the hostile requests, in the week the report shows.
HOSTILE = START - dt.timedelta(days=1)
#: The report of a week stays under this many bytes (the issue's bound).
MAX_BYTES = 8_000_000
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason=MISSING)
#: The charts of the operators' marts (capacity, cold starts, server drift, retry waste, token anomalies, workflows).
OPERATORS = ("capacity", "cold-starts", "drift", "retry-waste", "tokens", "workflows")

#: Every chart's marks (bars, points, lines, Sankey boxes) and the numbers of its traces, as the browser holds them.
CHARTS_JS = """
Object.fromEntries(Array.from(document.querySelectorAll('[data-chart]')).map(d => [d.dataset.chart, {
  marks: d.querySelectorAll('.barlayer .point path, .scatterlayer .points path, .scatterlayer .js-line, '
                            + '.sankey-node rect').length,
  drawn: d.querySelectorAll('.barlayer .trace, .scatterlayer .trace').length,
  nodes: d.querySelectorAll('.sankey-node rect').length,
  xticks: Array.from(d.querySelectorAll('.xtick text')).map(t => t.textContent),
  xtype: (d._fullLayout.xaxis || {}).type,
  traces: (d.data || []).map(t => ({
    name: t.name === undefined ? null : t.name, xaxis: t.xaxis || 'x',
    x: t.x ? Array.from(t.x) : [], y: t.y ? Array.from(t.y) : [],
    labels: t.node ? Array.from(t.node.label) : []}))
}]))
"""

#: An attacker's reading of the page: every chart hovered (all its points at once, subplot by subplot), every
#: legend entry, Sankey box and link in the charts hovered and clicked; then what the page says, as text.
ATTACK_JS = """
(async () => {
  const pause = () => new Promise(r => setTimeout(r, 60));  // plotly throttles hovers to one per 50 ms
  const fire = (el, ...types) => types.forEach(t => el.dispatchEvent(new MouseEvent(t, {bubbles: true})));
  const all = selector => Array.from(document.querySelectorAll(selector));
  const hovers = [];
  for (const gd of all('[data-chart]')) {
    const subplots = {};
    gd.data.forEach((t, c) => (t.x || t.y || []).forEach((_, p) => {
      const key = (t.xaxis || 'x') + (t.yaxis || 'y');
      (subplots[key] = subplots[key] || []).push({curveNumber: c, pointNumber: p});
    }));
    for (const [subplot, points] of Object.entries(subplots)) {
      Plotly.Fx.hover(gd, points, subplot);
      await pause();
      hovers.push(gd.querySelector('.hoverlayer').textContent);
    }
    Plotly.Fx.unhover(gd);
    gd.querySelectorAll('.legendtoggle, .sankey-node, a').forEach(
      el => fire(el, 'mouseover', 'mousedown', 'mouseup', 'click'));
  }
  await pause();
  const ours = s => s.src === '' && (s.text.startsWith('(function(){var f=') || s.text.includes('plotly.js v'));
  return {
    pwned: typeof window.__pwned,
    hovers,
    text: all('svg text').map(t => t.textContent).join('\\n') + '\\n' + document.body.innerText,
    ticks: all('[data-chart] .xtick text, [data-chart] .ytick text').map(t => t.textContent),
    legend: Object.fromEntries(all('[data-chart]').map(
      d => [d.dataset.chart, Array.from(d.querySelectorAll('.legendtext')).map(t => t.textContent)])),
    scripts: document.scripts.length,
    foreign: Array.from(document.scripts).filter(s => !ours(s)).length,
    charts: all('[data-chart]').length,
    links: all('[data-chart] a').map(a => a.outerHTML),
    elements: all('img, iframe, object, embed, svg [style*="font-size:0"]').map(e => e.outerHTML),
    handlers: all('*').flatMap(e => e.getAttributeNames().filter(n => n.startsWith('on'))),
  };
})()
"""


#: Every chart's labels as Chromium drew them: each text (tick labels, titles, Sankey node labels) as the box it
#: covers on the page, turned as drawn, and each legend as one box; which leave the chart's SVG, which overlap.
LABELS_JS = """
(() => {
  const corners = el => {
    const b = el.getBBox(), m = el.getScreenCTM();
    return [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]].map(
      ([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
  };
  // Two convex boxes are apart when one has an edge with the other wholly beyond it (1 px of slack).
  const apart = (p, q) => [p, q].some(poly => poly.some((a, i) => {
    const b = poly[(i + 1) % poly.length], n = [a[1] - b[1], b[0] - a[0]], len = Math.hypot(...n);
    const along = s => s.map(v => (v[0] * n[0] + v[1] * n[1]) / len);
    const [pp, qq] = [along(p), along(q)];
    return Math.min(...pp) >= Math.max(...qq) - 1 || Math.min(...qq) >= Math.max(...pp) - 1;
  }));
  const shown = el => el.getBBox().width > 0 && getComputedStyle(el).display !== 'none'
    && getComputedStyle(el).visibility !== 'hidden' && getComputedStyle(el).opacity !== '0';
  return Object.fromEntries(Array.from(document.querySelectorAll('[data-chart]')).map(d => {
    const svg = d.querySelector('svg.main-svg').getBoundingClientRect();
    const boxes = Array.from(d.querySelectorAll('svg text'))
      .filter(t => t.textContent.trim() && !t.closest('.hoverlayer, .legend') && shown(t))
      .map(t => ({name: t.textContent, box: corners(t)}))
      .concat(Array.from(d.querySelectorAll('.legend > rect.bg')).filter(shown)
        .map(r => ({name: 'legend', box: corners(r)})));
    const outside = boxes.filter(l => l.box.some(([x, y]) =>
      x < svg.left - 0.5 || x > svg.right + 0.5 || y < svg.top - 0.5 || y > svg.bottom + 0.5)).map(l => l.name);
    const overlapping = [];
    boxes.forEach((a, i) => boxes.slice(i + 1).forEach(b => apart(a.box, b.box) || overlapping.push([a.name, b.name])));
    const sankey = d.querySelectorAll('.node-label').length;
    return [d.dataset.chart, {boxes: boxes.length, sankey, outside, overlapping}];
  }));
})()
"""

#: The scales of the bar charts whose tallest and shortest bars matter: each subplot's axis type, its tick labels,
#: the room between its tallest bar and its top (a share of its height), and its bars' heights in pixels.
SCALES_JS = """
(() => {
  const plot = (chart, x, y) => {
    const d = document.querySelector(`[data-chart="${chart}"]`), axis = d._fullLayout['yaxis' + y.slice(1)];
    const top = d.querySelector('svg.main-svg').getBoundingClientRect().top + axis._offset;
    const bars = Array.from(d.querySelectorAll(`.subplot.${x}${y} .barlayer .point path`))
      .map(p => p.getBoundingClientRect()).filter(r => r.height > 0);
    return {type: axis.type, ticks: Array.from(d.querySelectorAll(`.${y}tick text`)).map(t => t.textContent),
            headroom: (Math.min(...bars.map(r => r.top)) - top) / axis._length, bars: bars.map(r => r.height)};
  };
  return {latency: plot('latency', 'x', 'y'), ttft: plot('latency', 'x2', 'y2'), scores: plot('scores', 'x', 'y')};
})()
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict[str, Any]]:
    """A lake with every layer (see the module's docstring), and the generator's manifest."""
    landing = tmp_path_factory.mktemp("landing")
    settings = load_settings({"STRATA_HOME": str(tmp_path_factory.mktemp("home")), "STRATA_PSEUDONYM_KEY": KEY})
    manifest = generate(
        landing, days=len(DAYS), requests_per_day=REQUESTS_PER_DAY, seed=5, start=START, fault_rate=0.01
    )
    storm = _storm(dt.datetime.combine(END, dt.time(13, 0), dt.UTC), "tenant-001", "gpt-4o-mini", "2024-07-18")
    (landing / "requests" / f"date={END}" / "storm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in storm))
    _hostile(landing / "requests" / f"date={HOSTILE}")
    pipeline.land(settings, [landing / "requests", landing / "feedback"])
    pipeline.load_prices(settings, landing / "prices.csv")
    pipeline.load_quotas(settings, landing / "quotas.csv")
    for day in [HOSTILE, *DAYS]:
        pipeline.build_dwd(settings, day)
    for day in FEATURE_DAYS:
        pipeline.build_dws(settings, day)
        pipeline.materialize(settings, day)
        pipeline.check_consistency(settings, day, sample=40)
    build(Lake(settings), [HOSTILE, *DAYS])
    register_a_model(settings, FEATURE_DAYS[0], FEATURE_DAYS[0])
    for day in FEATURE_DAYS:
        pipeline.score(settings, day, provider="cpu")
    return settings, manifest


def _storm(at: dt.datetime, tenant: str, model: str, version: str) -> list[dict[str, object]]:
    """One first attempt rate-limited, then 24 retries of it within four minutes: a client's retry storm."""
    first = f"req_storm_{at:%m%d}"
    return [
        {
            "request_id": first if i == 0 else f"{first}_{i:02d}",
            "ts": int((at + dt.timedelta(seconds=10 * i)).timestamp() * 1000),
            "tenant_id": tenant,
            "user_id": "u_storm",
            "operation": "chat",
            "model": model,
            "model_version": version,
            "duration_ms": 12.5,
            "status_code": 429,
            "error_type": "rate_limited",
            "attempt": i + 1,
        }
        | ({"retry_of": first} if i else {})
        for i in range(25)
    ]


def _hostile(folder: Path) -> None:
    """A day of requests whose every free-text field carries a payload (tenant, model, version, provider,
    server, error type: four requests per tenant, the last one failed), one request the contract refuses
    (its operation a payload), a retry storm, all in a landing file whose name is a payload too."""
    at = dt.datetime.combine(HOSTILE, dt.time(23, 5), dt.UTC)
    n = len(PAYLOADS)
    lines: list[dict[str, object]] = [
        {
            "request_id": f"req_hostile_{i}_{j}",
            "ts": int((at + dt.timedelta(minutes=8 * i + j)).timestamp() * 1000),
            "tenant_id": tenant,
            "user_id": f"u_hostile_{j}",
            "operation": "chat",
            "model": PAYLOADS[(i + 1) % n],
            "model_version": PAYLOADS[(i + 2) % n],
            "provider": PAYLOADS[(i + 3) % n],
            "server": PAYLOADS[(i + 4) % n],
            "duration_ms": 100.0 + j,
            "ttft_ms": 20.0,
            **dict.fromkeys(("queue_ms", "preprocess_ms", "inference_ms", "postprocess_ms"), 5.0),
            "input_tokens": 10,
            "output_tokens": 5,
            "status_code": 500 if j == 3 else 200,
            **({"error_type": tenant} if j == 3 else {}),
        }
        for i, tenant in enumerate(PAYLOADS)
        for j in range(4)
    ]
    lines.append({**lines[0], "request_id": "req_hostile_refused", "operation": PAYLOADS[0]})
    lines += _storm(at + dt.timedelta(minutes=45), PAYLOADS[-1], PAYLOADS[0], PAYLOADS[1])
    folder.mkdir(parents=True)
    (folder / f"{PAYLOADS[1]}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _strata(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_HOME": str(settings.home), "STRATA_PSEUDONYM_KEY": KEY, "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "strata.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


@contextmanager
def _report_in_chromium(settings: Settings, folder: Path, start: dt.date, end: dt.date) -> Iterator[Page]:
    """The report of ``start`` … ``end`` written into ``folder`` and opened in headless Chromium, which
    reports no error by the end of the block."""
    page = folder / "report.html"
    pipeline.write_report(settings, end, start=start, out=page)
    with chromium(folder / "profile") as browser:
        browser.open(page.as_uri())
        browser.settle(0.3)
        yield browser
        assert browser.errors == []


def _sql(settings: Settings, query: str) -> pl.DataFrame:
    """``query`` over the lake, its tables named ``{layer.name}``."""
    text = re.sub(r"\{(\w+\.\w+)\}", lambda m: f"delta_scan('{Table(m.group(1)).uri(settings)}')", query)
    return lake_reader(settings).sql(text).pl()


def _by_x(traces: list[dict[str, Any]], axis: str = "x") -> dict[str, float]:
    """The sum of the traces' values at each x of one subplot (a stacked bar chart's bar heights)."""
    out: dict[str, float] = {}
    for trace in traces:
        if trace["xaxis"] == axis:
            for x, y in zip(trace["x"], trace["y"]):
                out[x] = out.get(x, 0) + (y or 0)
    return out


def test_strata_report_writes_the_week_into_the_lake_or_a_local_copy(
    built: tuple[Settings, dict[str, Any]], tmp_path: Path
) -> None:
    settings, manifest = built
    copy = tmp_path / "copy.html"
    local = _strata(settings, "report", "--out", str(copy))  # the week ending with the latest day dwd.request holds
    assert local.returncode == 0 and f"report: {copy}" in local.stdout and f"file://{copy}" in local.stdout
    text = copy.read_text()
    assert f"Strata report, {WEEK_START} to {END}" in text and len(text.encode()) < MAX_BYTES
    assert f"<p>lake {settings.lake_uri} · made " in text
    # Offline: nothing is loaded from anywhere (plotly.js is in the page), and users appear only as pseudonyms.
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", text)
    assert not any(user in text for user in manifest["abusive_user_ids"]) and KEY not in text
    # Without --out (as the daily DAG does), into the lake's reports/ folder.
    written = pipeline.write_report(settings, END, start=START)
    assert written.detail == report_uri(settings, START, END) and Path(written.detail).read_bytes().startswith(b"<!")
    with pytest.raises(InputError, match="after its end"):
        pipeline.write_report(settings, START, start=END, out=copy)


def test_a_lake_not_built_yet_gets_a_page_whose_sections_say_so(strata_env: Path, tmp_path: Path) -> None:
    result = pipeline.write_report(load_settings(), END, out=tmp_path / "empty.html")
    text = (tmp_path / "empty.html").read_text()
    assert result.detail == str(tmp_path / "empty.html")
    assert text.count("Not built yet") == 14 and 'data-chart="' not in text


@needs_chromium
def test_every_chart_of_the_report_is_drawn_in_chromium_with_the_lake_s_numbers(
    built: tuple[Settings, dict[str, Any]], tmp_path: Path
) -> None:
    settings, _ = built
    with _report_in_chromium(settings, tmp_path, HOSTILE, END) as browser:  # the week and the hostile evening
        charts = browser.evaluate(CHARTS_JS)
        riskiest = browser.evaluate(
            "Array.from(document.querySelectorAll('#scores table')).pop().querySelector('tbody td').textContent"
        )
        shot = browser.screenshot(tmp_path / "report.png")
    assert shot.stat().st_size > 50_000
    expected = {"tenant-traffic", "model-traffic", "latency", "stages", "storms", "books", "quarantine"}
    assert set(charts) == expected | {"consistency", "scores", "lineage"} | set(OPERATORS)
    assert all(chart["marks"] > 0 for chart in charts.values()), {k: c["marks"] for k, c in charts.items()}
    # The operators' charts: every trace drawn, the marts' times and days on date axes.
    assert {k: charts[k]["drawn"] for k in OPERATORS} == {k: len(charts[k]["traces"]) for k in OPERATORS}
    assert {charts[k]["xtype"] for k in ("capacity", "cold-starts", "retry-waste")} == {"date"}

    # Days in date order on a date axis (the hostile day's tenants are new to the traces drawn before them).
    for chart in ("tenant-traffic", "model-traffic"):
        ticks = [dt.datetime.strptime(f"{t} {END.year}", "%b %d %Y").date() for t in charts[chart]["xticks"]]
        assert charts[chart]["xtype"] == "date" and ticks == sorted(set(ticks))
        assert str(HOSTILE) in {x for trace in charts[chart]["traces"] for x in trace["x"]}
    # Requests and cost per day: the stacked bars add up to the marts; each tenant drawn alone is its own row.
    tenants = _sql(settings, "SELECT event_date::VARCHAR AS d, tenant_id, requests FROM {ads.tenant_daily}")
    assert _by_x(charts["tenant-traffic"]["traces"]) == {
        d: n for d, n in tenants.group_by("d").agg(pl.col("requests").sum()).iter_rows()
    }
    for trace in charts["tenant-traffic"]["traces"]:
        if trace["xaxis"] == "x" and trace["name"] != OTHERS:
            mine = tenants.filter(pl.col("tenant_id") == html.unescape(trace["name"]))  # escaped for plotly
            assert dict(zip(trace["x"], trace["y"])) == dict(zip(mine["d"], mine["requests"]))
    cost = _sql(  # a model without a price (the hostile day's) costs nothing drawn
        settings, "SELECT event_date::VARCHAR, sum(coalesce(cost_usd, 0))::DOUBLE FROM {ads.model_daily} GROUP BY 1"
    )
    drawn = _by_x(charts["model-traffic"]["traces"], "x3")
    assert drawn.keys() == set(cost[:, 0]) and all(abs(drawn[d] - c) < 1e-9 for d, c in cost.iter_rows())

    # Latency p95 per model version over the range, as DuckDB computes it on dwd.request.
    p95 = _sql(
        settings,
        "SELECT model || ' ' || coalesce(model_version, '(none)') AS v, quantile_cont(duration_ms, 0.95) AS p "
        "FROM {dwd.request} WHERE model IS NOT NULL GROUP BY 1",  # (a tool's or an agent's call names no model)
    )
    trace = next(t for t in charts["latency"]["traces"] if t["name"] == "p95")
    assert {html.unescape(x): y for x, y in zip(trace["x"], trace["y"])} == pytest.approx(dict(p95.iter_rows()))

    # The books, the quarantine by rule, the storms, the consistency checks.
    books = _sql(settings, "SELECT event_date::VARCHAR, dwd_rows FROM {ops.books} WHERE table_name = 'dwd.request'")
    trace = next(t for t in charts["books"]["traces"] if t["name"] == "dwd rows")
    assert dict(zip(trace["x"], trace["y"])) == dict(books.iter_rows())
    rules = _sql(settings, "SELECT r, count(*) FROM (SELECT unnest(rules) AS r FROM {dwd.quarantine}) GROUP BY r")
    (trace,) = charts["quarantine"]["traces"]
    assert dict(zip(trace["y"], trace["x"])) == dict(rules.iter_rows())
    storms = _sql(settings, "SELECT count(*) FROM {ads.retry_storms}").item()
    assert storms > 0 and len(charts["storms"]["traces"]) == storms
    checks = _sql(settings, "SELECT sum(entities_sampled) FROM {ads.feature_consistency} WHERE feature = '*'").item()
    assert sum(sum(t["x"]) for t in charts["consistency"]["traces"]) == checks

    # Every user-day scored is in the histogram; the riskiest user heads the list, by pseudonym.
    scored = _sql(settings, "SELECT count(*) AS n, arg_max(user_pseudonym, score) AS top FROM {ads.user_risk_scores}")
    assert sum(charts["scores"]["traces"][0]["y"]) == scored["n"].item() and riskiest == scored["top"].item()

    # The lineage: a box per landing folder, table and model, each counting what the lake holds.
    (sankey,) = charts["lineage"]["traces"]
    labels = sankey["labels"]
    assert charts["lineage"]["nodes"] == len(labels)
    files = _sql(settings, "SELECT count(*) FROM {ops.landed_files} WHERE table_name = 'ods.request_log_raw'").item()
    requests = _sql(settings, "SELECT count(*) FROM {dwd.request}").item()
    assert f"landing files<br>{files:,} files" in labels and f"dwd.request<br>{requests:,} rows" in labels
    assert "model user_risk@v1<br>1 version(s)" in labels and "Feast view<br>user_features" in labels


def _rows(table: str) -> list[dict[str, str]]:
    """An HTML table's rows as the page shows them: header → the cell's text."""
    headers = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table)]
    cells = (re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(<td.*?)</tr>", table))
    return [dict(zip(headers, map(html.unescape, row), strict=True)) for row in cells]


def _expected_quality(settings: Settings, start: dt.date, end: dt.date) -> dict[str, dict[str, str]]:
    """The data-quality table of ``start`` … ``end`` from the audit log's rows, the books and the contracts, when
    every day of the range is long due (a table is fresh exactly when it holds the last day)."""
    writes = _sql(settings, "SELECT * FROM {ops.audit_log}").with_columns(
        finished=pl.col("started_at") + pl.duration(microseconds=(pl.col("duration_ms") * 1000).round()),
        days=pl.col("partition")
        .str.extract_all(r"event_date = '\d{4}-\d{2}-\d{2}'")
        .list.eval(pl.element().str.slice(14, 10).str.to_date()),
    )
    books = _sql(settings, f"SELECT * FROM {{ops.books}} WHERE event_date BETWEEN '{start}' AND '{end}'")
    expected = {}
    for name in writes.filter(pl.col("days").list.len() > 0).get_column("table_name").unique():
        mine = writes.filter(pl.col("table_name") == name).with_columns(
            within=pl.col("days").list.eval(pl.element().is_between(start, end)).list.any()
        )
        published = mine.filter(pl.col("status") == "published").explode("days")
        days = published.filter(pl.col("days").is_between(start, end)).get_column("days")
        newest = days.max()
        lag = None
        if isinstance(newest, dt.date):
            first = published.filter(pl.col("days") == newest).get_column("finished").min()
            assert isinstance(first, dt.datetime)
            lag = (first - dt.datetime.combine(newest + dt.timedelta(days=1), dt.time(), dt.UTC)) / dt.timedelta(
                hours=1
            )
        freshness = Table(name).contract.freshness
        sla = freshness.max_latency / dt.timedelta(hours=1) if freshness else None
        balanced = books.filter(pl.col("table_name") == name).get_column("balanced")
        expected[name] = {
            "layer": name.split(".")[0],
            "table": name,
            "days published": str(days.n_unique()),
            "failed writes": str(mine.filter(pl.col("within") & (pl.col("status") == "failed")).height),
            "newest day": str(newest or "—"),
            "its publish lag": "—" if lag is None else f"{lag:,.1f} h",
            "SLA": "—" if sla is None else f"{sla:,.0f} h",
            "fresh": "—" if sla is None else ("yes" if newest == end else "NO"),
            "books balance": "—" if balanced.is_empty() else ("yes" if balanced.all() else "NO"),
        }
    return expected


def test_every_cell_of_the_data_quality_table_is_what_sql_on_the_lake_says(
    built: tuple[Settings, dict[str, Any]],
) -> None:
    settings, _ = built
    lake = Lake(settings)
    # A write of two days' books that its audit refuses (it would have emptied them): one failed write.
    with pytest.raises(AuditFailed):
        books = [{"event_date": day, "table_name": "dwd.request"} for day in DAYS]
        publish(lake, OPS_BOOKS, lake.read_frame(OPS_BOOKS).clear(), partitions=books, expectations=False)
    # The week the lake ends with (every table holds its last day), and the week after (its last day missing).
    for end in (END, END + dt.timedelta(days=1)):
        start = end - dt.timedelta(days=6)
        view = LakeView.open(settings, start, end)
        assert dt.datetime.now(dt.UTC) > dt.datetime.combine(end, dt.time(), dt.UTC) + dt.timedelta(days=2)  # long due
        (table,) = quality(view).tables
        shown = _rows(table)
        assert {row["table"]: row for row in shown} == _expected_quality(settings, start, end)
        # Layer by layer as data passes them; a mart's days are those it holds (not its writes' first days).
        layers = [row["layer"] for row in shown]
        assert layers == sorted(layers, key=["dwd", "dws", "ads", "ops"].index)
        by_table = {row["table"]: row for row in shown}
        days = f"event_date BETWEEN '{start}' AND '{end}'"
        held = _sql(settings, f"SELECT count(DISTINCT event_date) FROM {{ads.model_daily}} WHERE {days}").item()
        assert by_table["ads.model_daily"]["days published"] == str(held)
        assert held == sum(start <= day <= end for day in [HOSTILE, *DAYS])
        assert by_table["ops.books"]["failed writes"] == "1"
        assert {row["fresh"] for row in shown if row["SLA"] != "—"} == ({"yes"} if end == END else {"NO"})
        assert re.search(r"when this page was made \(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)", table)


@needs_chromium
def test_every_label_of_the_report_fits_its_chart_and_every_bar_shows(
    built: tuple[Settings, dict[str, Any]], tmp_path: Path
) -> None:
    settings, _ = built
    with _report_in_chromium(settings, tmp_path, HOSTILE, END) as browser:
        labels = browser.evaluate(LABELS_JS)
        scales = browser.evaluate(SCALES_JS)
    # Every label (ticks, titles, Sankey node labels, legends) inside its chart, none over another.
    assert {chart: drawn for chart, drawn in labels.items() if drawn["outside"] or drawn["overlapping"]} == {}
    assert (
        len(labels) == 16 and all(drawn["boxes"] > 0 for drawn in labels.values()) and labels["lineage"]["sankey"] > 5
    )
    # Latency and time to first token on log scales with three ticks or more and room above the tallest bar.
    for subplot in ("latency", "ttft"):
        assert scales[subplot]["type"] == "log" and len(scales[subplot]["ticks"]) >= 3, scales[subplot]
        assert scales[subplot]["headroom"] >= 0.05, scales[subplot]
    # The scores on a log scale: a bin of a few flagged users is not a sliver beside the hundreds near 0.
    bars = scales["scores"]["bars"]
    assert scales["scores"]["type"] == "log" and min(bars) >= 0.05 * max(bars), scales["scores"]


@needs_chromium
def test_the_dbt_docs_page_opens_offline_without_a_console_error(
    built: tuple[Settings, dict[str, Any]], tmp_path: Path
) -> None:
    settings, _ = built
    docs = pipeline.generate_docs(settings).detail
    with chromium(tmp_path / "profile") as browser:
        browser.open(docs.as_uri())
        browser.settle(1.0)
        text = browser.evaluate("document.body.innerText")
        browser.screenshot(tmp_path / "docs.png")
        assert browser.errors == []
    assert "strata_ads" in text and "Welcome!" in text  # the project, read from the manifest inside the page


@needs_chromium
def test_strings_from_the_logs_show_as_text_and_run_nothing_in_the_page(
    built: tuple[Settings, dict[str, Any]], tmp_path: Path
) -> None:
    settings, _ = built
    with _report_in_chromium(settings, tmp_path, HOSTILE, HOSTILE) as browser:  # the hostile day alone
        loaded = browser.evaluate("typeof window.__pwned")
        seen = browser.evaluate(ATTACK_JS)
        browser.screenshot(tmp_path / "hostile.png")
    assert loaded == seen["pwned"] == "undefined"
    # Nothing of a payload became a script, an element, an event handler or a link.
    assert seen["scripts"] == 1 + seen["charts"] and seen["foreign"] == 0
    assert seen["elements"] == [] and seen["handlers"] == [] and seen["links"] == []
    # Each payload is shown as it was sent: the tenants' legend, the models', the storm's hover.
    assert sorted(seen["legend"]["tenant-traffic"]) == sorted(seen["legend"]["model-traffic"]) == sorted(PAYLOADS)
    hovers = "\n".join(seen["hovers"])
    assert f"{PAYLOADS[-1]} → {PAYLOADS[0]}" in hovers and f"{PAYLOADS[1]} {PAYLOADS[2]}" in hovers
    assert all(p in seen["text"] for p in PAYLOADS)
    # On an axis a long name is shortened from the middle (the hover above names it whole), so the bars keep room.
    assert max(map(len, seen["ticks"])) <= LABEL_CHARS and any("…" in tick for tick in seen["ticks"])


def _mart(settings: Settings, name: str) -> pl.DataFrame:
    """Mart ``name``'s rows of the week, read by polars (not through the report's DuckDB)."""
    return pl.read_delta(Table(name).uri(settings)).filter(pl.col("event_date").is_between(START, END))


def _traces(figure: Any, **want: Any) -> list[Any]:
    """The figure's traces whose settings are ``want``'s (``name``, ``xaxis``, ``line_dash`` for ``line.dash``)."""
    return [t for t in figure.data if all(t[key.replace("_", ".")] == value for key, value in want.items())]


def _points(figure: Any, **want: Any) -> dict[Any, Any]:
    """The (x → y) of the figure's traces of ``want``'s settings (see :func:`_traces`), together."""
    return {x: y for t in _traces(figure, **want) for x, y in zip(t.x, t.y)}


def test_the_capacity_section_draws_the_busiest_models_peaks_and_replicas_from_the_mart(
    built: tuple[Settings, dict[str, Any]],
) -> None:
    settings, _ = built
    section = capacity(LakeView.open(settings, START, END))
    mart = _mart(settings, "ads.capacity")
    top = mart.group_by("model").agg(pl.col("peak_concurrency").max()).sort("peak_concurrency", "model")
    models = top.sort(["peak_concurrency", "model"], descending=[True, False]).get_column("model").head(CAPACITY_MODELS)
    figure = section.charts["capacity"]
    assert [t.name for t in _traces(figure, line_dash="solid", xaxis="x")] == models.to_list()
    for model in models:
        rows = mart.filter(pl.col("model") == model)
        for measure, where in (
            ("peak_concurrency", {"line_dash": "solid", "xaxis": "x"}),
            ("littles_law_concurrency", {"line_dash": "dot"}),
            ("replicas_needed", {"xaxis": "x2"}),
        ):
            drawn = _points(figure, name=model, **where)
            assert drawn == {str(d): v for d, v in zip(rows["event_date"], rows[measure])}, (model, measure)
    assert "at 8 requests per instance and 25% headroom" in section.note


def test_the_cold_start_section_places_every_start_of_the_week_and_marks_the_slow_ones(
    built: tuple[Settings, dict[str, Any]],
) -> None:
    settings, manifest = built
    section = cold_starts(LakeView.open(settings, START, END))
    starts = _mart(settings, "ads.cold_starts").filter(pl.col("is_cold_start"))
    slow = starts.filter(pl.col("is_slow_start"))
    figure = section.charts["cold-starts"]
    assert _points(figure, name="slow start") == dict(zip(slow["first_seen_at"], slow["server"]))
    assert _points(figure) == dict(zip(starts["first_seen_at"], starts["server"]))
    (flagged,) = _traces(figure, name="slow start")  # the warm-up ratio is in its hover
    assert [c[2] for c in flagged.customdata] == slow.sort("server", "first_seen_at", descending=[True, False])[
        "warmup_latency_ratio"
    ].to_list()
    # The generator's new instances are the week's starts (the hostile evening started none).
    planted = {i["server_instance"] for i in manifest["planted"]["instance_starts"] if i["first_request_at"]}
    assert planted <= set(starts["server_instance"]) and f"{starts.height} instance(s) started" in section.note


def test_the_drift_section_draws_the_largest_rises_and_says_whether_the_next_instance_recovered(
    built: tuple[Settings, dict[str, Any]],
) -> None:
    settings, _ = built
    section = server_drift(LakeView.open(settings, START, END))
    drift = pl.read_delta(Table("ads.server_drift").uri(settings)).filter(
        pl.col("predicted_increase").is_not_null()
        & (pl.col("event_date") <= END)
        & (pl.col("last_seen_at") >= dt.datetime.combine(START, dt.time(), dt.UTC))
    )
    shown = drift.sort(["is_drifting", "predicted_increase"], descending=True).head(DRIFT_SHOWN)
    bars = {y: x for t in section.charts["drift"].data for x, y in zip(t.x, t.y) if x is not None}
    assert bars == dict(zip(shown["server_instance"], shown["predicted_increase"]))
    drifting = {y for t in section.charts["drift"].data if t.name.startswith("drifting") for x, y in zip(t.x, t.y) if x}
    assert drifting == set(shown.filter(pl.col("is_drifting"))["server_instance"])
    (table,) = section.tables
    listed = _rows(table) if "<table>" in table else []
    flagged = drift.filter(pl.col("is_drifting"))
    assert {r["instance"]: r["recovered"] for r in listed} == {
        i: {True: "yes", False: "NO", None: "—"}[r] for i, r in zip(flagged["server_instance"], flagged["is_recovered"])
    }


def test_the_token_section_plots_every_tenant_day_with_a_baseline_and_lists_the_flagged(
    built: tuple[Settings, dict[str, Any]],
) -> None:
    settings, manifest = built
    section = token_anomalies(LakeView.open(settings, START, END))
    days = _mart(settings, "ads.token_anomalies").filter(pl.col("token_ratio").is_not_null())
    flagged = days.filter(pl.col("is_flagged"))
    figure = section.charts["tokens"]
    drawn = [xy for t in figure.data for xy in zip(t.x, t.y)]
    assert sorted(drawn) == sorted(zip(days["request_ratio"], days["token_ratio"]))
    assert _points(figure, name="flagged") == dict(zip(flagged["request_ratio"], flagged["token_ratio"]))
    (table,) = section.tables
    assert [(r["day"], r["tenant"]) for r in _rows(table)] == list(
        zip(map(str, flagged["event_date"]), flagged["tenant_id"])
    )
    jumps = {(j["event_date"], j["tenant_id"]) for j in manifest["planted"]["token_jumps"]}
    assert jumps and jumps <= {(r["day"], r["tenant"]) for r in _rows(table)}


def test_the_retry_waste_section_draws_each_flagged_tenant_and_model_per_day(
    built: tuple[Settings, dict[str, Any]],
) -> None:
    settings, _ = built
    section = retry_waste(LakeView.open(settings, START, END))
    flagged = _mart(settings, "ads.retry_policy").filter(pl.col("is_flagged"))
    assert flagged.height > 0
    figure = section.charts["retry-waste"]
    for row in flagged.iter_rows(named=True):
        who, day = f"{row['tenant_id']} → {row['model']}", str(row["event_date"])
        for axis, measure in (("x", "non_retryable_retries"), ("x2", "long_chains"), ("x3", "retry_tokens")):
            assert _points(figure, name=who, xaxis=axis)[day] == row[measure], (who, measure)
        assert _points(figure, name=who, xaxis="x4")[day] == pytest.approx(float(row["retry_cost_usd"] or 0))
    assert {t.name for t in figure.data} == {f"{t} → {m}" for t, m in zip(flagged["tenant_id"], flagged["model"])}


def test_the_workflow_section_draws_each_shape_s_traces_and_lists_its_slowest_step(
    built: tuple[Settings, dict[str, Any]],
) -> None:
    settings, _ = built
    section = workflows(LakeView.open(settings, START, END))
    mart = _mart(settings, "ads.trace_breakdown")
    shapes = mart.group_by("shape").agg(
        pl.col("traces").sum(),
        pl.col("sequential_traces").sum(),
        duration=(pl.col("duration_mean_ms") * pl.col("traces")).sum() / pl.col("traces").sum(),
    )
    figure = section.charts["workflows"]
    sequential, other = ({html.unescape(y): x for x, y in zip(t.x, t.y)} for t in _traces(figure, xaxis="x2"))
    parts = [{html.unescape(y): x for x, y in zip(t.x, t.y)} for t in _traces(figure, xaxis="x")]
    assert sequential == dict(zip(shapes["shape"], shapes["sequential_traces"]))
    assert {s: other[s] + sequential[s] for s in other} == dict(zip(shapes["shape"], shapes["traces"]))
    assert {s: parts[0][s] + parts[1][s] for s in parts[0]} == pytest.approx(
        dict(zip(shapes["shape"], shapes["duration"]))
    )
    (table,) = section.tables
    rows = {r["shape"]: r for r in _rows(table)}
    assert rows.keys() == set(shapes["shape"])
    for shape in rows:  # the step most often slowest over the week
        counts = mart.filter(pl.col("shape") == shape).group_by("slowest_step").agg(pl.col("slowest_step_traces").sum())
        assert (
            rows[shape]["slowest step"]
            == counts.sort(["slowest_step_traces", "slowest_step"], descending=[True, False])["slowest_step"][0]
        )
