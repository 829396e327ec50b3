"""The generator's multi-step workflows through landing and the DWD build: every call a dwd.request row, every
span that is no call a dwd.span row, each trace whole (its parent links resolve within it), as the manifest says."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl

from strata import pipeline
from synthetic_workload import generate
from warehouse.settings import load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_QUARANTINE, DWD_REQUEST, DWD_SPAN, OPS_BOOKS

DAY = dt.date(2026, 4, 7)


def test_each_workflow_lands_whole_in_dwd_request_and_dwd_span(tmp_path: Path, strata_env: Path) -> None:
    settings = load_settings()
    manifest = generate(tmp_path / "gen", days=1, requests_per_day=5000, seed=9, start=DAY, fault_rate=0.0)
    pipeline.land(settings, [tmp_path / "gen" / "requests"])
    pipeline.load_prices(settings, tmp_path / "gen" / "prices.csv")
    pipeline.build_dwd(settings, DAY)
    lake = Lake(settings)
    truth = manifest["days"][DAY.isoformat()]
    assert lake.read_frame(DWD_QUARANTINE).is_empty()
    books = lake.read_frame(OPS_BOOKS)
    calls_books = books.filter(pl.col("table_name") == DWD_REQUEST.name).row(0, named=True)
    assert calls_books["balanced"] and calls_books["ods_rows"] == truth["lines"]
    assert (calls_books["dwd_rows"], calls_books["trace_only"]) == (truth["requests"], truth["trace_only_lines"])

    calls = lake.read_frame(DWD_REQUEST).filter(pl.col("span_id").is_not_null())
    spans = lake.read_frame(DWD_SPAN)
    planted = manifest["planted"]["workflows"]
    assert {p["shape"] for p in planted} == {
        "rag.query: retrieve > rerank > chat",
        "invoke_agent: chat > execute_tool > chat",
        "invoke_agent: chat > execute_tool > execute_tool > chat",
    }
    nodes = pl.concat(
        [
            calls.select(
                "trace_id", "span_id", "parent_span_id", pl.col("operation").alias("name"), "ts", "duration_ms"
            ),
            spans.select("trace_id", "span_id", "parent_span_id", "name", "ts", "duration_ms"),
        ]
    )
    assert nodes.select("trace_id", "span_id").is_unique().all()
    # every parent resolves within its trace; one root per trace, in dwd.span (RAG) or dwd.request (agents)
    parents = nodes.drop_nulls("parent_span_id").join(
        nodes.select("trace_id", pl.col("span_id").alias("parent_span_id")),
        on=["trace_id", "parent_span_id"],
        how="anti",
    )
    assert parents.is_empty()
    roots = nodes.filter(pl.col("parent_span_id").is_null())
    assert roots.get_column("trace_id").is_unique().all() and roots.height == nodes.get_column("trace_id").n_unique()
    assert set(spans.get_column("service")) == {"rag-app"} and spans.get_column("server_instance").null_count() == 0
    assert spans.get_column("tenant_id").null_count() == 0

    steps = nodes.filter(pl.col("parent_span_id").is_not_null()).sort("ts", "span_id")
    shapes = (
        steps.group_by("trace_id", maintain_order=True)
        .agg(pl.col("name").str.join(" > ").alias("steps"))
        .join(roots.select("trace_id", pl.col("name").alias("root")), on="trace_id")
        .select(pl.concat_str("root", pl.lit(": "), "steps").alias("shape"))
        .group_by("shape")
        .len()
    )
    assert dict(shapes.iter_rows()) == {p["shape"]: p["traces"] for p in planted}
    tokens = calls.join(roots.select("trace_id"), on="trace_id").select(pl.col("input_tokens").sum()).item()
    assert tokens == sum(p["input_tokens"] for p in planted)
