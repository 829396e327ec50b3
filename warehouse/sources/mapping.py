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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import polars as pl
import pyarrow as pa
import yaml  # type: ignore[import-untyped]

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
    raise FileNotFoundError(f"no mapping file {name_or_path} and no shipped mapping of that name "
                            f"({', '.join(shipped_mappings())})")


def load_mapping(path: Path) -> Mapping:
    """Read and validate a mapping file."""
    return parse_mapping(path.read_text(), origin=str(path))


def parse_mapping(text: str, origin: str = "<mapping>") -> Mapping:
    """Validate mapping YAML text; errors name the file and the offending key."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MappingError(f"{origin}: not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise MappingError(f"{origin}: a mapping file is a YAML object")

    def need(key: str, kind: type) -> object:
        if key not in doc:
            raise MappingError(f"{origin}: missing key '{key}'")
        if not isinstance(doc[key], kind):
            raise MappingError(f"{origin}: '{key}' must be a {kind.__name__}")
        return doc[key]

    name = str(need("name", str))
    kind = doc.get("kind", "requests")
    if kind not in ("requests", "feedback"):
        raise MappingError(f"{origin}: 'kind' must be requests or feedback, not {kind!r}")
    fmt = need("format", str)
    if fmt not in ("csv", "jsonl"):
        raise MappingError(f"{origin}: 'format' must be csv or jsonl, not {fmt!r}")
    canonical = set(fields_for(kind))
    fields_ = {str(k): str(v) for k, v in dict(need("fields", dict)).items()}  # type: ignore[call-overload]
    constants = {str(k): str(v) for k, v in dict(doc.get("constants") or {}).items()}
    unknown = sorted((set(fields_) | set(constants)) - canonical)
    if unknown:
        raise MappingError(f"{origin}: {unknown} are not canonical {kind} fields (see DESIGN §2)")
    derive = doc.get("request_id") == "derive"
    if "request_id" not in fields_ and "request_id" not in constants and not derive:
        raise MappingError(f"{origin}: map 'request_id' in fields or set 'request_id: derive'")
    if "ts" not in fields_:
        raise MappingError(f"{origin}: 'fields' must map 'ts'")
    ts = dict(doc.get("timestamp") or {})
    if ("format" in ts) == ("unit" in ts):
        raise MappingError(f"{origin}: 'timestamp' needs exactly one of 'format' or 'unit'")
    if "unit" in ts and ts["unit"] not in _UNITS:
        raise MappingError(f"{origin}: timestamp unit must be one of {sorted(_UNITS)}")
    csv_opts = dict(doc.get("csv") or {})
    columns = tuple(str(c) for c in csv_opts.get("columns", ()))
    if fmt == "csv":
        if not columns:
            raise MappingError(f"{origin}: csv.columns must list the file's columns in order")
        missing = sorted(set(fields_.values()) - set(columns))
        if missing:
            raise MappingError(f"{origin}: fields name columns {missing} that csv.columns does not list")
    return Mapping(
        name=name, kind=kind, format=fmt, fields=fields_, constants=constants,  # type: ignore[arg-type]
        csv_columns=columns, csv_header=bool(csv_opts.get("header", True)),
        csv_delimiter=str(csv_opts.get("delimiter", ",")),
        ts_format=ts.get("format"), ts_timezone=str(ts.get("timezone", "UTC")),
        ts_unit=ts.get("unit"), ts_epoch_offset_s=float(ts.get("epoch_offset_s", 0)),
        derive_request_id=derive, text=text,
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
    return pl.DataFrame({"parse_error": errors, **columns}, schema={"parse_error": pl.String,
                        **{c: pl.String for c in mapping.csv_columns}})


def _timestamps_to_text(values: pl.Expr, mapping: Mapping) -> pl.Expr:
    """Source timestamps → RFC 3339 UTC text; text that does not parse is kept as it was."""
    if mapping.ts_unit:
        micros = (values.cast(pl.Float64, strict=False) * _UNITS[mapping.ts_unit]
                  + mapping.ts_epoch_offset_s * 1_000_000).round(0).cast(pl.Int64, strict=False)
        parsed = pl.from_epoch(micros, time_unit="us").dt.replace_time_zone("UTC")
    else:
        parsed = values.str.to_datetime(mapping.ts_format, strict=False, time_unit="us")
        parsed = parsed.dt.replace_time_zone(mapping.ts_timezone).dt.convert_time_zone("UTC")
    iso = parsed.dt.strftime("%Y-%m-%dT%H:%M:%S%.6f+00:00")
    return pl.when(parsed.is_not_null()).then(iso).otherwise(values)


def parse_mapped_lines(raw: pa.Array, mapping: Mapping, *, line_no: pa.Array, file_sha256: pa.Array,
                       folder: Path) -> pl.DataFrame:
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
            expr = pl.format("{}:{}:{}", pl.lit(mapping.name), pl.Series(file_sha256).str.slice(0, 12),
                             pl.Series(line_no))
        else:
            expr = pl.lit(None, pl.String)
        exprs.append(pl.when(ok).then(expr).otherwise(None).cast(pl.String).alias(name))
    return source.select(exprs)
