"""Vectorized row checks: split a frame into rows that keep their contract and rows that don't.

Every rule is one polars expression evaluated over whole columns; there is no Python loop
over rows. Input columns may be looser than the contract (strings from parsed JSON): each
is cast non-strictly to the contract type, and a value that was present but did not cast
(or would lose information) breaks ``<column>.type``. Rule ids are listed in the package
docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import polars as pl

from contracts.errors import Violation
from contracts.model import Contract
from contracts.rules import checked, rule_named
from contracts.types import polars_dtype

_TRUE = ["true", "1", "yes", "y", "t"]
_FALSE = ["false", "0", "no", "n", "f"]
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000}
PK_RULE = "primary_key.unique"


@dataclass(frozen=True)
class RowSplit:
    """``valid``: contract-typed rows (plus ``keep`` columns); ``rejected``: input rows + ``rules``."""

    valid: pl.DataFrame
    rejected: pl.DataFrame

    def rule_counts(self) -> dict[str, int]:
        """How many rejected rows broke each rule."""
        if self.rejected.height == 0:
            return {}
        counts = self.rejected.select(pl.col("rules").explode().value_counts(sort=True)).unnest("rules")
        return dict(zip(counts["rules"].to_list(), counts["count"].to_list()))


def split_rows(
    df: pl.DataFrame,
    contract: Contract,
    *,
    now: datetime | None = None,
    keep: Sequence[str] = (),
) -> RowSplit:
    """Check every row of ``df`` against ``contract`` and split it into valid and rejected rows.

    ``now`` is the check time for ``<column>.future`` rules (default: the current UTC time).
    ``keep`` names input columns outside the contract to carry into ``valid`` (e.g. the raw
    line). ``rejected`` holds the input columns as given plus ``rules``: every rule the row
    broke, sorted. Of rows sharing a primary key, the first that breaks no other rule is
    kept and the others are rejected with ``primary_key.unique``.
    """
    missing = [k for k in keep if k not in df.columns]
    clash = [k for k in keep if k in contract]
    if missing or clash:
        raise ValueError(
            f"keep={list(keep)}: {missing or clash} {'not in the input' if missing else 'already contract columns'}"
        )
    typed, flags = _typed_with_flags(df, contract, now)
    mask = typed.select(pl.any_horizontal(*flags) if flags else pl.lit(False)).to_series()
    names = [*contract.column_names, *keep]
    if not mask.any():
        return RowSplit(typed.select(names), df.clear().with_columns(rules=pl.lit([], dtype=pl.List(pl.String))))
    rules = rules_column(typed.filter(mask), flags)
    return RowSplit(
        valid=typed.filter(~mask).select(names),
        rejected=df.filter(mask).with_columns(rules),
    )


def _typed_with_flags(df: pl.DataFrame, contract: Contract, now: datetime | None) -> tuple[pl.DataFrame, list[str]]:
    """The contract-typed columns of ``df`` plus one boolean column per rule (named by rule id)."""
    now = _check_time(now)
    stage1: list[pl.Expr] = []
    for k in df.columns:
        if k not in contract:
            stage1.append(pl.col(k))
    flags: list[str] = []
    type_flags: list[pl.Expr] = []
    for c in contract.columns:
        target = polars_dtype(c.arrow_type)
        present = c.name in df.columns
        if present:
            value, broken = cast_expr(c.name, df.schema[c.name], target)
            stage1.append(value.alias(c.name))
            if broken is not None:
                stage1.append(pl.col(c.name).alias(source_column(c.name)))
                type_flags.append(broken.alias(f"{c.name}.type"))
                flags.append(f"{c.name}.type")
        else:
            stage1.append(pl.lit(None, dtype=target).alias(c.name))
        given = pl.col(c.name) if present else pl.lit(None, dtype=target)  # the input, before the cast
        for rule in checked(c, contract):
            if rule.about_nulls and (expr := rule.row_check(given, c, now)) is not None:
                stage1.append(expr.alias(rule.rule_id(c.name)))
                flags.append(rule.rule_id(c.name))
    typed = df.select(stage1)
    if type_flags:
        typed = typed.with_columns(type_flags).drop(
            source_column(f[: -len(".type")]) for f in flags if f.endswith(".type")
        )
    value_flags = value_rule_exprs(contract, now)
    if value_flags:
        typed = typed.with_columns(expr.alias(rule) for rule, expr in value_flags)
        flags += [rule for rule, _ in value_flags]
    if contract.primary_key:
        typed = typed.with_columns(_pk_flag(typed, contract.primary_key, flags).alias(PK_RULE))
        flags.append(PK_RULE)
    return typed, sorted(flags)


def value_rule_exprs(contract: Contract, now: datetime | None = None) -> list[tuple[str, pl.Expr]]:
    """(rule id, boolean expression) for every per-row value rule, over contract-typed columns.

    An expression is true where the row breaks the rule; nulls never break a value rule
    (that is ``<column>.required``). Rules with a tolerance are aggregate and not listed.
    """
    now = _check_time(now)
    out: list[tuple[str, pl.Expr]] = []
    for c in contract.columns:
        for rule in checked(c, contract):
            if not rule.about_nulls and (expr := rule.row_check(pl.col(c.name), c, now)) is not None:
                out.append((rule.rule_id(c.name), expr.fill_null(False)))
    return out


def _pk_flag(typed: pl.DataFrame, keys: Sequence[str], flags: list[str]) -> pl.Series:
    """Rows that repeat a key: of each key, the first row breaking no other rule stays."""
    key_ok = pl.all_horizontal(pl.col(k).is_not_null() for k in keys)
    key = pl.col(keys[0]) if len(keys) == 1 else pl.struct(*keys)
    # A 64-bit hash finds candidate repeats cheaply; the exact keys decide among them.
    candidate = typed.select(key_ok & key.hash().is_duplicated()).to_series()
    if not candidate.any():
        return candidate.alias(PK_RULE)
    idx = candidate.arg_true()
    sub = typed[idx].select(*keys, ok=~pl.any_horizontal(*flags) if flags else pl.lit(True))
    ok = pl.col("ok")
    n_ok_so_far = ok.cast(pl.UInt32).cum_sum().over(keys)
    n_ok = ok.cast(pl.UInt32).sum().over(keys)
    first = pl.int_range(pl.len()).over(keys) == 0
    repeat = sub.select(pl.when(ok).then(n_ok_so_far > 1).otherwise((n_ok > 0) | ~first)).to_series()
    return candidate.scatter(idx, repeat).alias(PK_RULE)


def rules_column(flagged: pl.DataFrame, flags: list[str]) -> pl.Series:
    """``rules``: the sorted rule ids whose flag column is set, per row of ``flagged``.

    Flags are packed into bit codes; only the distinct codes (a handful of failure patterns)
    are turned into lists, then joined back — far cheaper than building a list per row.
    """
    chunks = [flags[i : i + 62] for i in range(0, len(flags), 62)]
    codes = flagged.select(
        pl.sum_horizontal(pl.col(f).cast(pl.UInt64) * (1 << i) for i, f in enumerate(chunk)).alias(f"__code{j}")
        for j, chunk in enumerate(chunks)
    )
    combos = codes.unique()
    lists = [
        [f for chunk, code in zip(chunks, row) for i, f in enumerate(chunk) if code >> i & 1] for row in combos.rows()
    ]
    combos = combos.with_columns(rules=pl.Series(lists, dtype=pl.List(pl.String)))
    return codes.join(combos, on=codes.columns, how="left", maintain_order="left").get_column("rules")


def source_column(name: str) -> str:
    """Name under which :func:`cast_expr`'s ``broken`` expression reads the uncast input."""
    return f"__source.{name}"


def cast_expr(name: str, src: pl.DataType, target: pl.DataType) -> tuple[pl.Expr, pl.Expr | None]:
    """(typed value, broken) for casting column ``name`` from ``src`` to ``target`` leniently.

    ``typed`` reads the input column ``name``. ``broken`` — true where a value was present
    but did not convert exactly, None when the conversion cannot fail — is evaluated
    afterwards, over the typed column ``name`` and the input kept as ``source_column(name)``,
    so an expensive conversion (timestamp parsing) runs once.
    """
    col = pl.col(name)
    original = pl.col(source_column(name))
    present = original.is_not_null()
    failed = present & col.is_null()
    impossible = (pl.lit(None, dtype=target), present)

    if src == pl.Null:
        return col.cast(target), None
    if src == target:
        return col, ((~col.is_finite()).fill_null(False) if target.is_float() else None)
    if target == pl.String:
        if src in (pl.String, pl.Categorical) or isinstance(src, pl.Enum) or src.is_numeric() or src == pl.Boolean:
            return col.cast(pl.String), None
        if isinstance(src, pl.Struct):
            return col.struct.json_encode(), None
        return impossible
    if target.is_numeric():
        return _to_number(col, original, present, failed, src, target) or impossible
    if target == pl.Boolean:
        if src == pl.String:
            text = col.str.strip_chars().str.to_lowercase()
            return pl.when(text.is_in(_TRUE)).then(True).when(text.is_in(_FALSE)).then(False).otherwise(None), failed
        if src.is_integer():
            return pl.when(col == 1).then(True).when(col == 0).then(False).otherwise(None), failed
        return impossible
    if target == pl.Date:
        if src == pl.String:
            return col.str.strip_chars().str.to_date("%Y-%m-%d", strict=False), failed
        return impossible
    if isinstance(target, pl.Datetime):
        unit, tz = target.time_unit, target.time_zone
        if src == pl.String:
            return col.str.strip_chars().str.to_datetime("%+", time_unit=unit, time_zone=tz, strict=False), failed
        if isinstance(src, pl.Datetime) and (src.time_zone is not None) == (tz is not None):
            typed = (col.dt.convert_time_zone(tz) if tz else col).dt.cast_time_unit(unit)
            finer = _UNIT_NS[unit] // _UNIT_NS[src.time_unit] if _UNIT_NS[unit] > _UNIT_NS[src.time_unit] else 1
            return typed, (present & (original.dt.epoch(src.time_unit) % finer != 0)) if finer > 1 else None
        return impossible  # naive <-> zoned, dates, numbers: the unit or zone would be a guess
    if target == pl.Binary:
        if src == pl.String:
            return col.cast(pl.Binary), None
        return impossible
    if isinstance(target, pl.List):
        if isinstance(src, pl.List) and src.inner in (pl.Null, pl.String, pl.Categorical) and target.inner == pl.String:
            return col.cast(target), None
        if isinstance(src, pl.List) and src.inner == target.inner:
            return col, None
        return impossible
    return impossible


def _to_number(
    col: pl.Expr, original: pl.Expr, present: pl.Expr, failed: pl.Expr, src: pl.DataType, target: pl.DataType
) -> tuple[pl.Expr, pl.Expr | None] | None:
    """:func:`cast_expr` to an integer, float or decimal type (None: ``src`` does not convert to it). A value
    that does not convert exactly is broken."""
    if target.is_integer():
        if src.is_integer():
            return col.cast(target, strict=False), failed
        if src.is_float() or src.is_decimal():
            lossy = col.cast(pl.Float64) != original.cast(pl.Float64)
            return col.cast(target, strict=False), present & (col.is_null() | lossy)
        if src == pl.String:
            return col.str.strip_chars().cast(target, strict=False), failed
        return None
    if target.is_float():
        if src.is_numeric():
            typed = col.cast(target, strict=False)
        elif src == pl.String:
            typed = col.str.strip_chars().cast(target, strict=False)
        else:
            return None
        return typed, present & (col.is_null() | ~col.is_finite())  # NaN and ±infinity are no measurement
    # a decimal
    if src.is_decimal() or src.is_integer() or src.is_float():
        typed = col.cast(target, strict=False)
        # A value that does not survive the way back lost digits (or was a NaN or infinity).
        lossy = typed.cast(src, strict=False) != original
        return typed, present & (col.is_null() | lossy.fill_null(True))
    if src == pl.String:
        return col.str.strip_chars().cast(target, strict=False), failed
    return None


def find_violations(typed: pl.DataFrame, contract: Contract, now: datetime | None = None) -> list[Violation]:
    """Every value rule broken in ``typed`` (already of the contract's types), with counts and examples.

    Used by :func:`contracts.arrow.conform` as the last gate before a write; rows are not split.
    """
    exprs = value_rule_exprs(contract, now)
    exprs += [
        (f"{c.name}.type", (~pl.col(c.name).is_finite()).fill_null(False))
        for c in contract.columns
        if polars_dtype(c.arrow_type).is_float()
    ]
    if contract.primary_key:
        key_ok = pl.all_horizontal(pl.col(k).is_not_null() for k in contract.primary_key)
        key = pl.col(contract.primary_key[0]) if len(contract.primary_key) == 1 else pl.struct(*contract.primary_key)
        exprs.append((PK_RULE, key_ok & ~key.is_first_distinct()))
    if not exprs or typed.height == 0:
        return []
    flags = typed.select(expr.alias(f"__flag{i}") for i, (_, expr) in enumerate(exprs))
    counts = flags.sum().row(0)
    out = []
    for i, ((rule, _), count) in enumerate(zip(exprs, counts)):
        if not count:
            continue
        column = None if rule == PK_RULE else rule.rsplit(".", 1)[0]
        cols = list(contract.primary_key) if column is None else [column]
        out.append(
            Violation(rule, column, _message(contract, rule), int(count), examples(typed, flags[f"__flag{i}"], cols))
        )
    return out


def _message(contract: Contract, rule: str) -> str:
    if rule == PK_RULE:
        return f"repeated primary key {list(contract.primary_key)}"
    column, kind = rule.rsplit(".", 1)
    if kind == "type":
        return "NaN or infinity in a numeric column"
    return rule_named(kind).violation(contract.column(column))


def _check_time(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (e.g. datetime.now(timezone.utc))")
    return now


def examples(df: pl.DataFrame, flag: pl.Series, columns: Sequence[str], limit: int = 5) -> tuple[Any, ...]:
    """Up to ``limit`` distinct example values of ``columns`` where ``flag`` is set."""
    rows = df.filter(flag).select(columns).unique(maintain_order=True).head(limit)
    if len(columns) == 1:
        return tuple(rows.to_series().to_list())
    return tuple(rows.rows())
