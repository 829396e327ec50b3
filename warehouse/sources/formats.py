"""Which parser reads a landed file, and how ODS rows name it (their ``source``).

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

import re
from pathlib import Path
from typing import Protocol

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs

from contracts.errors import InputError
from warehouse.settings import Settings
from warehouse.sources.canonical import Kind, fields_for
from warehouse.sources.jsonl import parse_json_lines
from warehouse.sources.mapping import Mapping, parse_mapping
from warehouse.storage.objectstore import filesystem
from warehouse.storage.scratch import scratch_dir


class Parser(Protocol):
    """(raw lines, line numbers, file sha256s) → parse_error + canonical fields as text.

    ``ndjson`` is the lines' bytes as their file holds them, when the caller has them; a
    parser that can read them directly saves a copy.
    """

    def __call__(
        self, raw: pa.Array, line_no: pa.Array, sha: pa.Array, /, *, ndjson: memoryview | None = None
    ) -> pl.DataFrame: ...


JSONL = "jsonl"
OTLP = "otlp-json"
_TENANT = ";tenant="
_SIGNAL = re.compile(rb'^\s*\{\s*"(resource_?[sS]pans|resource_?[mM]etrics|resource_?[lL]ogs)"')
#: Bytes of a file's head that :func:`otlp_signal` reads.
HEAD_BYTES = 4096
_SOURCE = re.compile(
    r"^mapping:([A-Za-z0-9][A-Za-z0-9_-]{0,63}@[0-9a-f]{12})(?:;tenant=[A-Za-z0-9][A-Za-z0-9._-]{0,127})?$"
)


def _mapping_dir(settings: Settings) -> tuple[pafs.FileSystem, str]:
    fs, root = filesystem(settings, settings.lake_uri)
    return fs, f"{root.rstrip('/')}/ods/_mappings"


def register_mapping(settings: Settings, mapping: Mapping) -> str:
    """Keep the mapping's text in the lake (idempotent) and return its ``source`` value."""
    fs, folder = _mapping_dir(settings)
    fs.create_dir(folder, recursive=True)
    path = f"{folder}/{mapping.name}@{mapping.sha12}.yaml"
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        with fs.open_output_stream(path) as out:
            out.write(mapping.text.encode())
    return mapping.source


def registered_mapping(settings: Settings, source: str) -> Mapping:
    """The mapping a ``mapping:<name>@<hash>[;tenant=<id>]`` source was landed with."""
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
) -> Parser:
    """The parser for rows of a given ``source``.

    ``keys_only`` asks for ``request_id`` and ``ts`` alone (and the fields named in ``also``)
    where a format can skip the rest (ODS needs only those; DWD needs every field).
    ``checked_ok`` says the lines already passed the format's line checks when ODS landed them.
    """
    folder = scratch_dir(settings)
    tenant = source.partition(_TENANT)[2] or None
    if source == JSONL:
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

        return lambda raw, _line_no, _sha, ndjson=None: parse_otlp_lines(raw, tenant=tenant)
    raise InputError(
        f"unknown ODS source {source!r}: expected jsonl, otlp-json[;tenant=<id>] or mapping:<name>@<hash>[;tenant=<id>]"
    )


def with_tenant(source: str, tenant: str | None) -> str:
    """The ``source`` of lines whose records without a tenant belong to ``tenant``."""
    return source if tenant is None else f"{source}{_TENANT}{tenant}"


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
