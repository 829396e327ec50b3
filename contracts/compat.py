"""Is a contract change compatible? Classify every difference between two versions of a table.

A change is *breaking* when data valid under the old contract may be invalid under the
new one, or a reader of the old shape may fail on the new: a column removed or renamed,
a type narrowed or changed, a required column added, a rule tightened (required, unique,
allowed values, ranges, patterns, tolerances), the key or partitioning changed. Widening
changes and descriptions are compatible. A breaking change needs a major version bump
(see :mod:`contracts.lock`).
"""

from __future__ import annotations

from typing import Any

from contracts.model import Column, Contract
from contracts.rules import Change, rules
from contracts.types import is_widening, parse_type


def column_shape(c: Column) -> dict[str, Any]:
    """What of a column compatibility depends on, as JSON-ready values (descriptions excluded):
    its type, each rule's entry (:attr:`Rule.lock_key <contracts.rules.Rule.lock_key>`), its tolerances,
    its attribute policy."""
    shape: dict[str, Any] = {"type": c.physical_type}
    for rule in rules():
        if rule.lock_key is not None:
            shape[rule.lock_key] = rule.shape(c.rule(rule.name))
    shape["tolerances"] = dict(c.tolerances)
    shape["attribute_policy"] = c.attribute_policy
    return shape


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
        # Rows written before have no value here: a rule that nulls break makes the addition breaking.
        required = any(new_cols[n][r.lock_key] != r.lock_default for r in rules() if r.about_nulls and r.lock_key)
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
        changes.append(
            Change("partitioning_changed", None, f"{old['partition_columns']} → {new['partition_columns']}", True)
        )
    return changes


def _column_changes(name: str, old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    out: list[Change] = []
    if old["type"] != new["type"]:
        widened = is_widening(parse_type(old["type"]), parse_type(new["type"]))
        out.append(
            Change("type_widened" if widened else "type_changed", name, f"{old['type']} → {new['type']}", not widened)
        )
    before, after = old["attribute_policy"], new["attribute_policy"]
    if before != after:
        # A policy only removes attributes a reader could not rely on: every value stays a JSON object.
        out.append(Change("attribute_policy_changed", name, f"attribute policy: {before} → {after}", False))
    t = parse_type(new["type"])
    for rule in rules():
        if rule.lock_key is not None:
            out += rule.changes(name, old[rule.lock_key], new[rule.lock_key], t)
    for kind in sorted(set(old["tolerances"]) | set(new["tolerances"])):
        before, after = old["tolerances"].get(kind), new["tolerances"].get(kind)
        if before != after:
            # A tolerance rule is a limit on bad rows: adding one or lowering it tightens the contract.
            tighter = before is None or (after is not None and after < before)
            out.append(
                Change(
                    f"tolerance_{'tightened' if tighter else 'relaxed'}", name, f"{kind}: {before} → {after}", tighter
                )
            )
    return out
