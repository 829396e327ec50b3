"""The column rules a contract can state, each defined once; every enforcer iterates :func:`rules`.

A rule kind (required, unique, allowed values, a range, a pattern, a maximum length, …) is
one object that knows each of its faces: where an ODCS property states it and how it is read
(the loader), the polars expression that flags a row breaking it (row checks and ``conform``), its Great
Expectations expectations (the audit), its entry in a column's shape (the lock) and how a
change of it is classified (compatibility: tightening is breaking), how ``strata contracts
show`` prints it and the dbt data tests it implies. Its id in quarantine rows, violations
and audit failures is ``<column>.<name>``.

A column keeps only the rules' parameters (``Column.rules``: name → value), never the rule
objects, so a contract pickles to the audit worker as plain data and the worker checks the
rules it knows. Adding a rule is one class here, listed in :data:`_RULES`; :func:`registered`
adds one for the length of a ``with`` block (a test, an experiment).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, cast

import polars as pl
import pyarrow as pa

from contracts.errors import InputError
from contracts.types import logical_type, polars_dtype

if TYPE_CHECKING:
    from contracts.model import Column, Contract


class Invalid(InputError):
    """A rule stated wrongly in a contract; ``at`` extends the field it was read from (``.arguments``)."""

    def __init__(self, message: str, at: str = "") -> None:
        super().__init__(message)
        self.at = at


@dataclass(frozen=True)
class Change:
    """One difference between two versions of a contract."""

    kind: str
    column: str | None
    detail: str
    breaking: bool

    def __str__(self) -> str:
        where = f"{self.column}: " if self.column else ""
        return f"{'BREAKING' if self.breaking else 'compatible'} {self.kind}: {where}{self.detail}"


class Rule:
    """One kind of column rule. A subclass sets the class attributes and overrides what it has.

    Methods that take a :class:`Column` are only called for columns that state the rule
    (``column.rule(name)`` is not None); the others take the rule's parameter or its shape.
    """

    #: The id suffix (``<column>.<name>``), and the key of the parameter in ``Column.rules``.
    name: ClassVar[str]
    #: Where an ODCS property states it: one of the property's fields (``required``),
    #: ``logicalTypeOptions.<option>``, ``quality.<metric>`` or ``customProperties.<property>``.
    odcs: ClassVar[str]
    #: Its key in a column's shape (the lock file); None when the shape holds it otherwise.
    lock_key: ClassVar[str | None] = None
    #: Its shape when not stated (such entries are left out of the lock file).
    lock_default: ClassVar[Any] = None
    #: Broken by a null or a missing column (``required``): checked on the input value before
    #: the cast (a value that does not cast breaks ``.type``, not this), and a column added
    #: with it is a breaking change. Every other rule lets nulls pass.
    about_nulls: ClassVar[bool] = False

    def rule_id(self, column: str) -> str:
        return f"{column}.{self.name}"

    @property
    def section(self) -> str:
        """The part of the ODCS property :attr:`odcs` names: ``logicalTypeOptions``, …; "" for a field."""
        return self.odcs.rpartition(".")[0]

    @property
    def key(self) -> str:
        """The field, option, metric or custom property :attr:`odcs` names."""
        return self.odcs.rpartition(".")[2]

    # ---- the loader -----------------------------------------------------------------------

    def fits(self, t: pa.DataType) -> bool:
        """Whether a column of Arrow type ``t`` may state the rule."""
        return True

    def read(self, value: Any, t: pa.DataType) -> Any:
        """The parameter stated by ``value`` (the ODCS field, option or quality object); None
        when it states nothing. :class:`Invalid` when it is wrong."""
        return value

    def conflict(self, stated: Mapping[str, Any]) -> str | None:
        """Why the column's stated parameters (by rule name) contradict each other, or None."""
        return None

    # ---- the enforcers --------------------------------------------------------------------

    def applies(self, column: Column, contract: Contract) -> bool:
        """Whether the enforcers check the rule on ``column`` (and can report its id)."""
        return column.rule(self.name) is not None

    def row_check(self, col: pl.Expr, column: Column, now: datetime) -> pl.Expr | None:
        """True where a row breaks the rule (nulls are handled by the caller), or None when
        the rule is not checked row by row. ``col`` is the column, contract-typed unless
        :attr:`about_nulls`; ``now`` is the check time."""
        return None

    def violation(self, column: Column) -> str:
        """What a row breaking the rule has, for ``conform``'s errors."""
        return f"values breaking {self.name} {column.rule(self.name)!r}"

    def expectations(self, column: Column, now: datetime) -> list[Any]:
        """The GX expectations of the audit (their ``meta`` is set by the caller)."""
        return []

    def recheck(self, column: Column, now: datetime) -> list[Any]:
        """Exact expectations that replace :meth:`expectations` where those fail (empty: none)."""
        return []

    # ---- compatibility and the lock -------------------------------------------------------

    def shape(self, param: Any) -> Any:
        """The parameter as JSON-ready data: the column shape's entry under :attr:`lock_key`."""
        return param

    def changes(self, column: str, old: Any, new: Any, t: pa.DataType) -> list[Change]:
        """The change from shape ``old`` to shape ``new`` of a column now of Arrow type ``t``
        (any change is breaking unless the rule says which direction relaxes it)."""
        if old == new:
            return []
        return [Change(f"{self.name}_changed", column, f"{old!r} → {new!r}", True)]

    # ---- people ---------------------------------------------------------------------------

    def show(self, column: Column) -> str | None:
        """The rule as ``strata contracts show`` prints it; None to leave it out."""
        return f"{self.name} {column.rule(self.name)}"

    def dbt_tests(self, column: Column) -> list[Any]:
        """The dbt data tests it implies on the column of an ADS model."""
        return []


def bound_change(column: str, what: str, old: Any, new: Any, *, lower: bool) -> list[Change]:
    """A lower bound (``lower``) narrows when it rises; an upper bound when it falls; adding one narrows."""
    if old == new:
        return []
    if new is None:
        return [Change("range_widened", column, f"{what} {old!r} dropped", False)]
    try:
        narrowed = old is None or (new > old if lower else new < old)
    except TypeError:  # the column's type changed too; bounds of different kinds
        narrowed = True
    return [Change("range_narrowed" if narrowed else "range_widened", column, f"{what}: {old!r} → {new!r}", narrowed)]


# ---- the rules --------------------------------------------------------------------------------


class _Flag(Rule):
    """A yes/no property of the column (``required``, ``unique``); adding it is breaking."""

    lock_default = False

    def read(self, value: Any, t: pa.DataType) -> Any:
        return True if value else None

    def shape(self, param: Any) -> Any:
        return param is not None

    def changes(self, column: str, old: Any, new: Any, t: pa.DataType) -> list[Change]:
        if old == new:
            return []
        return [
            Change(
                f"{self.lock_key}_{'added' if new else 'removed'}", column, f"{self.lock_key}: {old} → {new}", bool(new)
            )
        ]


class Required(_Flag):
    """No nulls, and the column must be there (ODCS ``required``)."""

    name = odcs = lock_key = "required"
    about_nulls = True

    def row_check(self, col: pl.Expr, column: Column, now: datetime) -> pl.Expr | None:
        return col.is_null()

    def expectations(self, column: Column, now: datetime) -> list[Any]:
        import great_expectations.expectations as gxe

        return [gxe.ExpectColumnValuesToNotBeNull(column=column.name)]

    def show(self, column: Column) -> str | None:
        return None  # ``show`` has a column of its own for it


class Unique(_Flag):
    """No value twice (ODCS ``unique``); a one-column key is checked only as the key."""

    name = odcs = lock_key = "unique"

    def applies(self, column: Column, contract: Contract) -> bool:
        return column.unique and (column.name,) != contract.primary_key

    def row_check(self, col: pl.Expr, column: Column, now: datetime) -> pl.Expr | None:
        return col.is_not_null() & ~col.is_first_distinct()

    def violation(self, column: Column) -> str:
        return "repeated values in a unique column"

    def expectations(self, column: Column, now: datetime) -> list[Any]:
        import great_expectations.expectations as gxe

        return [gxe.ExpectColumnValuesToBeUnique(column=column.name)]

    def show(self, column: Column) -> str | None:
        return "unique"


class AllowedValues(Rule):
    """Values from a set (quality metric ``invalidValues`` with ``validValues``); with a
    tolerance it is aggregate, checked by the audit only."""

    name = lock_key = "allowed_values"
    odcs = "quality.invalidValues"

    def read(self, value: Any, t: pa.DataType) -> Any:
        values = (value.arguments or {}).get("validValues")
        if not isinstance(values, list) or not values:
            raise Invalid("invalidValues needs a non-empty validValues list", ".arguments.validValues")
        extra = set(value.arguments or {}) - {"validValues"}
        if extra:
            raise Invalid(f"unsupported arguments {sorted(extra)} (only validValues)", ".arguments")
        return tuple(_allowed_value(v, t) for v in values)

    def row_check(self, col: pl.Expr, column: Column, now: datetime) -> pl.Expr | None:
        if column.tolerance(self.name):
            return None
        values = pl.Series(list(column.rule(self.name)), dtype=polars_dtype(column.arrow_type))
        return col.is_not_null() & ~col.is_in(values.implode())

    def violation(self, column: Column) -> str:
        return f"values outside {list(column.rule(self.name))}"

    def expectations(self, column: Column, now: datetime) -> list[Any]:
        import great_expectations.expectations as gxe

        return [
            gxe.ExpectColumnValuesToBeInSet(
                column=column.name, value_set=list(column.rule(self.name)), mostly=1 - column.tolerance(self.name)
            )
        ]

    def shape(self, param: Any) -> Any:
        return list(param) if param is not None else None

    def changes(self, column: str, old: Any, new: Any, t: pa.DataType) -> list[Change]:
        if old == new:
            return []
        if new is None:
            return [Change("allowed_values_widened", column, "allowed-values rule dropped", False)]
        if old is None or not set(old) <= set(new):
            lost = "rule added" if old is None else f"values {sorted(set(old) - set(new), key=str)} no longer allowed"
            return [Change("allowed_values_narrowed", column, lost, True)]
        if set(old) != set(new):
            return [
                Change("allowed_values_widened", column, f"values {sorted(set(new) - set(old), key=str)} added", False)
            ]
        return []

    def show(self, column: Column) -> str | None:
        tol = column.tolerance(self.name)
        return f"in {{{', '.join(map(str, column.rule(self.name)))}}}" + (f" (≤{tol:.0%} off)" if tol else "")

    def dbt_tests(self, column: Column) -> list[Any]:
        return [{"accepted_values": {"arguments": {"values": list(column.rule(self.name))}}}]


class Bound(Rule):
    """A one-sided limit on a column's values: the least allowed (``lower``) or the greatest.

    The audit expects it of the column's extreme (2 ms an expectation against 8 ms value by
    value, most of a DWS table's audit) and, where that fails, value by value: that verdict
    is exact (an all-null column has no minimum, yet breaks no bound) and counts the values.
    """

    lower: ClassVar[bool]

    def limit(self, column: Column, now: datetime) -> Any:
        """The limit values are compared with at check time ``now``."""
        return column.rule(self.name)

    def row_check(self, col: pl.Expr, column: Column, now: datetime) -> pl.Expr | None:
        limit = pl.lit(self.limit(column, now))
        return col < limit if self.lower else col > limit

    def expectations(self, column: Column, now: datetime) -> list[Any]:
        import great_expectations.expectations as gxe

        limit = _gx_value(self.limit(column, now))
        if self.lower:
            return [gxe.ExpectColumnMinToBeBetween(column=column.name, min_value=limit)]
        return [gxe.ExpectColumnMaxToBeBetween(column=column.name, max_value=limit)]

    def recheck(self, column: Column, now: datetime) -> list[Any]:
        import great_expectations.expectations as gxe

        limit = _gx_value(self.limit(column, now))
        low, high = (limit, None) if self.lower else (None, limit)
        return [gxe.ExpectColumnValuesToBeBetween(column=column.name, min_value=low, max_value=high)]


class _Range(Bound):
    """``logicalTypeOptions.minimum`` / ``maximum``: inclusive, ISO text for timestamps and dates."""

    lock_key: ClassVar[str]

    def fits(self, t: pa.DataType) -> bool:
        return logical_type(t) in ("integer", "number", "timestamp", "date")

    def read(self, value: Any, t: pa.DataType) -> Any:
        return _bound(value, t)

    def shape(self, param: Any) -> Any:
        if isinstance(param, Decimal):  # as text: exact in the lock file
            return str(param)
        return param.isoformat() if isinstance(param, (date, datetime)) else param

    def changes(self, column: str, old: Any, new: Any, t: pa.DataType) -> list[Change]:
        return bound_change(column, self.lock_key, _from_shape(old, t), _from_shape(new, t), lower=self.lower)


class Minimum(_Range):
    name = "min"
    odcs = "logicalTypeOptions.minimum"
    lock_key = "minimum"
    lower = True

    def violation(self, column: Column) -> str:
        return f"values below the minimum {column.rule(self.name)}"

    def show(self, column: Column) -> str | None:
        return f"≥ {column.rule(self.name)}"


class Maximum(_Range):
    name = "max"
    odcs = "logicalTypeOptions.maximum"
    lock_key = "maximum"
    lower = False

    def conflict(self, stated: Mapping[str, Any]) -> str | None:
        low, high = stated.get(Minimum.name), stated.get(self.name)
        if low is not None and high is not None and low > high:
            return f"minimum {low!r} is above maximum {high!r}"
        return None

    def violation(self, column: Column) -> str:
        return f"values above the maximum {column.rule(self.name)}"

    def show(self, column: Column) -> str | None:
        return f"≤ {column.rule(self.name)}"


class Pattern(Rule):
    """``logicalTypeOptions.pattern``: a regular expression every string value matches."""

    name = lock_key = "pattern"
    odcs = "logicalTypeOptions.pattern"

    def fits(self, t: pa.DataType) -> bool:
        return logical_type(t) == "string" and not pa.types.is_binary(t)

    def read(self, value: Any, t: pa.DataType) -> Any:
        try:
            re.compile(value)  # the audit's (pandas) dialect
        except re.error as e:
            raise Invalid(f"not a valid regular expression: {e}") from None
        try:
            pl.Series([""], dtype=pl.String).str.contains(value)  # the row checks' (Rust) dialect
        except pl.exceptions.ComputeError as e:
            raise Invalid(f"does not compile for polars: {e}") from None
        return value

    def row_check(self, col: pl.Expr, column: Column, now: datetime) -> pl.Expr | None:
        return ~col.str.contains(column.rule(self.name))

    def violation(self, column: Column) -> str:
        return f"values not matching {column.rule(self.name)}"

    def expectations(self, column: Column, now: datetime) -> list[Any]:
        import great_expectations.expectations as gxe

        return [gxe.ExpectColumnValuesToMatchRegex(column=column.name, regex=column.rule(self.name))]

    def changes(self, column: str, old: Any, new: Any, t: pa.DataType) -> list[Change]:
        if old == new:
            return []
        dropped = new is None
        return [Change("pattern_removed" if dropped else "pattern_changed", column, f"{old!r} → {new!r}", not dropped)]

    def show(self, column: Column) -> str | None:
        return f"~ {column.rule(self.name)}"


class MaxLength(Rule):
    """``logicalTypeOptions.maxLength``: the longest string allowed, in characters (what
    ODCS and GX count; a character is at most 4 bytes of UTF-8)."""

    name = lock_key = "max_length"
    odcs = "logicalTypeOptions.maxLength"

    def fits(self, t: pa.DataType) -> bool:
        return logical_type(t) == "string" and not pa.types.is_binary(t)

    def read(self, value: Any, t: pa.DataType) -> Any:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise Invalid(f"{value!r} is not a positive whole number")
        return value

    def row_check(self, col: pl.Expr, column: Column, now: datetime) -> pl.Expr | None:
        longest: int = column.rule(self.name)
        return col.str.len_chars() > longest

    def violation(self, column: Column) -> str:
        return f"strings longer than {column.rule(self.name)} characters"

    def expectations(self, column: Column, now: datetime) -> list[Any]:
        import great_expectations.expectations as gxe

        return [gxe.ExpectColumnValueLengthsToBeBetween(column=column.name, max_value=column.rule(self.name))]

    def changes(self, column: str, old: Any, new: Any, t: pa.DataType) -> list[Change]:
        return bound_change(column, self.name, old, new, lower=False)

    def show(self, column: Column) -> str | None:
        return f"≤ {column.rule(self.name)} chars"


class MinItems(Rule):
    """``logicalTypeOptions.minItems``: the shortest list allowed (row checks only)."""

    name = lock_key = "min_items"
    odcs = "logicalTypeOptions.minItems"

    def fits(self, t: pa.DataType) -> bool:
        return logical_type(t) == "array"

    def read(self, value: Any, t: pa.DataType) -> Any:
        return int(value)

    def row_check(self, col: pl.Expr, column: Column, now: datetime) -> pl.Expr | None:
        shortest: int = column.rule(self.name)
        return col.list.len() < shortest

    def violation(self, column: Column) -> str:
        return f"lists with fewer than {column.rule(self.name)} items"

    def changes(self, column: str, old: Any, new: Any, t: pa.DataType) -> list[Change]:
        return bound_change(column, self.name, old, new, lower=True)

    def show(self, column: Column) -> str | None:
        return f"≥ {column.rule(self.name)} items"


class MaxFuture(Bound):
    """``customProperties.maxFutureSkew`` (ISO 8601 duration, e.g. P1D): a timestamp lies at
    most this far after the check time (the one rule ODCS has no slot for)."""

    name = "future"
    odcs = "customProperties.maxFutureSkew"
    lock_key = "max_future_s"
    lower = False

    def fits(self, t: pa.DataType) -> bool:
        return cast(bool, pa.types.is_timestamp(t))

    def read(self, value: Any, t: pa.DataType) -> Any:
        m = _DURATION.match(str(value))
        if not m or not any(m.groups()):
            raise Invalid(f"{value!r} is not an ISO 8601 duration such as P1D or PT2H")
        d, h, mi, s = (int(g or 0) for g in m.groups())
        return timedelta(days=d, hours=h, minutes=mi, seconds=s)

    def limit(self, column: Column, now: datetime) -> Any:
        return now + column.rule(self.name)

    def violation(self, column: Column) -> str:
        return f"timestamps later than the check time + {column.rule(self.name)}"

    def shape(self, param: Any) -> Any:
        return param.total_seconds() if param is not None else None

    def changes(self, column: str, old: Any, new: Any, t: pa.DataType) -> list[Change]:
        return bound_change(column, "max_future", old, new, lower=False)

    def show(self, column: Column) -> str | None:
        return f"≤ now + {span(column.rule(self.name))}"


class NullRate(Rule):
    """Quality metric ``nullValues``: the share of nulls a column may hold. Aggregate: its
    limit is the column's tolerance (the shape's ``tolerances``), checked by the audit only."""

    name = "null_rate"
    odcs = "quality.nullValues"

    def read(self, value: Any, t: pa.DataType) -> Any:
        return True

    def conflict(self, stated: Mapping[str, Any]) -> str | None:
        if Required.name in stated and self.name in stated:
            return "nullValues on a required column: required already forbids nulls"
        return None

    def applies(self, column: Column, contract: Contract) -> bool:
        return column.tolerance(self.name) > 0

    def expectations(self, column: Column, now: datetime) -> list[Any]:
        import great_expectations.expectations as gxe

        return [gxe.ExpectColumnValuesToNotBeNull(column=column.name, mostly=1 - column.tolerance(self.name))]

    def show(self, column: Column) -> str | None:
        tol = column.tolerance(self.name)
        return f"≤{tol:.0%} null" if tol else None


#: Every rule kind, in the order a column's shape (the lock file) lists them, and by name.
_RULES: list[Rule] = [
    Required(),
    Unique(),
    AllowedValues(),
    Minimum(),
    Maximum(),
    Pattern(),
    MaxLength(),
    MinItems(),
    MaxFuture(),
    NullRate(),
]
_BY_NAME: dict[str, Rule] = {r.name: r for r in _RULES}


def rules() -> tuple[Rule, ...]:
    """Every rule kind, in a stable order."""
    return tuple(_RULES)


def rule_named(name: str) -> Rule:
    """The rule whose ids end in ``.<name>``; ``KeyError`` when this process knows none."""
    return _BY_NAME[name]


def checked(column: Column, contract: Contract) -> list[Rule]:
    """The rules the enforcers check on ``column`` of ``contract``: of those it states, the
    ones this process knows (a contract may come from one that registered more)."""
    return [
        rule for name, _ in column.rules if (rule := _BY_NAME.get(name)) is not None and rule.applies(column, contract)
    ]


def rule_ids(contract: Contract) -> list[str]:
    """Every rule id the enforcers of ``contract`` can report."""
    ids: list[str] = []
    for c in contract.columns:
        ids += [f"{c.name}.type", *(rule.rule_id(c.name) for rule in checked(c, contract))]
    if contract.primary_key:
        ids.append("primary_key.unique")
    ids += ["table.row_count", "table.columns"]
    return ids


@contextmanager
def registered(rule: Rule) -> Iterator[Rule]:
    """Add ``rule`` to the rules for the length of the block, then restore them.

    Only this process knows it: the shared audit worker (:mod:`contracts.audit_worker`)
    skips a rule it does not have, so audit such a contract with :func:`contracts.gx_audit.audit`.
    """
    clash = [r for r in _RULES if r.name == rule.name or r.odcs == rule.odcs]
    if clash:
        raise ValueError(f"rule {rule.name!r} ({rule.odcs}) clashes with {clash[0].name!r} ({clash[0].odcs})")
    _RULES.append(rule)
    _BY_NAME[rule.name] = rule
    try:
        yield rule
    finally:
        _RULES.remove(rule)
        del _BY_NAME[rule.name]


def span(td: timedelta) -> str:
    """``timedelta(hours=26)`` → ``26h``; whole days as ``d``."""
    seconds = int(td.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$")


def _bound(value: Any, t: pa.DataType) -> Any:
    """A range option's value as a value of the column's type."""
    if pa.types.is_timestamp(t):
        text = value.isoformat() if isinstance(value, datetime) else str(value)
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise Invalid(f"{value!r} is not an ISO 8601 timestamp") from None
        if parsed.tzinfo is None:
            raise Invalid(f"{value!r} needs a UTC offset")
        return parsed
    if pa.types.is_date(t):
        try:
            return value if isinstance(value, date) else date.fromisoformat(str(value))
        except ValueError:
            raise Invalid(f"{value!r} is not an ISO 8601 date") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Invalid(f"{value!r} is not a number")
    if pa.types.is_decimal(t):
        return Decimal(str(value))
    if pa.types.is_integer(t):
        if float(value) != int(value):
            raise Invalid(f"{value!r} is not a whole number for an integer column")
        return int(value)
    return float(value)


def _from_shape(value: Any, t: pa.DataType) -> Any:
    """A bound from a shape (JSON) back to a comparable value."""
    if value is None or not isinstance(value, str):
        return value
    if pa.types.is_decimal(t):
        return Decimal(value)
    return datetime.fromisoformat(value) if pa.types.is_timestamp(t) else date.fromisoformat(value)


def _allowed_value(value: Any, t: pa.DataType) -> Any:
    ok = (
        (pa.types.is_string(t) and isinstance(value, str))
        or (pa.types.is_integer(t) and isinstance(value, int) and not isinstance(value, bool))
        or (pa.types.is_floating(t) and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (pa.types.is_boolean(t) and isinstance(value, bool))
    )
    if not ok:
        raise Invalid(f"value {value!r} does not fit column type {t}", ".arguments.validValues")
    return float(value) if pa.types.is_floating(t) else value


def _gx_value(value: Any) -> Any:
    """A limit as GX compares it with a pandas column (timestamps as ``pd.Timestamp``)."""
    import pandas as pd

    return pd.Timestamp(value) if isinstance(value, datetime) else value
