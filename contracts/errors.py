"""The two ways a contract says no: a broken contract file, and data that breaks a contract."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class ContractError(ValueError):
    """A contract file is missing, malformed or inconsistent; the message names file and field."""


@dataclass(frozen=True)
class Violation:
    """One rule that data broke: which rule, on which column, how often, with examples."""

    rule: str
    column: str | None
    message: str
    count: int | None = None
    examples: tuple[Any, ...] = field(default=())

    def __str__(self) -> str:
        where = f"column {self.column!r}: " if self.column else ""
        count = f" ({self.count:,} row{'s' if self.count != 1 else ''})" if self.count is not None else ""
        examples = f"; e.g. {list(self.examples)!r}" if self.examples else ""
        return f"[{self.rule}] {where}{self.message}{count}{examples}"


class ContractViolation(ValueError):
    """Data does not conform to a table's contract.

    ``table`` names the contract, ``violations`` every rule broken; ``rule`` and ``column``
    are those of the first, for callers that only report one.
    """

    def __init__(self, table: str, violations: Sequence[Violation]):
        if not violations:
            raise ValueError("ContractViolation needs at least one violation")
        self.table = table
        self.violations = list(violations)
        lines = "\n  ".join(str(v) for v in self.violations)
        super().__init__(f"{table}: data breaks its contract:\n  {lines}")

    @property
    def rule(self) -> str:
        return self.violations[0].rule

    @property
    def column(self) -> str | None:
        return self.violations[0].column

    @property
    def rules(self) -> list[str]:
        """Every rule id broken, sorted, without repeats."""
        return sorted({v.rule for v in self.violations})
