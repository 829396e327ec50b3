"""Contract files: loading, validation errors, lint, compatibility classification, the lock, the CLI."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from contracts import (
    ContractError,
    all_contracts,
    arrow_schema,
    check_lock,
    diff_contracts,
    lint,
    load_contract,
    write_lock,
)
from contracts.loader import CONTRACTS_DIR, MAX_CONTRACT_BYTES, parse_contract, read_contract, read_directory
from strata.commands.contracts import app
from tests.contract_rows import CONTRACT_NAMES

TS = pa.timestamp("us", tz="UTC")
VERSION_LINE = f"version: {read_contract(CONTRACTS_DIR / 'dwd.request.yaml').version}"
#: The shipped dwd.request's version with its minor raised, and with its major raised.
MAJOR = read_contract(CONTRACTS_DIR / "dwd.request.yaml").major
MINOR_BUMP, MAJOR_BUMP = f"version: {MAJOR}.99.0", f"version: {MAJOR + 1}.0.0"


def request_yaml() -> str:
    return (CONTRACTS_DIR / "dwd.request.yaml").read_text()


def edited(text: str, old: str, new: str) -> str:
    assert old in text, f"fixture text not found: {old!r}"
    return text.replace(old, new, 1)


# --- loading ---------------------------------------------------------------------------------


def test_every_table_has_a_valid_contract() -> None:
    contracts = all_contracts()
    assert set(contracts) == CONTRACT_NAMES
    for name, c in contracts.items():
        assert c.layer == name.split(".")[0]
        assert c.version.count(".") == 2 and c.owner
        assert c.odcs.apiVersion.startswith("v3.") and c.odcs.kind == "DataContract"
        assert c.partition_columns or name in (
            "ops.audit_log",
            "dwd.model_price",
            "dwd.tenant_quota",
            "ops.forgotten_users",
        )


def test_request_contract_view() -> None:
    c = load_contract("dwd.request")
    assert c.primary_key == ("request_id",) and c.partition_columns == ("event_date",)
    assert c.column("ts").arrow_type == TS and c.column("ts").required
    assert c.column("ts").max_future == timedelta(days=1)
    assert c.column("attempt").arrow_type == pa.int32() and c.column("attempt").minimum == 1
    status = c.column("status_code")
    assert (status.minimum, status.maximum, status.required) == (100, 599, False)  # null: no HTTP answer
    assert c.column("operation").allowed_values == (
        "chat",
        "completion",
        "embeddings",
        "rerank",
        "classify",
        "detect",
        "ocr",
        "generate_content",
        "execute_tool",
        "invoke_agent",
        "create_agent",
    )
    assert c.column("trace_id").pattern == "^[0-9a-f]{32}$"
    assert c.column("model_version").tolerance("null_rate") == 0.0  # no tolerance: may be null
    assert c.column("event_date").arrow_type == pa.date32()
    assert "user_id" not in c and "user_pseudonym" in c
    assert not {"prompt", "response"} & set(c.column_names)
    assert c.row_count.minimum == 0 and c.freshness and c.freshness.column == "ts"
    assert load_contract("dwd.quarantine").column("rules").arrow_type == pa.list_(pa.string())
    assert load_contract("ods.request_log_raw").column("raw_line").arrow_type == pa.binary()
    assert load_contract("ods.request_log_raw").primary_key == ("file_sha256", "line_no")
    assert load_contract("dwd.feedback").primary_key == ("request_id", "kind", "ts")


def test_feature_contracts_have_rolling_windows() -> None:
    user, model = load_contract("dws.user_features"), load_contract("dws.model_features")
    assert user.primary_key == ("user_pseudonym", "feature_ts")
    assert model.primary_key == ("model_key", "feature_ts")
    for window in ("1h", "24h", "7d"):
        assert user.column(f"request_count_{window}").arrow_type == pa.int64()
        rate = user.column(f"error_rate_{window}")
        assert (rate.arrow_type, rate.minimum, rate.maximum) == (pa.float64(), 0.0, 1.0)
        assert f"distinct_models_{window}" in user and f"distinct_models_{window}" not in model
        assert f"latency_p95_ms_{window}" in model
    assert user.column("feature_ts").required and user.column("feature_ts").arrow_type == TS


def test_arrow_schema_follows_the_contract() -> None:
    c = load_contract("dwd.feedback")
    schema = arrow_schema(c)
    assert schema.names == c.column_names
    assert not schema.field("request_id").nullable and schema.field("value").nullable
    assert schema.field("ts").type == TS


def test_unknown_table_names_the_known_ones() -> None:
    with pytest.raises(ContractError, match=r"dwd\.request"):
        load_contract("dwd.nope")


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        (
            "        required: true\n        description: Calling",
            "        requred: true\n        description: Calling",
            "requred",
        ),
        (
            "physicalType: int32\n        description: HTTP",
            "physicalType: int33\n        description: HTTP",
            "properties[status_code].physicalType",
        ),
        (
            "logicalType: timestamp\n        physicalType: timestamp[us, tz=UTC]\n        required: true",
            "logicalType: string\n        physicalType: timestamp[us, tz=UTC]\n        required: true",
            "properties[ts].logicalType",
        ),
        (VERSION_LINE, "version: one", "version"),
        ("value: P1D", "value: one day", "maxFutureSkew"),
        ("          minimum: 100", "          minimum: 700", "minimum 700 is above maximum 599"),
        (
            "        primaryKeyPosition: 1\n",
            "        primaryKeyPosition: 1\n        partitioned: false\n        partitionKeyPosition: 9\n",
            None,
        ),
    ],
)
def test_invalid_contract_names_file_and_field(tmp_path: Path, old: str, new: str, field: str | None) -> None:
    path = tmp_path / "dwd.request.yaml"
    path.write_text(edited(request_yaml(), old, new))
    if field is None:  # a harmless edit still parses
        assert read_directory(tmp_path)["dwd.request"].primary_key == ("request_id",)
        return
    with pytest.raises(ContractError) as err:
        read_directory(tmp_path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_key_column_must_be_required(tmp_path: Path) -> None:
    text = edited(request_yaml(), "        required: true\n        unique: true\n", "        unique: true\n")
    with pytest.raises(ContractError, match=r"request_id\]\.required: a primary-key column must be required"):
        parse_contract(text, source="x.yaml")


# --- lint ------------------------------------------------------------------------------------


def test_lint_passes_on_the_repo() -> None:
    assert lint() == []


def test_lint_reports_file_problems(tmp_path: Path) -> None:
    shutil.copy(CONTRACTS_DIR / "dwd.feedback.yaml", tmp_path / "dwd.feedbacks.yaml")
    (tmp_path / "dwd.request.yaml").write_text(edited(request_yaml(), VERSION_LINE, "version: '1.0'"))
    (tmp_path / "notes.yml").write_text("x: 1\n")
    problems = "\n".join(lint(tmp_path, lock_path=None))
    assert "does not match the file name 'dwd.feedbacks'" in problems
    assert "dwd.request.yaml: version: '1.0' is not a semantic version" in problems
    assert "notes.yml: contract files must be named" in problems


# --- compatibility ---------------------------------------------------------------------------


def classify(new_text: str) -> dict[str, bool]:
    old = load_contract("dwd.request")
    new = parse_contract(new_text, source="new.yaml")
    return {f"{c.kind}:{c.column}": c.breaking for c in diff_contracts(old, new)}


COLUMN_BLOCK = """      - name: finish_reason
        logicalType: string
        physicalType: string
        description: Why generation stopped.
"""


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (COLUMN_BLOCK, "", {"column_removed:finish_reason": True}),
        (COLUMN_BLOCK, COLUMN_BLOCK.replace("finish_reason", "stop_reason"), {"column_renamed:finish_reason": True}),
        (COLUMN_BLOCK, COLUMN_BLOCK + COLUMN_BLOCK.replace("finish_reason", "region"), {"column_added:region": False}),
        (
            COLUMN_BLOCK,
            COLUMN_BLOCK
            + COLUMN_BLOCK.replace("finish_reason", "region").replace(
                "physicalType: string\n", "physicalType: string\n        required: true\n"
            ),
            {"column_added:region": True},
        ),
        (
            "physicalType: int32\n        description: Attempt",
            "physicalType: int64\n        description: Attempt",
            {"type_widened:attempt": False},
        ),
        (
            "physicalType: int64\n        description: Prompt tokens",
            "physicalType: int32\n        description: Prompt tokens",
            {"type_changed:input_tokens": True},
        ),
        (
            "physicalType: string\n        description: Why generation",
            "physicalType: string\n        required: true\n        description: Why generation",
            {"required_added:finish_reason": True},
        ),
        (
            "execute_tool, invoke_agent, create_agent]",
            "execute_tool, invoke_agent]",
            {"allowed_values_narrowed:operation": True},
        ),
        (
            "execute_tool, invoke_agent, create_agent]",
            "execute_tool, invoke_agent, create_agent, speech]",
            {"allowed_values_widened:operation": False},
        ),
        ("          minimum: 100", "          minimum: 200", {"range_narrowed:status_code": True}),
        ("          maximum: 599", "          maximum: 999", {"range_widened:status_code": False}),
        ("pattern: ^[0-9a-f]{32}$", "pattern: ^[0-9a-f]{16}$", {"pattern_changed:trace_id": True}),
        (
            "description: Why generation stopped.",
            "description: Why the model stopped.",
            {"description_changed:finish_reason": False},
        ),
    ],
)
def test_diff_classification(old: str, new: str, expected: dict[str, bool]) -> None:
    assert classify(edited(request_yaml(), old, new)) == expected


def test_primary_key_change_is_breaking() -> None:
    text = edited(request_yaml(), "        primaryKey: true\n        primaryKeyPosition: 1\n", "")
    changes = classify(edited(text, "unique: true\n", "unique: true\n        primaryKey: true\n"))
    assert changes == {}  # the same key written differently is no change
    text = edited(
        request_yaml(),
        "      - name: trace_id\n",
        "      - name: trace_id\n        required: true\n        primaryKey: true\n        primaryKeyPosition: 2\n",
    )
    assert classify(text) == {"required_added:trace_id": True, "primary_key_changed:None": True}


# --- lock ------------------------------------------------------------------------------------


def test_repo_contracts_match_the_lock() -> None:
    assert check_lock() == [], "\n".join(map(str, check_lock()))


def test_lock_catches_breaking_change_without_major_bump(tmp_path: Path) -> None:
    tables = tmp_path / "tables"
    shutil.copytree(CONTRACTS_DIR, tables)
    lock = write_lock(tmp_path / "contracts.lock.json", read_directory(tables))
    assert check_lock(read_directory(tables), lock) == []

    path = tables / "dwd.request.yaml"
    path.write_text(edited(request_yaml(), COLUMN_BLOCK, ""))
    problems = check_lock(read_directory(tables), lock)
    assert [p.table for p in problems] == ["dwd.request"]
    assert "breaking change without a major version bump" in str(problems[0])
    assert [c.kind for c in problems[0].changes] == ["column_removed"]

    path.write_text(edited(path.read_text(), VERSION_LINE, MINOR_BUMP))  # minor is not enough
    assert [p.table for p in check_lock(read_directory(tables), lock)] == ["dwd.request"]
    path.write_text(edited(path.read_text(), MINOR_BUMP, MAJOR_BUMP))
    assert check_lock(read_directory(tables), lock) == []


def test_lock_wants_a_bump_for_compatible_changes_and_tracks_removed_tables(tmp_path: Path) -> None:
    tables = tmp_path / "tables"
    shutil.copytree(CONTRACTS_DIR, tables)
    lock = write_lock(tmp_path / "contracts.lock.json", read_directory(tables))
    path = tables / "dwd.request.yaml"
    path.write_text(
        edited(request_yaml(), COLUMN_BLOCK, COLUMN_BLOCK + COLUMN_BLOCK.replace("finish_reason", "region"))
    )
    (problem,) = check_lock(read_directory(tables), lock)
    assert "without a version bump" in problem.reason
    path.write_text(edited(path.read_text(), VERSION_LINE, MINOR_BUMP))
    assert check_lock(read_directory(tables), lock) == []
    (tables / "ops.audit_log.yaml").unlink()
    assert [p.table for p in check_lock(read_directory(tables), lock)] == ["ops.audit_log"]


# --- CLI -------------------------------------------------------------------------------------


def test_cli_lint_show_diff(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["lint"])
    assert result.exit_code == 0, result.output
    assert f"{len(CONTRACT_NAMES)} contracts OK" in result.output

    result = runner.invoke(app, ["show", "dwd.request"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "status_code" in result.output and "timestamp[us, tz=UTC]" in result.output
    assert runner.invoke(app, ["show", "dwd.nope"]).exit_code == 1
    narrow = runner.invoke(app, ["show", "dwd.request"], env={"COLUMNS": "80"}).output  # rules and descriptions
    assert max(map(len, narrow.splitlines())) <= 80 and "string · ~ ^[0-9a-f]{32}$" in narrow  # whole, not "…"

    old = CONTRACTS_DIR / "dwd.request.yaml"
    compatible = tmp_path / "compatible.yaml"
    compatible.write_text(edited(request_yaml(), "          maximum: 599", "          maximum: 999"))
    result = runner.invoke(app, ["diff", str(old), str(compatible)])
    assert result.exit_code == 0 and "range_widened" in result.output
    breaking = tmp_path / "breaking.yaml"
    breaking.write_text(edited(request_yaml(), COLUMN_BLOCK, ""))
    result = runner.invoke(app, ["diff", str(old), str(breaking)])
    assert result.exit_code == 1 and "column_removed" in result.output and "major version bump" in result.output


def test_a_contract_file_is_read_up_to_a_mebibyte(tmp_path: Path) -> None:
    """`contracts diff OLD /dev/zero` read without end; a file past the cap is refused unread."""
    shipped = (CONTRACTS_DIR / "dwd.request.yaml").read_text()
    big = tmp_path / "dwd.request.yaml"
    big.write_text(shipped + "#" * MAX_CONTRACT_BYTES + "\n")  # valid YAML: one long comment
    with pytest.raises(ContractError, match="larger than 1 MiB, not a contract"):
        read_contract(big)
    big.write_bytes(b"\xff" + shipped.encode())
    with pytest.raises(ContractError, match="a contract is UTF-8 text"):
        read_contract(big)
