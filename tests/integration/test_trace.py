"""``strata trace`` on a generated lake: each planted workflow's every call and span in order under the right parent,
checked against the generator's files as ODS holds them and against DWD read directly; the quarantine and the
feedback of a trace; raw lines only with ``--raw``; a trace id not found; a forgotten user's trace shows nothing
of them; and every file of the tables a trace is looked up in carries its Bloom filter."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator

import duckdb
import polars as pl
import pytest

from strata import pipeline
from synthetic_workload import generate
from tests.terminal import run_on_terminal
from warehouse.dwd.trace import Trace, trace
from warehouse.errors import NoData
from warehouse.settings import Settings, load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_FEEDBACK, DWD_QUARANTINE, DWD_REQUEST, DWD_SPAN, ODS_REQUESTS, Table

DAY = dt.date(2026, 5, 4)
KEY = "test-key-not-a-secret-0123456789"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, dict[str, str]]]:
    """One generated day (with faults and late feedback) landed and built to DWD; the environment to run on it."""
    home = tmp_path_factory.mktemp("home")
    landing = tmp_path_factory.mktemp("landing")
    env = {"STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": KEY}
    settings = load_settings(env)
    manifest = generate(landing, days=1, requests_per_day=4_000, seed=37, start=DAY, fault_rate=0.01)
    pipeline.land(settings, [landing / "requests", landing / "feedback"])
    pipeline.load_prices(settings, landing / "prices.csv")
    for day in sorted(set(manifest["days"]) | set(manifest["feedback"]["days"])):
        pipeline.build_dwd(settings, dt.date.fromisoformat(day))
    yield settings, env


def _read(settings: Settings, table: Table) -> pl.DataFrame:
    return pl.read_delta(table.uri(settings))


def _workflows(settings: Settings) -> dict[str, list[dict[str, str | None]]]:
    """Each workflow's spans as the generator wrote them (read from ODS: its JSON lines of calls and its OTLP lines
    of the spans that are no call): trace id → [{span, parent, name, start}]."""
    ods = _read(settings, ODS_REQUESTS).filter(pl.col("source_file").str.contains("/workflows-"))
    traces: dict[str, list[dict[str, str | None]]] = {}
    for line in ods.get_column("raw_line"):
        record = json.loads(line)
        if "resourceSpans" not in record:
            traces.setdefault(record["trace_id"], []).append(
                {"span": record["span_id"], "parent": record.get("parent_span_id"), "name": record["operation"]}
            )
            continue
        for resource in record["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    traces.setdefault(span["traceId"], []).append(
                        {"span": span["spanId"], "parent": span.get("parentSpanId"), "name": span["name"]}
                    )
    return traces


def _one_per_shape(traces: dict[str, list[dict[str, str | None]]]) -> dict[str, str]:
    """A trace id of each shape (root name, then its steps' names), the first by id."""
    shapes: dict[str, str] = {}
    for trace_id in sorted(traces):
        spans = traces[trace_id]
        root = next(s["name"] for s in spans if s["parent"] is None)
        shapes.setdefault(f"{root}: {len(spans) - 1} steps: {sorted(str(s['name']) for s in spans)}", trace_id)
    return shapes


def test_each_planted_workflow_shows_every_call_in_order_under_its_parent(
    lake: tuple[Settings, dict[str, str]],
) -> None:
    settings, env = lake
    written = _workflows(settings)
    chosen = _one_per_shape(written)
    assert len(chosen) >= 3  # rag, agent with one tool, agent with two tools
    calls, spans = _read(settings, DWD_REQUEST), _read(settings, DWD_SPAN)
    ods = _read(settings, ODS_REQUESTS)
    for trace_id in chosen.values():
        found = trace(Lake(settings), trace_id)
        truth = {s["span"]: s for s in written[trace_id]}
        assert {s.span_id for s in found.steps} == set(truth)
        position = {s.span_id: i for i, s in enumerate(found.steps)}
        for i, step in enumerate(found.steps):
            assert step.parent_span_id == truth[step.span_id]["parent"]
            parent = step.parent_span_id
            assert step.depth == (0 if parent is None else found.steps[position[parent]].depth + 1)
            assert parent is None or position[parent] < i  # a parent comes before its children
        siblings: dict[str | None, list[dt.datetime]] = {}
        for step in found.steps:
            siblings.setdefault(step.parent_span_id, []).append(step.ts)
        assert all(ts == sorted(ts) for ts in siblings.values())  # each level in time order
        # every row as DWD holds it, and the ODS line it names holds the trace
        mine = pl.concat(
            [
                calls.filter(pl.col("trace_id") == trace_id).select(
                    pl.col("request_id").alias("id"), "span_id", "ts", "source_file", "line_no"
                ),
                spans.filter(pl.col("trace_id") == trace_id).select(
                    pl.col("span_id").alias("id"), "span_id", "ts", "source_file", "line_no"
                ),
            ]
        )
        assert sorted((s.id, s.span_id, s.ts, s.source_file, s.line_no) for s in found.steps) == sorted(mine.rows())
        for step in found.steps:
            (line,) = ods.filter(
                (pl.col("source_file") == step.source_file) & (pl.col("line_no") == step.line_no)
            ).get_column("raw_line")
            assert trace_id.encode() in line

    # on an 80×24 terminal: every line fits, the steps in the same order, no raw line
    trace_id = chosen[next(k for k in chosen if k.startswith("invoke_agent") and "2 steps" not in k)]
    found = trace(Lake(settings), trace_id, raw=True)
    screen = run_on_terminal(["trace", trace_id], env)
    assert screen.returncode == 0, screen.text
    assert all(len(line) <= 80 for line in screen.lines)
    rows = [line for line in screen.lines if re.match(r"^\s*\d+ ", line) and ("━" in line or "↳" in line)]
    assert [r.split()[0] for r in rows] == [str(i) for i in range(1, len(found.steps) + 1)]
    for row, step in zip(rows, found.steps):
        assert step.name.split()[0] in row
    assert "--raw" in screen.text and '"trace_id"' not in screen.text and "resourceSpans" not in screen.text
    raw = run_on_terminal(["trace", trace_id, "--raw"], env, columns=200)
    assert raw.returncode == 0 and '"trace_id":"' in raw.text and '"user_id":"' in raw.text
    assert set(found.raw_lines) == {(s.source_file, s.line_no) for s in found.steps}


def test_a_trace_shows_its_quarantined_lines_and_its_feedback(lake: tuple[Settings, dict[str, str]]) -> None:
    settings, env = lake
    quarantine = _read(settings, DWD_QUARANTINE).filter(pl.col("target_table") == DWD_REQUEST.name)
    held = [
        (re.search(rb'"trace_id":"([0-9a-f]{32})"', line), rules)
        for line, rules in quarantine.select("raw_line", "rules").rows()
    ]
    trace_id, rules = next((m.group(1).decode(), r) for m, r in held if m)
    found = trace(Lake(settings), trace_id)
    assert any(q.rules == tuple(rules) for q in found.quarantined)
    assert all(q.raw_line is None for q in found.quarantined)  # read only with raw
    screen = run_on_terminal(["trace", trace_id], env)
    assert screen.returncode == 0 and rules[0] in screen.text and '"trace_id":"' not in screen.text

    feedback = _read(settings, DWD_FEEDBACK)
    requests = _read(settings, DWD_REQUEST).join(feedback.select("request_id").unique(), on="request_id")
    trace_id = requests.get_column("trace_id")[0]
    found = trace(Lake(settings), trace_id)
    ids = {s.id for s in found.steps}
    expected = feedback.filter(pl.col("request_id").is_in(list(ids)))
    assert sorted((f.request_id, f.ts, f.kind) for f in found.feedback) == sorted(
        expected.select("request_id", "ts", "kind").rows()
    )
    assert expected.height >= 1


def test_a_trace_not_found_is_one_error_line_naming_the_tables_searched(lake: tuple[Settings, dict[str, str]]) -> None:
    _, env = lake
    screen = run_on_terminal(["trace", "0" * 32], env, columns=200)
    assert screen.returncode == 1
    assert screen.lines == [f"error: trace {'0' * 32}: no row in dwd.request, dwd.span or dwd.quarantine, on any date"]
    bad = run_on_terminal(["trace", "not-a-trace"], env, columns=200)
    assert bad.returncode == 1 and len(bad.lines) == 1 and "32 hex digits" in bad.text


def _bloom_filtered(settings: Settings, table: Table) -> bool:
    """Whether every data file of ``table``'s current version holds a Bloom filter of ``trace_id``."""
    from deltalake import DeltaTable

    files = DeltaTable(table.uri(settings)).file_uris()
    blooms = (
        duckdb.connect()
        .execute(
            "SELECT file_name, bool_and(bloom_filter_offset IS NOT NULL) FROM parquet_metadata(?) "
            "WHERE path_in_schema = 'trace_id' GROUP BY file_name",
            [files],
        )
        .fetchall()
    )
    return len(blooms) == len(files) and all(ok for _, ok in blooms)


def test_a_forgotten_users_trace_shows_nothing_of_them(lake: tuple[Settings, dict[str, str]]) -> None:
    """Last in the module: it forgets a user of the lake."""
    settings, env = lake
    written = _workflows(settings)
    trace_id = next(iter(_one_per_shape(written).values()))
    ods = _read(settings, ODS_REQUESTS).filter(pl.col("raw_line").bin.contains(trace_id.encode()))
    user = next(json.loads(line)["user_id"] for line in ods.get_column("raw_line") if b'"user_id"' in line)
    before: Trace = trace(Lake(settings), trace_id)
    assert before.steps
    pipeline.forget(settings, user)
    with pytest.raises(NoData):
        trace(Lake(settings), trace_id, raw=True)
    screen = run_on_terminal(["trace", trace_id, "--raw"], env, columns=200)
    assert screen.returncode == 1 and user not in screen.text and not any(s.id in screen.text for s in before.steps)
    # the tables' rewritten files keep their Bloom filters
    assert _bloom_filtered(settings, DWD_REQUEST) and _bloom_filtered(settings, DWD_SPAN)
