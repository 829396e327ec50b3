"""Table contracts: one ODCS file per table, compiled into every enforcer.

Each table ``layer.name`` has ``contracts/tables/<layer>.<name>.yaml``, an Open Data
Contract Standard document (``apiVersion: v3.1.0``, ``kind: DataContract``) parsed with the
``open-data-contract-standard`` package. From it come the Arrow schema writers conform to
(:func:`arrow_schema`, :func:`conform`), the row checks that route bad rows to quarantine
(:func:`split_rows`), the Great Expectations audit gate (:func:`audit`), the dbt enforced
column types (:func:`dbt_columns`) and the Feast field schemas (:func:`feast_fields`).

Where each part of a contract lives in the YAML (standard slots first)::

    name: dwd.request            version: 1.2.0 (semver)     team.name: owner
    customProperties: [{property: layer, value: dwd}]        (ODCS has no layer slot)
                      [{property: writer, value: dbt|python}]  what writes the table (default:
                      dbt for ADS tables, python for the rest; the dbt check asks a model only of dbt's)
    slaProperties: latency (value + unit, element: <table>.<column>) and frequency → freshness
    schema: exactly one object, name = the table part; per property:
      physicalType    Arrow type name: string, int64, int32, float64, bool, date32, binary,
                      timestamp[us, tz=UTC], list<string>   (authoritative)
      logicalType     the matching ODCS type (timestamp, integer, number, array, …);
                      a binary column is logicalType string with logicalTypeOptions.format: binary
      required / unique / primaryKey + primaryKeyPosition / partitioned + partitionKeyPosition
      logicalTypeOptions.minimum / maximum      range, inclusive (ISO text for timestamps/dates)
      logicalTypeOptions.pattern                regular expression (string columns)
      logicalTypeOptions.minItems               shortest list (array columns)
      quality: metric invalidValues, arguments.validValues: [...]   allowed values;
               mustBe: 0 → checked per row; mustBeLessOrEqualTo: N, unit: percent →
               a tolerance, checked by the audit only (GX ``mostly``)
      quality: metric nullValues, mustBeLessOrEqualTo: N, unit: percent   null-rate tolerance
      customProperties: maxFutureSkew (ISO 8601 duration, e.g. P1D): a timestamp may lie at
               most this far after the check time (the one rule ODCS has no slot for)
    schema[0].quality: metric rowCount, mustBeBetween: [min, max]   rows per audited write

apiVersion is v3.1.0 because the library quality metrics (rowCount, invalidValues,
nullValues) and the ``timestamp`` logical type first appear in ODCS v3.1.0; v3.0.x has no
standard slot for allowed values or row counts. Files are validated against the JSON
Schema shipped with the package, so a misspelt key is an error, not silently ignored.

Each kind of column rule is defined once, in :mod:`contracts.rules`: how it is read, its row
check, its expectations, its lock entry, how a change of it is classified, how it is shown.
Rule ids (the same in row checks, ``conform`` errors, audit failures and quarantine rows):
``<column>.type`` (value present but not convertible, or lossy), ``<column>.required``
(null or missing), ``<column>.min`` / ``.max``, ``<column>.allowed_values``,
``<column>.pattern``, ``<column>.min_items``, ``<column>.future``, ``<column>.unique``,
``primary_key.unique`` (a one-column key is checked only as the key), ``<column>.extra``
(column not in the contract), ``<column>.null_rate`` and ``table.row_count`` /
``table.columns`` (audit only).

Compatibility: :func:`diff_contracts` classifies changes; ``contracts.lock.json`` holds the
last released shapes and :func:`check_lock` refuses a breaking change without a major
version bump; :func:`write_lock` rewrites it at release. Heavy libraries (Great
Expectations, Feast) are imported only inside the functions that use them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contracts.arrow import arrow_schema, conform
    from contracts.compat import diff_contracts
    from contracts.dbt_models import check_dbt_models, dbt_columns
    from contracts.errors import ContractError, ContractViolation, Violation
    from contracts.feast_import import load_feast
    from contracts.feast_schema import check_feast_fields, feast_fields
    from contracts.gx_audit import AuditFailure, AuditResult, audit, expectation_suite
    from contracts.lint import lint
    from contracts.loader import all_contracts, load_contract, parse_contract, read_contract
    from contracts.lock import LockProblem, check_lock, write_lock
    from contracts.model import Column, Contract, Freshness, RowCountBounds
    from contracts.rowchecks import RowSplit, split_rows
    from contracts.rules import Change

#: Each public name → the module that defines it. Imported on first use, so that importing one module of
#: the package (the error family, at the bottom of every import chain) does not load polars and pyarrow.
_PUBLIC = {
    "AuditFailure": "contracts.gx_audit",
    "AuditResult": "contracts.gx_audit",
    "Change": "contracts.rules",
    "Column": "contracts.model",
    "Contract": "contracts.model",
    "ContractError": "contracts.errors",
    "ContractViolation": "contracts.errors",
    "Freshness": "contracts.model",
    "LockProblem": "contracts.lock",
    "RowCountBounds": "contracts.model",
    "RowSplit": "contracts.rowchecks",
    "Violation": "contracts.errors",
    "all_contracts": "contracts.loader",
    "arrow_schema": "contracts.arrow",
    "audit": "contracts.gx_audit",
    "check_dbt_models": "contracts.dbt_models",
    "check_feast_fields": "contracts.feast_schema",
    "check_lock": "contracts.lock",
    "conform": "contracts.arrow",
    "dbt_columns": "contracts.dbt_models",
    "diff_contracts": "contracts.compat",
    "expectation_suite": "contracts.gx_audit",
    "feast_fields": "contracts.feast_schema",
    "lint": "contracts.lint",
    "load_contract": "contracts.loader",
    "load_feast": "contracts.feast_import",
    "parse_contract": "contracts.loader",
    "read_contract": "contracts.loader",
    "split_rows": "contracts.rowchecks",
    "write_lock": "contracts.lock",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (PEP 562)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'contracts' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "AuditFailure",
    "AuditResult",
    "Change",
    "Column",
    "Contract",
    "ContractError",
    "ContractViolation",
    "Freshness",
    "LockProblem",
    "RowCountBounds",
    "RowSplit",
    "Violation",
    "all_contracts",
    "arrow_schema",
    "audit",
    "check_dbt_models",
    "check_feast_fields",
    "check_lock",
    "conform",
    "dbt_columns",
    "diff_contracts",
    "expectation_suite",
    "feast_fields",
    "lint",
    "load_contract",
    "load_feast",
    "parse_contract",
    "read_contract",
    "split_rows",
    "write_lock",
]
