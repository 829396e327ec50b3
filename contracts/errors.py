"""Strata's one error family, and the two ways a contract says no.

Every error a user can cause, and every fault of the machine or the store Strata meets, is a
:class:`StrataError` of one of three kinds, which say whether a retry can help: :class:`InputError`
(the input or the configuration is wrong: the same call fails the same way), :class:`TransientError`
(a fault of the machine or the store that may pass: retry) and :class:`ConflictError` (another writer
holds or changed what this one needs: wait, then retry). An exception outside the family is a bug.
The family sits here, at the bottom of the import layers, so every package can raise it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar


class StrataError(Exception):
    """The root of Strata's errors; :attr:`retry` says whether trying again can help.

    Messages speak the library's terms (the argument, the table), never a front end's: ``argument``
    names the argument that would change the outcome (``tenant``, ``mapping``), and ``step`` the step
    of ``strata/pipeline.py`` whose run would make what is missing (``build_dwd``, ``train``), so a
    front end can say how to set the one and run the other (the CLI names its option and command)."""

    retry: ClassVar[bool] = False

    def __init__(self, message: str, *, argument: str | None = None, step: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument
        self.step = step


class InputError(StrataError):
    """The input is wrong (a bad argument, file or setting, or input not there): retrying cannot help."""


class TransientError(StrataError):
    """A fault of the machine or the store (a full disk, an unreachable store, throttling) that may
    pass: a retry can help."""

    retry = True


class ConflictError(StrataError):
    """Another writer holds or changed what this one needs (a lock, a commit): wait, then retry."""

    retry = True


class ContractError(InputError):
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


class ContractViolation(InputError):
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
