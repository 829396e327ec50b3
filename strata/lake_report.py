"""What the lake holds, as rich tables: every table's version and rows, the quarantine by rule,
the books per day, a few analyst answers, an online feature lookup, the model and its riskiest users,
and where the week's HTML report is.

A section whose layer has not been built yet (its table does not exist, nothing is materialized) is one line
saying so — never a made-up table.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import polars as pl
from rich.markup import escape

from strata.console import Clauses, Command, FitTable, cell
from warehouse.settings import Settings

if TYPE_CHECKING:
    from warehouse.storage.lake import Lake

Echo: TypeAlias = Callable[[Any], None]

#: The analyst's first questions: (title, ADS table, the columns to show — regexes, in order of importance:
#: a narrow terminal leaves out the last ones —, the column to sort by (regex)).
ADS_ANSWERS = (
    (
        "cost per tenant",
        "ads.tenant_daily",
        (r"^tenant", r"^cost_usd$", r"^requests$", r"^total_tokens$", r"^top_model", r"^error_rate$", r"quota_used$"),
        r"cost",
    ),
    (
        "p95 latency by model version",
        "ads.model_daily",
        (r"^model$", r"^model_version$", r"^requests$", r"latency_p95", r"ttft_p95", r"^errors$", r"^cost_usd$"),
        r"p95",
    ),
    (
        "retry storms",
        "ads.retry_storms",
        (r"^tenant", r"^model", r"^window_start$", r"^minutes$", r"^retries$", r"^first_attempts$", r"multiple$"),
        r"retr",
    ),
)
SCORES = "ads.user_risk_scores"
MODEL = "user_risk"


def _table(title: str, columns: list[str], rows: list[list[Any]], *, drop: Sequence[str] = ()) -> FitTable:
    """A table of ``rows`` in plain units, each value read as what its column measures (a cell
    already made text stays as it is); ``drop``: the columns a narrow terminal leaves out first."""
    return FitTable(
        columns, [[cell(v, c) for v, c in zip(row, columns, strict=True)] for row in rows], title=title, drop=drop
    )


def tables_section(lake: Lake, echo: Echo) -> None:
    """Every table of the registry that exists: its Delta version and rows."""
    from warehouse.tables import all_tables

    rows = []
    for table in all_tables():
        delta = lake.open_table(table)
        if delta is not None:
            rows.append([table.name, delta.version(), lake.dataset(delta).count_rows()])
    echo(_table("tables", ["table", "version", "rows"], rows))


def quarantine_section(lake: Lake, echo: Echo) -> None:
    """Quarantined rows per rule (a row may break several)."""

    from warehouse.tables import DWD_QUARANTINE

    if lake.open_table(DWD_QUARANTINE) is None:
        echo("quarantine: nothing quarantined yet (dwd.quarantine does not exist)")
        return
    counts = (
        lake.read_frame(DWD_QUARANTINE, columns=["target_table", "rules"])
        .explode("rules")
        .group_by("target_table", "rules")
        .len()
        .sort(["len", "rules"], descending=[True, False])
    )
    echo(
        _table(
            "quarantined rows by rule",
            ["table", "rule", "rows"],
            [list(r) for r in counts.select("target_table", "rules", pl.col("len")).iter_rows()],
        )
    )


def books_section(lake: Lake, echo: Echo) -> None:
    """The books per table and day: ODS rows = DWD rows + duplicates + quarantined + malformed + trace-only."""
    from warehouse.tables import OPS_BOOKS

    if lake.open_table(OPS_BOOKS) is None:
        echo("books: no DWD build yet (ops.books does not exist)")
        return
    books = lake.read_frame(OPS_BOOKS).sort(["event_date", "table_name"])
    if "trace_only" not in books.columns:  # books written before trace-only lines were counted apart
        books = books.with_columns(trace_only=pl.lit(None, pl.Int64))
    columns = ["table_name", "event_date", "ods_rows", "dwd_rows", "duplicates", "quarantined", "malformed"]
    echo(
        _table(
            "the books per day: ODS rows = DWD rows + dup. + quar. + malf. + trace",
            ["table", "date", "ODS", "DWD", "dup.", "quar.", "malf.", "trace", "ok"],
            [list(r) for r in books.select(*columns, "trace_only", "balanced").iter_rows()],
            drop=["trace"],
        )
    )


def ads_section(lake: Lake, echo: Echo, day: dt.date) -> None:
    """A few analyst answers from the ADS tables, each only when its table has been built."""
    from warehouse.tables import Table

    for title, name, show, sort in ADS_ANSWERS:
        table = Table(name)
        if lake.open_table(table) is None:
            echo(f"ADS, {title}: not built yet ({name} does not exist) — skipped")
            continue
        frame = lake.read_frame(table)
        when = str(day)  # the day's rows; a day without any (no retry storm): every day's, said so
        if "event_date" in frame.columns and (frame["event_date"] == day).any():
            frame = frame.filter(frame["event_date"] == day)
        elif "event_date" in frame.columns and not frame.is_empty():
            when = f"every day: none on {day}"
        columns = list(dict.fromkeys(c for pattern in show for c in frame.columns if re.search(pattern, c)))
        columns = columns or frame.columns
        if frame.is_empty():
            echo(f"ADS, {title} ({name}, {day}): none")
            continue
        order = next((c for c in columns if re.search(sort, c)), columns[0])
        frame = frame.select(columns).sort(order, descending=True, nulls_last=True).head(5)
        echo(_table(f"{title} ({name}, {when})", columns, [list(r) for r in frame.iter_rows()]))


def operators_section(lake: Lake, echo: Echo, day: dt.date) -> None:
    """One line per operators' mart: its headline over the week (for capacity and workflows, ``day``'s),
    or why there is none."""
    from warehouse.tables import Table

    for name, headline in _HEADLINES:
        table = Table(name)
        if lake.open_table(table) is None:
            echo(f"{name}: not built yet — skipped")
            continue
        frame = lake.read_frame(table)
        echo(Clauses([f"[bold]{name}[/]:", *headline(frame, day)]))


def _capacity(frame: pl.DataFrame, day: dt.date) -> list[str]:
    """The model that needs the most replicas at ``day``'s peak."""
    rows = frame.filter(pl.col("event_date") == day).sort("replicas_needed", "peak_concurrency", descending=True)
    if rows.is_empty():
        return [f" no traffic on {day}"]
    r = rows.row(0, named=True)
    return [
        f" {escape(r['model'])} peaks at {r['peak_qps_1m']:.1f} req/s",
        f" and {r['peak_concurrency']} in flight at {r['peak_concurrency_at']:%H:%M}",
        f" (Little's law: {r['littles_law_concurrency']:.1f});",
        f" {r['replicas_needed']} replicas at {r['instance_concurrency']} a replica",
        f" and {r['headroom']:.0%} headroom",
    ]


def _cold_starts(frame: pl.DataFrame, _: dt.date) -> list[str]:
    """How many instances started and how slow the slowest warm-up was."""
    started = frame.filter("is_cold_start")
    slow = started.filter("is_slow_start").sort("warmup_latency_ratio", descending=True)
    clauses = [f" {started.height} instance(s) started, {slow.height} slow to warm up"]
    if slow.height:
        r = slow.row(0, named=True)
        clauses[-1] += ";"
        clauses += [
            f" {escape(r['server_instance'])} at {r['first_seen_at']:%a %H:%M}:",
            f" first {r['cold_start_requests']} requests {r['warmup_latency_ratio']:.1f}× steady",
        ]
    return clauses


def _server_drift(frame: pl.DataFrame, _: dt.date) -> list[str]:
    """The instance that drifted most, and whether its restart recovered."""
    drifting = frame.filter("is_drifting").sort("predicted_increase", descending=True)
    if drifting.is_empty():
        return [f" no instance drifted (of {frame.height})"]
    r = drifting.row(0, named=True)
    recovered = {True: "its restart recovered", False: "its restart did not recover", None: "not restarted"}
    return [
        f" {escape(r['server_instance'])} slowed +{r['predicted_increase']:.0%}",
        f" over {r['tokens_processed'] / 1e6:.1f}M tokens;",
        f" {recovered[r['is_recovered']]}",
    ]


def _token_anomalies(frame: pl.DataFrame, _: dt.date) -> list[str]:
    """The tenant-day whose tokens per request jumped most while its requests did not."""
    flagged = frame.filter("is_flagged").sort("token_ratio", descending=True)
    if flagged.is_empty():
        return [" no tenant's tokens per request jumped"]
    r = flagged.row(0, named=True)
    return [
        f" {escape(r['tenant_id'])} sent {r['token_ratio']:.1f}× its usual tokens a request",
        f" on {r['event_date']}",
        f" at {r['request_ratio']:.2f}× its usual requests",
    ]


def _retry_policy(frame: pl.DataFrame, _: dt.date) -> list[str]:
    """Retries no retry mends, chains without bound, and what all retries cost."""
    flagged = frame.filter("is_flagged")
    limit = "/".join(str(n) for n in frame.get_column("chain_limit").unique().sort()) or "the limit's"
    return [
        f" {flagged.select('tenant_id', 'event_date').n_unique()} tenant-day(s) flagged:",
        f" {int(frame.get_column('non_retryable_retries').sum()):,} retries of non-retryable answers,",
        f" {int(frame.get_column('long_chains').sum()):,} chain(s) beyond {limit} attempts;",
        f" {int(frame.get_column('retry_tokens').sum()):,} tokens spent on retries",
    ]


def _trace_breakdown(frame: pl.DataFrame, day: dt.date) -> list[str]:
    """``day``'s most frequent workflow shape, and the step that holds it up."""
    rows = frame.filter(pl.col("event_date") == day).sort("traces", descending=True)
    if rows.is_empty():
        return [f" no multi-call trace on {day}"]
    r = rows.row(0, named=True)
    return [
        f" {r['traces']} × {escape(r['shape'])}:",
        f" {escape(r['slowest_step'])} takes {r['slowest_step_share']:.0%} of a trace;",
        f" {r['sequential_traces']} ran strictly in sequence",
    ]


#: The operators' marts and their headline lines, in the order the demo prints them.
_HEADLINES: tuple[tuple[str, Callable[[pl.DataFrame, dt.date], list[str]]], ...] = (
    ("ads.capacity", _capacity),
    ("ads.cold_starts", _cold_starts),
    ("ads.server_drift", _server_drift),
    ("ads.token_anomalies", _token_anomalies),
    ("ads.retry_policy", _retry_policy),
    ("ads.trace_breakdown", _trace_breakdown),
)


def open_commands(lake: Lake, day: dt.date) -> list[str]:
    """A number and a workflow opened down to their raw lines: ``strata explain`` of a flagged retry-policy row
    (else ``day``'s busiest model in ``ads.model_daily``) and ``strata trace`` of ``day``'s slowest multi-call
    trace; what the lake cannot give yet is left out."""
    from strata.report.operators import explain_command
    from warehouse.ads.explain import shapes_sql
    from warehouse.storage.duck import lake_reader
    from warehouse.storage.lake import sql_literal
    from warehouse.tables import ADS_MODEL_DAILY, ADS_RETRY_POLICY, DWD_REQUEST, DWD_SPAN

    commands = []
    flagged = lake.read_frame(ADS_RETRY_POLICY).filter("is_flagged") if lake.exists(ADS_RETRY_POLICY) else None
    if flagged is not None and flagged.height:
        commands.append(
            explain_command(ADS_RETRY_POLICY.name, flagged.sort("event_date", "tenant_id").row(0, named=True))
        )
    elif lake.exists(ADS_MODEL_DAILY):
        busiest = lake.read_frame(ADS_MODEL_DAILY).filter(pl.col("event_date") == day).sort("requests", descending=True)
        if busiest.height:
            commands.append(explain_command(ADS_MODEL_DAILY.name, busiest.row(0, named=True)))
    if lake.exists(DWD_REQUEST):
        spans = f"delta_scan('{lake.uri(DWD_SPAN)}')" if lake.exists(DWD_SPAN) else None
        traces = shapes_sql(f"delta_scan('{lake.uri(DWD_REQUEST)}')", spans, f"event_date = {sql_literal(day)}")
        found = lake_reader(lake.settings).execute(f"SELECT arg_max(trace_id, duration_ms) FROM ({traces})").fetchone()
        if found is not None and found[0] is not None:
            commands.append(f"strata trace {found[0]}")
    return commands


def features_section(settings: Settings, echo: Echo, user_id: str) -> None:
    """One user's online features, through the pipeline's lookup (once they are materialized)."""
    from features.online import NotMaterialized
    from strata import pipeline

    try:
        values: dict[str, Any] = pipeline.get_online_features(settings, "user", user_id)
    except NotMaterialized as exc:
        echo(f"online features: not materialized yet ({exc}) — skipped")
        return
    echo(
        _table(f"online features of user {user_id}", ["feature", "value"], [[k, cell(v, k)] for k, v in values.items()])
    )


def model_section(lake: Lake, echo: Echo, day: dt.date, planted: frozenset[str] = frozenset()) -> None:
    """The latest registered model's metrics and the day's riskiest users (marked when the generator
    planted them as abusers: ``planted`` holds their pseudonyms)."""
    from batch_inference.registry import ModelError, get
    from warehouse.tables import Table

    try:
        card = get(lake.settings, MODEL).card
    except ModelError as exc:
        echo(f"model: {exc} — skipped")
    else:
        echo(
            _table(
                f"model {card.ref}, trained on {card.training_window[0]} … {card.training_window[1]}",
                ["metric", "value"],
                [[k, cell(v, k)] for k, v in card.metrics.items()],
            )
        )
    scores = Table(SCORES)
    if lake.open_table(scores) is None:
        echo(f"riskiest users: not scored yet ({SCORES} does not exist) — skipped")
        return
    scored = lake.read_frame(scores, filters=[("event_date", "=", day)])
    if planted and scored.height:
        truth = scored.get_column("user_pseudonym").is_in(list(planted)).to_numpy()
        if 0 < truth.sum() < len(truth):
            from sklearn.metrics import roc_auc_score

            echo(
                f"ROC AUC of the {day} scores against the generator's planted abusers "
                f"({int(truth.sum())} of {len(truth):,} users scored): "
                f"{roc_auc_score(truth, scored.get_column('score').to_numpy()):.3f}"
            )
    top = (
        scored.sort("score", descending=True)
        .head(5)
        .select("user_pseudonym", "score", "model_version", planted=pl.col("user_pseudonym").is_in(list(planted)))
    )
    echo(
        _table(
            f"riskiest users ({SCORES}, {day})",
            ["user (pseudonym)", "score", "model", "planted abuser"],
            [list(r) for r in top.iter_rows()],
        )
    )


def report_section(settings: Settings, echo: Echo, day: dt.date) -> None:
    """Where the daily run wrote the HTML report of the week ending with ``day`` (one line when it did not)."""
    import pyarrow.fs as pafs

    from strata.report import WEEK
    from warehouse.ops.reports import report_uri
    from warehouse.storage.objectstore import filesystem

    uri = report_uri(settings, day - dt.timedelta(days=WEEK - 1), day)
    fs, path = filesystem(settings, uri)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        echo(f"report: not written yet ({uri} does not exist) — skipped")
        return
    echo(f"[bold]report[/] of the week ending {day} ({info.size / 1e6:.1f} MB, opens offline in any browser):")
    echo(Command(f"  {uri if '://' in uri else 'file://' + uri}"))
