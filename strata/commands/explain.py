"""``strata explain TABLE KEY=VALUE…``: one ADS row down to the DWD rows, ODS lines and versions it came from."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.text import Text

from strata.commands.trace import print_raw_line, shown
from strata.console import Clauses, Command, FitTable, cell, out, say

if TYPE_CHECKING:
    from warehouse.ads.explain import Explanation, Partition

app = typer.Typer()

#: The ODS files listed (a day's rows come from one file an hour, or more).
FILES_SHOWN = 8


@app.command("explain")
def explain_cmd(
    table: str = typer.Argument(..., help="The mart: ads.model_daily, ads.tenant_daily, … (ads.* built by dbt)."),
    key: list[str] = typer.Argument(
        ..., metavar="KEY=VALUE…", help="The row's primary key, each column as KEY=VALUE (its contract's key)."
    ),
    raw: bool = typer.Option(
        False,
        "--raw",
        help="Also print the raw ODS lines of the sampled rows: they may hold personal data, prompts and responses.",
    ),
    sql: bool = typer.Option(False, "--sql", help="Also print the model's SQL."),
) -> None:
    """Explain one ADS row: the DWD rows it summarises (count and a sample), the ODS files and lines they came
    from, every ODS line of its days accounted for (summarised, another row's, quarantined by rule, a
    duplicate), the Delta versions of the tables its build read (and whether each is still there), the model.

    The versions are those the build recorded in ops.audit_log; a version retention or vacuum removed is said
    so, and the rows are read as they are now. Raw lines print only with --raw.
    """
    from warehouse.ads.explain import explain
    from warehouse.settings import load_settings
    from warehouse.storage.lake import Lake

    found = explain(Lake(load_settings()), table, key, raw=raw)
    asked = shlex.join(["strata", "explain", found.table, *(f"{c}={cell(v)}" for c, v in found.key.items())])
    out.print(
        Clauses([f"[bold]{found.table}[/]", *(f" {escape(shown(f'{c}={cell(v)}'))}" for c, v in found.key.items())])
    )
    values = [f" {c} {escape(shown(cell(v, c)) or 'null')}," for c, v in found.row.items() if c not in found.key]
    out.print(Clauses([v.strip() if i == 0 else v for i, v in enumerate(values)], 2))
    out.print(_build(found))
    if found.reads:
        out.print(_reads(found))
    out.print(_rows_line(found))
    if found.sample:
        out.print(_sample(found))
    if found.lines:
        out.print(_files(found))
    for partition in found.partitions:
        out.print(_accounted(partition))
    out.print(Text(f"the model: {found.sql_path}", style="dim"))
    if sql:
        out.print(Text(found.sql.rstrip("\n")), overflow="fold")
    if raw:
        _print_raw(found)
    else:
        out.print(Text("raw lines (they may hold prompts), the model's SQL:", style="dim"))
        say(Command(shown(f"{asked} --raw --sql")))


def _build(found: Explanation) -> Text:
    if found.built_at is None:
        return Text("no published write of this day in ops.audit_log", style="yellow")
    return Text(f"built {cell(found.built_at)} UTC as {found.table} version {cell(found.built_version)}")


def _reads(found: Explanation) -> FitTable:
    rows = []
    for read in found.reads:
        if read.gone is not None:
            state = f"gone: {read.gone}"
        elif read.version == read.current:
            state = "current"
        else:
            state = "older, still readable"
        rows.append([read.table, f"{read.version:,}", cell(read.current), state])
    return FitTable(
        ["table", "version read", "now", "that version"], rows, title="what the build read (Delta versions)"
    )


def _rows_line(found: Explanation) -> Clauses:
    parts = [f" {n:,} in {t}," for t, n in found.rows_by_table.items()] or [" none,"]
    at = [f" read at version {cell(found.dwd_version)},"]
    if found.dwd_as_built:
        at.append(" the one the build read")
    elif found.reads:
        at += [" the current:", " [yellow]the version the build read is gone;[/]", " [yellow]these are the rows now[/]"]
    else:
        at += [" the current:", " [yellow]the build recorded no versions[/]"]
    return Clauses(["[bold]DWD rows it summarises:[/]", *parts, *at])


def _sample(found: Explanation) -> FitTable:
    rows = [
        [
            r["request_id"],
            cell(r["ts"]),
            shown(r["tenant_id"] or ""),
            shown(r["model"] or ""),
            cell(r["status_code"]),
            cell(r["duration_ms"], "duration_ms"),
            f"{cell(r['input_tokens'])}/{cell(r['output_tokens'])}",
            r["source_file"],
            f"{r['line_no']:,}",
        ]
        for r in found.sample
    ]
    columns = ["request", "started (UTC)", "tenant", "model", "status", "took", "tokens", "ODS file", "line"]
    return FitTable(
        columns,
        rows,
        title=f"a sample ({len(rows)} of {found.rows:,}, the first by time)",
        drop=["tenant", "model", "tokens", "took", "started (UTC)", "status"],
        keep=["request", "ODS file", "line"],
        path="ODS file",
    )


def _files(found: Explanation) -> FitTable:
    rows = [[f.source_file, f"{f.lines:,}", f"{f.first:,}–{f.last:,}"] for f in found.lines[:FILES_SHOWN]]
    more = len(found.lines) - FILES_SHOWN
    title = "the ODS lines they came from" + (f" ({FILES_SHOWN} of {len(found.lines)} files)" if more > 0 else "")
    return FitTable(["ODS file", "lines", "first–last"], rows, title=title, keep=["ODS file"], path="ODS file")


def _accounted(p: Partition) -> Clauses:
    clauses = [
        f"[bold]every ODS line of {p.event_date}:[/] {p.ods_lines:,} =",
        f" {p.summarised:,} summarised by this row",
        f" + {p.duplicates_of_these:,} duplicates of them",
        f" + {p.other_rows:,} other DWD rows",
        f" + {p.quarantined:,} quarantined",
        f" + {p.duplicates:,} other duplicates",
    ]
    if p.unaccounted:
        clauses.append(f" + [red]{p.unaccounted:,} unaccounted[/]")
    if p.rules:
        clauses.append("; quarantined by rule:")
        clauses += [f" {escape(rule)} {n:,}," for rule, n in p.rules.items()]
        clauses[-1] = clauses[-1].rstrip(",")
    return Clauses(clauses)


def _print_raw(found: Explanation) -> None:
    """The ODS line of each sampled row, cut at :data:`RAW_BYTES`."""
    for r in found.sample:
        place = (r["source_file"], r["line_no"])
        print_raw_line(f"{place[0]}:{place[1]} ({r['request_id']})", found.raw_lines.get(place))
