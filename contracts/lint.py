"""``lint``: every problem with the contract files, as messages a person can act on."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from contracts.errors import ContractError
from contracts.loader import CONTRACTS_DIR, read_contract
from contracts.lock import LOCK_PATH, check_lock
from contracts.model import Contract


def lint(directory: Path | None = None, lock_path: Path | None = LOCK_PATH) -> list[str]:
    """Problems over all contracts in ``directory`` (default: the repo's); empty means clean.

    Checks: each file parses and validates (ODCS JSON Schema, pydantic model, Strata
    conventions: semantic version, layer, key and partition columns present and required,
    types and rules consistent, patterns that compile for polars), its name matches the
    file name, ids are unique, every column is described, the freshness column is temporal, and
    (with ``lock_path``) no contract changed without the version bump it needs.
    """
    directory = directory or CONTRACTS_DIR
    problems: list[str] = []
    contracts: dict[str, Contract] = {}
    ids: dict[str, str] = {}
    for path in sorted(directory.iterdir()):
        if path.is_file() and path.suffix != ".yaml" and not path.name.startswith("."):
            problems.append(f"{path}: contract files must be named <layer>.<table>.yaml")
    for path in sorted(directory.glob("*.yaml")):
        try:
            contract = read_contract(path)
        except ContractError as e:
            problems.append(str(e))
            continue
        if contract.name != path.stem:
            problems.append(f"{path}: name {contract.name!r} does not match the file name {path.stem!r}")
            continue
        contracts[contract.name] = contract
        odcs_id = contract.odcs.id
        if odcs_id in ids:
            problems.append(f"{path}: id {odcs_id!r} is also the id of {ids[odcs_id]}")
        ids[odcs_id] = contract.name
        problems += [f"{path}: {p}" for p in _conventions(contract)]
    if lock_path is not None:
        problems += [f"lock: {p}" for p in check_lock(contracts, lock_path)]
    return problems


def _conventions(contract: Contract) -> list[str]:
    out = []
    for c in contract.columns:
        if not c.description:
            out.append(f"column {c.name!r} has no description")
    if contract.freshness is not None:
        t = contract.column(contract.freshness.column).arrow_type
        if not (pa.types.is_timestamp(t) or pa.types.is_date(t)):
            out.append(f"freshness column {contract.freshness.column!r} is not a timestamp or date")
    if not contract.description:
        out.append("the contract has no description.purpose")
    return out
