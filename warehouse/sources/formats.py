"""How a landed file is read: its format, the parser of its lines, and how ODS rows name it (their ``source``).

Every decision about a file's format is taken here: which files a folder search takes
(:func:`searched`), and how one file is read (:func:`source_for`), from ``strata ingest
--format`` (a :class:`Format`), its mapping or its content.

``source`` is ``jsonl`` for canonical JSONL, ``otlp-json`` for OpenTelemetry file
exports, or ``mapping:<name>@<hash>`` for a declarative mapping; the mapping text is kept
beside ODS so DWD re-parses the raw lines exactly as they were landed. An OTLP or mapped
source ends ``;tenant=<id>`` when it names the tenant of records that name none
(``strata ingest --tenant``, ``STRATA_DEFAULT_TENANT``).

A file's format is told by its content, not its name: :func:`otlp_signal` reads the
first key of its first line (the OTLP JSON encoding of an export starts with
``resourceSpans``, ``resourceMetrics`` or ``resourceLogs``).
"""

from __future__ import annotations

import enum
import re
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from contracts.errors import InputError
from warehouse.settings import Settings
from warehouse.sources.canonical import Kind, fields_for

if TYPE_CHECKING:  # this module is light: the CLI's --format choices come from it
    import polars as pl
    import pyarrow as pa
    import pyarrow.fs as pafs

    from warehouse.sources.mapping import Mapping


class Format(enum.StrEnum):
    """How ``strata ingest --format`` reads files: ``auto`` tells each file's format by its content."""

    auto = "auto"
    jsonl = "jsonl"
    csv = "csv"
    otlp_json = "otlp-json"


class Parser(Protocol):
    """(raw lines, line numbers, file sha256s) → parse_error + canonical fields as text.

    ``ndjson`` is the lines' bytes as their file holds them, when the caller has them; a
    parser that can read them directly saves a copy.
    """

    def __call__(
        self, raw: pa.Array, line_no: pa.Array, sha: pa.Array, /, *, ndjson: memoryview | None = None
    ) -> pl.DataFrame: ...


#: The ``source`` of canonical JSON lines and of OTLP/JSON exports (before a tenant).
JSONL, OTLP = Format.jsonl.value, Format.otlp_json.value
_TENANT = ";tenant="
_SIGNAL = re.compile(rb'^\s*\{\s*"(resource_?[sS]pans|resource_?[mM]etrics|resource_?[lL]ogs)"')
#: Bytes of a file's head that :func:`otlp_signal` reads.
HEAD_BYTES = 4096
#: The first bytes of a gzip file (a file is read plain or gzip, whatever its name).
GZIP_MAGIC = b"\x1f\x8b"
#: What a folder search picks up, by what the files will be read as.
SUFFIXES = {
    "lines": (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz"),
    "otlp": (".json", ".json.gz"),
    "csv": (".csv", ".csv.gz"),
}
_SOURCE = re.compile(
    r"^mapping:([A-Za-z0-9][A-Za-z0-9_-]{0,63}@[0-9a-f]{12})(?:;tenant=[A-Za-z0-9][A-Za-z0-9._-]{0,127})?$"
)


def _mapping_dir(settings: Settings) -> tuple[pafs.FileSystem, str]:
    from warehouse.storage.objectstore import filesystem

    fs, root = filesystem(settings, settings.lake_uri)
    return fs, f"{root.rstrip('/')}/ods/_mappings"


def register_mapping(settings: Settings, mapping: Mapping) -> str:
    """Keep the mapping's text in the lake (idempotent) and return its ``source`` value."""
    import pyarrow.fs as pafs

    fs, folder = _mapping_dir(settings)
    fs.create_dir(folder, recursive=True)
    path = f"{folder}/{mapping.name}@{mapping.sha12}.yaml"
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        with fs.open_output_stream(path) as out:
            out.write(mapping.text.encode())
    return mapping.source


def registered_mapping(settings: Settings, source: str) -> Mapping:
    """The mapping a ``mapping:<name>@<hash>[;tenant=<id>]`` source was landed with."""
    from warehouse.sources.mapping import parse_mapping

    found = _SOURCE.match(source)
    if not found:
        raise InputError(f"{source!r} is not a mapping source (mapping:<name>@<hash>[;tenant=<id>])")
    fs, folder = _mapping_dir(settings)
    path = f"{folder}/{found.group(1)}.yaml"
    try:
        with fs.open_input_stream(path) as stream:
            text = stream.read().decode()
    except FileNotFoundError:
        raise InputError(f"ODS rows name source {source!r} but its mapping is missing at {path}") from None
    return parse_mapping(text, origin=path)


def parser_for(
    settings: Settings,
    source: str,
    kind: Kind,
    *,
    keys_only: bool = False,
    checked_ok: bool = False,
    also: tuple[str, ...] = (),
    spans: bool = False,
) -> Parser:
    """The parser for rows of a given ``source``.

    ``keys_only`` asks for ``request_id`` and ``ts`` alone (and the fields named in ``also``)
    where a format can skip the rest (ODS needs only those; DWD needs every field).
    ``checked_ok`` says the lines already passed the format's line checks when ODS landed them.
    ``spans`` asks a format of spans (OTLP) for the spans that are no call too (``_kind``; the DWD build).
    """
    from warehouse.storage.scratch import scratch_dir

    folder = scratch_dir(settings)
    tenant = source.partition(_TENANT)[2] or None
    if source == JSONL:
        from warehouse.sources.jsonl import parse_json_lines

        fields = ("request_id", "ts", *also) if keys_only else fields_for(kind)
        return lambda raw, _line_no, _sha, ndjson=None: parse_json_lines(
            raw, fields, folder=folder, checked_ok=checked_ok, ndjson=ndjson
        )
    if source.startswith("mapping:"):
        from warehouse.sources.mapping import parse_mapped_lines

        mapping = registered_mapping(settings, source)
        return lambda raw, line_no, sha, ndjson=None: parse_mapped_lines(
            raw, mapping, line_no=line_no, file_sha256=sha, folder=folder, tenant=tenant
        )
    if source == OTLP or source.startswith(OTLP + _TENANT):
        from warehouse.sources.otlp import parse_otlp_lines

        return lambda raw, _line_no, _sha, ndjson=None: parse_otlp_lines(raw, tenant=tenant, spans=spans)
    raise InputError(
        f"unknown ODS source {source!r}: expected jsonl, otlp-json[;tenant=<id>] or mapping:<name>@<hash>[;tenant=<id>]"
    )


def with_tenant(source: str, tenant: str | None) -> str:
    """The ``source`` of lines whose records without a tenant belong to ``tenant``."""
    return source if tenant is None else f"{source}{_TENANT}{tenant}"


def head(path: Path, size: int) -> bytes:
    """About the first ``size`` bytes of a file's content (a gzip file's inflated), to tell its format."""
    import zlib

    with path.open("rb") as handle:
        data = handle.read(size)
    if data[:2] == GZIP_MAGIC:
        try:
            return zlib.decompressobj(wbits=31).decompress(data, size)
        except zlib.error:
            return b""
    return data


def otlp_signal(head: bytes) -> str | None:
    """``traces``, ``metrics`` or ``logs`` when ``head`` (a file's first bytes) starts an OTLP
    JSON export of that signal; None otherwise."""
    found = _SIGNAL.match(head)
    if found is None:
        return None
    key = found.group(1).lower().replace(b"_", b"")
    return {b"resourcespans": "traces", b"resourcemetrics": "metrics", b"resourcelogs": "logs"}[key]


def kind_of(path: Path) -> Kind:
    """Record kind of a landed file: files under a ``feedback`` folder (or named so) hold feedback."""
    return "feedback" if any("feedback" in part for part in path.parts) else "requests"


class PassOver(Exception):
    """A file a folder search found that this run does not read (the message says why)."""


def searched(fmt: Format, mapping: Mapping | None) -> tuple[str, ...]:
    """The suffixes a folder search takes: JSON lines files, and ``.json`` (OTLP exports) or ``.csv``
    files only when the run reads them so, so a ``manifest.json`` or price list beside the logs is
    not mistaken for logs (a file named explicitly is always taken)."""
    if mapping is not None:
        kinds = ["csv", "lines"]
    else:
        kinds = ["otlp", "lines"] if fmt in (Format.otlp_json, Format.auto) else ["lines"]
    return tuple(s for kind in kinds for s in SUFFIXES[kind])


def source_for(
    path: Path, fmt: Format, mapping: Mapping | None, tenant: str | None, *, explicit: bool
) -> tuple[str, Kind]:
    """How a file is read (its ``source``) and the kind of its records: by its mapping, its
    ``--format``, else by its content (never its name). A file a folder search found (not
    ``explicit``) that is not read raises :class:`PassOver`; one named explicitly, :class:`InputError`."""
    if mapping is not None:  # a tenant constant names every row's tenant
        return with_tenant(mapping.source, None if "tenant_id" in mapping.constants else tenant), mapping.kind
    name = path.name.lower()
    if fmt == Format.csv or (fmt == Format.auto and name.endswith(SUFFIXES["csv"])):
        from warehouse.sources.mapping import shipped_mappings

        # Landed as JSON lines, every line would be malformed, and the file then counts as landed.
        raise InputError(
            f"{path}: a CSV file needs a mapping of its columns onto the canonical fields: give a "
            f"mapping file or the name of a shipped one ({', '.join(shipped_mappings())})"
            + (", or the format jsonl if it holds JSON lines" if fmt == Format.auto else ""),
            argument="mapping_file",
        )
    signal = otlp_signal(head(path, HEAD_BYTES)) if fmt in (Format.auto, Format.otlp_json) else None
    if signal in ("metrics", "logs"):
        reason = f"an OpenTelemetry {signal} export (Strata reads OTLP traces)"
        if explicit:
            raise InputError(f"{path}: {reason}; export traces (OTEL_TRACES_EXPORTER) and ingest that file")
        raise PassOver(reason)
    if fmt == Format.otlp_json or signal == "traces":
        return with_tenant(OTLP, tenant), "requests"
    if fmt == Format.auto and name.endswith(SUFFIXES["otlp"]):  # .json: an export, or not logs at all
        if not explicit:
            raise PassOver("a .json file that is not an OTLP trace export")
        raise InputError(
            f"{path}: a .json file that is not an OTLP trace export (its first line starts no "
            "resourceSpans): give the format jsonl if it holds request JSON lines",
            argument="fmt",
        )
    return JSONL, kind_of(path)
