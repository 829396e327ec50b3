"""ODS: the archive. Every landed line kept byte-exact, with lineage and lenient keys.

A file is landed in one Delta commit (all its lines or none). A file landed before (same
content hash, per ``ops.landed_files``, which outlives retention and erasure) is skipped,
so re-ingesting changes nothing — unless it is landed again on purpose (``reland``, e.g.
after fixing its mapping): then the same commit replaces its earlier rows, and the report
names the event dates whose DWD needs a rebuild. A file some of whose lines were erased is
never landed again.

Lines that do not parse are kept too, marked malformed with the reason. ``event_date``
comes from the line's own timestamp when it is plausible (not before 2000, not more than
a day after arrival); otherwise from a date in the file's path, else the most common date
of the lines around it, else the arrival date — so an impossible timestamp never sends a
line to a partition nobody builds.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator, Literal

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.ods import ODS_TABLES
from warehouse.ops import ledger
from warehouse.progress import Progress
from warehouse.settings import Settings
from warehouse.sources import files as landed
from warehouse.sources.canonical import Kind
from warehouse.sources.formats import JSONL, kind_of, parser_for, register_mapping
from warehouse.sources.mapping import load_mapping, resolve_mapping, shipped_mappings
from warehouse.sources.timestamps import parse_ts
from warehouse.storage import lake
from warehouse.storage.publish import keeps_every_row, publish
from warehouse.tables import Table

Format = Literal["auto", "jsonl", "csv", "otlp-json"]
_EARLIEST = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
#: Lenient request id of a line that does not parse (truncated, bad bytes elsewhere).
_REQUEST_ID = r'"request_id"\s*:\s*"(?P<request_id>[^"\\]{1,256})"'


def salvage_request_ids(raw: pa.Array, parsed: pl.DataFrame) -> pl.Series:
    """Parsed request ids, plus those found by pattern in lines that did not parse."""
    ids = parsed.get_column("request_id").clone()
    lost = np.flatnonzero((ids.is_null() & parsed.get_column("parse_error").is_not_null()).to_numpy())
    if len(lost):
        found = pc.struct_field(pc.extract_regex(raw.take(pa.array(lost)), _REQUEST_ID), 0).to_pylist()
        texts = [v.decode("utf-8", "replace") if v is not None else None for v in found]
        ids = ids.scatter(lost, pl.Series(texts, dtype=pl.String))
    return ids


@dataclass
class FileResult:
    """What happened to one file."""

    path: Path
    table: Table
    status: Literal["landed", "skipped"]
    lines: int = 0
    malformed: int = 0
    version: int | None = None
    #: How this run reads the file, as ODS rows name it (``jsonl``, ``otlp-json``, ``mapping:<name>@<hash>``).
    source: str = ""
    #: For a skipped file: how it was read when it was landed.
    landed_as: str = ""
    #: This landing replaced the file's earlier rows in ODS.
    replaced: bool = False


@dataclass
class IngestReport:
    """All files of one ingest run."""

    batch_id: str
    files: list[FileResult] = field(default_factory=list)
    #: Event dates of the rows a re-landing replaced or added: their DWD is stale until rebuilt.
    stale_dates: set[dt.date] = field(default_factory=set)

    @property
    def landed(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "landed"]

    @property
    def skipped(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "skipped"]


def _source_for(path: Path, fmt: Format, mapped: tuple[str, Kind] | None) -> tuple[str, Kind]:
    if mapped is not None:
        return mapped
    name = path.name.lower()
    if fmt == "csv" or (fmt == "auto" and name.endswith(landed.SUFFIXES["csv"])):
        # Landed as JSON lines, every line would be malformed, and the file then counts as landed.
        raise ValueError(f"{path}: a CSV file needs a mapping of its columns onto the canonical fields: pass "
                         f"--mapping FILE or the name of a shipped one ({', '.join(shipped_mappings())})"
                         + (", or --format jsonl if it holds JSON lines" if fmt == "auto" else ""))
    if fmt == "otlp-json" or (fmt == "auto" and "otlp" in name):
        return "otlp-json", "requests"
    return JSONL, kind_of(path)


def per_line(parsed: pl.DataFrame, lines: int) -> pl.DataFrame:
    """One parse row per line: formats that batch records per line (OTLP) keep the first
    record's time and error, and a request id only when the line holds a single record."""
    if "_line" not in parsed.columns:
        return parsed
    reduced = parsed.group_by("_line").agg(
        pl.when(pl.len() == 1).then(pl.col("request_id").first()).alias("request_id"),
        pl.col("ts").first(), pl.col("parse_error").first())
    return pl.DataFrame({"_line": pl.int_range(lines, dtype=pl.Int64, eager=True)}).join(
        reduced, on="_line", how="left").sort("_line")


def ods_frame(
    raw: pa.Array, parsed: pl.DataFrame, *, source: str, file: landed.LandedFile,
    ingested_at: dt.datetime, batch_id: str, first_line: int = 1,
) -> pl.DataFrame:
    """ODS rows of (a chunk of) one file: raw bytes, lineage, lenient keys, the malformed flag."""
    latest = ingested_at + dt.timedelta(days=1)
    parsed_ts = parsed.select(parse_ts(pl.col("ts"))).to_series()  # parsed once: it is the costly part
    event_ts = parsed_ts.set(~parsed_ts.is_between(_EARLIEST, latest).fill_null(False), None)
    fallback = _fallback_date(file, event_ts, ingested_at)
    n = len(raw)
    request_id = salvage_request_ids(raw, parsed)
    return pl.DataFrame({"raw_line": pl.Series(raw, dtype=pl.Binary)}).with_columns(
        source=pl.lit(source),
        source_file=pl.lit(str(file.path)),
        file_sha256=pl.lit(file.sha256),
        line_no=pl.Series(np.arange(first_line, first_line + n, dtype=np.int64)),
        ingested_at=pl.lit(ingested_at).dt.cast_time_unit("us"),
        batch_id=pl.lit(batch_id),
        request_id=request_id,
        event_ts=event_ts,
        event_date=event_ts.dt.date().fill_null(fallback),
        is_malformed=parsed.get_column("parse_error").is_not_null(),
        parse_error=parsed.get_column("parse_error"),
    )


def _fallback_date(file: landed.LandedFile, event_ts: pl.Series, ingested_at: dt.datetime) -> dt.date:
    """Event date of the lines without a plausible timestamp (a CSV header, a truncated line):
    the date in the file's path, else the most common date of the lines around them (the same
    chunk of the file), else the arrival day."""
    if file.path_date:
        return dt.date.fromisoformat(file.path_date)
    dates = event_ts.drop_nulls().dt.date()
    return dates.mode().min() if dates.len() else ingested_at.date()  # type: ignore[return-value]


#: Lines parsed and written per batch: bounds memory however large a file is.
CHUNK_LINES = 100_000


@dataclass(frozen=True)
class _Planned:
    path: Path
    source: str
    kind: Kind
    sha256: str
    replaces: bool = False


def _plan(settings: Settings, paths: list[Path], fmt: Format, mapping_file: Path | None,
          report: IngestReport, reland: bool) -> dict[Table, list[_Planned]]:
    """Files to land per ODS table; files already landed (unless ``reland``) or repeated in
    this run are skipped."""
    import hashlib

    mapped: tuple[str, Kind] | None = None
    if mapping_file is not None:  # read and kept once for the whole run
        mapping = load_mapping(resolve_mapping(mapping_file))
        mapped = register_mapping(settings, mapping), mapping.kind
    kinds = ["csv", "lines"] if mapping_file else ["otlp", "lines"] if fmt == "otlp-json" else ["lines"]
    found = []
    for path in landed.discover(paths, kinds):
        source, kind = _source_for(path, fmt, mapped)
        found.append(_Planned(path, source, kind, hashlib.sha256(path.read_bytes()).hexdigest()))
    seen = {table: ledger.seen_files(settings, table, {f.sha256 for f in found if ODS_TABLES[f.kind] == table})
            for table in {ODS_TABLES[f.kind] for f in found}}
    plan: dict[Table, list[_Planned]] = {}
    this_run: set[str] = set()
    for item in found:
        table = ODS_TABLES[item.kind]
        earlier = seen[table].get(item.sha256)
        if item.sha256 in this_run or (earlier is not None and not reland):
            report.files.append(FileResult(item.path, table, "skipped", source=item.source,
                                           landed_as=earlier or item.source))
            continue
        this_run.add(item.sha256)
        plan.setdefault(table, []).append(replace(item, replaces=earlier is not None))
    return plan


def _rows_of(settings: Settings, table: Table, hashes: list[str]) -> pl.DataFrame:
    """``file_sha256`` and ``event_date`` of the ODS rows of these files."""
    if not hashes or lake.open_table(settings, table) is None:
        return pl.DataFrame(schema={"file_sha256": pl.String, "event_date": pl.Date})
    return lake.read_frame(settings, table, filters=[("file_sha256", "in", hashes)],
                           columns=["file_sha256", "event_date"])


def _refuse_erased(path: Path, lines: int, kept: int) -> None:
    """A file some of whose lines retention or ``strata forget`` removed may not land again."""
    if kept < lines:
        raise ValueError(f"{path}: {lines - kept:,} of its {lines:,} lines were removed from ODS since it was "
                         "landed (retention or strata forget); landing it again would bring them back, so it is "
                         "refused and nothing was landed")


def _load(path: Path) -> tuple[landed.LandedFile, landed.Lines]:
    file = landed.load(path)
    return file, landed.split_lines(file.content)  # where lines start: no copy of the bytes yet


def _loaded_ahead(paths: list[Path]) -> Iterator[tuple[landed.LandedFile, landed.Lines]]:
    """The files in order, each read, decompressed and split while the one before is processed."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-read") as pool:
        pending = pool.submit(_load, paths[0]) if paths else None
        for index in range(len(paths)):
            assert pending is not None
            current = pending.result()
            pending = pool.submit(_load, paths[index + 1]) if index + 1 < len(paths) else None
            yield current


def ingest(
    settings: Settings,
    paths: list[Path],
    *,
    fmt: Format = "auto",
    mapping_file: Path | None = None,
    progress: Progress | None = None,
    reland: bool = False,
) -> IngestReport:
    """Land files into ODS: one atomic Delta commit per table per run, streamed in chunks.

    Files already landed (same content hash) are skipped, so a re-run adds nothing, and a
    run that crashes commits nothing: running it again lands the same files. With
    ``reland``, files already landed are landed again as this run reads them, and the
    commit replaces their earlier rows (``report.stale_dates`` says which DWD dates to rebuild).
    """
    report = IngestReport(batch_id=uuid.uuid4().hex[:16])
    plan = _plan(settings, paths, fmt, mapping_file, report, reland)
    total = sum(len(files) for files in plan.values())
    done = 0
    for table, files in plan.items():
        landed_now: list[FileResult] = []
        landings: list[ledger.Landing] = []
        replaced = _rows_of(settings, table, [f.sha256 for f in files if f.replaces])
        report.stale_dates |= set(replaced.get_column("event_date").unique().to_list())
        kept = dict(replaced.get_column("file_sha256").value_counts().iter_rows())

        def frames(files: list[_Planned] = files, landed_now: list[FileResult] = landed_now):
            nonlocal done
            for item, (file, lines) in zip(files, _loaded_ahead([f.path for f in files])):
                if file.sha256 != item.sha256:
                    raise RuntimeError(f"{item.path} changed while being ingested; ingest it again")
                if item.replaces:
                    _refuse_erased(item.path, len(lines), kept.get(item.sha256, 0))
                parse = parser_for(settings, item.source, item.kind, keys_only=True)
                ingested_at = dt.datetime.now(dt.timezone.utc)
                malformed = 0
                for start in range(0, max(len(lines), 1), CHUNK_LINES):
                    chunk = lines.raw(start, start + CHUNK_LINES)
                    line_no = pa.array(np.arange(start + 1, start + 1 + len(chunk), dtype=np.int64))
                    shas = pa.array([file.sha256] * len(chunk))
                    parsed = per_line(parse(chunk, line_no, shas, ndjson=lines.block(start, start + len(chunk))),
                                      len(chunk))
                    frame = ods_frame(chunk, parsed, source=item.source, file=file, ingested_at=ingested_at,
                                      batch_id=report.batch_id, first_line=start + 1)
                    malformed += int(frame.get_column("is_malformed").sum())
                    if item.replaces:
                        report.stale_dates.update(frame.get_column("event_date").unique().to_list())
                    yield frame
                landed_now.append(FileResult(item.path, table, "landed", len(lines), malformed, source=item.source,
                                             replaced=item.replaces))
                landings.append(ledger.Landing(item.sha256, table.name, str(file.path), item.source, len(lines),
                                                 malformed, report.batch_id, ingested_at))
                done += 1
                if progress:
                    progress(table.name, done, total)

        # A re-landing swaps the rows of exactly this run's files, in the same commit.
        relanding = any(f.replaces for f in files)
        mode: Literal["append", "replace_partitions"] = "replace_partitions" if relanding else "append"
        swap = [{"file_sha256": f.sha256} for f in files] if relanding else []
        result = publish(settings, table, frames(), mode=mode, partitions=swap, expectations=False,
                         invariants=[keeps_every_row("ods.keeps_every_line")])
        ledger.record(settings, landings, replace=relanding)
        for file_result in landed_now:
            file_result.version = result.version
        report.files += landed_now
    return report
