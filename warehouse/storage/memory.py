"""Keeping memory bounded while streaming large partitions."""

from __future__ import annotations

from typing import TypeVar

import polars as pl

T = TypeVar("T", pl.DataFrame, pl.Series)


def detach(data: T) -> T:
    """A compact copy that shares no buffers with the frame it was cut from.

    Polars string and binary columns are views: a few rows filtered out of a large batch
    keep the whole batch's buffers alive. Anything kept across batches goes through here.
    """
    if isinstance(data, pl.Series):
        copied = pl.from_arrow(data.to_arrow(), schema_overrides=None)
        assert isinstance(copied, pl.Series)
        return copied.alias(data.name)
    copied_frame = pl.from_arrow(data.to_arrow())
    assert isinstance(copied_frame, pl.DataFrame)
    return copied_frame
