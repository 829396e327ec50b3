"""The marts' dbt properties (``models/marts/_marts__models.yml``), generated from their contracts.

Each ADS table written by dbt has an ODCS contract (``contracts/tables/ads.<name>.yaml``); the
dbt model that builds it declares exactly the contract's columns with ``contract: enforced``
(types and ``not_null`` constraints from :func:`contracts.dbt_columns`), its grain and column
descriptions, and the data tests the contract implies: ``unique_key`` and ``not_null`` on the
primary key, those of its rules (:meth:`contracts.rules.Rule.dbt_tests`: ``accepted_values``
for allowed values), ``relationships`` for its foreign keys. So the YAML never restates a
schema by hand: edit the contract, then run ``python -m warehouse.ads.models_yml`` (a test
fails while the file and the contracts differ).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from contracts import Contract, all_contracts
from contracts.dbt_models import dbt_model
from contracts.rules import rules

MARTS_YML = Path(__file__).resolve().parent / "models" / "marts" / "_marts__models.yml"
_HEADER = (
    "# Generated from the ADS contracts (contracts/tables/ads.*.yaml) by\n"
    "# `python -m warehouse.ads.models_yml`: edit the contract, not this file.\n"
)


def dbt_contracts() -> list[Contract]:
    """The contracts of the tables this dbt project writes (ADS, ``writer: dbt``), by name."""
    return [c for name, c in sorted(all_contracts().items()) if c.layer == "ads" and c.writer == "dbt"]


def model_properties(contract: Contract) -> dict[str, Any]:
    """The dbt properties of the model publishing ``contract``'s table."""
    model = dbt_model(contract)
    schema = contract.odcs.schema_[0]
    grain = (schema.dataGranularityDescription or "").strip()
    model["description"] = (
        f"{contract.description}\n\nGrain: {grain[0].lower() + grain[1:]}" if grain else contract.description
    )
    model["config"]["meta"]["contract_version"] = contract.version
    if contract.primary_key:
        model["data_tests"] = [{"unique_key": {"arguments": {"columns": list(contract.primary_key)}}}]
    properties = {p.name: p for p in schema.properties}
    for column in model["columns"]:
        c = contract.column(column["name"])
        tests: list[Any] = []
        if c.name in contract.primary_key:
            tests.append("not_null")
        tests += [test for rule in rules() if c.rule(rule.name) is not None for test in rule.dbt_tests(c)]
        for relationship in properties[c.name].relationships or []:
            target, field = _reference(contract, c.name, relationship.to)
            tests.append({"relationships": {"arguments": {"to": f"ref('{target}')", "field": field}}})
        if tests:
            column["data_tests"] = tests
    return model


def _reference(contract: Contract, column: str, to: Any) -> tuple[str, str]:
    """``model_daily.model`` (or ``ads.model_daily.model``) → (model, column)."""
    parts = str(to).split(".")
    if len(parts) == 3 and parts[0] == "ads":
        parts = parts[1:]
    if len(parts) != 2:
        raise ValueError(f"{contract.name}.{column}: relationship to {to!r} is not <ads table>.<column>")
    return parts[0], parts[1]


def render() -> str:
    """The whole ``_marts__models.yml`` text."""
    import yaml

    class Indented(yaml.SafeDumper):  # type: ignore[misc]  # PyYAML is untyped here: its base is Any
        def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
            return super().increase_indent(flow, False)

    doc = {"version": 2, "models": [model_properties(c) for c in dbt_contracts()]}
    return _HEADER + cast(str, yaml.dump(doc, Dumper=Indented, sort_keys=False, allow_unicode=True, width=100))


def write(path: Path = MARTS_YML) -> Path:
    """Regenerate the file; returns its path."""
    path.write_text(render(), encoding="utf-8")
    return path


if __name__ == "__main__":
    print(f"wrote {write()}")
