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
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa

from contracts.errors import ContractError
from contracts.model import Column, Contract, Freshness, RowCountBounds
from contracts.types import logical_type, parse_type

CONTRACTS_DIR = Path(__file__).resolve().parent / "tables"
LAYERS = ("ods", "dwd", "dws", "ads", "ops")

_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
_TABLE = re.compile(r"^(ods|dwd|dws|ads|ops)\.[a-z][a-z0-9_]*$")
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$")
_UNITS = {
    "s": 1, "sec": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}
_RANGE_OPTIONS = {"integer", "number", "timestamp", "date"}
_COLUMN_CUSTOM = {"maxFutureSkew"}
_CONTRACT_CUSTOM = {"layer", "writer"}
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
    return next((d / f"{name}.yaml" for d in search_path() if (d / f"{name}.yaml").exists()),
                CONTRACTS_DIR / f"{name}.yaml")


@functools.lru_cache(maxsize=None)
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
    """Parse and check one contract file (not cached; any path)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ContractError(f"{path}: cannot read contract: {e}") from e
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
    """The ODCS schema's validator (jsonschema-rs: the pure-Python ``jsonschema`` took 0.7 s to
    check the shipped contracts, at every process start; this takes 4 ms)."""
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
    except ValueError as e:
        raise fail(f"{where}.physicalType", str(e)) from None
    expected = logical_type(arrow_type)
    if p.logicalType != expected:
        raise fail(f"{where}.logicalType", f"{p.logicalType!r} does not match physicalType "
                   f"{p.physicalType!r} (expected {expected!r})")
    options = dict(p.logicalTypeOptions or {})
    if pa.types.is_binary(arrow_type) and options.get("format") != "binary":
        raise fail(f"{where}.logicalTypeOptions.format", "a binary column must say format: binary")
    if pa.types.is_list(arrow_type) and p.items is not None:
        inner = logical_type(arrow_type.value_type)
        if p.items.logicalType not in (None, inner):
            raise fail(f"{where}.items.logicalType", f"{p.items.logicalType!r} does not match {inner!r}")

    minimum = maximum = pattern = min_items = None
    for key, value in options.items():
        field = f"{where}.logicalTypeOptions.{key}"
        if key in ("minimum", "maximum") and expected in _RANGE_OPTIONS:
            bound = _bound(value, arrow_type, field, fail)
            minimum, maximum = (bound, maximum) if key == "minimum" else (minimum, bound)
        elif key == "pattern" and expected == "string" and not pa.types.is_binary(arrow_type):
            try:
                re.compile(value)
            except re.error as e:
                raise fail(field, f"not a valid regular expression: {e}") from None
            pattern = value
        elif key == "minItems" and expected == "array":
            min_items = int(value)
        elif key == "format" and expected == "string":
            continue
        elif key in ("timezone", "defaultTimezone") and expected == "timestamp":
            continue
        else:
            raise fail(field, f"option {key!r} is not enforced by Strata for a {expected} column "
                       "(supported: minimum/maximum, pattern, minItems, format)")
    if minimum is not None and maximum is not None and minimum > maximum:
        raise fail(f"{where}.logicalTypeOptions", f"minimum {minimum!r} is above maximum {maximum!r}")

    allowed: tuple[Any, ...] | None = None
    tolerances: dict[str, float] = {}
    for qi, q in enumerate(p.quality or []):
        field = f"{where}.quality[{qi}]"
        if q.type == "text":
            continue
        metric = q.metric or q.rule
        if metric == "invalidValues":
            values = (q.arguments or {}).get("validValues")
            if not isinstance(values, list) or not values:
                raise fail(f"{field}.arguments.validValues", "invalidValues needs a non-empty validValues list")
            extra = set(q.arguments or {}) - {"validValues"}
            if extra:
                raise fail(f"{field}.arguments", f"unsupported arguments {sorted(extra)} (only validValues)")
            allowed = tuple(_check_value(v, arrow_type, f"{field}.arguments.validValues", fail) for v in values)
            tolerances["allowed_values"] = _tolerance(q, field, fail)
        elif metric == "nullValues":
            if p.required:
                raise fail(field, "nullValues on a required column: required already forbids nulls")
            tolerances["null_rate"] = _tolerance(q, field, fail)
        else:
            raise fail(f"{field}.metric", f"{metric!r} is not enforced on a column by Strata "
                       "(use required, unique, logicalTypeOptions or metric invalidValues/nullValues)")

    custom = _custom(p.customProperties, _COLUMN_CUSTOM, fail, f"{where}.customProperties")
    max_future = None
    if "maxFutureSkew" in custom:
        if expected != "timestamp":
            raise fail(f"{where}.customProperties.maxFutureSkew", "only a timestamp column can have one")
        max_future = _iso_duration(custom["maxFutureSkew"], f"{where}.customProperties.maxFutureSkew", fail)

    return Column(
        name=p.name,
        arrow_type=arrow_type,
        logical_type=expected,
        required=bool(p.required),
        unique=bool(p.unique),
        description=(p.description or "").strip(),
        allowed_values=allowed,
        minimum=minimum,
        maximum=maximum,
        pattern=pattern,
        min_items=min_items,
        max_future=max_future,
        primary_key_position=(p.primaryKeyPosition if p.primaryKeyPosition and p.primaryKeyPosition > 0 else 1)
        if p.primaryKey else None,
        partition_position=(p.partitionKeyPosition if p.partitionKeyPosition and p.partitionKeyPosition > 0 else 1)
        if p.partitioned else None,
        classification=p.classification,
        tolerances=tuple(sorted((k, v) for k, v in tolerances.items() if v > 0)),
    )


def _ordered(columns: tuple[Column, ...], attr: str, odcs_field: str, fail: Any) -> tuple[str, ...]:
    marked = sorted((getattr(c, attr), c.name) for c in columns if getattr(c, attr) is not None)
    positions = [pos for pos, _ in marked]
    if positions != list(range(1, len(marked) + 1)):
        raise fail(f"schema[0].properties.{odcs_field}",
                   f"positions {positions} of {[n for _, n in marked]} must be 1..{len(marked)}")
    return tuple(n for _, n in marked)


def _bound(value: Any, t: pa.DataType, field: str, fail: Any) -> Any:
    if pa.types.is_timestamp(t):
        text = value.isoformat() if isinstance(value, datetime) else str(value)
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise fail(field, f"{value!r} is not an ISO 8601 timestamp") from None
        if parsed.tzinfo is None:
            raise fail(field, f"{value!r} needs a UTC offset")
        return parsed
    if pa.types.is_date(t):
        try:
            return value if isinstance(value, date) else date.fromisoformat(str(value))
        except ValueError:
            raise fail(field, f"{value!r} is not an ISO 8601 date") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(field, f"{value!r} is not a number")
    if pa.types.is_decimal(t):
        return Decimal(str(value))
    if pa.types.is_integer(t):
        if float(value) != int(value):
            raise fail(field, f"{value!r} is not a whole number for an integer column")
        return int(value)
    return float(value)


def _check_value(value: Any, t: pa.DataType, field: str, fail: Any) -> Any:
    ok = (
        (pa.types.is_string(t) and isinstance(value, str))
        or (pa.types.is_integer(t) and isinstance(value, int) and not isinstance(value, bool))
        or (pa.types.is_floating(t) and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (pa.types.is_boolean(t) and isinstance(value, bool))
    )
    if not ok:
        raise fail(field, f"value {value!r} does not fit column type {t}")
    return float(value) if pa.types.is_floating(t) else value


def _tolerance(q: Any, field: str, fail: Any) -> float:
    unsupported = [k for k in ("mustNotBe", "mustBeGreaterThan", "mustBeGreaterOrEqualTo", "mustBeBetween",
                               "mustNotBeBetween") if getattr(q, k) is not None]
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
            raise fail(field, f"{s.property} needs a numeric value and a unit (s, m, h or d), "
                       f"got {s.value!r} {s.unit!r}")
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


def _iso_duration(value: Any, field: str, fail: Any) -> timedelta:
    m = _DURATION.match(str(value))
    if not m or not any(m.groups()):
        raise fail(field, f"{value!r} is not an ISO 8601 duration such as P1D or PT2H")
    d, h, mi, s = (int(g or 0) for g in m.groups())
    return timedelta(days=d, hours=h, minutes=mi, seconds=s)
