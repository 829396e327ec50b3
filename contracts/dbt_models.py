"""dbt ``contract: enforced`` columns from a contract, and a drift check over a dbt models YAML.

An ADS model built by dbt-duckdb declares its columns with ``data_type`` and ``not_null``
constraints; those entries are derived from the table's contract here, and
:func:`check_dbt_models` says where a ``models.yml`` has drifted from the contracts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from contracts.model import Contract
from contracts.types import duckdb_type

#: DuckDB type aliases, folded to the name :func:`contracts.types.duckdb_type` uses.
_ALIASES = {
    "INT8": "BIGINT",
    "LONG": "BIGINT",
    "INT64": "BIGINT",
    "INT4": "INTEGER",
    "INT": "INTEGER",
    "SIGNED": "INTEGER",
    "INT32": "INTEGER",
    "INT2": "SMALLINT",
    "SHORT": "SMALLINT",
    "INT1": "TINYINT",
    "FLOAT8": "DOUBLE",
    "FLOAT4": "FLOAT",
    "REAL": "FLOAT",
    "BOOL": "BOOLEAN",
    "LOGICAL": "BOOLEAN",
    "STRING": "VARCHAR",
    "TEXT": "VARCHAR",
    "CHAR": "VARCHAR",
    "BPCHAR": "VARCHAR",
    "TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE",
    "DATETIME": "TIMESTAMP",
    "BYTEA": "BLOB",
    "BINARY": "BLOB",
    "VARBINARY": "BLOB",
    "NUMERIC": "DECIMAL",
}
_PARAMETERS = re.compile(r"^(\w+)\s*\((.*)\)$")


def normalize_duckdb_type(name: str) -> str:
    """A DuckDB type name in canonical spelling (``int8`` → ``BIGINT``, ``text[]`` → ``VARCHAR[]``)."""
    text = " ".join(name.strip().upper().split())
    if text.endswith("[]"):
        return normalize_duckdb_type(text[:-2]) + "[]"
    if m := _PARAMETERS.match(text):  # DECIMAL(18, 9) → DECIMAL(18,9)
        base = _ALIASES.get(m.group(1), m.group(1))
        return f"{base}({','.join(p.strip() for p in m.group(2).split(','))})"
    return _ALIASES.get(text, text)


def dbt_columns(contract: Contract) -> list[dict[str, Any]]:
    """The ``columns:`` entries of the dbt model publishing ``contract``'s table (enforced contract)."""
    out = []
    for c in contract.columns:
        entry: dict[str, Any] = {"name": c.name, "data_type": duckdb_type(c.arrow_type)}
        if c.description:
            entry["description"] = c.description
        if c.required:
            entry["constraints"] = [{"type": "not_null"}]
        out.append(entry)
    return out


def dbt_model(contract: Contract, model_name: str | None = None) -> dict[str, Any]:
    """A whole dbt model entry (name, enforced contract, columns) for ``contract``."""
    return {
        "name": model_name or contract.name.split(".", 1)[1],
        "description": contract.description,
        "config": {"contract": {"enforced": True}, "meta": {"contract": contract.name}},
        "columns": dbt_columns(contract),
    }


def check_dbt_models(
    models_yml: Path,
    contracts: Mapping[str, Contract] | Iterable[Contract] | None = None,
) -> list[str]:
    """Drift between a dbt models YAML and the contracts; an empty list means they agree.

    A model is matched to a contract by ``config.meta.contract`` (or ``meta.contract``),
    else by name (``model_daily`` ↔ ``ads.model_daily``). Reported: a matched model without
    ``contract: enforced``, an enforced model without a contract, missing or extra columns,
    a differing ``data_type``, a ``not_null`` constraint that disagrees with ``required``,
    and a contract written by dbt (``customProperties.writer``, the default for ADS) with no model.
    """
    import yaml

    from contracts.loader import all_contracts

    if contracts is None:
        contracts = all_contracts()
    by_name = dict(contracts) if isinstance(contracts, Mapping) else {c.name: c for c in contracts}
    doc = yaml.load(Path(models_yml).read_text(encoding="utf-8"), Loader=yaml.CSafeLoader) or {}
    models = doc.get("models") or []
    problems: list[str] = []
    matched: set[str] = set()
    for model in models:
        name = model.get("name", "?")
        config = model.get("config") or {}
        meta = {**(model.get("meta") or {}), **(config.get("meta") or {})}
        enforced = bool((config.get("contract") or {}).get("enforced"))
        contract = _match(name, meta.get("contract"), by_name)
        where = f"{models_yml}: model {name!r}"
        if contract is None:
            if meta.get("contract"):
                problems.append(f"{where}: names contract {meta['contract']!r}, which does not exist")
            elif enforced:
                problems.append(f"{where}: enforces a contract but no Strata contract matches it")
            continue
        matched.add(contract.name)
        if not enforced:
            problems.append(f"{where}: contract {contract.name} exists but the model lacks contract: enforced")
        problems += _column_drift(where, contract, model.get("columns") or [])
    for name, contract in sorted(by_name.items()):
        if contract.writer == "dbt" and name not in matched:
            problems.append(f"{models_yml}: contract {name} has no dbt model")
    return problems


def _match(model: str, declared: str | None, contracts: Mapping[str, Contract]) -> Contract | None:
    if declared:
        return contracts.get(declared)
    for name, contract in contracts.items():
        if model in (name.split(".", 1)[1], name.replace(".", "_")) and contract.layer == "ads":
            return contract
    return None


def _column_drift(where: str, contract: Contract, columns: list[dict[str, Any]]) -> list[str]:
    problems = []
    declared = {c.get("name"): c for c in columns}
    for c in contract.columns:
        entry = declared.get(c.name)
        if entry is None:
            problems.append(f"{where}: column {c.name!r} of contract {contract.name} is missing")
            continue
        want = duckdb_type(c.arrow_type)
        got = entry.get("data_type")
        if got is None or normalize_duckdb_type(str(got)) != want:
            problems.append(f"{where}: column {c.name!r} has data_type {got!r}, contract says {want}")
        not_null = any((k or {}).get("type") == "not_null" for k in entry.get("constraints") or [])
        if not_null != c.required:
            problems.append(
                f"{where}: column {c.name!r} "
                + (
                    "lacks the not_null constraint of a required column"
                    if c.required
                    else "is not_null but the contract allows nulls"
                )
            )
    for name in declared:
        if name not in contract:
            problems.append(f"{where}: column {name!r} is not in contract {contract.name}")
    return problems
