"""The audit gate: a Great Expectations 1.x suite derived from a contract, run on pandas.

Each expectation carries the rule id it enforces in ``meta["rule"]`` (the same ids the row
checks report), so a failed audit says which rule failed on which values. The validation
result is returned as JSON for the caller to keep next to the write it gated.

Great Expectations takes seconds to import; it is imported only when a suite is built.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import polars as pl
import pyarrow as pa

from contracts.model import Contract
from contracts.rowchecks import PK_RULE, _check_time
from contracts.rules import checked
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
    """The GX suite of ``contract``: the table's shape, its key, each column's type and every
    rule of :mod:`contracts.rules` it states; ``now`` fixes the check time of ``future`` rules."""
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
    for c in contract.columns:
        add(f"{c.name}.type", gxe.ExpectColumnTypeToBe(column=c.name, type_=pandas_dtype_name(c.arrow_type)))
        for rule in checked(c, contract):
            for expectation in rule.expectations(c, now):
                add(rule.rule_id(c.name), expectation)
    # In one call: ``add_expectation`` compares each new expectation with every one before it
    # (quadratic: 0.4 s for a DWS table's 127), and each rule here is its own expectation anyway.
    return gx.ExpectationSuite(name=f"{contract.name}@{contract.version}", expectations=expectations)


def rechecks(contract: Contract, rules: Collection[str], *, now: datetime | None = None) -> list[Any]:
    """The exact expectations of those of ``rules`` that have them (:meth:`Rule.recheck
    <contracts.rules.Rule.recheck>`): a bound, first expected of the column's extreme, is
    checked value by value, whose verdict is exact and whose failure counts the values outside."""
    now = _check_time(now)
    found = []
    for c in contract.columns:
        for rule in checked(c, contract):
            if rule.rule_id(c.name) in rules:
                for expectation in rule.recheck(c, now):
                    expectation.meta = _meta(contract, rule.rule_id(c.name))
                    found.append(expectation)
    return found


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
    exact = rechecks(contract, {_rule(r) for r in result["results"] if not r["success"]}, now=now)
    if exact:
        recheck = gx.ExpectationSuite(name=f"{suite.name} rechecks", expectations=exact)
        by_rule = {_rule(r): r for r in batch.validate(recheck, result_format=result_format).to_json_dict()["results"]}
        result["results"] = [by_rule.get(_rule(r), r) for r in result["results"]]
        passed = sum(bool(r["success"]) for r in result["results"])
        result["success"] = passed == len(result["results"])
        result["statistics"] |= {
            "successful_expectations": passed,
            "unsuccessful_expectations": len(result["results"]) - passed,
            "success_percent": 100 * passed / max(len(result["results"]), 1),
        }
    failures = [_failure(r) for r in result["results"] if not r["success"]]
    return AuditResult(contract.name, bool(result["success"]), failures, result)


def _rule(result: dict[str, Any]) -> str:
    config = result["expectation_config"]
    return cast(str, (config.get("meta") or {}).get("rule", config["type"]))


def to_pandas(data: pa.Table | pl.DataFrame | pd.DataFrame) -> pd.DataFrame:
    """``data`` as pandas: nullable integer and boolean dtypes, UTC timestamps, strings as objects."""
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        data = pa.Table.from_pandas(data, preserve_index=False)
    elif isinstance(data, pl.DataFrame):
        data = data.to_arrow()
    nullable = {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.uint8(): pd.UInt8Dtype(),
        pa.uint16(): pd.UInt16Dtype(),
        pa.uint32(): pd.UInt32Dtype(),
        pa.uint64(): pd.UInt64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
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


@functools.cache
def _batch_definition(table: str) -> Any:
    """A whole-dataframe batch definition on one in-memory pandas asset per table."""
    context = _context()
    try:
        source = context.data_sources.get("strata")
    except (KeyError, ValueError):
        source = context.data_sources.add_pandas("strata")
    asset = source.add_dataframe_asset(name=table)
    return asset.add_batch_definition_whole_dataframe("whole")
