"""``strata retention apply`` and ``strata forget``: removing data for good."""

from __future__ import annotations

import typer

from strata.console import out
from strata.options import WAIT, for_writing

app = typer.Typer()
retention_app = typer.Typer(
    help="Retention of raw data (ODS, the quarantine, any table with a pii column).", no_args_is_help=True
)
app.add_typer(retention_app, name="retention")


@retention_app.command("apply")
def retention_apply_cmd(
    days: int | None = typer.Option(None, "--days", min=1, help="Days to keep (default: STRATA_ODS_RETENTION_DAYS)."),
    wait: float | None = WAIT,
) -> None:
    """Delete raw-data partitions older than the retention, then vacuum."""
    from strata import pipeline

    settings = for_writing(wait)
    result = pipeline.apply_retention(settings, days=days)
    kept = days or settings.ods_retention_days
    for table, rows in result.detail.items():
        out.print(f"{table}: deleted {rows:,} row(s) older than {kept} day(s)")
    if not result.detail:
        out.print("no raw-data tables yet: nothing to do")


@app.command("forget")
def forget_cmd(
    user: str = typer.Option(..., "--user", help="The user id (as the AI service logs it)."), wait: float | None = WAIT
) -> None:
    """Remove one user from every table that can hold them (raw lines included) and vacuum."""
    from strata import pipeline

    result = pipeline.forget(for_writing(wait), user)
    report = result.detail
    for table, rows in report.rows.items():
        out.print(f"{table}: removed {rows:,} row(s)")
    for table, rows in report.redacted.items():
        out.print(f"{table}: the user's id redacted in {rows:,} row(s)")
    out.print(f"removed {report.total:,} row(s) in all; old files and log entries vacuumed")
    if report.files:
        out.print(f"landing zone: {report.files:,} file(s) rewritten without the user's lines (or deleted)")
    if report.reports:
        out.print(
            f"reports: {report.reports:,} HTML report(s) naming the user deleted (the next daily run writes them anew)"
        )
    if report.unlanded.files or report.unlanded.segments:
        waiting = [f"{report.unlanded.files:,} landing file(s)"] if report.unlanded.files else []
        if report.unlanded.segments:
            waiting.append(f"{report.unlanded.segments:,} spool segment(s) of `strata collect`")
        out.print(
            f"[yellow]not yet ingested:[/] {', '.join(waiting)}; their lines may hold the user's: the "
            "ingest that lands them leaves those out (the user is on the suppression list)"
        )
    for store in ("online_sqlite", "online_redis"):
        if f"{store}_removed" in result.counts:
            unit = "key(s)" if store == "online_redis" else "row(s)"
            out.print(f"online store ({store.split('_')[1]}): removed {result.counts[f'{store}_removed']:,} {unit}")
