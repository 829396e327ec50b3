"""``strata ingest``, ``strata unland`` and ``strata landed``: landing files in ODS, undoing it,
and the ledger of what landed."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from strata.console import Command, console, out, progress, say
from strata.options import WAIT, for_writing, given_path
from warehouse.sources.formats import Format

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Iterable

    from strata.pipeline import StepResult
    from warehouse.ods.ingest import IngestReport

app = typer.Typer()
#: Skipped files listed one by one up to this many; beyond, a summary.
LISTED = 10


@app.command("ingest")
def ingest_cmd(
    paths: list[Path] | None = typer.Argument(
        None,
        parser=given_path,
        metavar="PATH",
        show_default=False,
        help="Files or folders to land (plain or gzip); none: the landing zone (STRATA_LANDING_DIR).",
    ),
    fmt: Format = typer.Option(Format.auto, "--format", help="How to read the files (auto: each by its content)."),
    mapping: Path | None = typer.Option(
        None, "--mapping", parser=given_path, metavar="FILE|NAME", help="Mapping file for a CSV/JSONL trace."
    ),
    reland: bool = typer.Option(
        False,
        "--reland",
        help="Land files again even if already landed, replacing their earlier rows (e.g. after fixing their mapping).",
    ),
    tenant: str | None = typer.Option(
        None,
        "--tenant",
        help="Tenant of OTLP spans and mapped records that name none (else STRATA_DEFAULT_TENANT, else for OTLP "
        "the resource's service.name).",
    ),
    wait: float | None = WAIT,
) -> None:
    """Land files (by default the landing zone's) into ODS byte-exact; files landed before (same hash) are skipped.

    Exits 1 when a file could not be read or held no parseable line (the others land), or when a
    mapped field no line holds as named is nested in them (the file lands; fix the mapping and --reland).
    """
    from contracts.errors import InputError
    from strata import pipeline

    settings = for_writing(wait)
    if not paths:
        if not settings.landing_dir.is_dir():
            raise InputError(
                f"no PATH given, and the landing zone {settings.landing_dir} (STRATA_LANDING_DIR) is no folder: "
                "name the files or folders to land"
            )
        console.print(f"[dim]landing zone: {escape(str(settings.landing_dir))}[/]", soft_wrap=True)
    with progress("ingesting") as step:
        result = pipeline.land(
            settings,
            paths or [settings.landing_dir],
            fmt=fmt,
            mapping=mapping,
            reland=reland,
            progress=step,
            tenant=tenant,
        )
    _print_not_landed(result.detail)
    _print_landed(result)
    _print_problems(result.detail)


def _print_not_landed(report: IngestReport) -> None:
    """The files of the folders not read, and those skipped as landed before: a few by name, then a count."""
    for path, why in report.passed_over[:LISTED]:
        out.print(f"[yellow]not read[/] {escape(str(path))}: {escape(why)}")
    if len(report.passed_over) > LISTED:
        out.print(f"[yellow]not read[/] {len(report.passed_over) - LISTED:,} more file(s) of the folder(s)")
    for skipped in report.skipped[:LISTED]:
        out.print(
            f"[yellow]skipped[/] {escape(str(skipped.path))} (already landed in {skipped.table} as "
            f"{escape(skipped.landed_as)})"
        )
    if len(report.skipped) > LISTED:
        out.print(
            f"[yellow]skipped[/] {len(report.skipped) - LISTED:,} more file(s) already landed "
            "(`strata landed` lists every landed file)"
        )


def _print_landed(result: StepResult) -> None:
    """What landed, and what to build or rebuild next."""
    report = result.detail
    trace_only = f", {result.counts['trace_only']:,} trace-only" if result.counts["trace_only"] else ""
    out.print(
        f"landed {result.counts['files_landed']} file(s), {result.counts['lines']:,} lines "
        f"({result.counts['malformed']:,} malformed{trace_only}), skipped {result.counts['files_skipped']}; "
        f"batch {report.batch_id}"
    )
    if trace_only:
        out.print(
            f"{result.counts['trace_only']:,} trace-only line(s): OTLP exports holding no GenAI span (a workflow's "
            "parent span sent alone), kept in ODS, no request"
        )
    if report.suppressed:
        out.print(
            f"{report.suppressed:,} record(s) of forgotten users suppressed: from before their `strata forget`, "
            "not landed and taken out of their landing files"
        )
    if any(f.landed_as != f.source for f in report.skipped):
        out.print(
            "some skipped files were landed as another format or mapping than this run reads them with; "
            "--reland lands them again as this run reads them, replacing their earlier rows"
        )
    if report.dates:
        out.print(f"event dates landed: {', '.join(d.isoformat() for d in report.dates)}; build them with:")
        say(_build_dwd(report.dates))
    replaced = [f for f in report.landed if f.replaced]
    if replaced:
        stale = "; DWD of their event dates is stale until rebuilt:" if report.stale_dates else ""
        out.print(f"re-landed {len(replaced)} file(s), replacing their earlier rows{stale}")
        if report.stale_dates:
            say(_build_dwd(report.stale_dates))


def _build_dwd(dates: Iterable[dt.date]) -> Command:
    """The command that builds ``dates``, to copy: whole on one line however narrow the terminal."""
    return Command(f"  strata build dwd {' '.join(f'--date {d.isoformat()}' for d in sorted(dates))}")


def _print_problems(report: IngestReport) -> None:
    """Warnings, then what went wrong: exits 1 when a file failed or held no log line, or a mapped field
    was not reached."""
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    for nested in report.nested:
        console.print(f"[red]not reached:[/] {escape(nested)}")
    for bad in report.all_malformed:
        console.print(
            f"[red]not logs?[/] every one of the {bad.lines:,} lines of {escape(str(bad.path))} is "
            f"malformed; its bytes are archived in {bad.table}. If it was landed by mistake:"
        )
        say(Command(f"  {shlex.join(['strata', 'unland', str(bad.path)])}"), console)
    for failed in report.failed:
        console.print(f"[red]not landed:[/] {escape(failed.error)}")
    if report.failed or report.all_malformed or report.nested:
        raise typer.Exit(1)


@app.command("unland")
def unland_cmd(
    files: list[Path] | None = typer.Argument(
        None, parser=given_path, help="Files landed by mistake (their content or path)."
    ),
    batch: str | None = typer.Option(None, "--batch", help="Unland every file of this ingest batch."),
    wait: float | None = WAIT,
) -> None:
    """Remove the ODS lines of files landed by mistake; the ledger remembers them (--reland lands them again)."""
    from strata import pipeline

    result = pipeline.unland(for_writing(wait), files or [], batch=batch)
    report = result.detail
    for table, rows in report.rows.items():
        out.print(f"{table}: removed {rows:,} line(s)")
    out.print(f"unlanded {report.files} file(s)")
    if report.stale_dates:
        out.print("DWD of their event dates is stale until rebuilt:")
        say(_build_dwd(report.stale_dates))


@app.command("landed")
def landed_cmd(
    last: int = typer.Option(20, "--last", min=1, help="How many of the most recent files to list."),
    full: bool = typer.Option(False, "--full", help="Print each path whole (folded over lines if need be)."),
) -> None:
    """List the files landed in ODS, newest first (from ops.landed_files, which outlives retention)."""
    from strata.console import FitTable
    from warehouse.ops.ledger import recent
    from warehouse.settings import load_settings
    from warehouse.storage.lake import Lake

    files = recent(Lake(load_settings()), last)
    if files.is_empty():
        out.print("no file landed yet")
        return
    rows = [
        [
            f"{row['landed_at']:%Y-%m-%d %H:%M:%S}",
            row["source_file"] + (" (unlanded)" if row.get("unlanded_at") else ""),
            row["table_name"],
            row["source"],
            f"{row['lines']:,}",
            f"{row['malformed']:,}",
            row["batch_id"],
        ]
        for row in files.iter_rows(named=True)
    ]
    # One line per file: a narrow terminal leaves out the batch, the format and the table (then the
    # counts, for a long name) before it shortens the paths below PATH_WIDTH (from the middle: the file's
    # name stays whole).
    columns = ["landed at (UTC)", "file", "table", "read as", "lines", "malformed", "batch"]
    drop, keep = ["batch", "read as", "table"], ["landed at (UTC)", "file"]
    if full:  # the paths whole (to copy one into `strata unland`), folded where the terminal is narrow
        out.print(FitTable(columns, rows, drop=drop, keep=keep))
    else:
        out.print(FitTable(columns, rows, drop=drop, keep=keep, path="file"))
