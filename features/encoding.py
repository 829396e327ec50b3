"""Feast's online-store bytes, computed a column at a time.

Feast writes each value as ``ValueProto.SerializeToString()`` and each entity as
``serialize_entity_key(EntityKeyProto, 3)``; it builds one proto per value in Python. These
functions give the same bytes from Arrow columns (null and NaN → the empty ``ValueProto``,
as Feast's conversion does), vectorized where the wire format allows; types without a fast
path go through Feast's own converter. Tests compare every path with Feast's output.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa

from contracts import load_feast

#: Feast's ``ValueType.STRING``: the type tag of string join keys and their values.
_STRING = 2
#: Protobuf tags of ``feast.types.Value`` fields (field number << 3 | wire type).
_DOUBLE_TAG, _FLOAT_TAG, _INT64_TAG, _INT32_TAG, _STRING_TAG, _BOOL_TAG = 0x29, 0x35, 0x20, 0x18, 0x12, 0x38


def entity_keys(join_key: str, values: pa.Array) -> list[bytes]:
    """``serialize_entity_key`` (version 3) of a single string join key, for each value."""
    name = join_key.encode()
    prefix = struct.pack("<III", 1, _STRING, len(name)) + name + struct.pack("<I", _STRING)
    pack = struct.Struct("<I").pack
    return [prefix + pack(len(b)) + b for b in (v.encode() for v in values.to_pylist())]


def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF  # negative numbers: ten bytes of two's complement, as protobuf does
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _fixed(values: np.ndarray, tag: int, valid: np.ndarray) -> list[bytes]:
    width = values.dtype.itemsize + 1
    raw = np.empty((len(values), width), np.uint8)
    raw[:, 0] = tag
    raw[:, 1:] = values.astype(values.dtype.newbyteorder("<"), copy=False).view(np.uint8).reshape(len(values), -1)
    buf = raw.tobytes()
    return [buf[i * width : (i + 1) * width] if ok else b"" for i, ok in enumerate(valid.tolist())]


def values(
    column: pa.Array | pa.ChunkedArray, value_type: Any, *, texts: bool = True
) -> tuple[list[bytes], list[str | None]]:
    """The serialized ``ValueProto`` and Feast's ``value_text`` (``str`` of the value) of each entry
    (``texts=False``: no texts, an empty list — Redis stores none)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if pa.types.is_floating(kind) and kind.bit_width in (32, 64):
        array = column.to_numpy(zero_copy_only=False)
        valid = ~np.isnan(array)
        encoded = _fixed(array, _DOUBLE_TAG if kind.bit_width == 64 else _FLOAT_TAG, valid)
        if not texts:
            return encoded, []
        return encoded, [str(x) if ok else None for x, ok in zip(array.tolist(), valid.tolist())]
    if pa.types.is_integer(kind) and kind.bit_width in (32, 64) and pa.types.is_signed_integer(kind):
        tag = bytes([_INT64_TAG if kind.bit_width == 64 else _INT32_TAG])
        cache: dict[int, bytes] = {}
        encoded = []
        shown: list[str | None] = []
        for x in column.to_pylist():
            if x is None:
                encoded.append(b"")
                shown.append(None)
                continue
            b = cache.get(x)
            if b is None:
                b = cache[x] = tag + _varint(x)
            encoded.append(b)
            shown.append(str(x))
        return encoded, shown if texts else []
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        out = [
            b"" if x is None else bytes([_STRING_TAG]) + _varint(len(e := x.encode())) + e for x in column.to_pylist()
        ]
        return out, column.to_pylist()
    if pa.types.is_boolean(kind):
        flags = column.to_pylist()
        return (
            [b"" if x is None else bytes([_BOOL_TAG, int(x)]) for x in flags],
            [None if x is None else str(x) for x in flags],
        )
    return _with_feast(column, value_type)


def _with_feast(column: pa.Array, value_type: Any) -> tuple[list[bytes], list[str | None]]:
    load_feast()
    from feast.infra.online_stores.helpers import extract_text_and_num
    from feast.type_map import python_values_to_proto_values

    protos = python_values_to_proto_values(column.to_numpy(zero_copy_only=False), value_type)
    return [p.SerializeToString() for p in protos], [extract_text_and_num(p, False)[0] for p in protos]
