"""A read-only view of one table contract: what the enforcers need, typed, nothing else.

:class:`Contract` and :class:`Column` are built by :mod:`contracts.loader` from an ODCS
document; the document itself stays reachable as ``Contract.odcs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pyarrow as pa

from contracts.types import type_name


@dataclass(frozen=True)
class Column:
    """One column: its Arrow type and every rule the contract states about it.

    ``rules`` holds each stated rule's parameter by rule name (``required`` → True,
    ``min`` → 1, ``future`` → a timedelta), in the order of :func:`contracts.rules.rules`,
    which says what each one means. ``tolerances`` maps an aggregate rule
    (``allowed_values``, ``null_rate``) to the share of rows allowed to break it (0.05 =
    5 %); such a rule is checked by the audit only, never row by row.
    """

    name: str
    arrow_type: pa.DataType
    logical_type: str
    rules: tuple[tuple[str, Any], ...] = ()
    description: str = ""
    primary_key_position: int | None = None
    partition_position: int | None = None
    classification: str | None = None
    tolerances: tuple[tuple[str, float], ...] = ()
    #: The attribute policy applied to this column's JSON object of attributes (its name, a
    #: file of ``contracts/policies``; see :mod:`contracts.policy`), None for other columns.
    attribute_policy: str | None = None

    def rule(self, name: str) -> Any:
        """The parameter of rule ``name`` on this column; None when the contract does not state it."""
        for key, value in self.rules:
            if key == name:
                return value
        return None

    # Typed shortcuts to the shipped rules' parameters (any rule's is ``rule(name)``), of the type each
    # rule's ``read`` (contracts.rules) makes of it.

    @property
    def required(self) -> bool:
        return self.rule("required") is not None

    @property
    def unique(self) -> bool:
        return self.rule("unique") is not None

    @property
    def allowed_values(self) -> tuple[Any, ...] | None:
        return cast("tuple[Any, ...] | None", self.rule("allowed_values"))

    @property
    def minimum(self) -> Any:
        return self.rule("min")

    @property
    def maximum(self) -> Any:
        return self.rule("max")

    @property
    def pattern(self) -> str | None:
        return cast("str | None", self.rule("pattern"))

    @property
    def min_items(self) -> int | None:
        return cast("int | None", self.rule("min_items"))

    @property
    def max_future(self) -> timedelta | None:
        return cast("timedelta | None", self.rule("future"))

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
