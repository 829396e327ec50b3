"""Real GenAI telemetry in: the official OpenAI instrumentation on a real ``openai`` client, its
spans written by the OTLP JSON-file exporter and sent by the OTLP/HTTP exporter into
``strata collect``, in both semantic-convention modes, ingested with no format and no tenant
named, equal the client's own ground truth in ``dwd.request``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
from collect_server import receiver_thread
from openai_server import serve

from warehouse.dwd.build import build_day
from warehouse.dwd.prices import load_prices
from warehouse.ods.ingest import ingest
from warehouse.settings import load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import table

CLIENT = Path(__file__).resolve().parents[1] / "genai_client.py"
#: Both semantic-convention modes of the instrumentation: the latest opted in, and the default.
MODES = {"latest": {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}, "default": {}}
#: The exporter's settings docs/sources.md exports for a service sending to ``strata collect``.
SENDING = {
    "OTEL_TRACES_EXPORTER": "otlp",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
}


def _run_client(base_url: str, folder: Path, mode: str, collector: str | None = None) -> list[dict]:
    """The client's calls in ``mode``, exported into ``folder/<mode>-traces.json``, or to ``collector`` as
    docs/sources.md configures a service; what the client saw is written beside the test's folder, so no
    ingest takes it for traces."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    via = "collect" if collector else "file"
    instance = f"{mode}-{via}-process"  # each run is one process lifetime of the service: one instance
    env |= {"OTEL_SERVICE_NAME": "chat-app", "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={instance}"}
    env |= MODES[mode]
    if collector:
        env |= {**SENDING, "OTEL_EXPORTER_OTLP_ENDPOINT": collector}
    traces = "otlp" if collector else str(folder / f"{mode}-traces.json")
    truth = folder.parent / f"{mode}-{via}-truth.json"
    done = subprocess.run(
        [sys.executable, str(CLIENT), base_url, traces, str(truth)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [call | {"instance": instance} for call in json.loads(truth.read_text())]


def test_an_instrumented_openai_client_equals_dwd_request(tmp_path: Path, strata_env: Path) -> None:
    exports = tmp_path / "exports"
    exports.mkdir()
    with serve() as base_url, receiver_thread() as collector:  # one server: response ids unique across runs
        truth = [
            call
            for mode in MODES
            for collect in (None, collector)
            for call in _run_client(base_url, exports, mode, collect)
        ]
    settings = load_settings()
    prices = tmp_path / "prices.csv"  # every model priced: a null cost can only mean no usage was reported
    prices.write_text(
        "model,effective_from,input_price_per_1k,output_price_per_1k\n"
        + "".join(f"{model},2020-01-01,0.001,0.002\n" for model in sorted({c["model"] for c in truth}))
    )
    load_prices(settings, prices)
    # no --format, no --tenant: the spans name none either; the receiver's segments landed on its shutdown
    report = ingest(settings, [exports, settings.landing_dir])
    assert {f.source for f in report.landed} == {"otlp-json"} and len(report.landed) >= 3
    runs = [build_day(Lake(settings), day)["requests"] for day in report.dates]
    dwd = pl.from_arrow(Lake(settings).read(table("dwd.request")))
    assert isinstance(dwd, pl.DataFrame)

    assert Counter((c["model"], c["operation"], c["status"]) for c in truth) == Counter(
        dwd.select("model", "operation", "status_code").iter_rows()
    )
    for field in ("input_tokens", "output_tokens"):
        expected = Counter()
        for c in truth:
            expected[c["model"]] += c[field] or 0
        got = dwd.group_by("model").agg(pl.col(field).sum())
        assert dict(got.iter_rows()) == dict(expected), field
    assert sum(r.books.quarantined + r.books.malformed for r in runs) == 0
    assert dwd.get_column("tenant_id").unique().to_list() == ["chat-app"]  # the resource's service.name
    errors = dict(
        dwd.filter(pl.col("status_code") >= 400).group_by("status_code").agg(pl.col("error_type").unique()).iter_rows()
    )
    assert errors == {400: ["invalid_request"], 429: ["rate_limited"], 500: ["upstream_error"]}
    # calls without usage whose cost is unknown: 5xx failures, a stream without usage (a 4xx costs 0: docs/pipeline.md)
    no_usage = sum(1 for c in truth if c["input_tokens"] is None and not 400 <= c["status"] < 500)
    assert sum(r.counts.no_usage for r in runs) == no_usage and sum(r.counts.incomplete for r in runs) == 0

    # Workflows: the calls of one trace share it and their parent span, in the order they were made.
    parents = dwd.with_columns(parent=pl.col("attributes").str.json_path_match("$['otel.parent_span_id']"))
    flows = (
        parents.filter(pl.col("parent").is_not_null())
        .sort("ts")
        .group_by("trace_id", maintain_order=True)
        .agg(pl.col("parent").n_unique().alias("parents"), pl.col("model"))
    )
    expected_flows = {}
    for c in truth:
        if c["workflow"]:
            expected_flows.setdefault(c["workflow"], []).append(c["model"])
    assert dict(flows.select("trace_id", "model").iter_rows()) == expected_flows
    assert flows.get_column("parents").to_list() == [1] * len(expected_flows)

    # The new columns: every call has its span, its workflow's span as its parent, and its process.
    assert dwd.get_column("span_id").null_count() == 0 and dwd.get_column("span_id").n_unique() == dwd.height
    assert Counter(dwd.select("model", "server_instance", "parent_span_id").iter_rows()) == Counter(
        (c["model"], c["instance"], c["parent"]) for c in truth
    )
    # ... and the workflow spans, no calls, are rows of dwd.span: a trace shows its whole shape.
    spans = pl.from_arrow(Lake(settings).read(table("dwd.span")))
    assert isinstance(spans, pl.DataFrame)
    workflows = {(c["workflow"], c["parent"], c["instance"]) for c in truth if c["workflow"]}
    assert set(spans.select("trace_id", "span_id", "server_instance").iter_rows()) == workflows
    assert spans.height == len(workflows)
    assert set(spans.select("name", "service", "status", "tenant_id").iter_rows()) == {
        ("workflow", "chat-app", "unset", "chat-app")
    }
    assert spans.get_column("parent_span_id").null_count() == spans.height  # the roots of their traces
    assert (spans.get_column("duration_ms") > 0).all()
    assert sum(r.spans.books.dwd_rows for r in runs if r.spans and r.spans.books) == len(workflows)
