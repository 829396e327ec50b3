"""A read-only view of one table contract: what the enforcers need, typed, nothing else.

:class:`Contract` and :class:`Column` are built by :mod:`contracts.loader` from an ODCS
document; the document itself stays reachable as ``Contract.odcs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from contracts.types import type_name


@dataclass(frozen=True)
class Column:
    """One column: its Arrow type and every rule the contract states about it.

    ``tolerances`` maps an aggregate rule (``allowed_values``, ``null_rate``) to the share
    of rows allowed to break it (0.05 = 5 %); such a rule is checked by the audit only,
    never row by row.
    """

    name: str
    arrow_type: pa.DataType
    logical_type: str
    required: bool = False
    unique: bool = False
    description: str = ""
    allowed_values: tuple[Any, ...] | None = None
    minimum: Any = None
    maximum: Any = None
    pattern: str | None = None
    min_items: int | None = None
    max_future: timedelta | None = None
    primary_key_position: int | None = None
    partition_position: int | None = None
    classification: str | None = None
    tolerances: tuple[tuple[str, float], ...] = ()

    @property
    def physical_type(self) -> str:
        """The Arrow type as the contract spells it, e.g. ``timestamp[us, tz=UTC]``."""
        return type_name(self.arrow_type)

    @property
    def nullable(self) -> bool:
        return not self.required

    def tolerance(self, rule: str) -> float:
        """Share of rows allowed to break aggregate rule ``rule`` (0.0 when strict)."""
        return dict(self.tolerances).get(rule, 0.0)

    def rule_ids(self) -> list[str]:
        """The rule ids this column's checks report, in a stable order."""
        ids = [f"{self.name}.type"]
        if self.required:
            ids.append(f"{self.name}.required")
        if self.minimum is not None:
            ids.append(f"{self.name}.min")
        if self.maximum is not None:
            ids.append(f"{self.name}.max")
        if self.allowed_values is not None:
            ids.append(f"{self.name}.allowed_values")
        if self.pattern is not None:
            ids.append(f"{self.name}.pattern")
        if self.min_items is not None:
            ids.append(f"{self.name}.min_items")
        if self.max_future is not None:
            ids.append(f"{self.name}.future")
        if self.unique:
            ids.append(f"{self.name}.unique")
        if "null_rate" in dict(self.tolerances):
            ids.append(f"{self.name}.null_rate")
        return ids


@dataclass(frozen=True)
class RowCountBounds:
    """How many rows one audited write (one partition) may hold; ``maximum`` None = unbounded."""

    minimum: int = 0
    maximum: int | None = None


@dataclass(frozen=True)
class Freshness:
    """The SLA: data in ``column`` is at most ``max_latency`` old when published, every ``frequency``."""

    column: str
    max_latency: timedelta
    frequency: timedelta | None = None


@dataclass(frozen=True)
class Contract:
    """One table's contract. ``name`` is ``layer.table``; ``columns`` are in schema order."""

    name: str
    layer: str
    version: str
    owner: str
    description: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    partition_columns: tuple[str, ...] = ()
    row_count: RowCountBounds = RowCountBounds()
    freshness: Freshness | None = None
    status: str = "active"
    #: What writes the table: ``dbt`` (a model of the ADS dbt project; the default for ADS
    #: tables) or ``python`` (Strata's own code: every other layer, and ADS tables such as
    #: feature consistency or scores).
    writer: str = "python"
    path: Path | None = field(default=None, compare=False)
    odcs: Any = field(default=None, compare=False, hash=False, repr=False)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def major(self) -> int:
        """Major part of the semantic version."""
        return int(self.version.split(".", 1)[0])

    def column(self, name: str) -> Column:
        """The column called ``name``; ``KeyError`` naming the table when there is none."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no column {name!r}")

    def __contains__(self, name: object) -> bool:
        return any(c.name == name for c in self.columns)

    @property
    def unique_columns(self) -> list[str]:
        """Columns checked for duplicates on their own (a one-column key is checked as the key)."""
        return [c.name for c in self.columns if c.unique and (c.name,) != self.primary_key]

    def rule_ids(self) -> list[str]:
        """Every rule id the enforcers of this contract can report."""
        unique = set(self.unique_columns)
        ids = [r for c in self.columns for r in c.rule_ids()
               if not (r == f"{c.name}.unique" and c.name not in unique)]
        if self.primary_key:
            ids.append("primary_key.unique")
        ids += ["table.row_count", "table.columns"]
        return ids
