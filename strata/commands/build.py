"""``strata build …``: build a layer for logical dates."""

from __future__ import annotations

import datetime as dt

import typer

from strata.console import out, progress
from strata.options import DATES, WAIT, dates, for_writing

app = typer.Typer(help="Build a layer for a logical date.", no_args_is_help=True)


@app.command("dwd")
def build_dwd_cmd(days: list[str] = DATES, wait: float | None = WAIT) -> None:
    """Publish dwd.feedback, dwd.request and dwd.span for event dates from ODS (idempotent), one date at a time."""
    from strata import pipeline

    settings = for_writing(wait)
    for day in dates(days):
        with progress(f"building DWD {day}") as step:
            result = pipeline.build_dwd(settings, day, progress=step)
        for run in [r for kind in result.detail.values() for r in (kind, kind.spans) if r is not None]:
            b = run.books
            assert b is not None, "a DWD run keeps its books"
            trace_only = f" + trace-only {b.trace_only:,}" if b.trace_only else ""
            records = "ODS spans" if run.table.name == "dwd.span" else "ODS"
            out.print(
                f"{b.table} [{day}] v{run.version}: {records} {b.ods_rows:,} = DWD {b.dwd_rows:,} + duplicates "
                f"{b.duplicates:,} + quarantined {b.quarantined:,} + malformed {b.malformed:,}{trace_only}"
            )
            for rule, count in sorted(run.rules.items()):
                out.print(f"  quarantined by {rule}: {count:,}")
            if run.rules.get("tenant_id.required"):
                out.print(
                    "  [yellow]records name no tenant[/]: set it where they come from (a `tenant.id` resource "
                    "attribute, or OTEL_SERVICE_NAME for OTLP spans), or land them with `strata ingest "
                    "FILE --tenant ID --reland`, with its --mapping if it was landed with one (or "
                    "STRATA_DEFAULT_TENANT), then rebuild"
                )
            if run.counts.incomplete:
                out.print(
                    f"  [yellow]{run.counts.incomplete:,} request(s) have no price in effect at their time[/]: "
                    "their cost_usd is null (load a price list with `strata prices load FILE`, then rebuild)"
                )
            if run.counts.no_usage:
                out.print(
                    f"  {run.counts.no_usage:,} request(s) reported no token usage (failed calls, streams "
                    "without usage): their cost_usd is null (a refused 4xx call of a priced model costs 0, "
                    "not among them)"
                )
            if b.trace_only:
                out.print(
                    f"  {b.trace_only:,} trace-only line(s): OTLP exports holding no GenAI span (a workflow's "
                    "parent span sent alone), kept in ODS, no request; their spans are rows of dwd.span"
                )


@app.command("dws")
def build_dws_cmd(days: list[str] = DATES, wait: float | None = WAIT) -> None:
    """Publish the DWS feature tables for feature dates from dwd.request (idempotent), one date at a time.

    Date D reads DWD from D-8 23:00 to D 23:00. A request counts in the rows of D..D+8, so after
    DWD of D changed (late data, a rebuild), rebuild DWS for D..D+8.
    """
    from strata import pipeline

    settings = for_writing(wait)
    for day in dates(days):
        with progress(f"building DWS {day}") as step:
            result = pipeline.build_dws(settings, day, progress=step)
        for name, run in result.detail.items():
            out.print(
                f"{name} [{day}] v{run.version}: {run.published:,} feature row(s) from "
                f"{run.counts.records:,} request(s) of {day - dt.timedelta(days=8)} 23:00 … {day} 23:00"
            )
    out.print(
        "After a change of DWD for date D, rebuild DWS for D..D+8 (a request leaves the 7-day window "
        "at D+8 00:00 at the latest)."
    )


@app.command("ads")
def build_ads_cmd(
    days: list[str] = DATES,
    storm_multiple: float | None = typer.Option(
        None,
        "--storm-multiple",
        min=0.0,
        help="Retry storms: retries must exceed this multiple of first attempts (default: the project's, 1.0).",
    ),
    wait: float | None = WAIT,
) -> None:
    """Publish the ADS marts for event dates: dbt build in-process, then each mart as a Delta table (idempotent).

    The days of the week before a date whose dwd.request changed since their marts were built
    (late labels merged in, a rebuilt DWD day) are built again with it.
    """
    from strata import pipeline

    settings = for_writing(wait)
    for day in dates(days):
        with progress(f"building ADS {day}") as step:
            result = pipeline.build_ads(settings, day, progress=step, storm_multiple=storm_multiple)
        report = result.detail
        built = ", ".join(str(d) for d in report.days)
        for p in report.published:
            out.print(f"{p.table} [{built}] v{p.version}: {p.rows:,} row(s)")
        if result.counts["days_caught_up"]:
            earlier = ", ".join(str(d) for d in report.days if d != day)
            out.print(f"  caught up {earlier}: their dwd.request changed after their marts were built (late labels)")
        run = report.dbt
        out.print(
            f"  dbt: start-up {run.startup_s:.1f}s, models {run.seconds('model'):.1f}s, tests "
            f"{run.seconds('test') + run.seconds('unit_test'):.1f}s; publishing {report.publish_s:.1f}s"
        )
