"""Refused calls are priced by one rule, whatever usage the producer reported (issue 41, item 6)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from strata.cli import app
from warehouse.settings import load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import table


def _request(request_id: str, model: str, status: int, tokens: tuple[int, int] | None) -> dict:
    record = {
        "request_id": request_id,
        "ts": "2026-02-01T10:00:00Z",
        "duration_ms": 12.5,
        "tenant_id": "t1",
        "operation": "chat",
        "model": model,
        "status_code": status,
    }
    if tokens is not None:
        record.update(input_tokens=tokens[0], output_tokens=tokens[1])
    return record


def test_a_refused_call_of_a_priced_model_costs_0_with_or_without_usage(strata_env: Path, tmp_path: Path) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text(
        "model,effective_from,input_price_per_1k,output_price_per_1k,bills_refusals\n"
        "m1,2026-01-01,0.01,0.02,\n"
        "billed,2026-01-01,0.01,0.02,true\n"
    )
    requests = tmp_path / "requests.jsonl"
    calls = [
        _request("no-usage", "m1", 429, None),  # LiteLLM's refused calls report no usage
        _request("usage", "m1", 400, (100, 20)),
        _request("unpriced", "m9", 429, None),
        _request("unpriced-usage", "m9", 400, (100, 20)),
        _request("billed", "billed", 400, (100, 20)),
        _request("billed-no-usage", "billed", 429, None),
    ]
    requests.write_text("".join(json.dumps(c) + "\n" for c in calls))
    for args in (
        ["prices", "load", str(prices)],
        ["ingest", str(requests)],
        ["build", "dwd", "--date", "2026-02-01"],
    ):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    dwd = pl.from_arrow(Lake(load_settings()).read(table("dwd.request")))
    assert dict(dwd.select("request_id", "cost_usd").rows()) == {
        "no-usage": 0.0,
        "usage": 0.0,
        "unpriced": None,
        "unpriced-usage": None,
        "billed": (100 * 0.01 + 20 * 0.02) / 1000,
        "billed-no-usage": None,  # billed refusals are priced by their usage: none reported
    }
