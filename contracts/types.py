"""Column types: the Arrow type names a contract's ``physicalType`` uses, and their mappings.

A contract names each column's physical type with Arrow's own spelling (``int64``,
``timestamp[us, tz=UTC]``, ``list<string>``, ``decimal128(18, 9)``) so the Arrow schema is
read straight off the file. Decimals hold money: sums of them are exact, so parts add up to
their total to the last digit, which floats do not promise. Everything else — polars dtypes
for row checks, DuckDB types for dbt, pandas dtypes for the GX audit — is derived from the
Arrow type here, in one place.
"""

from __future__ import annotations

import re
from typing import cast

import polars as pl
import pyarrow as pa

from contracts.errors import ContractError

_TIMESTAMP = re.compile(r"^timestamp\[(ms|us|ns)(?:,\s*tz=([^\]]+))?\]$")
_LIST = re.compile(r"^list<(?:item:\s*)?(.+)>$")
_DECIMAL = re.compile(r"^decimal(?:128)?\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
#: The widest decimal Arrow's decimal128 (and DuckDB's DECIMAL) can hold.
MAX_DECIMAL_PRECISION = 38

#: ODCS logical type each Arrow type family must be declared with.
_LOGICAL = {
    "string": "string",
    "large_string": "string",
    "binary": "string",  # with logicalTypeOptions.format: binary
    "large_binary": "string",
    "bool": "boolean",
    "date32": "date",
    "float32": "number",
    "float64": "number",
}

_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _key(t: pa.DataType) -> str:
    """``str(t)`` spelt as contracts spell it (``date32``, ``float64``), the key of the tables below."""
    return {"date32[day]": "date32", "double": "float64", "float": "float32", "halffloat": "float16"}.get(
        str(t), str(t)
    )


def parse_type(name: str) -> pa.DataType:
    """The Arrow type a ``physicalType`` string names; :class:`ContractError` when it names none."""
    text = name.strip()
    if m := _TIMESTAMP.match(text):
        return pa.timestamp(m.group(1), tz=m.group(2).strip() if m.group(2) else None)
    if m := _LIST.match(text):
        return pa.list_(parse_type(m.group(1)))
    if m := _DECIMAL.match(text):
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
            raise ContractError(
                f"{name!r}: a decimal needs 1 <= precision <= {MAX_DECIMAL_PRECISION} and 0 <= scale <= precision"
            )
        return pa.decimal128(precision, scale)
    if text == "bool":
        return pa.bool_()
    if text in (
        "float64",
        "float32",
        "date32",
        "string",
        "large_string",
        "binary",
        "large_binary",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
    ):
        return pa.type_for_alias(text)
    raise ContractError(
        f"unknown physical type {name!r} (use an Arrow type name such as int64, "
        "string, timestamp[us, tz=UTC], list<string>, decimal128(18, 9))"
    )


def type_name(t: pa.DataType) -> str:
    """The canonical contract spelling of an Arrow type (inverse of :func:`parse_type`)."""
    if pa.types.is_timestamp(t):
        return f"timestamp[{t.unit}, tz={t.tz}]" if t.tz else f"timestamp[{t.unit}]"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{type_name(t.value_type)}>"
    return _key(t)


def logical_type(t: pa.DataType) -> str:
    """The ODCS ``logicalType`` that goes with an Arrow type."""
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_list(t):
        return "array"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_decimal(t):
        return "number"
    return _LOGICAL.get(_key(t), "object")


def is_widening(old: pa.DataType, new: pa.DataType) -> bool:
    """True when every value of ``old`` is exactly representable in ``new`` (a compatible change)."""
    if old == new:
        return True
    if _key(old) in _INT_BITS and _key(new) in _INT_BITS:
        return _INT_BITS[_key(new)] > _INT_BITS[_key(old)]
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return True
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):  # no fewer digits on either side of the point
        return cast(bool, new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale)
    if pa.types.is_list(old) and pa.types.is_list(new):
        return is_widening(old.value_type, new.value_type)
    return False


def polars_dtype(t: pa.DataType) -> pl.DataType:
    """The polars dtype row checks cast a column to."""
    if pa.types.is_timestamp(t):
        return pl.Datetime(t.unit, t.tz)
    if pa.types.is_list(t):
        return pl.List(polars_dtype(t.value_type))
    if pa.types.is_decimal(t):
        return pl.Decimal(t.precision, t.scale)
    simple: dict[str, pl.DataType] = {
        "string": pl.String(),
        "large_string": pl.String(),
        "binary": pl.Binary(),
        "large_binary": pl.Binary(),
        "bool": pl.Boolean(),
        "date32": pl.Date(),
        "float32": pl.Float32(),
        "float64": pl.Float64(),
        "int8": pl.Int8(),
        "int16": pl.Int16(),
        "int32": pl.Int32(),
        "int64": pl.Int64(),
        "uint8": pl.UInt8(),
        "uint16": pl.UInt16(),
        "uint32": pl.UInt32(),
        "uint64": pl.UInt64(),
    }
    try:
        return simple[_key(t)]
    except KeyError:
        raise ValueError(f"no polars dtype for Arrow type {t}") from None


def duckdb_type(t: pa.DataType) -> str:
    """The DuckDB type name dbt declares for a column of Arrow type ``t``."""
    if pa.types.is_timestamp(t):
        return "TIMESTAMP WITH TIME ZONE" if t.tz else "TIMESTAMP"
    if pa.types.is_list(t):
        return f"{duckdb_type(t.value_type)}[]"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    simple = {
        "string": "VARCHAR",
        "large_string": "VARCHAR",
        "binary": "BLOB",
        "large_binary": "BLOB",
        "bool": "BOOLEAN",
        "date32": "DATE",
        "float32": "FLOAT",
        "float64": "DOUBLE",
        "int8": "TINYINT",
        "int16": "SMALLINT",
        "int32": "INTEGER",
        "int64": "BIGINT",
        "uint8": "UTINYINT",
        "uint16": "USMALLINT",
        "uint32": "UINTEGER",
        "uint64": "UBIGINT",
    }
    try:
        return simple[_key(t)]
    except KeyError:
        raise ValueError(f"no DuckDB type for Arrow type {t}") from None


def pandas_dtype_name(t: pa.DataType) -> str:
    """The pandas dtype a column has after :func:`contracts.gx_audit.to_pandas` (GX type check)."""
    if pa.types.is_timestamp(t):
        return f"datetime64[{t.unit}, {t.tz}]" if t.tz else f"datetime64[{t.unit}]"
    if pa.types.is_integer(t):
        return str(t).replace("int", "Int").replace("uInt", "UInt")
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_floating(t):
        return _key(t)
    return "object"  # strings, lists, and decimals (Python Decimal objects)
