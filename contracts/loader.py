"""Read ODCS contract files into :class:`~contracts.model.Contract` views.

A file is checked three ways before it is used: against the standard's JSON Schema (which
catches misspelt keys the pydantic models would silently drop), through the
``open_data_contract_standard`` pydantic models, and against the conventions of this
package (see the package docstring). Every error names the file and the field.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from contracts.errors import ContractError
from contracts.model import Column, Contract, Freshness, RowCountBounds
from contracts.rules import Invalid, Rule, rules
from contracts.types import logical_type, parse_type

CONTRACTS_DIR = Path(__file__).resolve().parent / "tables"
LAYERS = ("ods", "dwd", "dws", "ads", "ops")
#: A contract file is read up to this size (the largest shipped is ~16 KB): `diff OLD /dev/zero` read without end.
MAX_CONTRACT_BYTES = 2**20

_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
_TABLE = re.compile(r"^(ods|dwd|dws|ads|ops)\.[a-z][a-z0-9_]*$")
_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
}
#: Options that describe a column's type rather than state a rule: (option, logical type).
_TYPE_OPTIONS = {("format", "string"), ("timezone", "timestamp"), ("defaultTimezone", "timestamp")}
_CONTRACT_CUSTOM = {"layer", "writer"}
#: The column custom property naming an attribute policy (:mod:`contracts.policy`).
_ATTRIBUTE_POLICY = "attributePolicy"
_WRITERS = ("dbt", "python")


#: Extra folders of contracts (``os.pathsep``-separated), for tables a deployment adds to the
#: shipped ones; the shipped contract wins when both name a table.
SEARCH_PATH_VARIABLE = "STRATA_CONTRACTS_PATH"


def search_path() -> list[Path]:
    """The folders contracts are read from: the shipped one, then ``$STRATA_CONTRACTS_PATH``'s."""
    extra = os.environ.get(SEARCH_PATH_VARIABLE, "")
    return [CONTRACTS_DIR, *(Path(p).expanduser().resolve() for p in extra.split(os.pathsep) if p)]


def contract_path(name: str, directory: Path | None = None) -> Path:
    """Where the contract of table ``name`` lives: ``<directory>/<name>.yaml``, by default the
    first folder of the search path that holds it."""
    if directory is not None:
        return directory / f"{name}.yaml"
    return next(
        (d / f"{name}.yaml" for d in search_path() if (d / f"{name}.yaml").exists()), CONTRACTS_DIR / f"{name}.yaml"
    )


@functools.cache
def load_contract(name: str) -> Contract:
    """The contract of table ``name`` (``layer.table``), read once per process."""
    path = contract_path(name)
    if not _TABLE.match(name) or not path.exists():
        known = ", ".join(sorted(_names()))
        raise ContractError(f"no contract for table {name!r}: {path} does not exist (known: {known})")
    contract = read_contract(path)
    if contract.name != name:
        raise ContractError(f"{path}: name: {contract.name!r} does not match the file name {name!r}")
    return contract


def _names() -> set[str]:
    return {p.stem for d in search_path() for p in d.glob("*.yaml")}


@functools.lru_cache(maxsize=1)
def _all_contracts() -> tuple[tuple[str, Contract], ...]:
    return tuple((name, load_contract(name)) for name in sorted(_names()))


def all_contracts() -> dict[str, Contract]:
    """Every contract on the search path, by table name (read once per process)."""
    return dict(_all_contracts())


def shipped_contracts() -> dict[str, Contract]:
    """The contracts that ship with Strata (``contracts/tables``): what the lock releases."""
    return {p.stem: load_contract(p.stem) for p in sorted(CONTRACTS_DIR.glob("*.yaml"))}


def read_directory(directory: Path | str) -> dict[str, Contract]:
    """Every ``*.yaml`` contract under ``directory`` (not cached), checking names match files."""
    out = {}
    for path in sorted(Path(directory).glob("*.yaml")):
        contract = read_contract(path)
        if contract.name != path.stem:
            raise ContractError(f"{path}: name: {contract.name!r} does not match the file name {path.stem!r}")
        out[contract.name] = contract
    return out


def clear_cache() -> None:
    """Forget contracts read so far (after editing files in a running process)."""
    load_contract.cache_clear()
    _all_contracts.cache_clear()


def read_contract(path: Path | str) -> Contract:
    """Parse and check one contract file (not cached; any path, at most :data:`MAX_CONTRACT_BYTES`)."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONTRACT_BYTES + 1)  # /dev/zero or a huge file: read no more than that
        text = data.decode("utf-8")
    except OSError as e:
        raise ContractError(f"{path}: cannot read contract: {e}") from e
    except UnicodeDecodeError as e:
        raise ContractError(f"{path}: a contract is UTF-8 text: {e}") from None
    if len(data) > MAX_CONTRACT_BYTES:
        raise ContractError(
            f"{path}: larger than {MAX_CONTRACT_BYTES // 2**20} MiB, not a contract (the largest shipped is ~16 KB)"
        )
    return parse_contract(text, source=str(path), path=path)


def parse_contract(text: str, *, source: str = "<string>", path: Path | None = None) -> Contract:
    """Parse contract YAML ``text``; errors name ``source`` and the field."""
    import yaml

    try:
        raw = yaml.load(text, Loader=yaml.CSafeLoader)  # libyaml: several times the pure-Python loader
    except yaml.YAMLError as e:
        raise ContractError(f"{source}: not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ContractError(f"{source}: a contract must be a YAML mapping, got {type(raw).__name__}")
    problems = schema_errors(raw)
    if problems:
        raise ContractError(f"{source}: not a valid ODCS document:\n  " + "\n  ".join(problems))
    odcs = _odcs_model(raw, source)
    return _build(odcs, source, path)


def schema_errors(raw: dict[str, Any]) -> list[str]:
    """Where ``raw`` breaks the ODCS JSON Schema shipped with the standard's package."""
    validator = _json_schema_validator()
    seen: dict[str, None] = {}
    for err in validator.iter_errors(raw):
        seen.setdefault(f"{_json_path(err.instance_path) or '(top level)'}: {err.message}", None)
    return list(seen)


def _json_path(parts: Sequence[str | int]) -> str:
    """``["schema", 0, "properties", 2]`` as ``schema[0].properties[2]``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")


@functools.lru_cache(maxsize=1)
def _json_schema_validator() -> Any:
    """The ODCS schema's validator: jsonschema-rs, fast enough to check the shipped contracts at every
    process start (docs/design.md §8)."""
    from importlib import resources

    import jsonschema_rs

    schema = json.loads(resources.files("open_data_contract_standard").joinpath("schema.json").read_text())
    return jsonschema_rs.validator_for(schema)


def _odcs_model(raw: dict[str, Any], source: str) -> Any:
    import pydantic
    from open_data_contract_standard.model import OpenDataContractStandard

    try:
        return OpenDataContractStandard.model_validate(raw)
    except pydantic.ValidationError as e:
        lines = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()]
        raise ContractError(f"{source}: not a valid ODCS document:\n  " + "\n  ".join(lines)) from e


def _build(odcs: Any, source: str, path: Path | None) -> Contract:
    def fail(field: str, message: str) -> ContractError:
        return ContractError(f"{source}: {field}: {message}")

    if odcs.kind != "DataContract":
        raise fail("kind", f"must be 'DataContract', got {odcs.kind!r}")
    if not (odcs.apiVersion or "").startswith("v3."):
        raise fail("apiVersion", f"must be an ODCS v3 version, got {odcs.apiVersion!r}")
    name = odcs.name or ""
    if not _TABLE.match(name):
        raise fail("name", f"{name!r} is not 'layer.table' with layer one of {', '.join(LAYERS)}")
    if not _SEMVER.match(odcs.version or ""):
        raise fail("version", f"{odcs.version!r} is not a semantic version (MAJOR.MINOR.PATCH)")
    custom = _custom(odcs.customProperties, _CONTRACT_CUSTOM, fail, "customProperties")
    layer = custom.get("layer")
    if layer != name.split(".", 1)[0]:
        raise fail("customProperties.layer", f"{layer!r} does not match the layer of name {name!r}")
    writer = custom.get("writer", "dbt" if layer == "ads" else "python")
    if writer not in _WRITERS:
        raise fail("customProperties.writer", f"{writer!r} is not one of {', '.join(_WRITERS)}")
    team = odcs.team
    owner = getattr(team, "name", None)
    if not owner:
        raise fail("team.name", "the owning team must be named (team: {name: ...})")
    if not odcs.schema_ or len(odcs.schema_) != 1:
        raise fail("schema", "must hold exactly one schema object (one table per file)")
    obj = odcs.schema_[0]
    if obj.name != name.split(".", 1)[1]:
        raise fail("schema[0].name", f"{obj.name!r} must be the table part of {name!r}")
    if not obj.properties:
        raise fail("schema[0].properties", "the table has no columns")

    columns = tuple(_column(p, i, fail) for i, p in enumerate(obj.properties))
    names = [c.name for c in columns]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise fail("schema[0].properties", f"duplicate column names {dupes}")
    primary_key = _ordered(columns, "primary_key_position", "primaryKeyPosition", fail)
    for key in primary_key:
        if not next(c for c in columns if c.name == key).required:
            raise fail(f"schema[0].properties[{key}].required", "a primary-key column must be required")
    partitions = _ordered(columns, "partition_position", "partitionKeyPosition", fail)
    for key in partitions:
        if not next(c for c in columns if c.name == key).required:
            raise fail(f"schema[0].properties[{key}].required", "a partition column must be required")

    return Contract(
        name=name,
        layer=layer,
        version=odcs.version,
        owner=owner,
        description=(odcs.description.purpose or "") if odcs.description else "",
        columns=columns,
        primary_key=primary_key,
        partition_columns=partitions,
        row_count=_row_count(obj.quality, fail),
        freshness=_freshness(odcs.slaProperties, names, fail),
        status=odcs.status or "active",
        writer=writer,
        path=path,
        odcs=odcs,
    )


def _column(p: Any, index: int, fail: Any) -> Column:
    where = f"schema[0].properties[{p.name or index}]"
    if not p.name or not re.match(r"^[a-z][a-z0-9_]*$", p.name):
        raise fail(f"{where}.name", f"{p.name!r} is not a snake_case column name")
    if not p.physicalType:
        raise fail(f"{where}.physicalType", "missing (an Arrow type name such as int64 or string)")
    try:
        arrow_type = parse_type(p.physicalType)
    except ContractError as e:
        raise fail(f"{where}.physicalType", str(e)) from None
    expected = logical_type(arrow_type)
    if p.logicalType != expected:
        raise fail(
            f"{where}.logicalType",
            f"{p.logicalType!r} does not match physicalType {p.physicalType!r} (expected {expected!r})",
        )
    options = dict(p.logicalTypeOptions or {})
    if pa.types.is_binary(arrow_type) and options.get("format") != "binary":
        raise fail(f"{where}.logicalTypeOptions.format", "a binary column must say format: binary")
    if pa.types.is_list(arrow_type) and p.items is not None:
        inner = logical_type(arrow_type.value_type)
        if p.items.logicalType not in (None, inner):
            raise fail(f"{where}.items.logicalType", f"{p.items.logicalType!r} does not match {inner!r}")

    stated, tolerances = _rules(p, arrow_type, where, fail)
    return Column(
        name=p.name,
        arrow_type=arrow_type,
        logical_type=expected,
        rules=tuple((r.name, stated[r.name]) for r in rules() if r.name in stated),
        description=(p.description or "").strip(),
        primary_key_position=(p.primaryKeyPosition if p.primaryKeyPosition and p.primaryKeyPosition > 0 else 1)
        if p.primaryKey
        else None,
        partition_position=(p.partitionKeyPosition if p.partitionKeyPosition and p.partitionKeyPosition > 0 else 1)
        if p.partitioned
        else None,
        classification=p.classification,
        tolerances=tuple(sorted((k, v) for k, v in tolerances.items() if v > 0)),
        attribute_policy=_attribute_policy(p, arrow_type, where, fail),
    )


def _attribute_policy(p: Any, t: pa.DataType, where: str, fail: Any) -> str | None:
    """The attribute policy a text column names (``customProperties: attributePolicy``), checked to load."""
    from contracts.policy import load_policy

    name = next((cp.value for cp in p.customProperties or [] if cp.property == _ATTRIBUTE_POLICY), None)
    if name is None:
        return None
    field = f"{where}.customProperties.{_ATTRIBUTE_POLICY}"
    if not pa.types.is_string(t) and not pa.types.is_large_string(t):
        raise fail(field, "an attribute policy applies to a string column (a JSON object of attributes)")
    if not isinstance(name, str):
        raise fail(field, f"{name!r} is not the name of a policy in contracts/policies")
    try:
        load_policy(name)
    except ContractError as e:
        raise fail(field, str(e)) from None
    return name


def _rules(p: Any, t: pa.DataType, where: str, fail: Any) -> tuple[dict[str, Any], dict[str, float]]:
    """The parameters of the rules property ``p`` (of Arrow type ``t``) states, and their tolerances."""
    expected = logical_type(t)
    slots = {(r.section, r.key): r for r in rules()}
    stated: dict[str, Any] = {}
    tolerances: dict[str, float] = {}

    def state(rule: Rule, value: Any, field: str) -> None:
        try:
            param = rule.read(value, t)
        except Invalid as e:
            raise fail(field + e.at, str(e)) from None
        if param is not None:
            stated[rule.name] = param

    def keys(section: str) -> list[str]:
        return [r.key for r in rules() if r.section == section]

    for rule in rules():
        if not rule.section:  # a field of the property itself: required, unique
            state(rule, getattr(p, rule.key), f"{where}.{rule.key}")
    for key, value in (p.logicalTypeOptions or {}).items():
        field = f"{where}.logicalTypeOptions.{key}"
        option = slots.get(("logicalTypeOptions", key))
        if option is not None and option.fits(t):
            state(option, value, field)
        elif (key, expected) not in _TYPE_OPTIONS:
            raise fail(
                field,
                f"option {key!r} is not enforced by Strata for a {expected} column "
                f"(supported: {', '.join(keys('logicalTypeOptions'))}, format)",
            )
    for qi, q in enumerate(p.quality or []):
        field = f"{where}.quality[{qi}]"
        if q.type == "text":
            continue
        metric = q.metric or q.rule
        check = slots.get(("quality", metric))
        if check is None or not check.fits(t):
            raise fail(
                f"{field}.metric",
                f"{metric!r} is not enforced on a column by Strata "
                f"(use required, unique, logicalTypeOptions or metric {'/'.join(keys('quality'))})",
            )
        state(check, q, field)
        tolerances[check.name] = _tolerance(q, field, fail)
    known = {*keys("customProperties"), _ATTRIBUTE_POLICY}
    custom = _custom(p.customProperties, known, fail, f"{where}.customProperties")
    custom.pop(_ATTRIBUTE_POLICY, None)  # not a row rule: read by _attribute_policy
    for key, value in custom.items():
        custom_rule = slots["customProperties", key]
        if not custom_rule.fits(t):
            raise fail(f"{where}.customProperties.{key}", f"not enforced by Strata for a {expected} column")
        state(custom_rule, value, f"{where}.customProperties.{key}")
    for rule in rules():
        if problem := rule.conflict(stated):
            raise fail(f"{where}.{rule.section or rule.key}", problem)
    return stated, tolerances


def _ordered(columns: tuple[Column, ...], attr: str, odcs_field: str, fail: Any) -> tuple[str, ...]:
    marked = sorted((getattr(c, attr), c.name) for c in columns if getattr(c, attr) is not None)
    positions = [pos for pos, _ in marked]
    if positions != list(range(1, len(marked) + 1)):
        raise fail(
            f"schema[0].properties.{odcs_field}",
            f"positions {positions} of {[n for _, n in marked]} must be 1..{len(marked)}",
        )
    return tuple(n for _, n in marked)


def _tolerance(q: Any, field: str, fail: Any) -> float:
    unsupported = [
        k
        for k in ("mustNotBe", "mustBeGreaterThan", "mustBeGreaterOrEqualTo", "mustBeBetween", "mustNotBeBetween")
        if getattr(q, k) is not None
    ]
    if unsupported:
        raise fail(field, f"{unsupported[0]} is not supported here (use mustBe: 0 or mustBeLessOrEqualTo)")
    if q.mustBe is not None:
        if q.mustBe != 0:
            raise fail(f"{field}.mustBe", "only mustBe: 0 is supported")
        return 0.0
    limit = q.mustBeLessOrEqualTo if q.mustBeLessOrEqualTo is not None else q.mustBeLessThan
    if limit is None or limit == 0:
        return 0.0
    if (q.unit or "").lower() not in ("percent", "%"):
        raise fail(f"{field}.unit", "a non-zero tolerance must be given in percent (unit: percent)")
    if not 0 < limit < 100:
        raise fail(field, f"tolerance {limit} % must be between 0 and 100")
    return float(limit) / 100.0


def _row_count(quality: list[Any] | None, fail: Any) -> RowCountBounds:
    bounds = RowCountBounds()
    for qi, q in enumerate(quality or []):
        field = f"schema[0].quality[{qi}]"
        if q.type == "text":
            continue
        if (q.metric or q.rule) != "rowCount":
            raise fail(f"{field}.metric", f"{q.metric!r} is not enforced on a table by Strata (only rowCount)")
        low, high = 0, None
        if q.mustBeBetween is not None:
            low, high = q.mustBeBetween
        if q.mustBeGreaterOrEqualTo is not None:
            low = q.mustBeGreaterOrEqualTo
        if q.mustBeGreaterThan is not None:
            low = q.mustBeGreaterThan + 1
        if q.mustBeLessOrEqualTo is not None:
            high = q.mustBeLessOrEqualTo
        if q.mustBeLessThan is not None:
            high = q.mustBeLessThan - 1
        if high is not None and low > high:
            raise fail(field, f"row count bounds [{low}, {high}] are empty")
        bounds = RowCountBounds(int(low), None if high is None else int(high))
    return bounds


def _freshness(sla: list[Any] | None, columns: list[str], fail: Any) -> Freshness | None:
    latency = frequency = None
    column = None
    for si, s in enumerate(sla or []):
        field = f"slaProperties[{si}]"
        if s.property not in ("latency", "frequency"):
            continue
        seconds = _UNITS.get((s.unit or "").lower())
        if seconds is None or isinstance(s.value, bool) or not isinstance(s.value, (int, float)):
            raise fail(
                field, f"{s.property} needs a numeric value and a unit (s, m, h or d), got {s.value!r} {s.unit!r}"
            )
        span = timedelta(seconds=float(s.value) * seconds)
        if s.property == "latency":
            latency = span
            column = (s.element or "").split(".")[-1]
            if column not in columns:
                raise fail(f"{field}.element", f"{s.element!r} does not name a column of this table")
        else:
            frequency = span
    if latency is None:
        return None
    return Freshness(column=column or "", max_latency=latency, frequency=frequency)


def _custom(props: list[Any] | None, known: set[str], fail: Any, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cp in props or []:
        if cp.property not in known:
            raise fail(f"{where}.{cp.property}", f"unknown custom property (known: {sorted(known)})")
        out[cp.property] = cp.value
    return out
