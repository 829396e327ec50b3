"""The marts' dbt properties are generated from their contracts, and the committed file is that output."""

from __future__ import annotations

import yaml  # type: ignore[import-untyped]

from contracts import check_dbt_models, load_contract
from warehouse.ads.models_yml import MARTS_YML, dbt_contracts, model_properties, render


def test_the_committed_file_is_the_generated_one_and_agrees_with_the_contracts() -> None:
    assert MARTS_YML.read_text(encoding="utf-8") == render(), "run `python -m warehouse.ads.models_yml`"
    assert check_dbt_models(MARTS_YML) == []
    assert [c.name for c in dbt_contracts()] == [
        "ads.capacity",
        "ads.cold_starts",
        "ads.data_quality",
        "ads.latency_breakdown",
        "ads.model_daily",
        "ads.retry_policy",
        "ads.retry_storms",
        "ads.server_drift",
        "ads.tenant_daily",
        "ads.token_anomalies",
        "ads.trace_breakdown",
        "ads.version_mix",
    ]


def test_tests_come_from_the_contract() -> None:
    model = model_properties(load_contract("ads.tenant_daily"))
    assert model["config"]["contract"] == {"enforced": True}
    assert model["description"].endswith("Grain: one row per event_date × tenant_id.")
    assert model["data_tests"] == [{"unique_key": {"arguments": {"columns": ["event_date", "tenant_id"]}}}]
    columns = {c["name"]: c for c in model["columns"]}
    assert columns["tenant_id"]["data_tests"] == ["not_null"]
    assert columns["cost_usd"]["data_type"] == "DECIMAL(18,9)" and "constraints" not in columns["cost_usd"]
    assert columns["top_model_by_cost"]["data_tests"] == [
        {"relationships": {"arguments": {"to": "ref('model_daily')", "field": "model"}}}
    ]
    status = {c["name"]: c for c in model_properties(load_contract("ads.data_quality"))["columns"]}["status"]
    assert status["data_tests"] == [{"accepted_values": {"arguments": {"values": ["published", "failed"]}}}]
    assert yaml.safe_load(render())["version"] == 2
