"""Identifiers: unique-by-construction 64-bit ids that look random, and their hex text.

Request ids are a bijective scramble (splitmix64 finalizer) of a structured counter
``(namespace, day, row)``, keyed by the seed: unique without any bookkeeping, different
for every seed, and never shared between valid requests and fault lines.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

_M64 = (1 << 64) - 1
NS_REQUEST, NS_FAULT, NS_TRACE, NS_USER, NS_KEY = 1, 2, 3, 4, 5
#: Workflows' call request ids, span ids (and service instances), trace ids (high half; the low half + 8).
NS_WORKFLOW_REQUEST, NS_SPAN, NS_WORKFLOW_TRACE = 32, 33, 34


def mix64(x: np.ndarray, key: int) -> np.ndarray:
    """Bijective 64-bit scramble of ``x`` (uint64) under ``key`` (splitmix64 finalizer)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) ^ np.uint64(key & _M64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def seed_key(seed: int, namespace: int) -> int:
    """The scramble key for one id namespace of one seed."""
    return int(mix64(np.array([(seed * 16 + namespace) & _M64], dtype=np.uint64), 0x5EED)[0])


def structured_ids(seed: int, namespace: int, day_index: int, rows: np.ndarray) -> np.ndarray:
    """Unique uint64 ids for ``rows`` (< 2**32) of day ``day_index`` in ``namespace``."""
    counter = (np.uint64(namespace) << np.uint64(56)) | (np.uint64(day_index) << np.uint64(32)) | rows.astype(np.uint64)
    return mix64(counter, seed_key(seed, namespace))


_HEX_PAIRS = np.array([ord(a) | ord(b) << 8 for a in "0123456789abcdef" for b in "0123456789abcdef"], dtype="<u2")


def hex_ascii(values: np.ndarray, digits: int = 16) -> np.ndarray:
    """(n, digits) uint8 array of lowercase hex ASCII of the low ``digits`` nibbles of uint64 values."""
    v = np.ascontiguousarray(values, dtype=">u8").view(np.uint8).reshape(-1, 8)
    return _HEX_PAIRS[v].view(np.uint8).reshape(-1, 16)[:, 16 - digits :]


def ascii_rows_to_series(rows: np.ndarray, name: str) -> pl.Series:
    """A polars String series from an (n, width) uint8 ASCII array, without Python strings."""
    n, width = rows.shape
    data = np.ascontiguousarray(rows).reshape(-1)
    offsets = np.arange(n + 1, dtype=np.int64) * width
    arr = pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pl.Series(name, arr)


def hex_series(name: str, prefix: str, *parts: np.ndarray, digits: int = 16) -> pl.Series:
    """``prefix`` + hex of each uint64 part (``digits`` nibbles each) as a polars String series."""
    n = len(parts[0])
    pieces = [np.broadcast_to(np.frombuffer(prefix.encode(), dtype=np.uint8), (n, len(prefix)))]
    pieces += [hex_ascii(p, digits) for p in parts]
    return ascii_rows_to_series(np.concatenate(pieces, axis=1), name)


def hex_strings(prefix: str, values: np.ndarray, digits: int = 16) -> list[str]:
    """Python strings ``prefix + hex`` (for small id sets: users, keys, manifest lists)."""
    rows = np.concatenate(
        [
            np.broadcast_to(np.frombuffer(prefix.encode(), dtype=np.uint8), (len(values), len(prefix))),
            hex_ascii(values, digits),
        ],
        axis=1,
    )
    width = rows.shape[1]
    blob = np.ascontiguousarray(rows).tobytes().decode("ascii")
    return [blob[i * width : (i + 1) * width] for i in range(len(values))]
