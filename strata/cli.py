"""The ``strata`` command line: every pipeline step, callable by a person or a scheduler.

Commands import the library code they need inside their bodies, so ``strata --help``
stays fast. Errors are one clear line and a non-zero exit; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape

from strata.console import console, out

if TYPE_CHECKING:
    from rich.progress import TaskID

app = typer.Typer(
    name="strata",
    help="Strata: AI-service request logs → contract-checked Delta lakehouse, features and scores.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _mount_contracts() -> None:
    from contracts.cli import app as contracts_app

    app.add_typer(contracts_app, name="contracts")


_mount_contracts()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
) -> None:
    """Strata command line. Settings come from STRATA_* environment variables (see `strata config`)."""


@app.command("config")
def config_cmd() -> None:
    """Print the effective configuration (secrets masked)."""
    from rich.table import Table

    from strata.config import load_settings

    table = Table("setting", "value", title="Strata configuration")
    for key, value in load_settings().masked().items():
        table.add_row(key, value)
    out.print(table)


@app.command("generate")
def generate_cmd(
    out_dir: Path = typer.Option(..., "--out", help="Folder to write the dataset into."),
    days: int = typer.Option(1, "--days", min=1, help="Number of days of traffic."),
    requests_per_day: int = typer.Option(10_000, "--requests-per-day", min=1, help="Distinct requests per day."),
    seed: int = typer.Option(0, "--seed", help="Random seed: the same seed gives the same bytes."),
    start: Optional[str] = typer.Option(None, "--start", help="First day, YYYY-MM-DD (default: 2026-01-01)."),
    fault_rate: float = typer.Option(0.0, "--fault-rate", min=0.0, max=0.5, help="Share of malformed lines to mix in."),
) -> None:
    """Write realistic AI-service request logs, feedback, prices and a ground-truth manifest."""
    from warehouse.generator import generate

    start_day = _parse_date(start, "--start") if start else dt.date(2026, 1, 1)
    with _progress("generating") as step:
        manifest = generate(
            out_dir, days=days, requests_per_day=requests_per_day, seed=seed,
            start=start_day, fault_rate=fault_rate, progress=step,
        )
    total_lines = sum(day["lines"] for day in manifest["days"].values())
    out.print(
        f"wrote {len(manifest['files'])} files, {total_lines:,} request lines over {days} day(s) "
        f"to {out_dir} (manifest: {out_dir / 'manifest.json'})"
    )


@app.command("demo")
def demo_cmd(
    days: int = typer.Option(2, "--days", min=1, help="Days of traffic to generate."),
    requests_per_day: int = typer.Option(20_000, "--requests-per-day", min=1, help="Requests per day."),
    seed: int = typer.Option(7, "--seed", help="Random seed."),
) -> None:
    """Run the pipeline end to end on a small generated dataset under STRATA_HOME."""
    from strata.config import load_settings
    from strata.demo import run_demo

    ok = run_demo(load_settings(), days=days, requests_per_day=requests_per_day, seed=seed,
                  echo=out.print, progress=_progress)
    if not ok:
        raise typer.Exit(1)


@app.command("ingest")
def ingest_cmd(
    paths: list[Path] = typer.Argument(..., help="Files or folders to land (plain or gzip)."),
    fmt: str = typer.Option("auto", "--format", help="jsonl, csv, otlp-json or auto."),
    mapping: Optional[Path] = typer.Option(None, "--mapping", help="Mapping file for a CSV/JSONL trace."),
    reland: bool = typer.Option(False, "--reland", help="Land files again even if already landed, replacing "
                                "their earlier rows (e.g. after fixing their mapping)."),
) -> None:
    """Land files into ODS byte-exact; files already landed (same content hash) are skipped."""
    from strata.config import load_settings
    from warehouse.ods import ingest

    if fmt not in ("auto", "jsonl", "csv", "otlp-json"):
        raise typer.BadParameter(f"{fmt!r} is not one of jsonl, csv, otlp-json, auto", param_hint="--format")
    with _progress("ingesting") as step:
        report = ingest(load_settings(), paths, fmt=fmt, mapping_file=mapping, progress=step,  # type: ignore[arg-type]
                        reland=reland)
    for skipped in report.skipped:
        out.print(f"[yellow]skipped[/] {escape(str(skipped.path))} (already landed in {skipped.table} as "
                  f"{escape(skipped.landed_as)})")
    lines = sum(f.lines for f in report.landed)
    malformed = sum(f.malformed for f in report.landed)
    out.print(f"landed {len(report.landed)} file(s), {lines:,} lines ({malformed:,} malformed), "
              f"skipped {len(report.skipped)}; batch {report.batch_id}")
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

    from strata.config import load_settings
    from warehouse.ods_ledger import recent

    files = recent(load_settings(), last)
    if files.is_empty():
        out.print("no file landed yet")
        return
    table = Table("landed at (UTC)", "file", "table", "read as", "lines", "malformed", "batch")
    for row in files.iter_rows(named=True):
        table.add_row(f"{row['landed_at']:%Y-%m-%d %H:%M:%S}", escape(row["source_file"]), row["table_name"],
                      escape(row["source"]), f"{row['lines']:,}", f"{row['malformed']:,}", row["batch_id"])
    out.print(table)


build_app = typer.Typer(help="Build a layer for a logical date.", no_args_is_help=True)
app.add_typer(build_app, name="build")


@build_app.command("dwd")
def build_dwd_cmd(
    dates: list[str] = typer.Option(..., "--date", help="Event date to build, YYYY-MM-DD; repeat for several."),
) -> None:
    """Publish dwd.feedback and dwd.request for event dates from ODS (idempotent), one date at a time."""
    from strata.config import load_settings
    from warehouse.dwd import build_day

    settings = load_settings()
    for day in sorted({_parse_date(date, "--date") for date in dates}):
        with _progress(f"building DWD {day}") as step:
            reports = build_day(settings, day, progress=lambda table, done, total: step(done, total, table))
        for report in reports.values():
            b = report.books
            out.print(f"{b.table} [{day}] v{report.version}: ODS {b.ods_rows:,} = DWD {b.dwd_rows:,} + duplicates "
                      f"{b.duplicates:,} + quarantined {b.quarantined:,} + malformed {b.malformed:,}")
            for rule, count in sorted(report.rules.items()):
                out.print(f"  quarantined by {rule}: {count:,}")
            if report.unpriced:
                out.print(f"  [yellow]{report.unpriced:,} request(s) have no price in effect at their time[/]: their "
                          "cost_usd is null (load a price list with `strata prices load FILE`, then rebuild)")


retention_app = typer.Typer(help="Retention of raw lines (ODS and the quarantine).", no_args_is_help=True)
app.add_typer(retention_app, name="retention")


@retention_app.command("apply")
def retention_apply_cmd(
    days: Optional[int] = typer.Option(None, "--days", min=1, help="Days to keep (default: STRATA_ODS_RETENTION_DAYS)."),
) -> None:
    """Delete raw-line partitions (ODS and the quarantine) older than the retention, then vacuum."""
    from strata.config import load_settings
    from warehouse.retention import apply_retention

    settings = load_settings()
    deleted = apply_retention(settings, days=days)
    kept = days or settings.ods_retention_days
    for table, rows in deleted.items():
        out.print(f"{table}: deleted {rows:,} row(s) older than {kept} day(s)")
    if not deleted:
        out.print("no ODS tables yet: nothing to do")


@app.command("forget")
def forget_cmd(user: str = typer.Option(..., "--user", help="The user id (as the AI service logs it).")) -> None:
    """Remove one user from every layer (raw lines included) and vacuum, so no file keeps them."""
    from strata.config import load_settings
    from warehouse.retention import forget_user

    report = forget_user(load_settings(), user)
    for table, rows in report.rows.items():
        out.print(f"{table}: removed {rows:,} row(s)")
    out.print(f"removed {report.total:,} row(s) in all; old files and log entries vacuumed")


prices_app = typer.Typer(help="Model price reference data.", no_args_is_help=True)
app.add_typer(prices_app, name="prices")


@prices_app.command("load")
def prices_load_cmd(csv_path: Path = typer.Argument(..., exists=True, dir_okay=False, help="prices.csv")) -> None:
    """Load a price list (model, effective_from, prices per 1k tokens) as a new version."""
    from strata.config import load_settings
    from warehouse.prices import load_prices

    version = load_prices(load_settings(), csv_path)
    out.print(f"dwd.model_price is now version {version}")


def _parse_date(text: str, option: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a date like 2026-01-31", param_hint=option) from None


class _progress:
    """Context manager yielding a ``progress(done, total[, description])`` callback that drives a bar."""

    def __init__(self, description: str) -> None:
        from strata.console import progress_bar

        self._bar = progress_bar()
        self._description = description
        self._task: TaskID | None = None

    def __enter__(self):
        self._bar.start()

        def step(done: int, total: int, description: str | None = None) -> None:
            if self._task is None:
                self._task = self._bar.add_task(self._description, total=total)
            self._bar.update(self._task, completed=done, total=total, description=description or self._description)

        return step

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()


def main() -> None:
    """Entry point: run the app, turning any error into one line and exit code 1."""
    debug = "--debug" in sys.argv[1:]
    try:
        app(prog_name="strata")
    except SystemExit:
        raise
    except KeyboardInterrupt:
        console.print("[red]interrupted[/]")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the CLI's one error boundary
        if debug:
            raise
        # Escaped: a message may hold brackets (a partition "[event_date = …]", a path) that rich
        # would otherwise take for markup and drop.
        console.print(f"[red]error:[/] {escape(str(exc) or type(exc).__name__)}")
        console.print("[dim](run with --debug for the traceback)[/]")
        sys.exit(1)


if __name__ == "__main__":
    main()
