"""``strata retention apply``, ``strata forget`` and ``strata privacy clean``: removing data for good."""

from __future__ import annotations

import typer

from strata.console import out, progress
from strata.options import WAIT, for_writing

app = typer.Typer()
retention_app = typer.Typer(
    help="Retention of raw data (ODS, the quarantine, any table with a pii column).", no_args_is_help=True
)
app.add_typer(retention_app, name="retention")
privacy_app = typer.Typer(help="Keeping private values in the raw layer.", no_args_is_help=True)
app.add_typer(privacy_app, name="privacy")


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


@privacy_app.command("clean")
def privacy_clean_cmd(wait: float | None = WAIT) -> None:
    """Clean a lake built before the attribute policy: rebuild DWD, vacuum, rebuild what follows.

    Rebuilds every DWD date, vacuums dwd.request's old versions (an --as-of read of one then fails), then
    rebuilds the DWS and ADS dates and the online store.
    """
    from strata import pipeline

    settings = for_writing(wait)
    with progress("cleaning the lake") as step:
        result = pipeline.clean(settings, progress=step)
    report, counts = result.detail, result.counts
    out.print(f"DWD: {len(report.rebuilt):,} date(s) rebuilt from ODS with the attribute policy")
    if report.filtered:
        out.print(
            f"DWD: {len(report.filtered):,} date(s) whose ODS lines retention deleted: their rows passed "
            "through the policy in place"
        )
    for table, files in report.vacuumed.items():
        out.print(f"{table}: old versions vacuumed ({files:,} file(s) deleted, log entries purged)")
    out.print(
        f"DWS: {counts['dws_days_rebuilt']:,} date(s) rebuilt; ADS: {counts['ads_days_rebuilt']:,} date(s) "
        f"rebuilt; online store: {counts['online_values_written']:,} value(s) written"
    )
