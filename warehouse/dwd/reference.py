"""Reference lists (prices, quotas) are loaded whole or not at all.

A reference CSV replaces its table, so a file that is partly wrong must change nothing: its
header must name every column the loader needs, and every row must keep the table's contract,
before anything is committed. Cells are read as text; the contract's row checks type them and
name the cell that is no date or number.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl

from contracts.errors import InputError
from warehouse.tables import Table

#: The CSV line of each row (the header is line 1), carried through the row checks.
_LINE = "_line"


def read_checked(csv_path: Path, table: Table, what: str, *, optional: frozenset[str] = frozenset()) -> pl.DataFrame:
    """The rows of ``csv_path`` as text, in the contract's column order, when its header names every
    column of ``table`` but ``optional`` (added as empty), nothing else, and no row breaks the contract.

    Raises :class:`ValueError` naming the missing or unknown columns, or each bad line and its rules.
    """
    from contracts import split_rows

    try:
        frame = pl.read_csv(csv_path, infer_schema=False)
    except Exception as exc:  # polars raises several types for unreadable CSV
        raise InputError(f"{csv_path}: not a readable {what} CSV: {exc}") from None
    columns = table.contract.column_names
    missing = [c for c in columns if c not in optional and c not in frame.columns]
    if missing:
        raise InputError(f"{csv_path}: missing {what} column(s) {missing}; expected {columns}")
    extra = sorted(set(frame.columns) - set(columns))
    if extra:
        raise InputError(f"{csv_path}: unknown {what} column(s) {extra}; expected {columns}")
    frame = frame.with_columns(pl.lit(None, pl.String).alias(c) for c in columns if c not in frame.columns)
    frame = frame.select(columns).with_columns(pl.col(c).str.strip_chars().replace("", None) for c in columns)
    rejected = split_rows(frame.with_row_index(_LINE, offset=2), table.contract, keep=[_LINE]).rejected
    if rejected.height:
        raise InputError(_refusal(csv_path, what, rejected, frame.height))
    return frame


def _refusal(csv_path: Path, what: str, rejected: pl.DataFrame, rows: int) -> str:
    """Which rules the bad rows broke (how many rows each) and the first few bad lines."""
    counts = Counter(rule for rules in rejected["rules"].to_list() for rule in rules)
    summary = ", ".join(f"{rule} ({n} row{'s' * (n > 1)})" for rule, n in sorted(counts.items()))
    lines = [
        f"line {row[_LINE]}: broke {', '.join(row['rules'])}: "
        f"{ {k: v for k, v in row.items() if k not in (_LINE, 'rules')} }"
        for row in rejected.head(5).to_dicts()
    ]
    more = [f"… and {rejected.height - 5} more"] if rejected.height > 5 else []
    return (
        f"{csv_path}: {rejected.height} of {rows} {what} row(s) break the contract ({summary}); nothing loaded:"
        "\n  " + "\n  ".join(lines + more)
    )
