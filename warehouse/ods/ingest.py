"""Landing files in ODS: every line byte-exact, one commit per table per run.

A ``strata collect`` spool segment (``*.otlp.spool``, named or found in a folder) is converted
first into its OTLP/JSON lines file beside it (:mod:`warehouse.sources.collector.segments`), which
then lands like any other; the receiver hands segments over unparsed.

A file landed before (same content hash, per ``ops.landed_files``, which outlives
retention and erasure) is skipped, so re-ingesting changes nothing — unless it is landed
again on purpose (``reland``, e.g. after fixing its mapping): then the same commit replaces
its earlier rows, and the report names the event dates whose DWD needs a rebuild. A file
some of whose lines were erased is never landed again.

Each file is locked while it is checked and landed, so the same file ingested twice at once
lands once; a re-landing locks the whole table. A file that cannot be read (a broken gzip)
is reported and skipped, and the others land. Lines that do not parse are kept too, marked
malformed with the reason; a file whose every line is malformed is landed (its bytes are
archived) and reported, so the mistake can be undone with ``strata unland``. Trace-only lines (OTLP
exports holding no GenAI span) parse and hold no request: they land, counted apart.

Records of users ``strata forget`` erased, dated before their forget, never land: each run reads
the suppression list under its locks and leaves them out (:mod:`warehouse.ops.suppression`),
rewriting the landing file as a forget would, and counts them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl
import pyarrow as pa

from contracts.errors import ConflictError, InputError
from warehouse.ods import ODS_TABLES
from warehouse.ods.rows import ods_frame, per_line, record_dates, trace_only
from warehouse.ops import ledger
from warehouse.ops.landing import rewrite_landed
from warehouse.ops.suppression import Suppression, record_suppressed
from warehouse.progress import Progress
from warehouse.settings import TENANT, Settings
from warehouse.sources import files as landed
from warehouse.sources.canonical import Kind
from warehouse.sources.collector.segments import convert_pending
from warehouse.sources.formats import Format, PassOver, parser_for, register_mapping, searched, source_for
from warehouse.sources.mapping import Mapping, describe, load_mapping, nested_at, resolve_mapping
from warehouse.storage import locks
from warehouse.storage.lake import Lake
from warehouse.storage.publish import keeps_every_row, publish
from warehouse.tables import OPS_LANDED_FILES, OPS_SUPPRESSED_RECORDS, Table

#: Good lines of a mapped file searched for where an absent field's name is nested.
NESTED_SAMPLE = 200

#: Lines parsed and written per batch: bounds memory however large a file is.
CHUNK_LINES = 100_000

log = logging.getLogger(f"strata.{__name__}")


@dataclass
class FileResult:
    """What happened to one file."""

    path: Path
    table: Table
    status: Literal["landed", "skipped", "failed"]
    lines: int = 0
    malformed: int = 0
    #: Lines that parse and hold no request: OTLP exports of no GenAI span (a workflow's parent span sent alone).
    trace_only: int = 0
    version: int | None = None
    #: How this run reads the file, as ODS rows name it (``jsonl``, ``otlp-json``, ``mapping:<name>@<hash>``).
    source: str = ""
    #: For a skipped file: how it was read when it was landed.
    landed_as: str = ""
    #: This landing replaced the file's earlier rows in ODS.
    replaced: bool = False
    #: The event dates of its lines (the DWD dates to build).
    dates: list[dt.date] = field(default_factory=list)
    #: Why a failed file could not be landed.
    error: str = ""
    #: Records of forgotten users from before their forget left out, by event date (:mod:`warehouse.ops.suppression`).
    suppressed_dates: dict[dt.date | None, int] = field(default_factory=dict)
    #: Line number → its new text (None: left out) where records were suppressed: the landing file's changes.
    changes: dict[int, bytes | None] = field(default_factory=dict)


@dataclass
class IngestReport:
    """All files of one ingest run."""

    batch_id: str
    files: list[FileResult] = field(default_factory=list)
    #: Event dates of the rows a re-landing replaced or added: their DWD is stale until rebuilt.
    stale_dates: set[dt.date] = field(default_factory=set)
    #: Things a person should look at (a mapped field absent from a file, …).
    warnings: list[str] = field(default_factory=list)
    #: Mapped fields no line holds as named but lines hold nested (the CLI exits 1).
    nested: list[str] = field(default_factory=list)
    #: Files a folder search found and did not read, and why (an OTLP export of metrics or logs).
    passed_over: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def landed(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "landed"]

    @property
    def skipped(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "skipped"]

    @property
    def failed(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "failed"]

    @property
    def all_malformed(self) -> list[FileResult]:
        """Files landed whose every line is malformed: most likely not logs at all."""
        return [f for f in self.landed if f.lines and f.malformed == f.lines]

    @property
    def suppressed(self) -> int:
        """Records of forgotten users this run left out."""
        return sum(n for f in self.landed for n in f.suppressed_dates.values())

    @property
    def dates(self) -> list[dt.date]:
        """Event dates of every line landed by this run, in order."""
        return sorted({d for f in self.landed for d in f.dates})


@dataclass(frozen=True)
class _Found:
    path: Path
    source: str
    kind: Kind
    sha256: str

    @property
    def table(self) -> Table:
        return ODS_TABLES[self.kind]


def _find(
    paths: list[Path], fmt: Format, mapping: Mapping | None, tenant: str | None, report: IngestReport
) -> list[_Found]:
    """The files to consider, each with how it is read, hashed; a repeat within this run is skipped."""
    found: dict[str, _Found] = {}
    for given in paths:
        for path in landed.discover([given], searched(fmt, mapping)):
            try:
                source, kind = source_for(path, fmt, mapping, tenant, explicit=not given.is_dir())
            except PassOver as why:
                report.passed_over.append((path, str(why)))
                continue
            item = _Found(path, source, kind, hashlib.sha256(path.read_bytes()).hexdigest())
            if item.sha256 in found:
                report.files.append(FileResult(path, item.table, "skipped", source=source, landed_as=source))
            else:
                found[item.sha256] = item
    return list(found.values())


def ingest(
    settings: Settings,
    paths: list[Path],
    *,
    fmt: Format = Format.auto,
    mapping_file: Path | None = None,
    progress: Progress | None = None,
    reland: bool = False,
    tenant: str | None = None,
) -> IngestReport:
    """Land files into ODS: one atomic Delta commit per table per run, streamed in chunks.

    Files already landed (same content hash) are skipped, so a re-run adds nothing, and a
    run that crashes commits nothing it did not also record: running it again finishes the
    job. With ``reland``, files already landed are landed again as this run reads them, and
    the commit replaces their earlier rows (``report.stale_dates`` says which DWD dates to
    rebuild). Spool segments are converted first (a conversion cut short is finished, never
    repeated). A mapping is read and checked whole before anything is written. ``tenant``
    (else ``STRATA_DEFAULT_TENANT``) is the tenant of OTLP spans and mapped records that name none.
    """
    if tenant is not None and not TENANT.fullmatch(tenant):
        raise InputError(f"tenant must be 1-128 letters, digits, '.', '_' or '-', not {tenant!r}", argument="tenant")
    mapping = load_mapping(resolve_mapping(mapping_file)) if mapping_file is not None else None
    if tenant is not None and mapping is not None and (mapping.kind != "requests" or "tenant_id" in mapping.constants):
        raise InputError(
            f"tenant names the tenant of records that name none, but every record of mapping {mapping.name!r} "
            + ("is feedback: it has none" if mapping.kind != "requests" else "names one (its constant tenant_id)")
            + ": leave the tenant out",
            argument="tenant",
        )
    report = IngestReport(batch_id=uuid.uuid4().hex[:16])
    conversion = convert_pending(paths)
    for segment, error in conversion.failed:
        report.files.append(FileResult(segment, ODS_TABLES["requests"], "failed", error=error))
        log.warning("not converted, not landed: %s", error)
    found = _find(conversion.paths, fmt, mapping, tenant or settings.default_tenant, report)
    step = _Landing(Lake(settings), report, mapping, reland, progress, total=len(found))
    tables = sorted({f.table for f in found}, key=lambda t: t.name)
    # Every file is checked and landed under its own lock (a re-landing replaces rows across its
    # table), all taken at once for the run: a retention or forget runs before it or after it, never
    # between its tables.
    write: list[tuple[Table, dict[str, object] | None]] = (
        [(t, None) for t in tables] if reland else [(f.table, {"file_sha256": f.sha256}) for f in found]
    )
    with locks.hold(settings, write=write, read=[OPS_LANDED_FILES, OPS_SUPPRESSED_RECORDS]):
        step.suppression = Suppression.load(step.lake)  # under the locks: a forget ran before, or waits
        for table in tables:
            step.land(table, [f for f in found if f.table == table])
    for warning in report.warnings:
        log.warning("%s", warning)
    return report


@dataclass
class _Landing:
    """One ingest run, table by table, on one handle of the lake."""

    lake: Lake
    report: IngestReport
    mapping: Mapping | None
    reland: bool
    progress: Progress | None
    total: int
    done: int = 0
    suppression: Suppression = field(default_factory=lambda: Suppression(b"", {}))

    def land(self, table: Table, found: list[_Found]) -> None:
        """Land ``found`` (files of ``table``), under the run's locks."""
        hashes = [f.sha256 for f in found]
        ledger.reconcile(self.lake, table, hashes)  # a crash between the ODS and ledger commits
        seen = {row["file_sha256"]: row for row in ledger.seen_files(self.lake, table, hashes).iter_rows(named=True)}
        plan = []
        for item in found:
            earlier = seen.get(item.sha256)
            if earlier is not None and not self.reland:
                self.report.files.append(
                    FileResult(item.path, table, "skipped", source=item.source, landed_as=earlier["source"])
                )
                log.debug("%s: landed before (same content), skipped", item.path)
            else:
                plan.append((item, earlier))
        if len(plan) < len(found):
            log.info("%s: %d of %d file(s) landed before, skipped", table.name, len(found) - len(plan), len(found))
        if plan:
            self._commit(table, plan)

    def _commit(self, table: Table, plan: list[tuple[_Found, dict[str, Any] | None]]) -> None:
        if self.mapping is not None:  # kept beside ODS only when something lands with it
            register_mapping(self.lake.settings, self.mapping)
        relanding = any(earlier is not None for _, earlier in plan)
        replaced = _rows_of(self.lake, table, [item.sha256 for item, earlier in plan if earlier is not None])
        self.report.stale_dates |= record_dates(replaced)
        kept = dict(replaced.get_column("file_sha256").value_counts().iter_rows())
        landed_now: list[FileResult] = []
        landings: list[ledger.Landing] = []

        def frames() -> Iterator[pl.DataFrame]:
            for (item, earlier), loaded in zip(plan, _loaded_ahead([item.path for item, _ in plan])):
                if isinstance(loaded, Exception):
                    self.report.files.append(
                        FileResult(item.path, table, "failed", source=item.source, error=str(loaded))
                    )
                    log.warning("not landed: %s", loaded)
                    continue
                file, lines = loaded
                if file.sha256 != item.sha256:
                    raise ConflictError(f"{item.path} changed while being ingested; ingest it again")
                if earlier is not None and earlier["unlanded_at"] is None:
                    _refuse_erased(item.path, int(earlier["lines"]), kept.get(item.sha256, 0))
                result = FileResult(
                    item.path, table, "landed", len(lines), source=item.source, replaced=earlier is not None
                )
                ingested_at = dt.datetime.now(dt.UTC)
                yield from self._chunks(item, file, lines, result, ingested_at)
                log.debug(
                    "%s: %d lines, %d malformed, %d trace-only (read as %s)",
                    item.path,
                    result.lines,
                    result.malformed,
                    result.trace_only,
                    item.source,
                )
                landed_now.append(result)
                landings.append(
                    ledger.Landing(
                        item.sha256,
                        table.name,
                        str(file.path),
                        item.source,
                        result.lines,
                        result.malformed,
                        self.report.batch_id,
                        ingested_at,
                    )
                )
                self.done += 1
                if self.progress:
                    self.progress(table.name, self.done, self.total)

        mode: Literal["append", "replace_partitions"] = "replace_partitions" if relanding else "append"
        swap = [{"file_sha256": item.sha256} for item, _ in plan] if relanding else []
        published = publish(
            self.lake,
            table,
            frames(),
            mode=mode,
            partitions=swap,
            expectations=False,
            invariants=[keeps_every_row("ods.keeps_every_line")],
        )
        if relanding:  # a rewrite of rows already there: their exact types must survive it
            self.lake.check_file_types(table, published.version)
        ledger.record(self.lake, landings, replace=relanding)
        self._suppressed(table, list(zip(landed_now, landings, strict=True)))
        log.info(
            "%s version %s: %s %d file(s), %s lines (%s malformed, %s trace-only)",
            table.name,
            published.version,
            "landed again" if relanding else "landed",
            len(landed_now),
            f"{sum(r.lines for r in landed_now):,}",
            f"{sum(r.malformed for r in landed_now):,}",
            f"{sum(r.trace_only for r in landed_now):,}",
        )
        for result in landed_now:
            result.version = published.version
            if result.replaced:
                self.report.stale_dates.update(result.dates)
        self.report.files += landed_now

    def _suppressed(self, table: Table, landed_now: list[tuple[FileResult, ledger.Landing]]) -> None:
        """Records of forgotten users left out: counted per date, and their landing files lose them too,
        as ``forget`` does."""
        counts = [
            {
                "table_name": table.name,
                "file_sha256": landing.file_sha256,
                "event_date": day or landing.landed_at.date(),
                "batch_id": landing.batch_id,
                "records": n,
            }
            for result, landing in landed_now
            for day, n in result.suppressed_dates.items()
        ]
        record_suppressed(self.lake, counts)
        rows = [
            {"source_file": landing.source_file, "file_sha256": landing.file_sha256, "line_no": n, "raw_line": line}
            for result, landing in landed_now
            for n, line in result.changes.items()
        ]
        if rows:
            schema = {"source_file": pl.String, "file_sha256": pl.String, "line_no": pl.Int64, "raw_line": pl.Binary}
            rewrite_landed(self.lake, table, pl.DataFrame(rows, schema=schema))

    def _chunks(
        self, item: _Found, file: landed.LandedFile, lines: landed.Lines, result: FileResult, ingested_at: dt.datetime
    ) -> Iterator[pl.DataFrame]:
        """ODS rows of one file, a chunk at a time; the result gathers its counts, dates and warnings."""
        suppressing = bool(self.suppression) and item.kind == "requests"  # feedback names no user
        parse = parser_for(self.lake.settings, item.source, item.kind, keys_only=True, also=("user_id",) * suppressing)
        mapped = set(self.mapping.fields) if self.mapping is not None else set()
        present: set[str] = set()
        sample: list[bytes] = []  # good lines that say where an absent field's name is nested
        dates: set[dt.date] = set()
        for start in range(0, max(len(lines), 1), CHUNK_LINES):
            chunk = lines.raw(start, start + CHUNK_LINES)
            line_no = pa.array(np.arange(start + 1, start + 1 + len(chunk), dtype=np.int64))
            shas = pa.array([file.sha256] * len(chunk))
            parsed = parse(chunk, line_no, shas, ndjson=lines.block(start, start + len(chunk)))
            if suppressing:
                kept = self.suppression.apply(chunk, line_no, parsed)
                chunk, line_no, parsed = kept.raw, kept.line_no, kept.parsed
                for day, n in kept.suppressed.items():
                    result.suppressed_dates[day] = result.suppressed_dates.get(day, 0) + n
                result.changes |= kept.changes
            parsed = per_line(parsed, len(chunk))
            result.trace_only += int(trace_only(parsed).sum())
            frame = ods_frame(
                chunk,
                parsed,
                source=item.source,
                file=file,
                ingested_at=ingested_at,
                batch_id=self.report.batch_id,
                first_line=start + 1,
                floor=self.lake.settings.ts_floor,
            ).with_columns(line_no=pl.Series(line_no, dtype=pl.Int64))
            result.malformed += int(frame.get_column("is_malformed").sum())
            dates |= record_dates(frame)
            good = parsed.filter(pl.col("parse_error").is_null())
            present |= {name for name in mapped - present if good.get_column(name).null_count() < good.height}
            if self.mapping is not None and self.mapping.format == "jsonl" and len(sample) < NESTED_SAMPLE:
                errors = parsed.get_column("parse_error").to_list()
                sample += [line for line, error in zip(chunk.to_pylist(), errors, strict=True) if error is None]
            yield frame
        result.dates = sorted(dates)
        if self.mapping is not None and result.malformed < result.lines:
            for name in sorted(mapped - present):
                self._absent(item.path, name, sample[:NESTED_SAMPLE])

    def _absent(self, path: Path, name: str, sample: list[bytes]) -> None:
        """Report a mapped field no line gave: nested where lines hold its name lower down, else misspelt."""
        assert self.mapping is not None
        rule = self.mapping.fields[name]
        for source in rule.sources:
            places = (nested_at(line, str(source[0])) for line in sample if len(source) == 1)
            found = next(filter(None, places), None)
            if found is not None:
                self.report.nested.append(
                    f"{path}: mapping {self.mapping.name!r} maps {name} from source field {describe(source)!r}, "
                    f"which no line holds at the top level; lines hold it nested at {describe(found)}: "
                    f"write `{name}: {describe(found)}` in the mapping"
                )
                return
        self.report.warnings.append(
            f"{path}: mapping {self.mapping.name!r} maps {name} from source field "
            f"{' or '.join(describe(s) for s in rule.sources)!r}, which no line of the file holds (misspelt?)"
        )


def _rows_of(lake: Lake, table: Table, hashes: list[str]) -> pl.DataFrame:
    """``file_sha256``, ``event_date`` (and ``event_dates`` where the table has it) of the ODS rows of these files."""
    if not hashes or lake.open_table(table) is None:
        return pl.DataFrame(schema={"file_sha256": pl.String, "event_date": pl.Date})
    return lake.read_frame(
        table,
        filters=[("file_sha256", "in", hashes)],
        columns=lake.present_columns(table, ["file_sha256", "event_date", "event_dates"]),
    )


def _refuse_erased(path: Path, lines: int, kept: int) -> None:
    """A file some of whose lines retention or ``strata forget`` removed may not land again."""
    if kept < lines:
        raise InputError(
            f"{path}: {lines - kept:,} of its {lines:,} lines were removed from ODS since it was "
            "landed (retention or strata forget); landing it again would bring them back, so it is "
            "refused and nothing was landed"
        )


def _load(path: Path) -> tuple[landed.LandedFile, landed.Lines] | Exception:
    try:
        file = landed.load(path)
    except (OSError, InputError) as exc:  # a broken gzip, a file gone: reported, the others land
        return exc
    return file, landed.split_lines(file.content)  # where lines start: no copy of the bytes yet


def _loaded_ahead(paths: list[Path]) -> Iterator[tuple[landed.LandedFile, landed.Lines] | Exception]:
    """The files in order, each read, decompressed and split while the one before is processed."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-read") as pool:
        pending = pool.submit(_load, paths[0]) if paths else None
        for index in range(len(paths)):
            assert pending is not None
            current = pending.result()
            pending = pool.submit(_load, paths[index + 1]) if index + 1 < len(paths) else None
            yield current
