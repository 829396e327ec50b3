"""``strata ingest`` and ``strata landed``: landing files in ODS, and the ledger of what landed."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from strata.console import out, progress

app = typer.Typer()


@app.command("ingest")
def ingest_cmd(
    paths: list[Path] = typer.Argument(..., help="Files or folders to land (plain or gzip)."),
    fmt: str = typer.Option("auto", "--format", help="jsonl, csv, otlp-json or auto."),
    mapping: Optional[Path] = typer.Option(None, "--mapping", help="Mapping file for a CSV/JSONL trace."),
    reland: bool = typer.Option(False, "--reland", help="Land files again even if already landed, replacing "
                                "their earlier rows (e.g. after fixing their mapping)."),
) -> None:
    """Land files into ODS byte-exact; files already landed (same content hash) are skipped."""
    from strata import pipeline
    from warehouse.settings import load_settings

    if fmt not in ("auto", "jsonl", "csv", "otlp-json"):
        raise typer.BadParameter(f"{fmt!r} is not one of jsonl, csv, otlp-json, auto", param_hint="--format")
    with progress("ingesting") as step:
        result = pipeline.land(load_settings(), paths, fmt=fmt, mapping=mapping, reland=reland,  # type: ignore[arg-type]
                               progress=step)
    report = result.detail
    for skipped in report.skipped:
        out.print(f"[yellow]skipped[/] {escape(str(skipped.path))} (already landed in {skipped.table} as "
                  f"{escape(skipped.landed_as)})")
    out.print(f"landed {result.counts['files_landed']} file(s), {result.counts['lines']:,} lines "
              f"({result.counts['malformed']:,} malformed), skipped {result.counts['files_skipped']}; "
              f"batch {report.batch_id}")
    if any(f.landed_as != f.source for f in report.skipped):
        out.print("some skipped files were landed as another format or mapping than this run reads them with; "
                  "--reland lands them again as this run reads them, replacing their earlier rows")
    replaced = [f for f in report.landed if f.replaced]
    if replaced:
        dates = " ".join(f"--date {d.isoformat()}" for d in sorted(report.stale_dates))
        out.print(f"re-landed {len(replaced)} file(s), replacing their earlier rows"
                  + (f"; DWD of their event dates is stale until rebuilt: strata build dwd {dates}" if dates else ""))


@app.command("landed")
def landed_cmd(
    last: int = typer.Option(20, "--last", min=1, help="How many of the most recent files to list."),
) -> None:
    """List the files landed in ODS, newest first (from ops.landed_files, which outlives retention)."""
    from rich.table import Table

    from warehouse.ops.ledger import recent
    from warehouse.settings import load_settings

    files = recent(load_settings(), last)
    if files.is_empty():
        out.print("no file landed yet")
        return
    table = Table("landed at (UTC)", "file", "table", "read as", "lines", "malformed", "batch")
    for row in files.iter_rows(named=True):
        table.add_row(f"{row['landed_at']:%Y-%m-%d %H:%M:%S}", escape(row["source_file"]), row["table_name"],
                      escape(row["source"]), f"{row['lines']:,}", f"{row['malformed']:,}", row["batch_id"])
    out.print(table)
