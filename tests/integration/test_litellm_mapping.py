"""``strata ingest payloads.jsonl --mapping litellm``: LiteLLM's StandardLoggingPayload of 20 real
calls (tests/data/producers/litellm) lands one row per call, as the client saw it."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from conftest import TEST_DATA
from typer.testing import CliRunner

from strata.cli import app
from warehouse.privacy import pseudonym
from warehouse.settings import load_settings
from warehouse.sources.otlp import ERROR_CLASSES
from warehouse.storage.lake import Lake
from warehouse.tables import table

CAPTURE = TEST_DATA / "producers" / "litellm"
PAYLOADS = CAPTURE / "payloads.jsonl"
TRUTH = json.loads((CAPTURE / "truth.json").read_text())
DAY = dt.date(2026, 12, 7).isoformat()
#: Streams whose server sent no usage: LiteLLM fills its own tokenizer's estimate (docs/producers.md).
ESTIMATED = {8, 9}


@pytest.fixture(scope="module")
def lake_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One lake: the payloads landed with the litellm mapping and --tenant, DWD built."""
    home = tmp_path_factory.mktemp("litellm") / "strata-home"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STRATA_HOME", str(home))
        env.setenv("STRATA_PSEUDONYM_KEY", "test-key-not-a-secret-0123456789")
        for name in ("STRATA_LAKE_URI", "STRATA_LANDING_DIR", "AIRFLOW_HOME", "STRATA_DEFAULT_TENANT"):
            env.delenv(name, raising=False)
        landed = CliRunner().invoke(app, ["ingest", str(PAYLOADS), "--mapping", "litellm", "--tenant", "no-team"])
        assert landed.exit_code == 0, landed.output
        built = CliRunner().invoke(app, ["build", "dwd", "--date", DAY])
        assert built.exit_code == 0, built.output
        assert "quarantined 0" in built.output, built.output
        yield home


def _requests() -> pl.DataFrame:
    frame = pl.from_arrow(Lake(load_settings()).read(table("dwd.request")))
    assert isinstance(frame, pl.DataFrame)
    return frame


def test_every_call_lands_once_as_the_client_saw_it(lake_home: Path) -> None:
    key = load_settings().require_pseudonym_key()
    rows = {r["request_id"]: r for r in _requests().iter_rows(named=True)}
    payloads = [json.loads(line) for line in PAYLOADS.read_text().splitlines()]
    assert len(rows) == len(TRUTH) == len(payloads)
    for call, payload in zip(TRUTH, payloads, strict=True):
        row, where = rows[payload["id"]], f"call {call['index']}"
        assert row["tenant_id"] == (call["team"] or "no-team"), where
        assert row["user_pseudonym"] == (call["user"] and pseudonym(key, call["user"])), where
        assert (row["operation"], row["model"]) == (call["operation"], call["model"]), where
        assert row["model_version"] == call["response_model"], where
        assert row["status_code"] == call["status"], where
        assert row["error_type"] == (call["error_type"] and ERROR_CLASSES[call["error_type"]][1]), where
        assert row["cached_input_tokens"] == call["cached_tokens"], where
        if call["index"] not in ESTIMATED:
            assert (row["input_tokens"], row["output_tokens"]) == (call["input_tokens"], call["output_tokens"]), where
        assert row["finish_reason"] == ("stop" if call["operation"] == "chat" and call["status"] == 200 else None)
        assert row["trace_id"] == payload["trace_id"].replace("-", ""), where
        ms = (payload["endTime"] - payload["startTime"]) * 1000
        assert row["duration_ms"] == pytest.approx(ms, abs=1e-3), where
        streamed = call["stream"] and call["status"] == 200
        assert (row["ttft_ms"] is not None) == streamed, where
    assert {rows[p["id"]]["input_tokens"] for i, p in enumerate(payloads) if i in ESTIMATED} == {12, 10}


def test_the_tenant_given_to_a_mapped_file_is_kept_with_its_source_for_rebuilds(lake_home: Path) -> None:
    ods = pl.from_arrow(Lake(load_settings()).read(table("ods.request_log_raw")))
    assert isinstance(ods, pl.DataFrame)
    assert ods.get_column("source").unique().to_list() == [
        f"mapping:litellm@{ods.get_column('source')[0].split('@')[1].split(';')[0]};tenant=no-team"
    ]
    rebuilt = CliRunner().invoke(app, ["build", "dwd", "--date", DAY])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert _requests().filter(pl.col("tenant_id") == "no-team").height == sum(not c["team"] for c in TRUTH)


def test_tenant_is_refused_where_every_mapped_record_names_one(lake_home: Path) -> None:
    refused = CliRunner().invoke(
        app,
        [
            "ingest",
            str(TEST_DATA / "azure_llm_2023_conv_sample.csv"),
            "--mapping",
            "azure_llm_2023_conv",
            "--tenant",
            "x",
        ],
    )
    assert refused.exit_code != 0
    assert "constant tenant_id" in str(refused.output) + str(refused.exception)


def test_a_field_mapped_by_a_name_the_lines_hold_nested_is_reported_and_fails_the_run(
    lake_home: Path, tmp_path: Path
) -> None:
    flat = tmp_path / "flat.yaml"
    flat.write_text(
        "name: flat\nformat: jsonl\ntimestamp: {unit: s}\n"
        "fields: {request_id: id, ts: startTime, model: model, tenant_id: user_api_key_team_id}\n"
    )
    some = tmp_path / "some.jsonl"  # not the file the module landed (that one would be skipped)
    some.write_text("".join(PAYLOADS.read_text().splitlines(keepends=True)[:5]))
    landed = CliRunner().invoke(app, ["ingest", str(some), "--mapping", str(flat)])
    assert landed.exit_code == 1, landed.output
    said = " ".join(landed.output.split())  # the process's console may be narrower than the message: it wraps
    assert "nested at [metadata, user_api_key_team_id]" in said, landed.output
    assert "misspelt" not in landed.output
