"""The Arrow schema of a contract, and ``conform``: the last gate before a table is written.

``conform`` returns a table with exactly the contract's columns, order and types, or raises
:class:`~contracts.errors.ContractViolation` naming every rule broken. Only safe casts
are made: widening numbers (int32 → int64, int → float), whole floats to integers,
timestamps between units and zones without losing precision, string/binary/list encodings.
A string is never parsed into a number or time here — that is the row checks' job.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, cast

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from contracts.errors import ContractViolation, Violation
from contracts.model import Column, Contract
from contracts.types import type_name


def arrow_schema(contract: Contract) -> pa.Schema:
    """The Arrow schema every writer of the table conforms to (required columns are not nullable)."""
    return pa.schema([pa.field(c.name, c.arrow_type, nullable=not c.required) for c in contract.columns])


def conform(
    data: pa.Table | pl.DataFrame,
    contract: Contract,
    *,
    check_values: bool = True,
    now: datetime | None = None,
) -> pa.Table:
    """``data`` as a table of exactly the contract's schema, or :class:`ContractViolation`.

    Missing nullable columns are filled with nulls; a missing required column, an extra
    column, an unsafe cast or a null in a required column is a violation. With
    ``check_values`` the value rules (ranges, allowed values, patterns, future timestamps,
    key uniqueness) are checked too, so nothing that breaks the contract is ever written.
    """
    table = data.to_arrow() if isinstance(data, pl.DataFrame) else data
    if not isinstance(table, pa.Table):
        raise TypeError(f"conform() takes a pyarrow Table or a polars DataFrame, not {type(data).__name__}")
    violations: list[Violation] = []
    present = set(table.column_names)
    for name in table.column_names:
        if name not in contract:
            violations.append(Violation(f"{name}.extra", name, "column is not in the contract"))
    arrays: list[pa.ChunkedArray] = []
    for c in contract.columns:
        if c.name not in present:
            if c.required:
                violations.append(Violation(f"{c.name}.required", c.name, "required column is missing"))
            arrays.append(pa.chunked_array([pa.nulls(table.num_rows, c.arrow_type)], c.arrow_type))
            continue
        arr, problem = _cast(table.column(c.name), c)
        if problem:
            violations.append(problem)
            continue
        if c.required and arr.null_count:
            violations.append(Violation(f"{c.name}.required", c.name, "nulls in a required column", arr.null_count))
        arrays.append(arr)
    if violations:
        raise ContractViolation(contract.name, violations)
    out = pa.Table.from_arrays(arrays, schema=arrow_schema(contract))
    if check_values:
        from contracts.rowchecks import find_violations

        found = find_violations(pl.from_arrow(out), contract, now)  # type: ignore[arg-type]
        if found:
            raise ContractViolation(contract.name, found)
    return out


def _cast(arr: pa.ChunkedArray, c: Column) -> tuple[pa.ChunkedArray, Violation | None]:
    target = c.arrow_type
    src = arr.type
    if pa.types.is_dictionary(src):
        arr, src = arr.cast(src.value_type), src.value_type
    if src == target:
        return arr, None
    if pa.types.is_null(src):
        return pa.chunked_array([pa.nulls(len(arr), target)], target), None
    if not _castable(src, target):
        why = " (a naive timestamp needs a time zone)" if pa.types.is_timestamp(src) and not src.tz else ""
        return arr, Violation(
            f"{c.name}.type", c.name, f"type {type_name(src)} cannot be converted safely to {type_name(target)}{why}"
        )
    try:
        return arr.cast(target, safe=True), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        bad = _lossy_examples(arr, target)
        return arr, Violation(
            f"{c.name}.type",
            c.name,
            f"{type_name(src)} → {type_name(target)} would lose data ({e})",
            len(bad) or None,
            tuple(bad[:5]),
        )


class _TypePredicates(Protocol):
    """``pyarrow.types`` as used here (pyarrow is untyped): its ``is_*`` functions answer a bool."""

    def __getattr__(self, name: str) -> Callable[[pa.DataType], bool]: ...


def _castable(src: pa.DataType, target: pa.DataType) -> bool:
    """Whether a value-checked cast from ``src`` to ``target`` is allowed at all."""
    t: _TypePredicates = pa.types
    if t.is_string(target) or t.is_large_string(target):
        return t.is_string(src) or t.is_large_string(src) or t.is_string_view(src)
    if t.is_binary(target) or t.is_large_binary(target):
        return t.is_binary(src) or t.is_large_binary(src) or t.is_binary_view(src)
    if t.is_integer(target) or t.is_floating(target):
        return t.is_integer(src) or t.is_floating(src)
    if t.is_decimal(target):  # exact sources only: Arrow refuses a cast that would drop digits
        return t.is_decimal(src) or t.is_integer(src)
    if t.is_boolean(target):
        return t.is_boolean(src)
    if t.is_date(target):
        return t.is_date(src)
    if t.is_timestamp(target):
        return t.is_timestamp(src) and (src.tz is None) == (target.tz is None)
    if t.is_list(target):
        return (t.is_list(src) or t.is_large_list(src) or t.is_list_view(src)) and _castable(
            src.value_type, target.value_type
        )
    return False


def _lossy_examples(arr: pa.ChunkedArray, target: pa.DataType) -> list[Any]:
    """Values of ``arr`` that do not survive a round trip through ``target``."""
    try:
        there = arr.cast(target, safe=False)
        back = there.cast(arr.type, safe=False)
        differs = pc.fill_null(pc.not_equal(arr, back), True)
        bad = pc.and_(pc.is_valid(arr), differs)
        return cast(list[Any], arr.filter(bad).to_pylist())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return []
