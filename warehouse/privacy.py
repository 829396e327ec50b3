"""User pseudonyms: a keyed HMAC, so DWD and later layers never hold a clear user id."""

from __future__ import annotations

import hashlib
import hmac

import polars as pl


def pseudonym(key: bytes, user_id: str) -> str:
    """The stable pseudonym of one user id under ``key`` (32 hex characters)."""
    return hmac.new(key, user_id.encode(), hashlib.sha256).hexdigest()[:32]


def pseudonymize(values: pl.Series, key: bytes, known: dict[str, str] | None = None) -> pl.Series:
    """Pseudonyms of a column of user ids (nulls stay null); hashes each distinct id once.

    ``known`` carries pseudonyms computed for earlier batches (and receives the new ones).
    """
    known = {} if known is None else known
    batch = {}
    for user in values.drop_nulls().unique().to_list():
        if user not in known:
            known[user] = pseudonym(key, user)
        batch[user] = known[user]
    return values.replace_strict(batch, default=None, return_dtype=pl.String)
