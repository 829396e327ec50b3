"""``strata features …``: materialize, look up, serve and check the online features (Feast)."""

from __future__ import annotations

import datetime as dt

import typer

from strata.console import cell, out, progress

app = typer.Typer(help="Online features (Feast): materialize, get, serve, check-consistency.", no_args_is_help=True)


def _instant(text: str | None, option: str) -> dt.datetime | None:
    if text is None:
        return None
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not a date or time like 2026-01-31 or 2026-01-31T12:00", param_hint=option
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


@app.command("materialize")
def materialize_cmd(
    start: str | None = typer.Option(None, "--start", help="Only rows with feature_ts at or after this (UTC)."),
    end: str | None = typer.Option(None, "--end", help="Only rows with feature_ts before this (UTC)."),
    full: bool = typer.Option(False, "--full", help="Read every DWS row again, not only what changed."),
) -> None:
    """Write each entity's latest DWS row into the online store.

    By default incremental: the DWS tables' Delta versions since the last run say which partitions to
    read again.
    """
    from strata import pipeline
    from warehouse.settings import load_settings

    settings = load_settings()
    with progress("materializing") as step:
        result = pipeline.materialize(
            settings, start=_instant(start, "--start"), end=_instant(end, "--end"), full=full, progress=step
        )
    report = result.detail
    for v in report.views:
        where = f" partitions {', '.join(v.partitions)}" if v.partitions else ""
        gone = f", {v.removed:,} removed (no longer in the table)" if v.removed else ""
        out.print(
            f"{v.view} ({v.table} v{v.version}): {v.mode}{where}, {v.entities:,} entities, "
            f"{v.values_written:,} values written{gone}"
        )
    out.print(f"online store: {report.store}")


@app.command("get")
def get_cmd(
    entity: str = typer.Argument(
        ..., metavar="ENTITY=ID", help="user=RAW_USER_ID, tenant=ID or model_version=MODEL@VERSION."
    ),
    features: list[str] | None = typer.Option(None, "--features", "-f", help="Features to show (default: all)."),
    pseudonymized: bool = typer.Option(False, "--pseudonym", help="The user id given is already the pseudonym."),
) -> None:
    """Look one entity's online features up (a raw user id is pseudonymized with the configured key first)."""
    from rich.table import Table

    from contracts.errors import InputError
    from features.online import get_online_features
    from warehouse.settings import load_settings

    if "=" not in entity:
        raise typer.BadParameter("give ENTITY=ID, e.g. user=alice", param_hint="ENTITY=ID")
    kind, raw = entity.split("=", 1)
    names = [n for group in features or [] for n in group.split(",") if n]
    values = get_online_features(
        load_settings(), kind, raw, names or None, pseudonymize=not pseudonymized, with_times=True
    )
    shown = [k for k in values if not k.endswith("__ts")]
    if all(values[f"{n}__ts"] is None for n in shown):  # a page of dashes would read as an answer
        raise InputError(
            f"the online store holds nothing for {kind} {raw}: unknown, forgotten, or not materialized yet "
            "(strata features materialize)"
        )
    table = Table(title=f"online features of {kind} {raw}")
    for column in ("feature", "value", "event time (UTC)"):
        table.add_column(column)
    for name in shown:
        ts = values[f"{name}__ts"]
        table.add_row(name, "—" if values[name] is None else cell(values[name], name), "—" if ts is None else cell(ts))
    out.print(table)


@app.command("serve")
def serve_cmd(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(6566, "--port", help="Port to listen on."),
    workers: int = typer.Option(1, "--workers", min=1, help="Server processes."),
    allow_writes: bool = typer.Option(
        False,
        "--allow-writes",
        help="Also serve Feast's writes: /push, /write-to-online-store, /materialize, /materialize-incremental.",
    ),
    max_entities: int = typer.Option(1000, "--max-entities", min=1, help="Entities one lookup may name."),
    max_body: int = typer.Option(1 << 20, "--max-body-bytes", min=1024, help="Largest request body."),
) -> None:
    """Serve online features over HTTP with Feast's feature server.

    Lookups (POST /get-online-features) and GET /health only, unless --allow-writes.
    """
    from features.http_api import Limits
    from features.serve import serve
    from warehouse.settings import load_settings

    served = "lookups and writes" if allow_writes else "lookups only"
    out.print(f"serving features on http://{host}:{port} ({served}; Ctrl-C stops)")
    serve(
        load_settings(),
        host,
        port,
        workers,
        allow_writes=allow_writes,
        limits=Limits(max_body=max_body, max_entities=max_entities),
    )


@app.command("check-consistency")
def check_consistency_cmd(
    day: str | None = typer.Option(None, "--date", help="Day to record the check under (default: the as-of day)."),
    sample: int = typer.Option(1000, "--sample", min=1, help="Entities sampled per feature view."),
) -> None:
    """Compare sampled online values with Feast's offline point-in-time values; write ads.feature_consistency."""
    from strata import pipeline
    from strata.options import parse_date
    from warehouse.settings import load_settings

    result = pipeline.check_consistency(load_settings(), parse_date(day) if day else None, sample=sample)
    report = result.detail
    if not report.views:
        out.print("nothing is materialized yet: nothing to compare (run `strata features materialize`)")
        return
    for v in report.views:
        skewed = sum(1 for n in v.mismatches.values() if n)
        out.print(
            f"{v.view} at {v.as_of.isoformat()}: {v.sampled:,} sampled, {v.entities_mismatched:,} mismatched, "
            f"{v.missing:,} missing online; {skewed} feature(s) differ"
        )
    for view, feature, n in report.skewed():
        example = next(iter(next(v for v in report.views if v.view == view).examples.get(feature, [])), None)
        more = f" (e.g. {example[0]}: online {example[1]!r}, offline {example[2]!r})" if example else ""
        out.print(f"[red]mismatch[/] {view}.{feature}: {n:,} entit(y/ies){more}")
    out.print(f"ads.feature_consistency [{report.day}] v{report.version}")
    if report.mismatches or report.missing:
        raise typer.Exit(1)
