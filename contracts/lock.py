"""The lock: the last released shape of every table, and the check that guards it.

``contracts/contracts.lock.json`` records, per table, the version and column shapes that
were last released (:func:`write_lock` rewrites it at release time). :func:`check_lock`
compares the current contracts with it: a breaking change needs a higher major version,
any other change of shape a higher version, and a locked table may not disappear.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.compat import contract_shape, diff_shapes
from contracts.errors import ContractError
from contracts.model import Contract
from contracts.rules import Change, rules

LOCK_PATH = Path(__file__).resolve().parent / "contracts.lock.json"
_NOTE = (
    "Last released shape of every table contract. Rewrite with `strata contracts lock` when "
    "releasing; tests fail when a contract changes in a breaking way without a major version bump."
)


@dataclass(frozen=True)
class LockProblem:
    """A table whose contract changed without the version bump its changes need."""

    table: str
    locked_version: str | None
    version: str | None
    reason: str
    changes: list[Change] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.table} {self.locked_version} → {self.version}: {self.reason}"]
        lines += [f"    {c}" for c in self.changes]
        return "\n".join(lines)


def read_lock(path: Path = LOCK_PATH) -> dict[str, dict[str, Any]]:
    """The locked shapes by table (empty when there is no lock file yet)."""
    if not Path(path).exists():
        return {}
    tables: dict[str, dict[str, Any]] = json.loads(Path(path).read_text(encoding="utf-8"))["tables"]
    defaults = _defaults()
    for shape in tables.values():
        shape["columns"] = {name: {**defaults, **col} for name, col in shape["columns"].items()}
    return tables


def write_lock(path: Path = LOCK_PATH, contracts: Mapping[str, Contract] | None = None) -> Path:
    """Record the current shape of every contract as released; returns the lock path."""
    from contracts.loader import shipped_contracts

    contracts = shipped_contracts() if contracts is None else contracts
    dump = functools.partial(json.dumps, ensure_ascii=False)
    defaults = _defaults()
    lines = ["{", f'  "note": {dump(_NOTE)},', '  "tables": {']
    for ti, (name, contract) in enumerate(sorted(contracts.items())):
        shape = contract_shape(contract)
        lines += [
            f"    {dump(name)}: {{",
            f'      "version": {dump(shape["version"])},',
            f'      "primary_key": {dump(shape["primary_key"])},',
            f'      "partition_columns": {dump(shape["partition_columns"])},',
            '      "columns": {',
        ]
        cols = list(shape["columns"].items())
        for ci, (col, col_shape) in enumerate(cols):
            compact = {k: v for k, v in col_shape.items() if k == "type" or v != defaults[k]}
            lines.append(f"        {dump(col)}: {dump(compact)}" + ("," if ci < len(cols) - 1 else ""))
        lines += ["      }", "    }" + ("," if ti < len(contracts) - 1 else "")]
    lines += ["  }", "}"]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(path)


def check_lock(contracts: Mapping[str, Contract] | None = None, path: Path = LOCK_PATH) -> list[LockProblem]:
    """Tables whose changes since the lock lack the version bump they need (empty = ok)."""
    from contracts.loader import shipped_contracts

    contracts = shipped_contracts() if contracts is None else contracts
    problems = []
    for name, locked in sorted(read_lock(path).items()):
        contract = contracts.get(name)
        if contract is None:
            problems.append(
                LockProblem(
                    name,
                    locked["version"],
                    None,
                    "contract removed (breaking); release it deliberately with a new lock",
                )
            )
            continue
        changes = diff_shapes(locked, contract_shape(contract))
        old, new = _version(locked["version"]), _version(contract.version)
        if new < old:
            problems.append(LockProblem(name, locked["version"], contract.version, "version went backwards"))
        elif any(c.breaking for c in changes) and new[0] <= old[0]:
            problems.append(
                LockProblem(
                    name,
                    locked["version"],
                    contract.version,
                    "breaking change without a major version bump",
                    [c for c in changes if c.breaking],
                )
            )
        elif changes and new == old:
            problems.append(
                LockProblem(
                    name,
                    locked["version"],
                    contract.version,
                    "shape changed without a version bump (compatible: bump minor)",
                    changes,
                )
            )
    return problems


def _defaults() -> dict[str, Any]:
    """Column-shape entries left out of the lock file when they have these values: a rule not stated."""
    return {
        **{r.lock_key: r.lock_default for r in rules() if r.lock_key is not None},
        "tolerances": {},
        "attribute_policy": None,
    }


def _version(text: str) -> tuple[int, int, int]:
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)", text)
    if not m:
        raise ContractError(f"not a semantic version: {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))
