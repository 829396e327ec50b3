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
"""

from __future__ import annotations

import csv
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl
import pyarrow as pa
import yaml

from warehouse.sources.canonical import MAX_LINE_BYTES, Kind, fields_for
from warehouse.sources.jsonl import parse_json_lines

_UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 0.001}


class MappingError(ValueError):
    """A mapping file is invalid; the message names the file and the key."""


@dataclass(frozen=True)
class Mapping:
    """A parsed, validated mapping file."""

    name: str
    kind: Kind
    format: Literal["csv", "jsonl"]
    fields: dict[str, str]
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
    raise FileNotFoundError(
        f"no mapping file {name_or_path} and no shipped mapping of that name ({', '.join(shipped_mappings())})"
    )


#: A mapping file is a few hundred bytes; anything far larger is not one.
MAX_MAPPING_BYTES = 64 * 1024
#: A mapping's name becomes part of file names and of every landed row's ``source``.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_KEYS = {"name", "kind", "format", "csv", "fields", "timestamp", "constants", "request_id"}
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


def parse_mapping(text: str, origin: str = "<mapping>") -> Mapping:
    """Validate mapping YAML text whole; every error names the file and the offending key."""
    doc = _yaml(text, origin)
    if not isinstance(doc, dict):
        raise MappingError(f"{origin}: a mapping file is a YAML object")

    def fail(key: str, message: str) -> MappingError:
        return MappingError(f"{origin}: {key}: {message}")

    def section(key: str, known: set[str] | None = None) -> dict:
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
    fields_ = {str(k): text_of(f"fields.{k}", v) for k, v in section("fields").items()}
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
    csv_opts = section("csv", _CSV_KEYS)
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
        missing = sorted(set(fields_.values()) - set(columns))
        if missing:
            raise fail("fields", f"name columns {missing} that csv.columns does not list")
    elif csv_opts:
        raise fail("csv", "applies to format: csv only")
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
        ts_epoch_offset_s=float(offset),
        derive_request_id=request_id == "derive",
        text=text,
    )


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


def _timestamps_to_text(values: pl.Expr, mapping: Mapping) -> pl.Expr:
    """Source timestamps → RFC 3339 UTC text; text that does not parse is kept as it was."""
    if mapping.ts_unit:
        micros = (
            (values.cast(pl.Float64, strict=False) * _UNITS[mapping.ts_unit] + mapping.ts_epoch_offset_s * 1_000_000)
            .round(0)
            .cast(pl.Int64, strict=False)
        )
        parsed = pl.from_epoch(micros, time_unit="us").dt.replace_time_zone("UTC")
    else:
        parsed = values.str.to_datetime(mapping.ts_format, strict=False, time_unit="us")
        parsed = parsed.dt.replace_time_zone(mapping.ts_timezone).dt.convert_time_zone("UTC")
    iso = parsed.dt.strftime("%Y-%m-%dT%H:%M:%S%.6f+00:00")
    return pl.when(parsed.is_not_null()).then(iso).otherwise(values)


def parse_mapped_lines(
    raw: pa.Array, mapping: Mapping, *, line_no: pa.Array, file_sha256: pa.Array, folder: Path
) -> pl.DataFrame:
    """Canonical fields (text) and ``parse_error`` for lines of a mapped source, in input order."""
    if mapping.format == "csv":
        source = _parse_csv_lines(raw, mapping)
    else:
        source = parse_json_lines(raw, sorted(set(mapping.fields.values())), folder=folder)
    ok = pl.col("parse_error").is_null()
    exprs: list[pl.Expr] = [pl.col("parse_error")]
    for name in fields_for(mapping.kind):
        if name in mapping.fields:
            expr = pl.col(mapping.fields[name])
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
        exprs.append(pl.when(ok).then(expr).otherwise(None).cast(pl.String).alias(name))
    return source.select(exprs)
