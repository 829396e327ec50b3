"""One call seen at two levels of one trace is one row: an app instrumented with the official openai-v2
package (live, against the fake OpenAI server) calls a LiteLLM gateway instrumented too. The gateway's
spans are LiteLLM's committed capture, each ``litellm_request`` (and its ``raw_gen_ai_request``) re-parented
under the app's span of the same call, inside its time and with its response id, as a gateway in front of
the same server would send them. Both exports go to one ``strata collect`` (the app's ordinary token, the
gateway's gateway token), then ingest and build: one row per call, the gateway's team and timings, the
client's tokens, model and status."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from collect_server import receiver_thread
from integration.test_collect import _post
from openai_server import serve
from producers import capture_otlp, run_producer

from warehouse.dwd.build import build_day
from warehouse.ods.ingest import ingest
from warehouse.settings import Settings, load_settings
from warehouse.sources.collector.encoding import JSON, PROTOBUF, decode
from warehouse.sources.otlp import ERROR_CLASSES
from warehouse.storage.lake import Lake
from warehouse.tables import table

LITELLM = Path(__file__).resolve().parents[1] / "data" / "producers" / "litellm"
APP, GATEWAY = "app-token-0123456789", "gateway-token-0123456789"
Landed = tuple[list[dict], list[dict], list[dict], pl.DataFrame, int, Settings, list[dt.date]]


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}


def _gateway_export(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """LiteLLM's captured export, its ``n``-th call moved under the app's ``n``-th call span ``calls[n]``."""
    doc = json.loads((LITELLM / "traces-001.json").read_text())
    (resource,) = doc["resourceSpans"]
    resource["resource"]["attributes"] = [
        a for a in resource["resource"]["attributes"] if not a["key"].startswith("strata.")
    ]
    (scope,) = resource["scopeSpans"]
    spans = scope["spans"]
    requests = sorted((s for s in spans if s["name"] == "litellm_request"), key=lambda s: int(s["startTimeUnixNano"]))
    assert len(requests) == len(calls)
    for n, (request, app) in enumerate(zip(requests, calls, strict=True)):
        start, end = int(app["startTimeUnixNano"]), int(app["endTimeUnixNano"])
        inner = {"startTimeUnixNano": str(start + (end - start) // 4), "endTimeUnixNano": str(end - (end - start) // 4)}
        new_id = f"{0xA0000 + n:016x}"
        for child in (s for s in spans if s.get("parentSpanId") == request["spanId"]):
            child.update(traceId=app["traceId"], parentSpanId=new_id, spanId=f"{0xB0000 + n:016x}", **inner)
        request.update(traceId=app["traceId"], parentSpanId=app["spanId"], spanId=new_id, **inner)
        request["attributes"] = [a for a in request.get("attributes", []) if a["key"] != "gen_ai.response.id"]
        if "gen_ai.response.id" in _attrs(app):  # the gateway answered with the server's response
            request["attributes"].append(
                {"key": "gen_ai.response.id", "value": {"stringValue": _attrs(app)["gen_ai.response.id"]}}
            )
    return doc


@pytest.fixture(scope="module")
def landed(tmp_path_factory: pytest.TempPathFactory) -> Landed:
    """The client's truth, the app's and the gateway's call spans, ``dwd.request``, the records set aside,
    the lake's settings and its dates."""
    root = tmp_path_factory.mktemp("levels")
    tokens = root / "tokens"
    tokens.write_text(f"{APP} tenant-app\n{GATEWAY} tenant-gateway gateway=team-a,team-b\n")
    tokens.chmod(0o600)
    with pytest.MonkeyPatch.context() as env:
        for name in ("STRATA_LAKE_URI", "STRATA_LANDING_DIR"):
            env.delenv(name, raising=False)
        env.setenv("STRATA_HOME", str(root / "home"))
        env.setenv("STRATA_PSEUDONYM_KEY", "test-key-not-a-secret-0123456789")
        env.setenv("STRATA_COLLECT_TOKENS_FILE", str(tokens))
        with serve() as base_url, capture_otlp() as captured:
            truth = run_producer("openai_v2", base_url, f"{captured.url}/v1/traces", APP)
        app_bodies = captured.bodies()
        app_calls = sorted(
            (
                span
                for body in app_bodies
                for rs in json.loads(decode(body, PROTOBUF, None).line or b"{}")["resourceSpans"]
                for ss in rs["scopeSpans"]
                for span in ss["spans"]
                if "gen_ai.operation.name" in _attrs(span)
            ),
            key=lambda s: int(s["startTimeUnixNano"]),
        )
        gateway = _gateway_export(app_calls)
        settings, dates = load_settings(), set()
        # The app's exports land first, the gateway's later: separate ingests, separate ODS files.
        for token, bodies, kind in ((APP, app_bodies, PROTOBUF), (GATEWAY, [json.dumps(gateway).encode()], JSON)):
            with receiver_thread() as url:
                for body in bodies:
                    assert _post(url, body, kind, Authorization=f"Bearer {token}")[:1] == (200,)
            dates |= set(ingest(settings, [settings.landing_dir]).dates)
        set_aside = 0
        for day in sorted(dates):
            books = build_day(Lake(settings), day)["requests"].books
            set_aside += books.quarantined + books.malformed
        frame = pl.from_arrow(Lake(settings).read(table("dwd.request")))
        assert isinstance(frame, pl.DataFrame)
    gateway_calls = sorted(
        (s for s in gateway["resourceSpans"][0]["scopeSpans"][0]["spans"] if s["name"] == "litellm_request"),
        key=lambda s: int(s["startTimeUnixNano"]),
    )
    return truth, app_calls, gateway_calls, frame, set_aside, settings, sorted(dates)


def test_a_call_seen_by_the_app_and_its_gateway_is_one_row(landed: Landed) -> None:
    truth, app_calls, gateway_calls, dwd, set_aside, _, _ = landed
    teams = [call["team"] for call in json.loads((LITELLM / "truth.json").read_text())]
    assert (dwd.height, set_aside, len(truth)) == (20, 0, 20)
    rows = {row["trace_id"]: row for row in dwd.iter_rows(named=True)}
    for call, app, gateway, team in zip(truth, app_calls, gateway_calls, teams, strict=True):
        where = f"call {call['index']}"
        row = rows[app["traceId"]]
        assert row["tenant_id"] == (team or "tenant-gateway"), where  # the gateway's team, not the app's token
        start, end = int(gateway["startTimeUnixNano"]), int(gateway["endTimeUnixNano"])
        assert row["ts"].timestamp() * 1e6 == pytest.approx(start // 1000, abs=1), where  # the innermost span's
        assert row["duration_ms"] == pytest.approx((end - start) / 1e6, abs=1e-3), where
        assert row["request_id"] == (call["response_id"] or app["spanId"]), where  # as the app knows it
        assert (row["operation"], row["model"]) == (call["operation"], call["model"]), where  # as the client saw
        assert row["status_code"] == call["status"], where
        assert row["error_type"] == (call["error_type"] and ERROR_CLASSES[call["error_type"]][1]), where
        for field, seen in (("input_tokens", call["input_tokens"]), ("output_tokens", call["output_tokens"])):
            if seen is not None:  # the client saw none on a stream without usage: the gateway's estimate stands
                assert row[field] == seen, (where, field)
    failed = dwd.filter(pl.col("status_code") >= 400)
    assert failed.height == sum(call["status"] >= 400 for call in truth) == 5  # each 429 and 400 once


def test_a_call_whose_levels_meet_in_different_batches_still_counts_once(
    landed: Landed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build batch of one ODS line: the gateway's span meets its app span only through the links an
    earlier batch kept, and is counted as a duplicate (the first arrival's fields stand)."""
    truth, app_calls, _, _, _, settings, dates = landed
    monkeypatch.setattr("warehouse.ods.scan.BATCH_ROWS", 1)
    books = [build_day(Lake(settings), day)["requests"].books for day in dates]
    dwd = pl.from_arrow(Lake(settings).read(table("dwd.request")))
    assert isinstance(dwd, pl.DataFrame)
    assert (dwd.height, sum(b.quarantined + b.malformed for b in books)) == (20, 0)
    assert sum(b.duplicates for b in books) == 20  # each gateway span
    assert sorted(dwd.get_column("trace_id")) == sorted(app["traceId"] for app in app_calls)
    assert dwd.filter(pl.col("status_code") >= 400).height == sum(call["status"] >= 400 for call in truth)
