"""Every enforcer derived from a contract catches each kind of violation and names its rule."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
import yaml  # type: ignore[import-untyped]

from contracts import (
    ContractError,
    ContractViolation,
    arrow_schema,
    audit,
    check_dbt_models,
    check_feast_fields,
    conform,
    dbt_columns,
    expectation_suite,
    feast_fields,
    load_contract,
    split_rows,
)
from contracts.dbt_models import dbt_model
from contracts.loader import parse_contract
from contracts.types import is_widening
from tests.contract_rows import CONTRACT_NAMES, synthetic

NOW = datetime(2026, 1, 2, tzinfo=UTC)
TS = datetime(2026, 1, 1, 12, tzinfo=UTC)
FEEDBACK = load_contract("dwd.feedback")
REQUEST = load_contract("dwd.request")
#: The request contract with a null-rate tolerance on model_version (an audit-only rule).
TOLERANT = parse_contract(
    REQUEST.path.read_text().replace(
        "      - name: model_version\n",
        "      - name: model_version\n        quality:\n          - metric: nullValues\n"
        "            mustBeLessOrEqualTo: 50\n            unit: percent\n",
        1,
    ),
    source="dwd.request (tolerant)",
)


def feedback(n: int = 3, **overrides: Any) -> pl.DataFrame:
    """A valid dwd.feedback frame of ``n`` rows; keyword arguments replace columns."""
    df = pl.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "ts": pl.Series([TS] * n, dtype=pl.Datetime("us", "UTC")),
            "event_date": [date(2026, 1, 1)] * n,
            "kind": ["thumb"] * n,
            "value": ["up"] * n,
            "source": ["ui"] * n,
            "source_file": ["feedback.jsonl"] * n,
            "line_no": list(range(1, n + 1)),
            "batch_id": ["b1"] * n,
        }
    )
    return df.with_columns(pl.Series(k, v) if isinstance(v, list) else v.alias(k) for k, v in overrides.items())


def request_rows(n: int = 3) -> pl.DataFrame:
    """Valid dwd.request rows as a JSON reader hands them over: text timestamps, int64 numbers."""
    return pl.DataFrame(
        {
            "request_id": [f"req-{i}" for i in range(n)],
            "trace_id": ["0123456789abcdef0123456789abcdef"] * n,
            "attempt": [1] * n,
            "ts": ["2026-01-01T12:00:00+02:00"] * n,
            "duration_ms": [120.5] * n,
            "tenant_id": ["acme"] * n,
            "operation": ["chat"] * n,
            "model": ["gpt-x"] * n,
            "input_tokens": [10] * n,
            "status_code": [200] * n,
            "event_date": ["2026-01-01"] * n,
            "is_error": [False] * n,
            "is_retry": [False] * n,
            "source": ["jsonl"] * n,
            "source_file": ["a.jsonl"] * n,
            "line_no": list(range(1, n + 1)),
            "batch_id": ["b1"] * n,
            "raw_line": [b"{}"] * n,
        }
    )


def rules_of(split: Any) -> list[list[str]]:
    return split.rejected["rules"].to_list()


# --- row checks ------------------------------------------------------------------------------


def test_row_checks_pass_valid_rows_typed_as_the_contract() -> None:
    split = split_rows(request_rows(), REQUEST, now=NOW, keep=["raw_line"])
    assert split.rejected.height == 0 and split.valid.height == 3
    assert split.valid.columns == [*REQUEST.column_names, "raw_line"]
    assert split.valid.schema["ts"] == pl.Datetime("us", "UTC")
    assert split.valid["ts"][0] == datetime(2026, 1, 1, 10, tzinfo=UTC)  # offset applied
    assert split.valid.schema["status_code"] == pl.Int32 and split.valid.schema["event_date"] == pl.Date
    assert split.valid["model_version"].null_count() == 3  # nullable missing column: nulls (tolerance is audit-only)


@pytest.mark.parametrize(
    ("column", "values", "rules"),
    [
        ("status_code", ["200", "abc", "7.5"], [["status_code.type"], ["status_code.type"]]),  # wrong type
        ("attempt", [1.0, 1.5, 2.0], [["attempt.type"]]),  # lossy float → int
        ("ts", ["2026-01-01T12:00:00Z", "yesterday", "2026-01-01 12:00:00"], [["ts.type"], ["ts.type"]]),
        ("tenant_id", ["acme", None, "acme"], [["tenant_id.required"]]),  # null in a required column
        ("status_code", [200, 99, 600], [["status_code.min"], ["status_code.max"]]),  # out of range
        ("duration_ms", [1.0, -0.5, float("nan")], [["duration_ms.min"], ["duration_ms.type"]]),
        ("operation", ["chat", "dance", "ocr"], [["operation.allowed_values"]]),  # outside the set
        ("trace_id", ["0123456789abcdef0123456789abcdef", "XYZ", None], [["trace_id.pattern"]]),
        ("ts", ["2026-01-01T12:00:00Z", "2026-01-04T00:00:00Z", "2026-01-02T23:00:00Z"], [["ts.future"]]),
    ],
)
def test_row_checks_name_the_broken_rule(column: str, values: list[Any], rules: list[list[str]]) -> None:
    df = request_rows().with_columns(pl.Series(column, values))
    split = split_rows(df, REQUEST, now=NOW)
    assert rules_of(split) == rules
    assert split.valid.height == 3 - len(rules)
    assert split.rejected.drop("rules").schema == df.schema  # rejected rows keep the input as given


def test_row_checks_missing_required_column_and_every_rule_sorted() -> None:
    df = (
        request_rows()
        .drop("tenant_id")
        .with_columns(pl.Series("status_code", [200, 700, 200]), pl.Series("operation", ["chat", "dance", "chat"]))
    )
    split = split_rows(df, REQUEST, now=NOW)
    assert rules_of(split) == [
        ["tenant_id.required"],
        ["operation.allowed_values", "status_code.max", "tenant_id.required"],
        ["tenant_id.required"],
    ]
    assert split.rejected.columns == [*df.columns, "rules"]


def test_row_checks_duplicate_key_keeps_the_first_valid_occurrence() -> None:
    df = request_rows(5).with_columns(
        pl.Series("request_id", ["a", "a", "b", "b", "a"]), pl.Series("status_code", [700, 200, 200, 200, 200])
    )
    split = split_rows(df, REQUEST, now=NOW)
    # row 0 breaks status_code.max, so row 1 is the "a" that stays; rows 0 and 4 repeat it.
    assert split.valid["line_no"].to_list() == [2, 3]
    assert split.rejected["line_no"].to_list() == [1, 4, 5]
    assert rules_of(split) == [
        ["primary_key.unique", "status_code.max"],
        ["primary_key.unique"],
        ["primary_key.unique"],
    ]


def test_row_checks_compound_key() -> None:
    df = feedback(3, request_id=["x", "x", "x"], kind=["thumb", "flag", "thumb"])
    split = split_rows(df, FEEDBACK, now=NOW)
    assert split.valid["kind"].to_list() == ["thumb", "flag"] and rules_of(split) == [["primary_key.unique"]]


def test_row_checks_keep_and_counts() -> None:
    df = request_rows().with_columns(pl.Series("status_code", [1, 2, 200]))
    split = split_rows(df, REQUEST, now=NOW, keep=["raw_line"])
    assert split.valid.columns[-1] == "raw_line" and split.rule_counts() == {"status_code.min": 2}
    with pytest.raises(ValueError, match="nope"):
        split_rows(df, REQUEST, keep=["nope"])


def test_row_checks_are_vectorized_at_scale() -> None:
    df = pl.concat([request_rows(1)] * 200_000).with_columns(
        request_id=pl.format("req-{}", pl.int_range(pl.len())), ts=pl.lit(TS)
    )
    split = split_rows(df, REQUEST, now=NOW)
    assert split.valid.height == 200_000 and split.rejected.height == 0


# --- conform ---------------------------------------------------------------------------------


def test_conform_gives_the_exact_schema() -> None:
    df = (
        feedback()
        .select(reversed(feedback().columns))
        .drop("value")
        .with_columns(
            pl.col("line_no").cast(pl.Int32),
            pl.col("ts").dt.convert_time_zone("Asia/Tokyo"),
            pl.col("kind").cast(pl.Categorical),
        )
    )
    table = conform(df, FEEDBACK, now=NOW)
    assert table.schema == arrow_schema(FEEDBACK)
    assert table.column("value").null_count == 3 and table.column("ts")[0].as_py() == TS
    assert conform(table, FEEDBACK, now=NOW).equals(table)


@pytest.mark.parametrize(
    ("data", "rule", "text"),
    [
        (feedback(line_no=["1", "2", "3"]), "line_no.type", "cannot be converted safely"),  # no string parsing
        (feedback(line_no=[1.0, 1.5, 2.7]), "line_no.type", "[1.5, 2.7]"),  # lossy, with examples
        (feedback().with_columns(pl.col("ts").dt.replace_time_zone(None)), "ts.type", "naive"),
        (feedback().drop("batch_id"), "batch_id.required", "required column is missing"),
        (feedback(extra=[1, 2, 3]), "extra.extra", "not in the contract"),
        (feedback(request_id=["a", None, "c"]), "request_id.required", "nulls in a required column"),
        (feedback(request_id=["a", "a", "c"]), "primary_key.unique", "repeated primary key"),
        (feedback(line_no=[1, 0, 2]), "line_no.min", "below the minimum 1"),
        (feedback(kind=["thumb", "smile", "flag"]), "kind.allowed_values", "['smile']"),
        (feedback(ts=pl.lit(NOW + timedelta(days=2))), "ts.future", "later than the check time"),
    ],
)
def test_conform_names_the_broken_rule(data: pl.DataFrame, rule: str, text: str) -> None:
    with pytest.raises(ContractViolation) as err:
        conform(data, FEEDBACK, now=NOW)
    assert err.value.table == "dwd.feedback" and err.value.rule == rule
    assert rule in str(err.value) and text in str(err.value)


def test_conform_can_skip_value_checks() -> None:
    assert conform(feedback(line_no=[0, 1, 2]), FEEDBACK, check_values=False).num_rows == 3


# --- GX audit --------------------------------------------------------------------------------


def test_expectation_suite_maps_every_expectation_to_a_rule() -> None:
    suite = expectation_suite(TOLERANT, now=NOW)
    rules = {(e.meta or {})["rule"] for e in suite.expectations}
    assert {
        "table.row_count",
        "table.columns",
        "primary_key.unique",
        "ts.required",
        "ts.future",
        "status_code.min",
        "status_code.max",
        "operation.allowed_values",
        "trace_id.pattern",
        "model_version.null_rate",
        "attempt.type",
    } <= rules
    mostly = {(e.meta or {})["rule"]: e.mostly for e in suite.expectations if getattr(e, "mostly", None) is not None}
    assert mostly["model_version.null_rate"] == 0.5


def test_audit_passes_valid_data_and_keeps_the_result() -> None:
    result = audit(conform(feedback(), FEEDBACK, now=NOW), FEEDBACK, now=NOW)
    assert result.success and result.failures == [], result.summary()
    assert json.loads(json.dumps(result.result))["success"] is True


@pytest.mark.parametrize(
    ("data", "rule", "count"),
    [
        (feedback(line_no=["1", "2", "3"]), "line_no.type", None),  # wrong type
        (feedback().drop("batch_id"), "batch_id.required", None),  # missing required column
        (feedback(request_id=["a", None, "c"]), "request_id.required", 1),  # null
        (feedback(request_id=["a", "a", "c"]), "primary_key.unique", 2),  # duplicate key (all occurrences)
        (feedback(line_no=[1, 0, 2]), "line_no.min", 1),  # out of range
        (feedback(kind=["thumb", "smile", "flag"]), "kind.allowed_values", 1),  # outside the set
        (feedback(ts=pl.lit(NOW + timedelta(days=2))), "ts.future", 3),
    ],
)
def test_audit_names_the_failed_rule(data: pl.DataFrame, rule: str, count: int | None) -> None:
    result = audit(data, FEEDBACK, now=NOW)
    assert not result.success
    failure = next(f for f in result.failures if f.rule == rule)
    assert failure.unexpected_count == count
    assert rule in result.rules_failed and rule in result.summary()


def test_a_bound_is_checked_on_the_column_extremes_and_value_by_value_where_they_break_it() -> None:
    rows = conform(split_rows(request_rows(4), REQUEST, now=NOW).valid, REQUEST, now=NOW)
    # An optional column with a bound, all null: it has no minimum, yet no value breaks the bound.
    assert rows.column("ttft_ms").null_count == 4 and audit(rows, REQUEST, now=NOW).success
    low = pl.from_arrow(rows).with_columns(pl.Series("ttft_ms", [5.0, -1.0, None, -2.0]))
    result = audit(low, REQUEST, now=NOW)
    failure = next(f for f in result.failures if f.rule == "ttft_ms.min")
    assert (failure.expectation, failure.unexpected_count, sorted(failure.examples)) == (
        "expect_column_values_to_be_between",
        2,
        [-2.0, -1.0],
    )
    statistics = result.result["statistics"]
    assert not result.success and statistics["unsuccessful_expectations"] == len(result.failures) == 1
    assert statistics["successful_expectations"] + 1 == statistics["evaluated_expectations"]


def test_audit_row_count_bounds_and_tolerances() -> None:
    assert "table.row_count" in audit(feedback(0), load_contract("ops.audit_log"), now=NOW).rules_failed
    rows = split_rows(request_rows(4), TOLERANT, now=NOW).valid
    # model_version may be null in up to 50 % of rows: 2 of 4 passes, 3 of 4 fails.
    half = rows.with_columns(pl.Series("model_version", ["v1", "v1", None, None]))
    assert audit(half, TOLERANT, now=NOW).success
    most = rows.with_columns(pl.Series("model_version", ["v1", None, None, None]))
    assert audit(most, TOLERANT, now=NOW).rules_failed == ["model_version.null_rate"]


# --- dbt -------------------------------------------------------------------------------------

ADS_YAML = """
apiVersion: v3.1.0
kind: DataContract
id: ads_model_daily
name: ads.model_daily
version: 1.0.0
description: {purpose: Daily performance per model version.}
team: {name: analytics}
customProperties: [{property: layer, value: ads}]
schema:
  - name: model_daily
    properties:
      - {name: day, logicalType: date, physicalType: date32, required: true, description: Day.}
      - {name: model, logicalType: string, physicalType: string, required: true, description: Model.}
      - {name: requests, logicalType: integer, physicalType: int64, required: true, description: Requests.}
      - {name: p95_ms, logicalType: number, physicalType: float64, description: Latency p95.}
      - {name: first_ts, logicalType: timestamp, physicalType: "timestamp[us, tz=UTC]", description: First.}
"""


def test_dbt_columns_use_duckdb_types() -> None:
    cols = {c["name"]: c for c in dbt_columns(REQUEST)}
    assert cols["status_code"]["data_type"] == "INTEGER" and cols["input_tokens"]["data_type"] == "BIGINT"
    assert cols["ts"]["data_type"] == "TIMESTAMP WITH TIME ZONE" and cols["event_date"]["data_type"] == "DATE"
    assert cols["ts"]["constraints"] == [{"type": "not_null"}] and "constraints" not in cols["trace_id"]
    assert {c["name"]: c["data_type"] for c in dbt_columns(load_contract("dwd.quarantine"))}["rules"] == "VARCHAR[]"


def test_check_dbt_models_reports_drift(tmp_path: Path) -> None:
    ads = parse_contract(ADS_YAML, source="ads.model_daily.yaml")
    models = tmp_path / "models.yml"
    model = dbt_model(ads)
    models.write_text(yaml.safe_dump({"version": 2, "models": [model]}))
    assert check_dbt_models(models, [ads]) == []

    model["columns"][2]["data_type"] = "int8"  # an alias of BIGINT: no drift
    model["columns"][3]["data_type"] = "FLOAT"
    model["columns"][1].pop("constraints")
    model["columns"].pop(4)
    model["columns"].append({"name": "bonus", "data_type": "VARCHAR"})
    other = {"name": "scratch", "config": {"contract": {"enforced": True}}, "columns": []}
    models.write_text(yaml.safe_dump({"version": 2, "models": [model, other]}))
    problems = "\n".join(check_dbt_models(models, {"ads.model_daily": ads}))
    assert "'p95_ms' has data_type 'FLOAT', contract says DOUBLE" in problems
    assert "'model' lacks the not_null constraint" in problems
    assert "'first_ts' of contract ads.model_daily is missing" in problems
    assert "'bonus' is not in contract ads.model_daily" in problems
    assert "'scratch': enforces a contract but no Strata contract matches it" in problems
    assert "requests" not in problems

    models.write_text(yaml.safe_dump({"version": 2, "models": []}))
    assert check_dbt_models(models, [ads]) == [f"{models}: contract ads.model_daily has no dbt model"]


def test_decimal_columns_hold_money_exactly_through_every_enforcer() -> None:
    money = parse_contract(
        ADS_YAML.replace(
            "{name: p95_ms, logicalType: number, physicalType: float64, description: Latency p95.}",
            "{name: cost_usd, logicalType: number, physicalType: 'decimal128(18, 9)', description: Cost.,"
            " logicalTypeOptions: {minimum: 0}}",
        ),
        source="money.yaml",
    )
    cost = money.column("cost_usd")
    assert cost.arrow_type == pa.decimal128(18, 9) and cost.physical_type == "decimal128(18, 9)"
    assert cost.minimum == Decimal("0")
    assert {c["name"]: c["data_type"] for c in dbt_columns(money)}["cost_usd"] == "DECIMAL(18,9)"
    rows = pl.DataFrame(
        {
            "day": [date(2026, 1, 1)] * 4,
            "model": list("abcd"),
            "requests": [1, 2, 3, 4],
            "cost_usd": [Decimal("0.000000001"), Decimal("-1"), Decimal("1.5"), None],
            "first_ts": [TS] * 4,
        },
        schema_overrides={"cost_usd": pl.Decimal(38, 9)},
    )
    split = split_rows(rows, money, now=NOW)
    assert split.rejected["rules"].to_list() == [["cost_usd.min"]]
    table = conform(split.valid, money, now=NOW)
    assert table.schema.field("cost_usd").type == pa.decimal128(18, 9)
    assert table.column("cost_usd").to_pylist() == [Decimal("0.000000001"), Decimal("1.5"), None]
    assert audit(table, money, now=NOW).success
    # A value with more digits than the scale holds is refused, not rounded away.
    finer = rows.head(1).with_columns(pl.lit(Decimal("0.0000000001"), pl.Decimal(20, 10)).alias("cost_usd"))
    assert split_rows(finer, money, now=NOW).rejected["rules"].to_list() == [["cost_usd.type"]]
    # Widening keeps every digit on both sides of the point; anything else is breaking.
    assert is_widening(pa.decimal128(18, 9), pa.decimal128(38, 9))
    assert not is_widening(pa.decimal128(18, 9), pa.decimal128(18, 6))
    assert not is_widening(pa.decimal128(18, 9), pa.decimal128(18, 10))


# --- Feast -----------------------------------------------------------------------------------


def test_feast_fields_and_drift() -> None:
    from feast import Field
    from feast.types import Float32, Float64, Int64

    users = load_contract("dws.user_features")
    fields = feast_fields(users, ["request_count_1h", "error_rate_24h", "latency_p95_ms_7d"])
    assert [(f.name, f.dtype) for f in fields] == [
        ("request_count_1h", Int64),
        ("error_rate_24h", Float64),
        ("latency_p95_ms_7d", Float64),
    ]
    assert fields[0].description.startswith("Requests in the 1h window")
    assert check_feast_fields(fields, users) == []
    drifted = [*fields[:2], Field(name="latency_p95_ms_7d", dtype=Float32), Field(name="bogus", dtype=Int64)]
    assert check_feast_fields(drifted, users) == [
        "field 'latency_p95_ms_7d' has Feast type Float32, contract dws.user_features says Float64 (float64)",
        "field 'bogus' is not a column of dws.user_features",
    ]
    with pytest.raises(ContractError, match="no column 'bogus'"):
        feast_fields(users, ["bogus"])
    with pytest.raises(ContractError, match="no Feast type"):
        feast_fields(users, ["event_date"])


def test_arrow_table_input_to_row_checks_equivalent() -> None:
    table = conform(feedback(), FEEDBACK, now=NOW)
    split = split_rows(pl.from_arrow(table), FEEDBACK, now=NOW)  # type: ignore[arg-type]
    assert split.valid.to_arrow().cast(arrow_schema(FEEDBACK)).equals(table)
    assert isinstance(table, pa.Table)


# --- every contract ----------------------------------------------------------------------------


#: Contracts :func:`synthetic` cannot fill: a pattern it has no example for, or a key with a pattern (one
#: example value, so every row would share the key).
PATTERNED_KEYS = {"ops.books", "ops.forgotten_users", "ops.landed_files", "ops.suppressed_records"}


@pytest.mark.parametrize("name", sorted(CONTRACT_NAMES - PATTERNED_KEYS))
def test_every_contract_round_trips_through_every_enforcer(name: str) -> None:
    contract = load_contract(name)
    df = synthetic(contract)
    split = split_rows(df, contract, now=NOW)
    assert split.rejected.height == 0, split.rejected["rules"].to_list()
    table = conform(split.valid, contract, now=NOW)
    assert table.schema == arrow_schema(contract)
    result = audit(table, contract, now=NOW)
    assert result.success, result.summary()
    assert audit(table.to_pandas(), contract, now=NOW).success  # pandas input too
    key = (contract.primary_key or contract.partition_columns)[0]
    rejected = split_rows(df.with_columns(pl.lit(None).alias(key)), contract, now=NOW).rejected
    assert rejected.height == 3 and all(f"{key}.required" in rules for rules in rejected["rules"].to_list())


def test_audit_in_the_worker_process_gives_the_same_result() -> None:
    from contracts import audit_worker

    good = conform(feedback(), FEEDBACK, now=NOW)
    bad = feedback(kind=["thumb", "smile", "flag"]).to_arrow()
    assert audit_worker.audit(good, FEEDBACK, now=NOW).success
    remote = audit_worker.audit(bad, FEEDBACK, now=NOW)
    local = audit(bad, FEEDBACK, now=NOW)
    assert remote.rules_failed == local.rules_failed == ["kind.allowed_values"]
    assert remote.failures[0].unexpected_count == local.failures[0].unexpected_count == 1


def test_a_dead_audit_worker_is_replaced() -> None:
    import psutil

    from contracts import audit_worker

    first = audit_worker.pid()
    psutil.Process(first).kill()
    psutil.Process(first).wait(timeout=10)
    assert audit_worker.audit(conform(feedback(), FEEDBACK, now=NOW), FEEDBACK, now=NOW).success
    assert audit_worker.pid() != first


def test_processes_share_one_audit_worker_of_their_user() -> None:
    import subprocess

    from contracts import audit_worker

    ours = audit_worker.pid()
    theirs = subprocess.run(
        [sys.executable, "-c", "from contracts import audit_worker; print(audit_worker.pid())"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    ).stdout
    assert int(theirs) == ours


def test_audit_worker_messages_rebuild_every_contract_and_nothing_else() -> None:
    from contracts import all_contracts, audit_wire

    for name, contract in all_contracts().items():
        assert audit_wire.contract_from(audit_wire.contract_text(contract)) == contract, name
    assert audit_wire.decode(
        {"$": "tuple", "v": [{"$": "timedelta", "v": [1, 2, 3]}, {"$": "dict", "v": {"$": 1}}]}
    ) == (timedelta(1, 2, 3), {"$": 1})
    with pytest.raises(ValueError, match=r"unknown tag 'posix\.system'"):
        audit_wire.decode({"$": "posix.system", "v": ["touch /tmp/x"]})
    with pytest.raises(TypeError, match="cannot send a PosixPath"):
        audit_wire.encode(Path("/"))


def test_an_error_in_the_audit_worker_comes_back_with_its_type_and_message() -> None:
    from contracts import audit_worker

    with pytest.raises(ValueError, match="now must be timezone-aware") as raised:
        audit_worker.audit(conform(feedback(), FEEDBACK, now=NOW), FEEDBACK, now=datetime(2026, 1, 2))
    assert "raised in the GX audit worker" in raised.value.__notes__[0]


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0,
    reason="needs root on Linux: the squatter drops to uid nobody (65534) to hold the socket name",
)
def test_a_socket_name_held_by_another_user_gets_no_byte_and_the_audit_a_private_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another user binds the worker's name while no worker runs (here a name of the test's own,
    computed as the client would): one that answers a pickle that writes a file, one that never
    listens. The client sends and reads nothing, writes nothing, and audits in a private worker
    without waiting out the start timeout."""
    import pickle
    import select
    import signal
    import socket
    import time

    from contracts import audit_worker

    marker = tmp_path / "written when the answer is unpickled"

    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return open, (str(marker), "w")

    evil = pickle.dumps(Evil())

    def squat(address: str, listens: bool) -> tuple[int, int]:
        report, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the squatter: uid nobody, holding the name
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                listener.bind(address)
                if listens:
                    listener.listen(8)
                os.write(write, b"ready\n")
                while listens:
                    conn, _ = listener.accept()
                    conn.settimeout(5)
                    try:
                        conn.sendall(evil)
                        got = conn.recv(1 << 16)
                    except OSError:
                        got = b""
                    os.write(write, f"read {len(got)} bytes\n".encode())
                    conn.close()
                time.sleep(120)
            finally:
                os._exit(0)
        os.close(write)
        assert os.read(report, 6) == b"ready\n"
        return pid, report

    sample = conform(feedback(), FEEDBACK, now=NOW)
    monkeypatch.setattr(audit_worker, "_private", None)
    for listens in (True, False):
        address = f"\0strata-gx-audit-{os.getuid()}-squatted-{os.getpid()}-{int(listens)}"
        monkeypatch.setattr(audit_worker, "_address", lambda address=address: address)
        monkeypatch.setattr(audit_worker, "_foreign", False, raising=False)
        squatter, report = squat(address, listens)
        try:
            started = time.monotonic()
            assert audit_worker.audit(sample, FEEDBACK, now=NOW).success
            assert time.monotonic() - started < (60 if listens else 20)  # the first imports GX privately
            assert not marker.exists()
            if listens:
                assert select.select([report], [], [], 10)[0]
                assert os.read(report, 100) == b"read 0 bytes\n"  # not one byte of the request went out
            assert "cannot be used" in caplog.text
            assert ("held by uid 65534" if listens else "does not listen") in caplog.text
            caplog.clear()
        finally:
            os.kill(squatter, signal.SIGKILL)
            os.waitpid(squatter, 0)
            os.close(report)
