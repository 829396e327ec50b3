"""A gateway's token through ``strata collect``: its spans name their tenant by their team attribute, within its
teams; an ordinary token's tenant overrides a team attribute (issue 41, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from collect_server import receiver_thread
from fixtures_otlp import otlp_export_line
from test_collect import DAY, _post, _records

from warehouse.dwd.build import build
from warehouse.ods.ingest import ingest
from warehouse.settings import load_settings
from warehouse.sources.otlp import parse_otlp_lines
from warehouse.storage.lake import Lake
from warehouse.tables import table

TEAM = "metadata.user_api_key_team_id"
LITELLM = Path(__file__).parents[1] / "data" / "producers" / "litellm"
TOKENS = (
    "token-of-acme-0123456789 acme\n"
    "gateway-token-0123456789 litellm gateway=team-a,team-b\n"
    "team-a-gateway-0123456789 litellm gateway=team-a\n"
)
AUTH = {
    "acme": "Bearer token-of-acme-0123456789",
    "gateway": "Bearer gateway-token-0123456789",
    "team-a": "Bearer team-a-gateway-0123456789",
}


@pytest.fixture
def tokens(strata_env: Path, tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(TOKENS)
    path.chmod(0o600)
    return path


def _export(prefix: str, spans: dict[str, tuple[str | None, str | None]], mark: str | None = None) -> dict:
    """A LiteLLM export (its scope and call span, whose dialect's team attribute is ``TEAM``) whose span
    ``<prefix>-<name>`` has (team attribute on the span, ``tenant.id`` on its resource); ``mark``: a sender's
    own ``strata.gateway`` on every resource."""
    records = []
    for name, (team, tenant) in spans.items():
        [record] = _records(f"{prefix}-{name}", 1)
        attributes = {"llm.request.type": "completion", **({} if team is None else {TEAM: team})}
        records.append({**record, "tenant_id": tenant, "attributes": attributes})
    export = json.loads(otlp_export_line(records))
    for resource_spans in export["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            scope_spans["scope"] = {"name": "litellm"}
            for span in scope_spans["spans"]:
                span["name"] = "litellm_request"
        if mark is not None:
            resource_spans["resource"]["attributes"].append({"key": "strata.gateway", "value": {"stringValue": mark}})
    return export


def _protobuf(export: dict) -> bytes:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return ParseDict(export, ExportTraceServiceRequest()).SerializeToString()


def _rejected(answer: bytes, content_type: str) -> tuple[int, str]:
    """(rejected spans, message) of an export answer."""
    if content_type == "application/json":
        partial = json.loads(answer).get("partialSuccess", {})
        return int(partial.get("rejectedSpans", 0)), partial.get("errorMessage", "")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    response = ExportTraceServiceResponse.FromString(answer)
    return response.partial_success.rejected_spans, response.partial_success.error_message


def test_a_gateway_token_lands_each_team_under_its_tenant_and_refuses_a_team_outside_its_list(tokens: Path) -> None:
    gateway_spans = {
        "a": ("team-a", None),
        "b": (None, "team-b"),
        "none": ("", None),  # no team: the token's default tenant
        "empty": ("", "team-b"),  # an empty team attribute names none: tenant.id comes next
        "c": ("team-c", None),  # outside the token's teams
    }
    with receiver_thread(STRATA_COLLECT_TOKENS_FILE=str(tokens), STRATA_COLLECT_SEGMENT_SECONDS="3600") as url:
        for prefix, content_type in (("j", "application/json"), ("p", "application/x-protobuf")):
            export = _export(prefix, gateway_spans)
            body = json.dumps(export).encode() if prefix == "j" else _protobuf(export)
            status, _, answer = _post(url, body, content_type, Authorization=AUTH["gateway"])
            rejected, message = _rejected(answer, content_type)
            assert status == 200 and rejected == 1 and "outside the gateway token's teams" in message, answer
        # a sender's own mark is no gateway: dropped, its team outside the list still refused
        status, _, answer = _post(
            url,
            json.dumps(_export("m", {"c": ("team-c", None)}, mark="*")).encode(),
            **{"Authorization": AUTH["gateway"]},
        )
        assert status == 200 and _rejected(answer, "application/json")[0] == 1
        # an ordinary token: a team attribute (and a sender's own mark) is no claim, the token's tenant wins
        for prefix, mark in (("o", None), ("s", "*")):
            body = json.dumps(_export(prefix, {"b": ("team-b", None)}, mark=mark)).encode()
            assert _post(url, body, Authorization=AUTH["acme"])[:3:2] == (200, b"{}")
    settings = load_settings()
    assert not ingest(settings, [settings.landing_dir]).failed
    build(Lake(settings), "requests", DAY)
    dwd = pl.from_arrow(Lake(settings).read(table("dwd.request")))
    tenants = dict(dwd.select("request_id", "tenant_id").rows())
    expected = {"a": "team-a", "b": "team-b", "none": "litellm", "empty": "team-b"}
    assert tenants == {
        **{f"{p}-{name}-0": tenant for p in "jp" for name, tenant in expected.items()},
        "o-b-0": "acme",
        "s-b-0": "acme",
    }


def test_litellm_through_a_gateway_token_lands_its_teams_and_refuses_the_others(tokens: Path) -> None:
    body = (LITELLM / "traces-001.pb").read_bytes()
    truth = json.loads((LITELLM / "truth.json").read_text())
    teams = {team: sum(call["team"] == team for call in truth) for team in ("team-a", "team-b", None)}
    assert teams == {"team-a": 6, "team-b": 5, None: 9}  # the capture: 20 calls, two teams and none
    with receiver_thread(STRATA_COLLECT_TOKENS_FILE=str(tokens), STRATA_COLLECT_SEGMENT_SECONDS="3600") as url:
        answers = {
            name: _post(url, body, "application/x-protobuf", Authorization=AUTH[name])
            for name in ("team-a", "gateway", "acme")
        }
    assert {
        name: (status, _rejected(answer, "application/x-protobuf")[0]) for name, (status, _, answer) in answers.items()
    } == {
        "team-a": (200, teams["team-b"]),
        "gateway": (200, 0),
        "acme": (200, 0),
    }
    settings = load_settings()
    assert not ingest(settings, [settings.landing_dir]).failed
    ods = pl.from_arrow(Lake(settings).read(table("ods.request_log_raw")))
    tenants = []
    for line in ods.get_column("raw_line").to_list():
        rows = parse_otlp_lines(pl.Series([line]).to_arrow())
        tenants.append(sorted(rows.get_column("tenant_id").value_counts(sort=True).rows()))
    assert sorted(tenants) == sorted(
        [
            [("litellm", 9), ("team-a", 6)],  # team-a's gateway: team-b's refused
            [("litellm", 9), ("team-a", 6), ("team-b", 5)],
            [("acme", 20)],  # an ordinary token: its tenant
        ]
    )


def test_file_ingest_reads_the_team_attribute_as_the_tenant_and_tenant_for_spans_naming_none(
    strata_env: Path, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from strata.cli import app

    path = tmp_path / "litellm.otlp.jsonl"
    path.write_bytes(
        json.dumps(_export("f", {"a": ("team-a", None), "none": ("", None), "b": (None, "team-b")})).encode()
    )
    for args in (["ingest", str(path), "--tenant", "acme"], ["build", "dwd", "--date", DAY.isoformat()]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    dwd = pl.from_arrow(Lake(load_settings()).read(table("dwd.request")))
    assert dict(dwd.select("request_id", "tenant_id").rows()) == {
        "f-a-0": "team-a",
        "f-none-0": "acme",
        "f-b-0": "team-b",
    }
