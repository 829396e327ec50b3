"""The GX audit worker's messages: JSON and Arrow IPC, nothing that runs code when it is read.

A message is one frame: the lengths of its two parts (8 bytes each, big-endian), a JSON header
and an Arrow IPC stream (empty when the message carries no table). What the header holds beyond
JSON — the contract and the audit result, Arrow types, datetimes, durations, decimals, tuples —
are tagged objects ``{"$": tag, "v": ...}``; reading one rebuilds data, and the only classes it
builds are those of :data:`_CLASSES`, from their fields. A contract travels as its view: the ODCS
document and the file path, which the audit does not read, stay behind.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import json
import socket
import struct
import traceback
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from contracts.errors import ConflictError, ContractError, InputError, StrataError, TransientError
from contracts.gx_audit import AuditFailure, AuditResult
from contracts.model import Column, Contract, Freshness, RowCountBounds
from contracts.types import parse_type, type_name

_CLASSES: dict[str, Any] = {
    c.__name__: c for c in (Contract, Column, RowCountBounds, Freshness, AuditResult, AuditFailure)
}
#: Fields that take no part in a contract's equality and that the audit does not read.
_LEFT_BEHIND = {"odcs", "path"}
#: Exceptions other than the built-in ones that come back as themselves; another of Strata's errors comes
#: back as the nearest of these, so a refusal in the worker stays a refusal.
_ERRORS: dict[str, type[Exception]] = {
    f"{c.__module__}.{c.__qualname__}": c
    for c in (ContractError, InputError, TransientError, ConflictError, StrataError)
}
_LENGTHS = struct.Struct("!QQ")


def send(conn: socket.socket, header: dict[str, Any], table: pa.Table | None = None) -> None:
    """Write one message: ``header`` (JSON-able after :func:`encode`) and ``table``."""
    text = json.dumps(header, separators=(",", ":")).encode()
    data: Any = b""
    if table is not None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        data = sink.getvalue()
    conn.sendall(_LENGTHS.pack(len(text), data.size if table is not None else 0) + text)
    if table is not None:
        conn.sendall(memoryview(data))


def receive(conn: socket.socket) -> tuple[dict[str, Any], pa.Table | None]:
    """Read one message; ``EOFError`` when the connection closes before or inside it."""
    text_size, data_size = _LENGTHS.unpack(_read(conn, _LENGTHS.size))
    header = json.loads(_read(conn, text_size))
    if not isinstance(header, dict):
        raise ValueError("a message header must be a JSON object")
    table = pa.ipc.open_stream(pa.py_buffer(_read(conn, data_size))).read_all() if data_size else None
    return header, table


def _read(conn: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    while view:
        got = conn.recv_into(view)
        if not got:
            raise EOFError("the connection closed inside a message" if len(view) < size else "the connection closed")
        view = view[got:]
    return buffer


def encode(value: Any) -> Any:
    """``value`` as JSON-able data; ``TypeError`` for what has no encoding here."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"cannot send a dict with keys that are not strings: {list(value)[:3]!r}")
        items = {k: encode(v) for k, v in value.items()}
        return {"$": "dict", "v": items} if "$" in value else items
    if isinstance(value, tuple):
        return {"$": "tuple", "v": [encode(v) for v in value]}
    if isinstance(value, datetime):
        return {"$": "datetime", "v": value.isoformat()}
    if isinstance(value, date):
        return {"$": "date", "v": value.isoformat()}
    if isinstance(value, timedelta):
        return {"$": "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, Decimal):
        return {"$": "decimal", "v": str(value)}
    if isinstance(value, pa.DataType):
        return {"$": "arrow", "v": type_name(value)}
    cls = _CLASSES.get(type(value).__name__)
    if cls is type(value):
        return {
            "$": cls.__name__,
            "v": {
                f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(cls) if f.name not in _LEFT_BEHIND
            },
        }
    raise TypeError(f"cannot send a {type(value).__name__} to or from the GX audit worker")


def decode(data: Any) -> Any:
    """What :func:`encode` made ``data`` of; ``ValueError`` for a tag it does not know."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    tag = data.get("$")
    if tag is None:
        return {k: decode(v) for k, v in data.items()}
    value: Any = data.get("v")
    if tag == "dict":
        return {k: decode(v) for k, v in value.items()}
    if tag == "tuple":
        return tuple(decode(v) for v in value)
    if tag == "datetime":
        return datetime.fromisoformat(value)
    if tag == "date":
        return date.fromisoformat(value)
    if tag == "timedelta":
        return timedelta(*value)
    if tag == "decimal":
        return Decimal(value)
    if tag == "arrow":
        return parse_type(value)
    if tag in _CLASSES:
        return _CLASSES[tag](**{k: decode(v) for k, v in value.items()})
    raise ValueError(f"unknown tag {tag!r} in a GX audit worker message")


@functools.lru_cache(maxsize=64)
def contract_text(contract: Contract) -> str:
    """``contract`` as JSON text (a process sends the same few contracts again and again: 2 ms
    each way for a DWS table's, saved)."""
    return json.dumps(encode(contract), separators=(",", ":"))


@functools.lru_cache(maxsize=64)
def contract_from(text: str) -> Contract:
    """The contract :func:`contract_text` made ``text`` of."""
    contract = decode(json.loads(text))
    if not isinstance(contract, Contract):
        raise ValueError(f"not a contract: {type(contract).__name__}")
    return contract


def error(exc: BaseException) -> dict[str, Any]:
    """``exc`` as data for :func:`exception`: its type, nearest built-in type (or kind of Strata error),
    arguments and traceback."""
    cls = type(exc)
    base = next(c for c in cls.__mro__ if c.__module__ == "builtins" or f"{c.__module__}.{c.__qualname__}" in _ERRORS)
    try:
        args = encode(exc.args)
        json.dumps(args)
    except (TypeError, ValueError):
        args = None
    return {
        "type": f"{cls.__module__}.{cls.__qualname__}",
        "base": base.__name__ if base.__module__ == "builtins" else f"{base.__module__}.{base.__qualname__}",
        "args": args,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
    }


def exception(data: dict[str, Any]) -> Exception:
    """The exception :func:`error` described: the same type for a built-in one or :data:`_ERRORS`',
    else its nearest built-in type, the message led by the original type's name. The worker's
    traceback is a note on it."""
    name = str(data.get("type"))
    module, _, short = name.rpartition(".")
    known = getattr(builtins, short, None) if module == "builtins" else _ERRORS.get(name)
    base = _ERRORS.get(str(data.get("base"))) or getattr(builtins, str(data.get("base")), None)
    exc: Exception | None = None
    if isinstance(known, type) and issubclass(known, Exception) and data.get("args") is not None:
        try:
            exc = known(*decode(data["args"]))
        except Exception:  # arguments it does not take: the fallback below
            exc = None
    if exc is None:
        cls = base if isinstance(base, type) and issubclass(base, Exception) else RuntimeError
        try:
            exc = cls(f"{name}: {data.get('message')}")
        except Exception:  # a built-in type that needs more arguments
            exc = RuntimeError(f"{name}: {data.get('message')}")
    exc.add_note(f"raised in the GX audit worker:\n{data.get('traceback', '')}".rstrip())
    return exc
