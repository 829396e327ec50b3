"""Feast field schemas from a contract, and a drift check for feature-view definitions.

Feature views over the DWS tables declare their fields with :func:`feast_fields` so their
types cannot drift from the table contract; :func:`check_feast_fields` verifies any fields
(or a feature view) against it. Feast is imported inside the functions, through
:func:`~contracts.feast_import.load_feast`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from contracts.errors import ContractError
from contracts.feast_import import load_feast
from contracts.model import Contract


def feast_type(t: pa.DataType) -> Any:
    """The Feast type of a column of Arrow type ``t``; ``ContractError`` when Feast has none."""
    load_feast()
    from feast import types as ft

    simple = {
        "string": ft.String,
        "large_string": ft.String,
        "binary": ft.Bytes,
        "large_binary": ft.Bytes,
        "bool": ft.Bool,
        "int32": ft.Int32,
        "int64": ft.Int64,
        "float": ft.Float32,
        "double": ft.Float64,
    }
    if pa.types.is_timestamp(t):
        return ft.UnixTimestamp
    if pa.types.is_list(t):
        return ft.Array(feast_type(t.value_type))
    if str(t) in simple:
        return simple[str(t)]
    raise ContractError(f"Arrow type {t} has no Feast type")


def feast_fields(contract: Contract, columns: Sequence[str]) -> list[Any]:
    """``feast.Field`` objects for ``columns`` of ``contract``, typed and described from it."""
    load_feast()
    from feast import Field

    fields = []
    for name in columns:
        try:
            c = contract.column(name)
        except KeyError as e:
            raise ContractError(str(e.args[0])) from None
        fields.append(Field(name=name, dtype=feast_type(c.arrow_type), description=c.description))
    return fields


def check_feast_fields(fields: Iterable[Any] | Any, contract: Contract) -> list[str]:
    """Drift between Feast fields (or a feature view's ``schema``) and ``contract``; empty = agree."""
    if hasattr(fields, "schema") and not isinstance(fields, (list, tuple)):
        fields = fields.schema
    problems = []
    for f in fields:
        if f.name not in contract:
            problems.append(f"field {f.name!r} is not a column of {contract.name}")
            continue
        c = contract.column(f.name)
        try:
            want = feast_type(c.arrow_type)
        except ContractError as e:
            problems.append(f"field {f.name!r}: {e}")
            continue
        if f.dtype != want:
            problems.append(
                f"field {f.name!r} has Feast type {f.dtype}, contract {contract.name} says {want} ({c.physical_type})"
            )
    return problems
