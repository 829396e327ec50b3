"""``strata report``: the lake of a date range as one self-contained HTML page."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer

from strata.console import out
from strata.options import given_path, parse_date

app = typer.Typer()


@app.command("report")
def report_cmd(
    start: str | None = typer.Option(None, "--start", help="First day, YYYY-MM-DD (default: 6 days before --end)."),
    end: str | None = typer.Option(
        None, "--end", help="Last day, YYYY-MM-DD (default: the latest day dwd.request holds)."
    ),
    to: Path | None = typer.Option(
        None,
        "--out",
        parser=given_path,
        metavar="FILE",
        help="Write the page to this local file instead of the lake's reports/ folder.",
    ),
) -> None:
    """Write the report of a date range as one HTML page that opens offline.

    It shows requests, cost, latency, quality, consistency, scores and lineage, and goes into the lake's
    reports/ folder, or to --out.
    """
    from strata import pipeline
    from strata.options import for_writing
    from strata.report import latest_day

    settings = for_writing()
    last = parse_date(end, "--end") if end else latest_day(settings) or dt.datetime.now(dt.UTC).date()
    first = parse_date(start, "--start") if start else None
    result = pipeline.write_report(settings, last, start=first, out=to.resolve() if to else None)
    where = result.detail
    out.print(f"report: {where} ({result.counts['bytes'] / 1e6:.1f} MB)", soft_wrap=True)
    if "://" not in where:
        out.print(f"  open it in a browser: file://{where}", soft_wrap=True)
