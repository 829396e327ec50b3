"""User pseudonyms: a keyed HMAC, so DWD and later layers never hold a clear user id."""

from __future__ import annotations

import hashlib
import hmac

import polars as pl


def pseudonym(key: bytes, user_id: str) -> str:
    """The stable pseudonym of one user id under ``key`` (32 hex characters)."""
    return hmac.new(key, user_id.encode(), hashlib.sha256).hexdigest()[:32]


def pseudonymize(values: pl.Series, key: bytes) -> pl.Series:
    """Pseudonyms of a column of user ids (nulls stay null); hashes each distinct id once."""
    distinct = values.drop_nulls().unique()
    table = {v: pseudonym(key, v) for v in distinct.to_list()}
    return values.replace_strict(table, default=None, return_dtype=pl.String)
