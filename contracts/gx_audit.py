"""The audit gate: a Great Expectations 1.x suite derived from a contract, run on pandas.

Each expectation carries the rule id it enforces in ``meta["rule"]`` (the same ids the row
checks report), so a failed audit says which rule failed on which values. The validation
result is returned as JSON for the caller to keep next to the write it gated.

Great Expectations takes seconds to import; it is imported only when a suite is built.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from contracts.model import Contract
from contracts.rowchecks import PK_RULE, _check_time
from contracts.types import pandas_dtype_name

if TYPE_CHECKING:
    import great_expectations as gx
    import pandas as pd


@dataclass(frozen=True)
class AuditFailure:
    """One failed expectation: the contract rule, the GX expectation, how many rows, examples."""

    rule: str
    expectation: str
    unexpected_count: int | None
    examples: list[Any]
    detail: str = ""

    def __str__(self) -> str:
        count = f" on {self.unexpected_count:,} rows" if self.unexpected_count is not None else ""
        examples = f", e.g. {self.examples[:5]!r}" if self.examples else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"[{self.rule}] {self.expectation} failed{count}{examples}{detail}"


@dataclass(frozen=True)
class AuditResult:
    """Outcome of one audit; ``result`` is the GX validation result as JSON (keep it)."""

    table: str
    success: bool
    failures: list[AuditFailure]
    result: dict[str, Any] = field(repr=False)

    @property
    def rules_failed(self) -> list[str]:
        return sorted({f.rule for f in self.failures})

    def summary(self) -> str:
        if self.success:
            return f"{self.table}: audit passed ({len(self.result.get('results', []))} expectations)"
        return f"{self.table}: audit failed:\n  " + "\n  ".join(str(f) for f in self.failures)


def expectation_suite(contract: Contract, *, now: datetime | None = None) -> gx.ExpectationSuite:
    """The GX suite of ``contract``; ``now`` fixes the check time of ``future`` rules.

    A bound (``min``, ``max``, ``future``) is expected of the column's minimum or maximum:
    2 ms an expectation against 8 ms value by value, most of a DWS table's audit. Where it
    fails, :func:`audit` checks the rule value by value (:func:`bound_expectations`).
    """
    import great_expectations as gx
    import great_expectations.expectations as gxe

    now = _check_time(now)
    _context()  # GX needs an active context to build a suite
    expectations: list[Any] = []

    def add(rule: str, expectation: Any) -> None:
        expectation.meta = _meta(contract, rule)
        expectations.append(expectation)

    bounds = contract.row_count
    add("table.row_count", gxe.ExpectTableRowCountToBeBetween(min_value=bounds.minimum, max_value=bounds.maximum))
    add("table.columns", gxe.ExpectTableColumnsToMatchOrderedList(column_list=contract.column_names))
    if len(contract.primary_key) == 1:
        add(PK_RULE, gxe.ExpectColumnValuesToBeUnique(column=contract.primary_key[0]))
    elif contract.primary_key:
        add(PK_RULE, gxe.ExpectCompoundColumnsToBeUnique(column_list=list(contract.primary_key)))
    unique = set(contract.unique_columns)
    column_bounds = {rule: (column, low, high) for rule, column, low, high in _bounds(contract, now)}

    for c in contract.columns:
        add(f"{c.name}.type", gxe.ExpectColumnTypeToBe(column=c.name, type_=pandas_dtype_name(c.arrow_type)))
        if c.required:
            add(f"{c.name}.required", gxe.ExpectColumnValuesToNotBeNull(column=c.name))
        elif c.tolerance("null_rate"):
            add(f"{c.name}.null_rate",
                gxe.ExpectColumnValuesToNotBeNull(column=c.name, mostly=1 - c.tolerance("null_rate")))
        for rule in (f"{c.name}.min", f"{c.name}.max", f"{c.name}.future"):
            if rule in column_bounds:
                _, low, high = column_bounds[rule]
                add(rule, gxe.ExpectColumnMinToBeBetween(column=c.name, min_value=low) if low is not None
                    else gxe.ExpectColumnMaxToBeBetween(column=c.name, max_value=high))
        if c.allowed_values is not None:
            add(f"{c.name}.allowed_values", gxe.ExpectColumnValuesToBeInSet(
                column=c.name, value_set=list(c.allowed_values), mostly=1 - c.tolerance("allowed_values")))
        if c.pattern is not None:
            add(f"{c.name}.pattern", gxe.ExpectColumnValuesToMatchRegex(column=c.name, regex=c.pattern))
        if c.name in unique:
            add(f"{c.name}.unique", gxe.ExpectColumnValuesToBeUnique(column=c.name))
    # In one call: ``add_expectation`` compares each new expectation with every one before it
    # (quadratic: 0.4 s for a DWS table's 127), and each rule here is its own expectation anyway.
    return gx.ExpectationSuite(name=f"{contract.name}@{contract.version}", expectations=expectations)


def bound_expectations(contract: Contract, rules: Collection[str], *, now: datetime | None = None) -> list[Any]:
    """The bound rules among ``rules`` as value-by-value expectations: their verdict is exact
    (an all-null column has no minimum, yet breaks no bound), and a failure counts and shows
    the values outside."""
    import great_expectations.expectations as gxe

    found = []
    for rule, column, low, high in _bounds(contract, _check_time(now)):
        if rule in rules:
            expectation = gxe.ExpectColumnValuesToBeBetween(column=column, min_value=low, max_value=high)
            expectation.meta = _meta(contract, rule)
            found.append(expectation)
    return found


def _bounds(contract: Contract, now: datetime) -> Iterator[tuple[str, str, Any, Any]]:
    """(rule, column, lowest, highest allowed) of every bound of the contract (one side each)."""
    import pandas as pd

    def value(v: Any) -> Any:
        return pd.Timestamp(v) if isinstance(v, datetime) else v

    for c in contract.columns:
        if c.minimum is not None:
            yield f"{c.name}.min", c.name, value(c.minimum), None
        if c.maximum is not None:
            yield f"{c.name}.max", c.name, None, value(c.maximum)
        if c.max_future is not None:
            yield f"{c.name}.future", c.name, None, pd.Timestamp(now + c.max_future)


def _meta(contract: Contract, rule: str) -> dict[str, str]:
    return {"rule": rule, "contract": contract.name, "contract_version": contract.version}


def audit(
    data: pa.Table | pl.DataFrame | pd.DataFrame,
    contract: Contract,
    *,
    now: datetime | None = None,
    result_format: str = "BASIC",
) -> AuditResult:
    """Validate ``data`` against the contract's expectation suite with Great Expectations.

    ``data`` is converted to pandas the way :func:`to_pandas` does, so column dtypes are
    those the suite's type expectations name. ``BASIC`` results hold what a failure reports
    (unexpected count, examples, observed value) at about half the cost of ``SUMMARY``.
    """
    import great_expectations as gx

    suite = expectation_suite(contract, now=now)
    frame = to_pandas(data)
    batch = _batch_definition(contract.name).get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(suite, result_format=result_format).to_json_dict()
    bounds = {rule for rule, *_ in _bounds(contract, _check_time(now))}
    recheck = {_rule(r) for r in result["results"] if not r["success"] and _rule(r) in bounds}
    if recheck:
        exact = gx.ExpectationSuite(name=f"{suite.name} bounds", expectations=bound_expectations(contract, recheck,
                                                                                                   now=now))
        by_rule = {_rule(r): r for r in batch.validate(exact, result_format=result_format).to_json_dict()["results"]}
        result["results"] = [by_rule.get(_rule(r), r) for r in result["results"]]
        passed = sum(bool(r["success"]) for r in result["results"])
        result["success"] = passed == len(result["results"])
        result["statistics"] |= {"successful_expectations": passed,
                                 "unsuccessful_expectations": len(result["results"]) - passed,
                                 "success_percent": 100 * passed / max(len(result["results"]), 1)}
    failures = [_failure(r) for r in result["results"] if not r["success"]]
    return AuditResult(contract.name, bool(result["success"]), failures, result)


def _rule(result: dict[str, Any]) -> str:
    config = result["expectation_config"]
    return (config.get("meta") or {}).get("rule", config["type"])


def to_pandas(data: pa.Table | pl.DataFrame | pd.DataFrame) -> pd.DataFrame:
    """``data`` as pandas: nullable integer and boolean dtypes, UTC timestamps, strings as objects."""
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        data = pa.Table.from_pandas(data, preserve_index=False)
    elif isinstance(data, pl.DataFrame):
        data = data.to_arrow()
    nullable = {
        pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
        pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(), pa.bool_(): pd.BooleanDtype(),
    }
    return data.to_pandas(types_mapper=nullable.get, coerce_temporal_nanoseconds=False)


def _failure(r: dict[str, Any]) -> AuditFailure:
    config = r["expectation_config"]
    rule = _rule(r)
    res = r.get("result") or {}
    info = r.get("exception_info") or {}
    # GX reports an exception either directly or keyed by the metric that raised it.
    raised = [info] if "raised_exception" in info else [v for v in info.values() if isinstance(v, dict)]
    for e in raised:
        if e.get("raised_exception"):
            message = str(e.get("exception_message") or "").strip().splitlines()[-1:] or ["?"]
            return AuditFailure(rule, config["type"], None, [], f"error: {message[0]}")
    examples = res.get("partial_unexpected_list") or []
    detail = "" if "unexpected_count" in res else f"observed {res.get('observed_value')!r}"
    return AuditFailure(rule, config["type"], res.get("unexpected_count"), list(examples[:5]), detail)


def warm_up() -> None:
    """Import GX and create its context now, so the first audit pays nothing for them."""
    _context()


@functools.lru_cache(maxsize=1)
def _context() -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


@functools.lru_cache(maxsize=None)
def _batch_definition(table: str) -> Any:
    """A whole-dataframe batch definition on one in-memory pandas asset per table."""
    context = _context()
    try:
        source = context.data_sources.get("strata")
    except (KeyError, ValueError):
        source = context.data_sources.add_pandas("strata")
    asset = source.add_dataframe_asset(name=table)
    return asset.add_batch_definition_whole_dataframe("whole")
