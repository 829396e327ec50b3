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

from strata.console import Command, FitTable, cell
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
    import polars as pl

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
    import polars as pl

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
    import polars as pl

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
