"""Declarative mappings: any CSV or JSONL trace onto the canonical fields, no code.

A mapping file (YAML) names the source columns of each canonical field, how its
timestamps are written, and constants for required fields the source lacks::

    name: azure_llm_2023_conv
    kind: requests              # or feedback
    format: csv                 # csv | jsonl
    csv: {columns: [TIMESTAMP, ContextTokens, GeneratedTokens], header: true, delimiter: ","}
    fields: {ts: TIMESTAMP, input_tokens: ContextTokens, output_tokens: GeneratedTokens}
    timestamp: {format: "%Y-%m-%d %H:%M:%S%.f", timezone: UTC}   # or {unit: ms, epoch_offset_s: 0}
    constants: {tenant_id: azure-public, model: azure-llm, operation: chat, status_code: "200"}
    request_id: derive          # "<name>:<file sha256[:12]>:<line_no>" when the source has no id

The timestamp ``format`` uses chrono/strftime codes; naive times are read in
``timezone``. With ``unit`` instead, the column holds epoch numbers in that unit,
plus ``epoch_offset_s`` seconds (for traces that count from their own start).

A constant fills a field where its source holds nothing. ``tenant_id`` is, after the
field and its constant, the tenant the file was landed with (``strata ingest --tenant``,
else ``STRATA_DEFAULT_TENANT``), kept in the rows' ``source`` so rebuilds and ``forget``
read the file the same way.

**What a field may say** (JSON lines; a CSV field names a column, and only the options
``empty_as_null``, ``uuid_hex``, ``map``, ``error_class``, ``unit`` and ``when`` apply).
A *source* is a plain name — one key of the line, taken literally, dots included
(``llm.user`` is the key ``llm.user``) — or a YAML list of keys and list positions
walked from the line down (``[metadata, user_api_key_team_id]``,
``[response, choices, 0, finish_reason]``). A field is a source, or an object::

    user_id:                                   # every key below is optional but one source
      first: [end_user, [model_parameters, user]]  # the first source present wins (or from: SOURCE)
      empty_as_null: true                      # "" is absent (so the next source is tried)
      uuid_hex: true                           # a dashed UUID → its 32 lower-case hex digits
      map: {completion: chat, failure: null}   # value → value (null: none); others kept as written
      error_class: true                        # error_type / status_code from an exception class name
      unit: s                                  # a *_ms field's source is in s, ms, us or ns
      minus: startTime                         # a *_ms field = from − minus, both times in ``unit``
      when: {field: stream, equals: true}      # null where the condition fails (a list: all hold)

- ``first`` / ``from``: sources tried in order; a value is present when the line holds it
  and it is not JSON null (nor ``""`` with ``empty_as_null``). Nested values come as their
  JSON text.
- ``uuid_hex``: ``9e4264bb-ebb6-47c0-bc93-53774bb84611`` reads as
  ``9e4264bbebb647c0bc9353774bb84611`` (trace ids); other values are kept as written.
- ``map``: applied to the value found; keys and values are text (YAML ``true`` is ``true``).
- ``error_class``: on ``error_type``, a class the OTLP reader's error table
  (:data:`warehouse.sources.otlp.ERROR_CLASSES`) knows becomes its error type
  (``RateLimitError`` → ``rate_limited``), another keeps its last dotted part; on
  ``status_code``, a known class becomes the HTTP status it stands for, another null.
- ``unit`` (without ``minus``): the value is a duration in that unit, converted to ms.
- ``minus``: the difference of two times, in ms; with ``unit`` both are epoch numbers in
  that unit, without it both are read by the mapping's ``timestamp`` rule. Exact decimal text.
- ``when``: ``{field: SOURCE, equals: V}`` holds where that source's value is V (``equals``
  defaults to ``true``); ``{field: SOURCE, in: [V, …]}`` where it is one of them.

Steps apply in the order listed; the field's constant, if any, fills what is left null.
Misuse (an unknown key, a path in a CSV mapping, ``unit`` on a field that is not a
duration, ``error_class`` elsewhere than ``error_type``/``status_code``, …) is refused at
load with a :class:`MappingError` naming the file and the key. Nothing is evaluated.
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl
import pyarrow as pa
import yaml

from contracts.errors import InputError
from warehouse.sources.canonical import MAX_LINE_BYTES, Kind, fields_for
from warehouse.sources.jsonl import parse_json_lines

_UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 0.001}


class MappingError(InputError):
    """A mapping file is invalid; the message names the file and the key."""


#: Where a value lies in a line: keys (and list positions) from the line down.
SourcePath = tuple[str | int, ...]


@dataclass(frozen=True)
class Condition:
    """A field's ``when``: holds where the value at ``path`` is one of ``values``."""

    path: SourcePath
    values: tuple[str, ...]


@dataclass(frozen=True)
class Field:
    """How one canonical field is read (the constructs of the module docstring, in order)."""

    sources: tuple[SourcePath, ...]
    empty_as_null: bool = False
    uuid_hex: bool = False
    values: tuple[tuple[str, str | None], ...] = ()
    error_class: bool = False
    unit: str | None = None
    minus: SourcePath | None = None
    when: tuple[Condition, ...] = ()

    def paths(self) -> list[SourcePath]:
        """Every source the field reads (its values, ``minus`` and conditions)."""
        return [*self.sources, *([self.minus] if self.minus else []), *(c.path for c in self.when)]


def nested_at(line: bytes, key: str, depth: int = 8) -> SourcePath | None:
    """Where a JSON-object line holds ``key`` below its top level (the first found, breadth first);
    None when it does not, or the line is not a JSON object. Read as data, ``depth`` levels at most."""
    import json

    try:
        doc = json.loads(line)
    except ValueError:
        return None
    level: list[tuple[SourcePath, object]] = [((), doc)]
    for _ in range(depth):
        below: list[tuple[SourcePath, object]] = []
        for path, value in level:
            items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
            for step, inner in items:
                if path and step == key:
                    return (*path, step)
                below.append(((*path, step), inner))
        level = below
    return None


def describe(path: SourcePath) -> str:
    """A source as a mapping file writes it: ``name``, or ``[a, b, 0]``."""
    return str(path[0]) if len(path) == 1 else "[" + ", ".join(map(str, path)) + "]"


@dataclass(frozen=True)
class Mapping:
    """A parsed, validated mapping file."""

    name: str
    kind: Kind
    format: Literal["csv", "jsonl"]
    fields: dict[str, Field]
    constants: dict[str, str] = field(default_factory=dict)
    csv_columns: tuple[str, ...] = ()
    csv_header: bool = True
    csv_delimiter: str = ","
    ts_format: str | None = None
    ts_timezone: str = "UTC"
    ts_unit: str | None = None
    ts_epoch_offset_s: float = 0.0
    derive_request_id: bool = False
    text: str = ""

    @property
    def sha12(self) -> str:
        """Short hash of the mapping text: part of the ``source`` of every row it landed."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:12]

    @property
    def source(self) -> str:
        """The ODS ``source`` value naming this exact mapping."""
        return f"mapping:{self.name}@{self.sha12}"


SHIPPED = Path(__file__).parent / "mappings"


def shipped_mappings() -> list[str]:
    """Names of the mappings that ship with Strata (usable as ``--mapping NAME``)."""
    return sorted(p.stem for p in SHIPPED.glob("*.yaml"))


def resolve_mapping(name_or_path: Path) -> Path:
    """A mapping file path, or the shipped mapping of that name (e.g. ``azure_llm_2023_conv``)."""
    if name_or_path.is_file():
        return name_or_path
    shipped = SHIPPED / f"{name_or_path.name.removesuffix('.yaml')}.yaml"
    if shipped.is_file():
        return shipped
    raise MappingError(
        f"no mapping file {name_or_path} and no shipped mapping of that name ({', '.join(shipped_mappings())})"
    )


#: A mapping file is a few hundred bytes; anything far larger is not one.
MAX_MAPPING_BYTES = 64 * 1024
#: A mapping's name becomes part of file names and of every landed row's ``source``.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_KEYS = {"name", "kind", "format", "csv", "fields", "timestamp", "constants", "request_id"}
_FIELD_KEYS = {"from", "first", "empty_as_null", "uuid_hex", "map", "error_class", "unit", "minus", "when"}
_CONDITION_KEYS = {"field", "equals", "in"}
#: The only canonical fields ``error_class`` reads into.
_ERROR_FIELDS = ("error_type", "status_code")
_CSV_KEYS = {"columns", "header", "delimiter"}
_TS_KEYS = {"format", "timezone", "unit", "epoch_offset_s"}


def load_mapping(path: Path) -> Mapping:
    """Read and validate a mapping file."""
    size = path.stat().st_size
    if size > MAX_MAPPING_BYTES:
        raise MappingError(f"{path}: {size:,} bytes is not a mapping file (at most {MAX_MAPPING_BYTES:,})")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise MappingError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_mapping(text, origin=str(path))


def _yaml(text: str, origin: str) -> object:
    """The YAML document, refusing anchors and aliases (a few hundred bytes of aliases can expand
    to gigabytes) and anything but plain data."""
    if len(text.encode()) > MAX_MAPPING_BYTES:
        raise MappingError(f"{origin}: too large for a mapping file (at most {MAX_MAPPING_BYTES:,} bytes)")
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise MappingError(
                    f"{origin}: YAML anchors and aliases are not allowed in a mapping file "
                    f"(line {event.start_mark.line + 1})"
                )
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MappingError(f"{origin}: not valid YAML: {exc}") from None


def _scalar(value: object) -> str | None:
    """A YAML scalar as the text a line's value is compared with (``true``, ``200``); None if not one."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def _source(key: str, value: object, fail: Callable[[str, str], MappingError]) -> SourcePath:
    """A source: a plain name (taken literally), or a list of keys and list positions."""
    if isinstance(value, str) and value:
        return (value,)
    if not isinstance(value, list) or not value:
        raise fail(key, f"a source is a name or a list of keys and list positions, not {value!r}")
    if not isinstance(value[0], str) or not value[0]:
        raise fail(key, f"a path starts with a key of the line, not {value[0]!r}")
    for step in value[1:]:
        if isinstance(step, bool) or not isinstance(step, (str, int)) or (isinstance(step, int) and step < 0):
            raise fail(key, f"a path step is a key or a list position (0, 1, …), not {step!r}")
        if isinstance(step, str) and (not step or "'" in step or "\\" in step):
            raise fail(key, f"a nested key may not be empty or hold ' or \\, not {step!r}")
    return tuple(value)


def _field(
    key: str,
    name: str,
    value: object,
    fail: Callable[[str, str], MappingError],
    text_of: Callable[[str, object], str],
) -> Field:
    """One entry of ``fields``: a source, or an object of the constructs in the module docstring."""
    if not isinstance(value, dict):
        if isinstance(value, list):
            return Field(sources=(_source(key, value, fail),))
        return Field(sources=((text_of(key, value),),))
    if unknown := sorted(map(str, set(value) - _FIELD_KEYS)):
        raise fail(f"{key}.{unknown[0]}", f"unknown key (known: {sorted(_FIELD_KEYS)})")
    if ("from" in value) == ("first" in value):
        raise fail(key, "needs exactly one of 'from' (a source) or 'first' (a list of sources)")
    if "from" in value:
        sources: tuple[SourcePath, ...] = (_source(f"{key}.from", value["from"], fail),)
    else:
        first = value["first"]
        if not isinstance(first, list) or len(first) < 2:
            raise fail(f"{key}.first", "must list two or more sources (one source: use 'from')")
        sources = tuple(_source(f"{key}.first[{i}]", v, fail) for i, v in enumerate(first))
    flags = {}
    for flag in ("empty_as_null", "uuid_hex", "error_class"):
        flags[flag] = value.get(flag, False)
        if not isinstance(flags[flag], bool):
            raise fail(f"{key}.{flag}", f"must be true or false, not {flags[flag]!r}")
    if flags["error_class"] and name not in _ERROR_FIELDS:
        raise fail(f"{key}.error_class", f"reads into {' or '.join(_ERROR_FIELDS)} only, not {name}")
    values: tuple[tuple[str, str | None], ...] = ()
    if "map" in value:
        table = value["map"]
        if not isinstance(table, dict) or not table:
            raise fail(f"{key}.map", "must be an object of value: value")
        pairs = []
        for k, v in table.items():
            k_text, v_text = _scalar(k), None if v is None else _scalar(v)
            if k_text is None or (v is not None and v_text is None):
                raise fail(f"{key}.map", "keys and values must be text, numbers or true/false (null: no value)")
            pairs.append((k_text, v_text))
        values = tuple(pairs)
    unit = value.get("unit")
    if unit is not None and unit not in _UNITS:
        raise fail(f"{key}.unit", f"must be one of {sorted(_UNITS)}, not {unit!r}")
    minus = _source(f"{key}.minus", value["minus"], fail) if "minus" in value else None
    if (unit is not None or minus is not None) and not name.endswith("_ms"):
        raise fail(f"{key}.{'unit' if unit is not None else 'minus'}", f"applies to durations (*_ms), not {name}")
    when_raw = value.get("when", [])
    conditions = when_raw if isinstance(when_raw, list) else [when_raw]
    when = tuple(_condition(f"{key}.when", c, fail) for c in conditions)
    return Field(sources=sources, values=values, unit=unit, minus=minus, when=when, **flags)


def _condition(key: str, value: object, fail: Callable[[str, str], MappingError]) -> Condition:
    """A ``when`` condition: ``{field: SOURCE, equals: V}`` (default ``true``) or ``{field: SOURCE, in: [V, …]}``."""
    if not isinstance(value, dict) or "field" not in value:
        raise fail(key, f"a condition is {{field: SOURCE, equals: V}} or {{field: SOURCE, in: [V, …]}}, not {value!r}")
    if unknown := sorted(map(str, set(value) - _CONDITION_KEYS)):
        raise fail(f"{key}.{unknown[0]}", f"unknown key (known: {sorted(_CONDITION_KEYS)})")
    if "equals" in value and "in" in value:
        raise fail(key, "needs one of 'equals' or 'in', not both")
    wanted = value["in"] if "in" in value else [value.get("equals", True)]
    if not isinstance(wanted, list) or not wanted:
        raise fail(f"{key}.in", "must list the values the condition holds for")
    texts = [_scalar(v) for v in wanted]
    if any(t is None for t in texts):
        raise fail(key, f"compares with text, numbers or true/false, not {wanted!r}")
    return Condition(path=_source(f"{key}.field", value["field"], fail), values=tuple(map(str, texts)))


def parse_mapping(text: str, origin: str = "<mapping>") -> Mapping:
    """Validate mapping YAML text whole; every error names the file and the offending key."""
    doc = _yaml(text, origin)
    if not isinstance(doc, dict):
        raise MappingError(f"{origin}: a mapping file is a YAML object")

    def fail(key: str, message: str) -> MappingError:
        return MappingError(f"{origin}: {key}: {message}")

    def section(key: str, known: set[str] | None = None) -> dict[Any, Any]:
        value = doc.get(key) or {}
        if not isinstance(value, dict):
            raise fail(key, "must be an object")
        if known is not None and (unknown := sorted(map(str, set(value) - known))):
            raise fail(key, f"unknown key(s) {unknown} (known: {sorted(known)})")
        return value

    def text_of(key: str, value: object) -> str:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise fail(key, f"must be text, not {type(value).__name__}")
        return str(value)

    unknown = sorted(map(str, set(doc) - _KEYS))
    if unknown:
        raise fail(str(unknown[0]), f"unknown key (known: {sorted(_KEYS)})")
    for key in ("name", "format", "fields"):
        if key not in doc:
            raise fail(key, "missing")
    name = doc["name"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise fail("name", f"{name!r} must be 1-64 letters, digits, '_' or '-' (it names files and rows)")
    kind = doc.get("kind", "requests")
    if kind not in ("requests", "feedback"):
        raise fail("kind", f"must be requests or feedback, not {kind!r}")
    fmt = doc["format"]
    if fmt not in ("csv", "jsonl"):
        raise fail("format", f"must be csv or jsonl, not {fmt!r}")
    canonical = set(fields_for(kind))
    fields_ = {str(k): _field(f"fields.{k}", str(k), v, fail, text_of) for k, v in section("fields").items()}
    constants = {str(k): text_of(f"constants.{k}", v) for k, v in section("constants").items()}
    for where, keys in (("fields", fields_), ("constants", constants)):
        wrong = sorted(set(keys) - canonical)
        if wrong:
            raise fail(
                f"{where}.{wrong[0]}", f"not a canonical {kind} field (see docs/design.md §2: {sorted(canonical)})"
            )
    request_id = doc.get("request_id")
    if request_id not in (None, "derive"):
        raise fail("request_id", f"the only value is 'derive', not {request_id!r}")
    if "request_id" not in fields_ and "request_id" not in constants and request_id != "derive":
        raise fail("request_id", "map 'request_id' in fields, or set 'request_id: derive'")
    if "ts" not in fields_:
        raise fail("fields.ts", "missing: every record needs its time")
    ts = section("timestamp", _TS_KEYS)
    ts_format, timezone, offset = _timestamp_rule(ts, fail, text_of)
    columns, header, delimiter = _csv_options(section("csv", _CSV_KEYS), fmt, fields_, fail, text_of)
    return Mapping(
        name=name,
        kind=kind,
        format=fmt,
        fields=fields_,
        constants=constants,
        csv_columns=columns,
        csv_header=header,
        csv_delimiter=delimiter,
        ts_format=ts_format,
        ts_timezone=timezone,
        ts_unit=ts.get("unit"),
        ts_epoch_offset_s=offset,
        derive_request_id=request_id == "derive",
        text=text,
    )


def _timestamp_rule(
    ts: dict[Any, Any], fail: Callable[[str, str], MappingError], text_of: Callable[[str, object], str]
) -> tuple[str | None, str, float]:
    """The ``timestamp`` section checked: (its format, its time zone, its epoch offset in seconds)."""
    if ("format" in ts) == ("unit" in ts):
        raise fail("timestamp", "needs exactly one of 'format' (text times) or 'unit' (epoch numbers)")
    if "unit" in ts and ts["unit"] not in _UNITS:
        raise fail("timestamp.unit", f"must be one of {sorted(_UNITS)}, not {ts['unit']!r}")
    offset = ts.get("epoch_offset_s", 0)
    if isinstance(offset, bool) or not isinstance(offset, (int, float)):
        raise fail("timestamp.epoch_offset_s", f"must be a number of seconds, not {offset!r}")
    if "epoch_offset_s" in ts and "unit" not in ts:
        raise fail("timestamp.epoch_offset_s", "applies to epoch numbers only (set 'unit')")
    timezone = text_of("timestamp.timezone", ts.get("timezone", "UTC"))
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise fail("timestamp.timezone", f"{timezone!r} is not a time zone (e.g. UTC, Europe/Berlin)") from None
    ts_format = text_of("timestamp.format", ts["format"]) if "format" in ts else None
    return ts_format, timezone, float(offset)


def _csv_options(
    csv_opts: dict[Any, Any],
    fmt: str,
    fields_: dict[str, Field],
    fail: Callable[[str, str], MappingError],
    text_of: Callable[[str, object], str],
) -> tuple[tuple[str, ...], bool, str]:
    """The ``csv`` section checked against the format and the fields: (columns, header, delimiter)."""
    columns_raw = csv_opts.get("columns", [])
    if not isinstance(columns_raw, list):
        raise fail("csv.columns", "must be a list of the file's column names")
    columns = tuple(text_of(f"csv.columns[{i}]", c) for i, c in enumerate(columns_raw))
    header = csv_opts.get("header", True)
    if not isinstance(header, bool):
        raise fail("csv.header", f"must be true or false, not {header!r}")
    delimiter = text_of("csv.delimiter", csv_opts.get("delimiter", ","))
    if len(delimiter) != 1:
        raise fail("csv.delimiter", f"must be one character, not {delimiter!r}")
    if fmt == "csv":
        if not columns:
            raise fail("csv.columns", "must list the file's columns in order")
        for field_name, rule in fields_.items():
            for path in rule.paths():
                if len(path) > 1 or rule.minus is not None:
                    raise fail(f"fields.{field_name}", "nested paths and 'minus' apply to format: jsonl only")
                if path[0] not in columns:
                    raise fail("fields", f"name columns {[path[0]]} that csv.columns does not list")
    elif csv_opts:
        raise fail("csv", "applies to format: csv only")
    return columns, header, delimiter


def _parse_csv_lines(raw: pa.Array, mapping: Mapping) -> pl.DataFrame:
    width = len(mapping.csv_columns)
    rows: list[list[str | None]] = []
    errors: list[str | None] = []
    for line in raw.to_pylist():
        if len(line) > MAX_LINE_BYTES:
            rows.append([None] * width)
            errors.append(f"oversized line (> {MAX_LINE_BYTES} bytes)")
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            rows.append([None] * width)
            errors.append("invalid UTF-8")
            continue
        values = next(csv.reader([text.rstrip("\r")], delimiter=mapping.csv_delimiter), [])
        if len(values) != width:
            rows.append([None] * width)
            errors.append(f"expected {width} CSV fields, found {len(values)}")
        elif mapping.csv_header and values == list(mapping.csv_columns):
            rows.append([None] * width)
            errors.append("CSV header row (not a record)")
        else:
            rows.append(list[str | None](values))
            errors.append(None)
    columns = {c: [r[i] for r in rows] for i, c in enumerate(mapping.csv_columns)}
    return pl.DataFrame(
        {"parse_error": errors, **columns},
        schema={"parse_error": pl.String, **{c: pl.String for c in mapping.csv_columns}},
    )


def _datetimes(values: pl.Expr, mapping: Mapping) -> pl.Expr:
    """Source timestamps (the mapping's ``timestamp`` rule) → UTC datetimes; null where they do not parse."""
    if mapping.ts_unit:
        micros = (
            (values.cast(pl.Float64, strict=False) * _UNITS[mapping.ts_unit] + mapping.ts_epoch_offset_s * 1_000_000)
            .round(0)
            .cast(pl.Int64, strict=False)
        )
        return pl.from_epoch(micros, time_unit="us").dt.replace_time_zone("UTC")
    parsed = values.str.to_datetime(mapping.ts_format, strict=False, time_unit="us")
    return parsed.dt.replace_time_zone(mapping.ts_timezone).dt.convert_time_zone("UTC")


def _timestamps_to_text(values: pl.Expr, mapping: Mapping) -> pl.Expr:
    """Source timestamps → RFC 3339 UTC text; text that does not parse is kept as it was."""
    parsed = _datetimes(values, mapping)
    iso = parsed.dt.strftime("%Y-%m-%dT%H:%M:%S%.6f+00:00")
    return pl.when(parsed.is_not_null()).then(iso).otherwise(values)


#: Exact decimal arithmetic for durations: nanoseconds of epoch numbers fit 38 digits.
_DECIMAL = pl.Decimal(38, 9)
#: Milliseconds per unit, as decimal text.
_MS_PER = {"s": "1000", "ms": "1", "us": "0.001", "ns": "0.000001"}
_UUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


def _decimal_text(value: pl.Expr) -> pl.Expr:
    """A decimal as text without trailing zeros (``3702.034000000`` → ``3702.034``)."""
    return value.cast(pl.String).str.replace(r"(\.[0-9]*?)0+$", "$1").str.strip_suffix(".")


def _read(path: SourcePath) -> pl.Expr:
    """The text at ``path`` of each line: the top-level column, then a JSON path inside its value."""
    column = pl.col(str(path[0]))
    if len(path) == 1:
        return column
    steps = "".join(f"[{step}]" if isinstance(step, int) else f"['{step}']" for step in path[1:])
    return column.str.json_path_match("$" + steps)


def _field_expr(name: str, rule: Field, mapping: Mapping) -> pl.Expr:
    """The canonical text of one mapped field (the steps of the module docstring, in order)."""
    from warehouse.sources.otlp import ERROR_CLASSES

    def present(path: SourcePath) -> pl.Expr:
        value = _read(path)
        return pl.when(value != "").then(value) if rule.empty_as_null else value

    expr = pl.coalesce([present(path) for path in rule.sources])
    if rule.uuid_hex:
        expr = pl.when(expr.str.contains(_UUID)).then(expr.str.replace_all("-", "").str.to_lowercase()).otherwise(expr)
    if rule.values:
        table = dict(rule.values)
        expr = expr.replace_strict(list(table), list(table.values()), default=expr, return_dtype=pl.String)
    if rule.error_class:
        class_name = expr.str.replace(r"^<class '([^']+)'>$", "$1").str.split(".").list.last()
        if name == "status_code":
            known = {k: str(status) for k, (status, _) in ERROR_CLASSES.items() if status is not None}
            other: pl.Expr | None = None
        else:
            known = {k: error_type for k, (_, error_type) in ERROR_CLASSES.items()}
            other = class_name
        expr = class_name.replace_strict(list(known), list(known.values()), default=other, return_dtype=pl.String)
    if rule.minus is not None and rule.unit is None:
        ns = (_datetimes(expr, mapping) - _datetimes(_read(rule.minus), mapping)).dt.total_nanoseconds()
        expr = _decimal_text(ns.cast(_DECIMAL) * pl.lit("0.000001").cast(_DECIMAL))
    elif rule.unit is not None:
        amount = expr.cast(_DECIMAL, strict=False)
        if rule.minus is not None:
            amount = amount - _read(rule.minus).cast(_DECIMAL, strict=False)
        expr = _decimal_text(amount * pl.lit(_MS_PER[rule.unit]).cast(_DECIMAL))
    for condition in rule.when:
        expr = pl.when(_read(condition.path).is_in(condition.values)).then(expr)
    return expr


def parse_mapped_lines(
    raw: pa.Array,
    mapping: Mapping,
    *,
    line_no: pa.Array,
    file_sha256: pa.Array,
    folder: Path,
    tenant: str | None = None,
) -> pl.DataFrame:
    """Canonical fields (text) and ``parse_error`` for lines of a mapped source, in input order.

    ``tenant`` is the tenant of rows that name none (the file's ``--tenant``), below the field's constant.
    """
    if mapping.format == "csv":
        source = _parse_csv_lines(raw, mapping)
    else:
        tops = {str(path[0]) for rule in mapping.fields.values() for path in rule.paths()}
        source = parse_json_lines(raw, sorted(tops), folder=folder)
    ok = pl.col("parse_error").is_null()
    exprs: list[pl.Expr] = [pl.col("parse_error")]
    for name in fields_for(mapping.kind):
        if name in mapping.fields:
            expr = _field_expr(name, mapping.fields[name], mapping)
            if name == "ts":
                expr = _timestamps_to_text(expr, mapping)
            if name in mapping.constants:
                expr = expr.fill_null(pl.lit(mapping.constants[name]))
        elif name in mapping.constants:
            expr = pl.lit(mapping.constants[name])
        elif name == "request_id" and mapping.derive_request_id:
            expr = pl.format(
                "{}:{}:{}", pl.lit(mapping.name), pl.Series(file_sha256).str.slice(0, 12), pl.Series(line_no)
            )
        else:
            expr = pl.lit(None, pl.String)
        if name == "tenant_id" and tenant is not None:
            expr = expr.fill_null(pl.lit(tenant))
        exprs.append(pl.when(ok).then(expr).otherwise(None).cast(pl.String).alias(name))
    return source.select(exprs)
