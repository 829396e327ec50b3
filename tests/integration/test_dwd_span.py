"""dwd.span: the spans of a trace that are no call, built beside dwd.request from the same ODS lines, with
their own books; forget and the suppression list reach them; a lake from before them still builds."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import polars as pl
from deltalake import write_deltalake
from fixtures_otlp import key_value, nanos

from strata import pipeline
from warehouse.dwd.build import build_day
from warehouse.ods.ingest import ingest
from warehouse.ops.forget import forget_user
from warehouse.privacy import pseudonym
from warehouse.settings import Settings, load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import (
    ADS_MODEL_DAILY,
    ADS_TENANT_DAILY,
    DWD_REQUEST,
    DWD_SPAN,
    DWS_MODEL_FEATURES,
    OPS_BOOKS,
)

DAY = dt.date(2026, 3, 1)
NEW_COLUMNS = ["span_id", "parent_span_id", "server_instance"]


def _span(
    trace: str, span: str, name: str, minute: int, parent: str | None = None, day: dt.date = DAY, **attrs: str
) -> dict[str, Any]:
    start = nanos(dt.datetime(day.year, day.month, day.day, 10, minute, tzinfo=dt.UTC))
    out: dict[str, Any] = {
        "traceId": trace,
        "spanId": span,
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 2_000_000_000),
        "attributes": [key_value(k, v) for k, v in attrs.items()],
        "status": {"code": 1},
    }
    return out | ({"parentSpanId": parent} if parent else {})


def _line(*spans: dict[str, Any], instance: str = "rag-7f3a") -> bytes:
    resource = [key_value("service.name", "rag-app"), key_value("service.instance.id", instance)]
    doc = {"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"spans": list(spans)}]}]}
    return json.dumps(doc).encode()


def _workflow(trace: str, user: str, minute: int, day: dt.date = DAY) -> list[dict[str, Any]]:
    """A user's question: a workflow span naming the user, a retrieval under it, and a chat call under it."""
    root, retrieval, call = f"{minute:02d}" + "a" * 14, f"{minute:02d}" + "b" * 14, f"{minute:02d}" + "c" * 14
    return [
        _span(trace, root, "answer", minute, day=day, **{"user.id": user}),
        _span(trace, retrieval, "retrieve", minute, root, day=day, **{"db.system": "qdrant"}),
        _span(
            trace,
            call,
            "chat m1",
            minute,
            root,
            day=day,
            **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "m1", "gen_ai.response.id": f"r-{trace[:4]}"},
        ),
    ]


def _land(settings: Settings, name: str, lines: list[bytes], day: dt.date = DAY) -> None:
    path = settings.landing_dir / f"date={day.isoformat()}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    ingest(settings, [path])


def _read(settings: Settings, table: Any) -> pl.DataFrame:
    frame = pl.from_arrow(Lake(settings).read(table))
    assert isinstance(frame, pl.DataFrame)
    return frame


def test_spans_land_beside_their_calls_and_forget_and_the_suppression_list_reach_them(strata_env: Path) -> None:
    settings = load_settings()
    alice, bob = "1" * 32, "2" * 32
    handler = _span("3" * 32, "3" * 16, "GET /health", 5)  # a web handler's span sent alone: trace-only
    first = [_line(*_workflow(alice, "alice", 1), *_workflow(bob, "bob", 2)), _line(handler)]
    _land(settings, "first.otlp.jsonl", first)
    _land(settings, "resent.otlp.jsonl", first[:1])  # an exporter re-sent its batch: every span a duplicate
    runs = build_day(Lake(settings), DAY)
    requests = runs["requests"]
    assert requests.books is not None and requests.books.balanced and requests.books.trace_only == 1
    assert (requests.books.dwd_rows, requests.books.duplicates) == (2, 2)

    spans = _read(settings, DWD_SPAN)
    assert sorted(spans.get_column("name").to_list()) == ["GET /health", "answer", "answer", "retrieve", "retrieve"]
    assert set(spans.get_column("server_instance")) == {"rag-7f3a"} and set(spans.get_column("service")) == {"rag-app"}
    key = settings.require_pseudonym_key()
    users = dict(spans.filter(pl.col("name") == "answer").select("trace_id", "user_pseudonym").iter_rows())
    assert users == {alice: pseudonym(key, "alice"), bob: pseudonym(key, "bob")}
    assert spans.filter(pl.col("name") == "retrieve").get_column("user_pseudonym").null_count() == 2
    assert "alice" not in spans.get_column("attributes").str.join("").item()  # user ids stay in ODS
    calls = _read(settings, DWD_REQUEST)
    parents = dict(spans.filter(pl.col("name") == "answer").select("trace_id", "span_id").iter_rows())
    assert dict(calls.select("trace_id", "parent_span_id").iter_rows()) == parents
    assert set(calls.get_column("server_instance")) == {"rag-7f3a"}
    # dwd.span keeps its own books: 5 spans, and the re-sent line's 4 again, each counted once
    books = _read(settings, OPS_BOOKS).filter(pl.col("table_name") == DWD_SPAN.name).row(0, named=True)
    assert (books["ods_rows"], books["dwd_rows"], books["duplicates"], books["balanced"]) == (9, 5, 4, True)

    # forget: alice's own span by her pseudonym, the rest of her trace (a retrieval naming nobody) with it
    report = forget_user(settings, "alice")
    assert report.rows[DWD_SPAN.name] == 2
    assert alice not in set(_read(settings, DWD_SPAN).get_column("trace_id"))

    # the same export again, late: the ingest leaves her call out, and the build her workflow span, which no
    # call of hers shares a line with here (an ingest checks calls only)
    late = _workflow("4" * 32, "alice", 3)
    _land(settings, "late.otlp.jsonl", [_line(late[0], *_workflow("5" * 32, "bob", 4))])
    runs = build_day(Lake(settings), DAY)
    assert runs["requests"].spans is not None and runs["requests"].spans.books is not None
    assert runs["requests"].spans.books.suppressed == 1 and runs["requests"].spans.books.balanced
    assert pseudonym(key, "alice") not in set(_read(settings, DWD_SPAN).get_column("user_pseudonym").drop_nulls())


def test_a_lake_from_before_the_new_columns_still_builds_and_reads(strata_env: Path) -> None:
    """Tolerant reads: dwd.request written without span_id, parent_span_id, server_instance (and no dwd.span)
    reads them as null, and the next build adds them to the table (Delta's schema merge); no migration."""
    settings = load_settings()
    _land(settings, "day.otlp.jsonl", [_line(*_workflow("1" * 32, "carol", 1))])
    build_day(Lake(settings), DAY)
    lake = Lake(settings)
    old = lake.read(DWD_REQUEST).drop_columns(NEW_COLUMNS)
    write_deltalake(
        DWD_REQUEST.uri(settings), old, mode="overwrite", schema_mode="overwrite", partition_by=["event_date"]
    )
    assert not set(NEW_COLUMNS) & set(Lake(settings).read(DWD_REQUEST).column_names)
    read = pl.from_arrow(Lake(settings).snapshot(DWD_REQUEST).to_table())  # read as the contract says
    assert isinstance(read, pl.DataFrame) and read.height == 1 and read.get_column("span_id").null_count() == 1
    later = DAY + dt.timedelta(days=1)
    _land(settings, "next.otlp.jsonl", [_line(*_workflow("6" * 32, "carol", 1, later))], later)
    build_day(Lake(settings), later)
    both = _read(settings, DWD_REQUEST).sort("event_date")
    assert both.get_column("event_date").to_list() == [DAY, later]
    assert both.get_column("span_id").is_null().to_list() == [True, False]
    build_day(Lake(settings), DAY)  # rebuilt, the old date has its columns too
    assert _read(settings, DWD_REQUEST).get_column("span_id").null_count() == 0


def test_an_agents_tool_and_agent_steps_land_without_a_model_and_stay_out_of_the_model_marts(
    strata_env: Path,
) -> None:
    settings = load_settings()
    trace = "6" * 32
    agent = _span(trace, "6" * 16, "invoke_agent planner", 1, **{"gen_ai.operation.name": "invoke_agent"})
    chat = _span(
        trace,
        "7" * 16,
        "chat m1",
        2,
        "6" * 16,
        **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "m1", "gen_ai.response.id": "r-agent"},
    )
    tool = _span(trace, "8" * 16, "execute_tool search", 3, "6" * 16, **{"gen_ai.operation.name": "execute_tool"})
    _land(settings, "agent.otlp.jsonl", [_line(agent, chat, tool)])
    runs = build_day(Lake(settings), DAY)
    assert runs["requests"].books is not None and runs["requests"].books.quarantined == 0
    calls = _read(settings, DWD_REQUEST).sort("ts")
    assert calls.get_column("operation").to_list() == ["invoke_agent", "chat", "execute_tool"]
    assert calls.get_column("model").to_list() == [None, "m1", None]
    assert calls.get_column("parent_span_id").to_list() == [None, "6" * 16, "6" * 16]

    pipeline.build_dws(settings, DAY)
    models = pl.read_delta(DWS_MODEL_FEATURES.uri(settings))
    assert set(models.get_column("model")) == {"m1"}  # features describe model calls
    pipeline.build_ads(settings, DAY)
    daily = pl.read_delta(ADS_MODEL_DAILY.uri(settings))
    assert daily.select("model", "requests").rows() == [("m1", 1)]
    tenants = pl.read_delta(ADS_TENANT_DAILY.uri(settings))
    assert tenants.get_column("requests").to_list() == [1]
