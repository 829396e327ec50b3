"""A column rule is defined once: a rule registered here is read, row-checked, audited, diffed,
locked and shown without touching any enforcer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from contracts import ContractError, ContractViolation, conform, diff_contracts, expectation_suite, split_rows
from contracts.gx_audit import audit
from contracts.loader import SEARCH_PATH_VARIABLE, clear_cache, parse_contract
from contracts.lock import check_lock, write_lock
from contracts.model import Column
from contracts.rules import Change, Invalid, Rule, bound_change, registered, rule_ids, rules
from strata.commands.contracts import app
from warehouse.ads.models_yml import model_properties

NOW = datetime(2026, 1, 2, tzinfo=UTC)
NOTES = """
apiVersion: v3.1.0
kind: DataContract
id: ops_notes
name: ops.notes
version: 1.0.0
description: {purpose: Short notes.}
team: {name: platform}
customProperties: [{property: layer, value: ops}]
schema:
  - name: notes
    properties:
      - {name: note_id, logicalType: integer, physicalType: int64, required: true, primaryKey: true,
         primaryKeyPosition: 1, description: Id.}
      - {name: note, logicalType: string, physicalType: string, description: The note.,
         logicalTypeOptions: {minLength: 3}}
"""


class MinLength(Rule):
    """``logicalTypeOptions.minLength``: the shortest string allowed, in characters."""

    name = lock_key = "min_length"
    odcs = "logicalTypeOptions.minLength"

    def fits(self, t: pa.DataType) -> bool:
        return pa.types.is_string(t)

    def read(self, value: Any, t: pa.DataType) -> Any:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise Invalid(f"{value!r} is not a positive whole number")
        return value

    def row_check(self, col: pl.Expr, column: Column, now: datetime) -> pl.Expr | None:
        return col.str.len_chars() < column.rule(self.name)

    def violation(self, column: Column) -> str:
        return f"strings shorter than {column.rule(self.name)} characters"

    def expectations(self, column: Column, now: datetime) -> list[Any]:
        import great_expectations.expectations as gxe

        return [gxe.ExpectColumnValueLengthsToBeBetween(column=column.name, min_value=column.rule(self.name))]

    def changes(self, column: str, old: Any, new: Any, t: pa.DataType) -> list[Change]:
        return bound_change(column, self.name, old, new, lower=True)

    def show(self, column: Column) -> str | None:
        return f"≥ {column.rule(self.name)} chars"

    def dbt_tests(self, column: Column) -> list[Any]:
        return [
            {
                "dbt_utils.expression_is_true": {
                    "arguments": {"expression": f"length({column.name}) >= {column.rule(self.name)}"}
                }
            }
        ]


@pytest.fixture
def min_length() -> Iterator[Rule]:
    with registered(MinLength()) as rule:
        yield rule


def notes(*texts: str | None) -> pl.DataFrame:
    return pl.DataFrame({"note_id": list(range(len(texts))), "note": list(texts)})


def test_a_rule_registered_once_is_enforced_everywhere(
    min_length: Rule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    contract = parse_contract(NOTES, source="ops.notes.yaml")
    assert contract.column("note").rule("min_length") == 3
    assert "note.min_length" in rule_ids(contract)

    # Row checks, and conform's value checks.
    split = split_rows(notes("long enough", "no", None), contract, now=NOW)
    assert split.rejected["note"].to_list() == ["no"]
    assert split.rejected["rules"].to_list() == [["note.min_length"]]
    with pytest.raises(ContractViolation, match="shorter than 3 characters") as err:
        conform(notes("long enough", "no"), contract, now=NOW)
    assert err.value.rules == ["note.min_length"]

    # The GX suite, audited in this process (the shared worker knows only the shipped rules).
    suite = expectation_suite(contract, now=NOW)
    assert [e.expectation_type for e in suite.expectations if (e.meta or {})["rule"] == "note.min_length"] == [
        "expect_column_value_lengths_to_be_between"
    ]
    assert audit(notes("long enough", None).to_arrow(), contract, now=NOW).success
    result = audit(notes("long enough", "no").to_arrow(), contract, now=NOW)
    assert result.rules_failed == ["note.min_length"] and result.failures[0].unexpected_count == 1

    # Compatibility: tightening breaks, loosening does not; the lock records the rule.
    tighter = parse_contract(NOTES.replace("minLength: 3", "minLength: 4"), source="tighter.yaml")
    looser = parse_contract(NOTES.replace("minLength: 3", "minLength: 1"), source="looser.yaml")
    assert [(c.kind, c.column, c.breaking) for c in diff_contracts(contract, tighter)] == [
        ("range_narrowed", "note", True)
    ]
    assert [(c.kind, c.breaking) for c in diff_contracts(contract, looser)] == [("range_widened", False)]
    lock = write_lock(tmp_path / "contracts.lock.json", {"ops.notes": contract})
    assert json.loads(lock.read_text())["tables"]["ops.notes"]["columns"]["note"] == {"type": "string", "min_length": 3}
    (problem,) = check_lock({"ops.notes": tighter}, lock)
    assert "breaking change without a major version bump" in str(problem)

    # The dbt tests of a model, and `strata contracts show`.
    columns = {c["name"]: c for c in model_properties(contract)["columns"]}
    assert columns["note"]["data_tests"] == min_length.dbt_tests(contract.column("note"))
    (tmp_path / "ops.notes.yaml").write_text(NOTES)
    monkeypatch.setenv(SEARCH_PATH_VARIABLE, str(tmp_path))
    clear_cache()
    try:
        shown = CliRunner().invoke(app, ["show", "ops.notes"], env={"COLUMNS": "200"})
    finally:
        monkeypatch.delenv(SEARCH_PATH_VARIABLE)
        clear_cache()
    assert shown.exit_code == 0, shown.output
    assert "≥ 3 chars" in shown.output


def test_a_registered_rule_is_gone_after_its_block() -> None:
    before = rules()
    with registered(MinLength()):
        assert rules()[-1].name == "min_length"
        with pytest.raises(ContractError, match=r"properties\[note\]\.logicalTypeOptions\.minLength: 0 is not a posi"):
            parse_contract(NOTES.replace("minLength: 3", "minLength: 0"), source="zero.yaml")
    assert rules() == before
    with pytest.raises(ContractError, match="option 'minLength' is not enforced by Strata for a string column"):
        parse_contract(NOTES, source="ops.notes.yaml")


def test_a_rule_that_clashes_with_a_shipped_one_is_refused() -> None:
    class Pattern2(MinLength):
        name = "pattern"

    with pytest.raises(ValueError, match="clashes with 'pattern'"), registered(Pattern2()):
        pass


def test_a_pattern_the_row_checks_cannot_compile_is_refused_when_read() -> None:
    lookahead = NOTES.replace("minLength: 3", "pattern: '^(?=n)'")  # Python's re has lookahead, polars' does not
    with pytest.raises(
        ContractError, match=r"properties\[note\]\.logicalTypeOptions\.pattern: does not compile for po"
    ):
        parse_contract(lookahead, source="ops.notes.yaml")
