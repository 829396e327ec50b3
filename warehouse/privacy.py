"""What leaves the raw layer: user pseudonyms (a keyed HMAC, so DWD and later layers never hold a clear
user id) and attributes passed through their column's attribute policy (:mod:`contracts.policy`)."""

from __future__ import annotations

import hashlib
import hmac

import polars as pl

from contracts import Contract


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


def without_private(frame: pl.DataFrame, contract: Contract) -> pl.DataFrame:
    """``frame`` with every column of ``contract`` that names an attribute policy passed through it.

    Applied to every row of a layer above ODS whatever its source (canonical JSON lines, mapped
    files, OTLP), so prompts, ids, emails, addresses, key hashes, headers and error text stay raw.
    """
    from contracts.policy import load_policy

    for column in contract.columns:
        if column.attribute_policy is None or column.name not in frame.columns:
            continue
        frame = frame.with_columns(load_policy(column.attribute_policy).clean_column(frame.get_column(column.name)))
    return frame
