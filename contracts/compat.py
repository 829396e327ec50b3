"""Is a contract change compatible? Classify every difference between two versions of a table.

A change is *breaking* when data valid under the old contract may be invalid under the
new one, or a reader of the old shape may fail on the new: a column removed or renamed,
a type narrowed or changed, a required column added, a rule tightened (required, unique,
allowed values, ranges, patterns, tolerances), the key or partitioning changed. Widening
changes and descriptions are compatible. A breaking change needs a major version bump
(see :mod:`contracts.lock`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from contracts.model import Column, Contract
from contracts.types import is_widening, parse_type


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


def column_shape(c: Column) -> dict[str, Any]:
    """What of a column compatibility depends on, as JSON-ready values (descriptions excluded)."""
    return {
        "type": c.physical_type,
        "required": c.required,
        "unique": c.unique,
        "allowed_values": list(c.allowed_values) if c.allowed_values is not None else None,
        "minimum": _json(c.minimum),
        "maximum": _json(c.maximum),
        "pattern": c.pattern,
        "min_items": c.min_items,
        "max_future_s": c.max_future.total_seconds() if c.max_future is not None else None,
        "tolerances": dict(c.tolerances),
    }


def contract_shape(contract: Contract) -> dict[str, Any]:
    """The released shape of a table: version, key, partitioning and column shapes in order."""
    return {
        "version": contract.version,
        "primary_key": list(contract.primary_key),
        "partition_columns": list(contract.partition_columns),
        "columns": {c.name: column_shape(c) for c in contract.columns},
    }


def diff_contracts(old: Contract, new: Contract) -> list[Change]:
    """Every change from ``old`` to ``new``, each marked breaking or compatible."""
    changes = diff_shapes(contract_shape(old), contract_shape(new))
    for c in new.columns:
        if c.name in old and old.column(c.name).description != c.description:
            changes.append(Change("description_changed", c.name, "description edited", False))
    if old.description != new.description:
        changes.append(Change("description_changed", None, "table description edited", False))
    return changes


def diff_shapes(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """Changes between two :func:`contract_shape` dicts (what the lock file stores)."""
    changes: list[Change] = []
    old_cols: dict[str, dict[str, Any]] = old["columns"]
    new_cols: dict[str, dict[str, Any]] = new["columns"]
    removed = [n for n in old_cols if n not in new_cols]
    added = [n for n in new_cols if n not in old_cols]
    old_pos = {n: i for i, n in enumerate(old_cols)}
    new_pos = {n: i for i, n in enumerate(new_cols)}
    for name in list(removed):
        twin = next((a for a in added if new_pos[a] == old_pos[name] and new_cols[a] == old_cols[name]), None)
        if twin:
            changes.append(Change("column_renamed", name, f"renamed to {twin!r}", True))
            removed.remove(name)
            added.remove(twin)
    changes += [Change("column_removed", n, "column removed", True) for n in removed]
    for n in added:
        required = new_cols[n]["required"]
        changes.append(Change("column_added", n, f"{'required' if required else 'nullable'} column added", required))
    for name in old_cols:
        if name in new_cols:
            changes += _column_changes(name, old_cols[name], new_cols[name])
    kept_old = [n for n in old_cols if n in new_cols]
    kept_new = [n for n in new_cols if n in old_cols]
    if kept_old != kept_new:
        changes.append(Change("column_order_changed", None, "columns reordered", False))
    if old["primary_key"] != new["primary_key"]:
        changes.append(Change("primary_key_changed", None, f"{old['primary_key']} → {new['primary_key']}", True))
    if old["partition_columns"] != new["partition_columns"]:
        changes.append(Change("partitioning_changed", None,
                              f"{old['partition_columns']} → {new['partition_columns']}", True))
    return changes


def _column_changes(name: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    out: list[Change] = []
    if old["type"] != new["type"]:
        widened = is_widening(parse_type(old["type"]), parse_type(new["type"]))
        out.append(Change("type_widened" if widened else "type_changed", name,
                          f"{old['type']} → {new['type']}", not widened))
    t = parse_type(new["type"])
    for flag in ("required", "unique"):
        if old[flag] != new[flag]:
            out.append(Change(f"{flag}_{'added' if new[flag] else 'removed'}", name,
                              f"{flag}: {old[flag]} → {new[flag]}", bool(new[flag])))
    a, b = old["allowed_values"], new["allowed_values"]
    if a != b:
        if b is None:
            out.append(Change("allowed_values_widened", name, "allowed-values rule dropped", False))
        elif a is None or not set(a) <= set(b):
            lost = "rule added" if a is None else f"values {sorted(set(a) - set(b), key=str)} no longer allowed"
            out.append(Change("allowed_values_narrowed", name, lost, True))
        elif set(a) != set(b):
            out.append(Change("allowed_values_widened", name, f"values {sorted(set(b) - set(a), key=str)} added",
                              False))
    out += _bound_change(name, "minimum", _parse(old["minimum"], t), _parse(new["minimum"], t), lower=True)
    out += _bound_change(name, "maximum", _parse(old["maximum"], t), _parse(new["maximum"], t), lower=False)
    out += _bound_change(name, "min_items", old["min_items"], new["min_items"], lower=True)
    out += _bound_change(name, "max_future", old["max_future_s"], new["max_future_s"], lower=False)
    if old["pattern"] != new["pattern"]:
        dropped = new["pattern"] is None
        out.append(Change("pattern_removed" if dropped else "pattern_changed", name,
                          f"{old['pattern']!r} → {new['pattern']!r}", not dropped))
    for rule in sorted(set(old["tolerances"]) | set(new["tolerances"])):
        before, after = old["tolerances"].get(rule), new["tolerances"].get(rule)
        if before != after:
            # A tolerance rule is a limit on bad rows: adding one or lowering it tightens the contract.
            tighter = before is None or (after is not None and after < before)
            out.append(Change(f"tolerance_{'tightened' if tighter else 'relaxed'}", name,
                              f"{rule}: {before} → {after}", tighter))
    return out


def _bound_change(name: str, what: str, old: Any, new: Any, *, lower: bool) -> list[Change]:
    """A lower bound (``lower``) narrows when it rises; an upper bound when it falls; adding one narrows."""
    if old == new:
        return []
    if new is None:
        return [Change("range_widened", name, f"{what} {old!r} dropped", False)]
    try:
        narrowed = old is None or (new > old if lower else new < old)
    except TypeError:  # the column's type changed too; bounds of different kinds
        narrowed = True
    return [Change("range_narrowed" if narrowed else "range_widened", name, f"{what}: {old!r} → {new!r}", narrowed)]


def _json(value: Any) -> Any:
    if isinstance(value, Decimal):  # as text: exact in the lock file
        return str(value)
    return value.isoformat() if isinstance(value, (date, datetime)) else value


def _parse(value: Any, t: Any) -> Any:
    """A bound from a shape back to a comparable value."""
    import pyarrow as pa

    if value is None or not isinstance(value, str):
        return value
    if pa.types.is_decimal(t):
        return Decimal(value)
    return datetime.fromisoformat(value) if pa.types.is_timestamp(t) else date.fromisoformat(value)
