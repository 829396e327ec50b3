"""The report's sections: each reads its numbers from the lake (DuckDB over the Delta tables) and draws them.

A section is a title, a line saying what it shows, its charts (plotly figures: SVG traces only, so a
browser test can count what was drawn) and its tables (small HTML). A section whose tables do not exist
yet says so in its line and draws nothing. Users appear only as the pseudonyms the lake holds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from strata.report import charts
from strata.report.operators import capacity, cold_starts, retry_waste, server_drift, token_anomalies, workflows
from strata.report.section import Section
from strata.report.view import LakeView
from warehouse.tables import OPS_BOOKS

if TYPE_CHECKING:
    import plotly.graph_objects as go
#: Bins of the score histogram, equal-width over [0, 1].
SCORE_BINS = 20
#: The riskiest users listed.
RISKIEST = 10


def traffic(lake: LakeView) -> Section:
    """Requests, tokens and cost by tenant and by model, day by day (``ads.tenant_daily``, ``ads.model_daily``)."""
    section = Section("traffic", "Requests, tokens and cost", "Per day, by tenant and by model (ADS marts).")
    if note := lake.missing("ads.tenant_daily", "ads.model_daily"):
        section.note = note
        return section
    measures, titles = ("requests", "tokens", "cost_usd"), ("requests", "tokens (input + output)", "cost, USD")
    for key, name in (("tenant_id", "ads.tenant_daily"), ("model", "ads.model_daily")):
        frame = lake.chart_frame(
            f"SELECT event_date, {key}, requests, input_tokens + output_tokens AS tokens, "
            f"coalesce(cost_usd, 0)::DOUBLE AS cost_usd FROM {lake.scan(name)} WHERE {lake.days}"
        )
        figure = charts.subplots([f"{t} by {key.removesuffix('_id')}" for t in titles], height=380)
        charts.bars_by_day(figure, charts.keep_top(frame, key, "cost_usd"), key, measures)
        section.charts[f"{key.removesuffix('_id')}-traffic"] = figure
    return section


def latency(lake: LakeView) -> Section:
    """End-to-end latency p50/p95/p99 and time to first token p50/p95 per model version, over the range
    (``dwd.request``; the same ``quantile_cont`` as ``ads.model_daily``'s daily figures)."""
    import plotly.graph_objects as go

    section = Section(
        "latency", "Latency by model version", "Percentiles over the whole range, from dwd.request (log scale)."
    )
    if note := lake.missing("dwd.request"):
        section.note = note
        return section
    frame = lake.chart_frame(
        f"""SELECT model || ' ' || coalesce(model_version, '(none)') AS version,
               quantile_cont(duration_ms, 0.5) AS p50, quantile_cont(duration_ms, 0.95) AS p95,
               quantile_cont(duration_ms, 0.99) AS p99,
               quantile_cont(ttft_ms, 0.5) AS ttft_p50, quantile_cont(ttft_ms, 0.95) AS ttft_p95
        FROM {lake.scan("dwd.request")} WHERE {lake.days} AND model IS NOT NULL GROUP BY 1 ORDER BY 1"""
    )
    figure = charts.subplots(
        ["end-to-end latency, ms", "time to first token, ms"], height=420, column_widths=[0.6, 0.4]
    )
    for col, measures in ((1, ("p50", "p95", "p99")), (2, ("ttft_p50", "ttft_p95"))):
        rows = frame.filter(pl.col(measures[0]).is_not_null())
        for i, measure in enumerate(measures):
            figure.add_trace(
                go.Bar(
                    x=rows.get_column("version").to_list(),
                    y=rows.get_column(measure).to_list(),
                    name=measure.replace("ttft_", "TTFT "),
                    marker_color=charts.PALETTE[i + 3 * (col - 1)],
                    customdata=rows.get_column("version").to_list(),  # the whole name; the axis shortens it
                    hovertemplate="%{customdata}: %{y:,.1f} ms",
                ),
                row=1,
                col=col,
            )
    # The legend at the figure's foot, below the longest name's rotated label (under the plot it ran into it).
    figure.update_layout(barmode="group", margin={"b": 170}, legend={"yref": "container", "y": 0, "yanchor": "bottom"})
    for col, measures in ((1, ("p50", "p95", "p99")), (2, ("ttft_p50", "ttft_p95"))):
        figure.update_yaxes(charts.log_axis(frame.select(measures).to_numpy().ravel().tolist()), row=1, col=col)
    figure.update_xaxes(tickangle=-35)
    charts.short_ticks(figure, frame.get_column("version").to_list(), "x")
    section.charts["latency"] = figure
    return section


#: The stages of ``ads.latency_breakdown``, in the order a request passes them.
STAGES = ("queue", "preprocess", "inference", "postprocess", "overhead")


def stages(lake: LakeView) -> Section:
    """Where a request's time goes, per model: the mean of each stage over the range (``ads.latency_breakdown``,
    each day's mean weighted by its staged requests)."""
    import plotly.graph_objects as go

    section = Section("stages", "Stage breakdown", "Mean milliseconds per stage, per model, over the range.")
    if note := lake.missing("ads.latency_breakdown"):
        section.note = note
        return section
    means = ", ".join(f"sum({s}_mean_ms * staged_requests) / nullif(sum(staged_requests), 0) AS {s}" for s in STAGES)
    frame = lake.chart_frame(
        f"SELECT model, {means} FROM {lake.scan('ads.latency_breakdown')} WHERE {lake.days} "
        "GROUP BY model HAVING sum(staged_requests) > 0 ORDER BY sum(duration_mean_ms * staged_requests) "
        "/ sum(staged_requests)"
    )
    figure = charts.blank(max(260, 60 + 34 * frame.height))
    for i, stage in enumerate(STAGES):
        figure.add_trace(
            go.Bar(
                y=frame.get_column("model").to_list(),
                x=frame.get_column(stage).to_list(),
                name=stage,
                orientation="h",
                marker_color=charts.PALETTE[i],
                customdata=frame.get_column("model").to_list(),
                hovertemplate="%{customdata}: %{x:,.1f} ms",
            )
        )
    figure.update_layout(barmode="stack", margin={"l": 170}, legend_traceorder="normal")
    charts.short_ticks(figure, frame.get_column("model").to_list(), "y")
    section.charts["stages"] = figure
    return section


def storms(lake: LakeView) -> Section:
    """The retry storms on a timeline: one segment per storm window, per tenant and model (``ads.retry_storms``)."""
    import plotly.graph_objects as go

    section = Section("storms", "Retry storms", "Windows where a tenant's retries outran its first attempts.")
    if note := lake.missing("ads.retry_storms"):
        section.note = note
        return section
    frame = lake.chart_frame(
        f"SELECT tenant_id || ' → ' || model AS who, window_start, window_end, retries, retry_multiple "
        f"FROM {lake.scan('ads.retry_storms')} WHERE {lake.days} ORDER BY window_start"
    )
    if frame.is_empty():
        section.note = f"No retry storm from {lake.start} to {lake.end}."
        return section
    figure = charts.blank(max(240, 90 + 28 * frame.get_column("who").n_unique()))
    for row in frame.iter_rows(named=True):
        figure.add_trace(
            go.Scatter(
                x=[row["window_start"], row["window_end"]],
                y=[row["who"], row["who"]],
                mode="lines+markers",
                line={"width": 8, "color": charts.PALETTE[3]},
                marker={"size": 9, "color": charts.PALETTE[3]},
                name=f"{row['retries']} retries",
                showlegend=False,
                customdata=[row["who"], row["who"]],
                hovertemplate=f"%{{customdata}}<br>{row['retries']:,} retries, "
                f"{row['retry_multiple'] or 0:.1f}× first attempts<br>%{{x}}<extra></extra>",
            )
        )
    figure.update_xaxes(
        range=[dt.datetime.combine(lake.start, dt.time()), dt.datetime.combine(lake.end, dt.time(23, 59))]
    )
    figure.update_layout(margin={"l": 230})
    charts.short_ticks(figure, frame.get_column("who").unique(maintain_order=True).to_list(), "y")
    section.charts["storms"] = figure
    section.note = f"{frame.height} storm window(s), {int(frame.get_column('retries').sum()):,} retries in them."
    return section


def quality(lake: LakeView) -> Section:
    """Data quality per layer: the books of DWD per day, the quarantine by rule, freshness and failed
    writes per table (``ops.books``, ``dwd.quarantine``, ``ops.audit_log``)."""
    import plotly.graph_objects as go

    section = Section(
        "quality",
        "Data quality",
        "The books (ODS records = DWD rows + duplicates + quarantined + malformed + trace-only), the quarantine "
        "by rule, freshness per table.",
    )
    if note := lake.missing("ops.books"):
        section.note = note
        return section
    # books written before trace-only lines were counted apart have no such column (they counted them malformed)
    trace_only = "coalesce(trace_only, 0)" if lake.handle.present_columns(OPS_BOOKS, ["trace_only"]) else "0"
    books = lake.chart_frame(
        f"SELECT event_date, dwd_rows, duplicates, quarantined, malformed, {trace_only} AS trace_only, ods_rows, "
        f"balanced FROM {lake.scan('ops.books')} WHERE {lake.days} AND table_name = 'dwd.request' ORDER BY event_date"
    )
    figure = charts.blank()
    days = [str(d) for d in books.get_column("event_date")]
    charts.stacked_parts(
        figure,
        days,
        books,
        (("dwd_rows", 2), ("duplicates", 7), ("quarantined", 1), ("malformed", 3), ("trace_only", 9)),
    )
    figure.update_layout(yaxis_title="dwd.request records", title="the books of dwd.request")
    figure.update_xaxes(type="category")
    section.charts["books"] = figure
    if "dwd.quarantine" in lake.present:
        rules = lake.chart_frame(
            f"SELECT rule, count(*) AS rows FROM (SELECT unnest(rules) AS rule FROM {lake.scan('dwd.quarantine')} "
            f"WHERE {lake.days}) GROUP BY rule ORDER BY rows, rule DESC"
        )
        chart = charts.blank(max(240, 80 + 26 * rules.height))
        chart.add_trace(
            go.Bar(
                y=rules.get_column("rule").to_list(),
                x=rules.get_column("rows").to_list(),
                orientation="h",
                marker_color=charts.PALETTE[1],
                name="quarantined rows",
            )
        )
        chart.update_layout(title="quarantined rows by rule (a row may break several)", margin={"l": 190})
        section.charts["quarantine"] = chart
    if "ops.audit_log" in lake.present:
        section.tables.append(_freshness(lake))
    return section


#: The days a write covers, read from the partition ``ops.audit_log`` names: ``event_date = '2026-01-05'``,
#: one per day of a write of several, its day among them in a partition of more keys.
WRITE_DAYS = r"regexp_extract_all(partition, 'event_date = ''(\d{4}-\d{2}-\d{2})''', 1)"
#: The layers with daily writes in the order data passes them: the order of the data-quality table's rows.
LAYERS = ("dwd", "dws", "ads", "ops")


def _freshness(lake: LakeView) -> str:
    """Per table with daily writes (any day's, in ``ops.audit_log``): the days of the range published, the
    failed writes, the newest day and its publish lag, the contract's SLA, whether the table is fresh when the
    page is made and whether its books balance; then what each column is measured from (docs/ads.md)."""
    from warehouse.ads.build import freshness_sla_hours

    frame = lake.frame(
        f"""WITH writes AS (
                SELECT table_name, status, attempt_id,
                       started_at + to_microseconds(round(duration_ms * 1000)::BIGINT) AS finished_at,
                       unnest({WRITE_DAYS})::DATE AS event_date
                FROM {lake.scan("ops.audit_log")}
            ), published AS (
                SELECT table_name, event_date, min(finished_at) AS first_published_at FROM writes
                WHERE status = 'published' AND {lake.days} GROUP BY ALL
            ), newest AS (
                SELECT table_name, count(*) AS days, max(event_date) AS newest_day,
                       (epoch(arg_max(first_published_at, event_date)) - epoch(max(event_date) + 1)) / 3600
                           AS lag_hours
                FROM published GROUP BY ALL
            ), books AS (
                SELECT table_name, bool_and(balanced) AS books_balanced FROM {lake.scan("ops.books")}
                WHERE {lake.days} GROUP BY ALL
            )
            SELECT split_part(table_name, '.', 1) AS layer, table_name, coalesce(any_value(days), 0) AS days,
                   count(DISTINCT attempt_id) FILTER (WHERE status = 'failed' AND {lake.days}) AS failed_writes,
                   any_value(newest_day) AS newest_day, any_value(lag_hours) AS lag_hours,
                   any_value(books_balanced) AS books_balanced
            FROM writes LEFT JOIN newest USING (table_name) LEFT JOIN books USING (table_name)
            GROUP BY table_name ORDER BY list_position({list(LAYERS)}, layer), table_name"""
    )
    slas = freshness_sla_hours()
    sla = [slas.get(name) for name in frame.get_column("table_name")]
    fresh = [_fresh(lake, day, hours) for day, hours in zip(frame.get_column("newest_day"), sla)]
    frame = frame.insert_column(6, pl.Series("sla_hours", sla, pl.Float64)).insert_column(
        7, pl.Series("fresh", fresh, pl.Boolean)
    )
    headers = ["layer", "table", "days published", "failed writes", "newest day", "its publish lag", "SLA", "fresh"]
    formats: dict[str, Callable[[Any], str]] = {
        "lag_hours": "{:,.1f} h".format,
        "sla_hours": "{:,.0f} h".format,
        "fresh": charts.yes,
        "books_balanced": charts.yes,
    }
    made = lake.made.strftime("%Y-%m-%d %H:%M UTC")
    return charts.table_html(frame, [*headers, "books balance"], formats) + (
        f'<p class="note">Days published: days of these {(lake.end - lake.start).days + 1} with a published '
        "write of the table (ops.audit_log; a write of several days counts for each). Failed writes: attempts on "
        "those days that failed their audit or their write, each counted once. Its publish lag: from the end of "
        "the newest day (00:00 UTC after it) to its first publish; a backfill of old days has a long lag, and is "
        "no outage. SLA: the contract's latency, counted from the start of a day: a day is due that long after "
        f"it begins. Fresh: the table holds the range's newest day that was due when this page was made ({made}), "
        "so a backfill catches it up and an outage leaves it behind (— without an SLA). Books balance: every "
        "day's books of the table balance (ops.books; DWD tables only).</p>"
    )


def _fresh(lake: LakeView, newest: dt.date | None, sla_hours: float | None) -> bool | None:
    """Whether a table whose newest day in the range is ``newest`` holds the range's newest day that is due
    (``sla_hours`` after its start) when the page is made; None without an SLA."""
    if sla_hours is None:
        return None
    due = min(lake.end, (lake.made - dt.timedelta(hours=sla_hours)).date())
    return due < lake.start or (newest is not None and newest >= due)


def consistency(lake: LakeView) -> Section:
    """Online against offline: the sampled entities per feature view and day that agree, differ or are
    missing online (``ads.feature_consistency``)."""
    section = Section(
        "consistency",
        "Online / offline consistency",
        "Sampled entities whose online values equal Feast's offline point-in-time values.",
    )
    if note := lake.missing("ads.feature_consistency"):
        section.note = note
        return section
    frame = lake.chart_frame(
        f"SELECT event_date || ' ' || feature_view AS checked, entities_sampled - mismatches - missing AS agree, "
        f"mismatches, missing FROM {lake.scan('ads.feature_consistency')} WHERE {lake.days} AND feature = '*' "
        "ORDER BY event_date, feature_view"
    )
    figure = charts.blank(max(260, 90 + 22 * frame.height))
    checked = frame.get_column("checked").to_list()
    charts.stacked_parts(figure, checked, frame, (("agree", 2), ("mismatches", 3), ("missing", 7)), across=True)
    figure.update_layout(xaxis_title="entities sampled", margin={"l": 200})
    figure.update_yaxes(autorange="reversed")
    section.charts["consistency"] = figure
    differ = frame.select(pl.col("mismatches").sum() + pl.col("missing").sum()).item()
    section.note += f" {differ:,} differed or were missing in {frame.height} check(s)."
    return section


def scores(lake: LakeView) -> Section:
    """The score distribution of the range (every user scored, equal-width bins), the daily summary and the
    riskiest users, by pseudonym (``ads.user_risk_scores``, ``ads.score_daily``)."""
    import plotly.graph_objects as go

    section = Section("scores", "Risk scores", "Every user scored in the range; users by pseudonym only.")
    if note := lake.missing("ads.user_risk_scores"):
        section.note = note
        return section
    scan = lake.scan("ads.user_risk_scores")
    bins = lake.chart_frame(
        f"SELECT least(floor(score * {SCORE_BINS}), {SCORE_BINS - 1})::INTEGER AS bin, count(*) AS users "
        f"FROM {scan} WHERE {lake.days} GROUP BY bin ORDER BY bin"
    )
    counts = dict(bins.iter_rows())
    figure = charts.blank()
    figure.add_trace(
        go.Bar(
            x=[(b + 0.5) / SCORE_BINS for b in range(SCORE_BINS)],
            y=[counts.get(b, 0) for b in range(SCORE_BINS)],
            width=1 / SCORE_BINS * 0.95,
            marker_color=charts.PALETTE[4],
            name="users scored",
        )
    )
    # On a log scale: the few users flagged near 1 would be a sliver beside the many near 0 on a linear one.
    figure.update_layout(xaxis_title="score", yaxis_title="user-days scored (log scale)", title="score distribution")
    figure.update_xaxes(range=[0, 1])
    figure.update_yaxes(charts.log_axis([1, *counts.values()]))  # from 1: a bin of one user shows
    section.charts["scores"] = figure
    if "ads.score_daily" in lake.present:
        daily = lake.frame(
            f"SELECT event_date, model_name || ' ' || model_version AS model, users_scored, score_mean, score_p90, "
            f"share_above_threshold, drift_psi FROM {lake.scan('ads.score_daily')} WHERE {lake.days} "
            "ORDER BY event_date, model"
        )
        number = "{:.3f}".format
        section.tables.append(
            charts.table_html(
                daily,
                ["day", "model", "users scored", "mean", "p90", "share ≥ threshold", "drift (PSI)"],
                {
                    "users_scored": "{:,}".format,
                    "score_mean": number,
                    "score_p90": number,
                    "drift_psi": number,
                    "share_above_threshold": "{:.1%}".format,
                },
            )
        )
    riskiest = lake.frame(
        f"SELECT user_pseudonym, score, event_date, model_name || ' ' || model_version AS model FROM {scan} "
        f"WHERE {lake.days} ORDER BY score DESC, user_pseudonym LIMIT {RISKIEST}"
    )
    section.tables.append(
        "<h3>the riskiest users</h3>"
        + charts.table_html(riskiest, ["user (pseudonym)", "score", "day", "model"], {"score": "{:.4f}".format})
    )
    return section


#: How the lake's tables feed each other, from the landing files up (a table not built yet drops out).
#: ``view:T`` is the Feast feature view over DWS table ``T``; ``model`` the registered model.
LINEAGE = (
    ("files:ods.request_log_raw", "ods.request_log_raw"),
    ("files:ods.feedback_raw", "ods.feedback_raw"),
    ("ods.request_log_raw", "dwd.request"),
    ("ods.request_log_raw", "dwd.quarantine"),
    ("ods.feedback_raw", "dwd.feedback"),
    ("ods.feedback_raw", "dwd.quarantine"),
    ("dwd.feedback", "dwd.request"),
    *(("dwd.request", f"dws.{t}") for t in ("user_features", "tenant_features", "model_features")),
    ("ods.request_log_raw", "dwd.span"),
    *(("dwd.request", f"ads.{t}") for t in ("model_daily", "tenant_daily", "latency_breakdown", "retry_storms")),
    ("dwd.request", "ads.version_mix"),
    *(("dwd.request", f"ads.{t}") for t in ("capacity", "cold_starts", "server_drift", "token_anomalies")),
    *(("dwd.request", f"ads.{t}") for t in ("retry_policy", "trace_breakdown")),
    ("dwd.span", "ads.trace_breakdown"),
    ("dwd.quarantine", "ads.data_quality"),
    *((f"dws.{t}", f"view:dws.{t}") for t in ("user_features", "tenant_features", "model_features")),
    *((f"view:dws.{t}", "ads.feature_consistency") for t in ("user_features", "tenant_features", "model_features")),
    ("model", "ads.user_risk_scores"),
    ("model", "ads.score_daily"),
)


def lineage(lake: LakeView) -> Section:
    """The lake from the landing files to the model, as a picture: files → ODS → DWD → DWS → ADS marts and
    Feast's feature views → the registered model, each with its count (files, rows, versions)."""
    from batch_inference.registry import list_models

    section = Section(
        "lineage", "Lineage", "From the landing files to the model: what the lake holds now, all dates included."
    )
    if note := lake.missing("ops.landed_files"):
        section.note = note
        return section
    nodes: dict[str, str] = {}  # id → label
    files = lake.chart_frame(
        f"SELECT table_name, count(*) AS files FROM {lake.scan('ops.landed_files')} "
        "WHERE unlanded_at IS NULL GROUP BY table_name"
    )
    for name, count in files.iter_rows():
        nodes[f"files:{name}"] = f"landing files<br>{count:,} files"
    for name in sorted(lake.present):
        if name.split(".")[0] in ("ods", "dwd", "dws", "ads"):
            nodes[name] = f"{name}<br>{lake.rows(name):,} rows"
            if name.startswith("dws."):
                nodes[f"view:{name}"] = f"Feast view<br>{name.split('.', 1)[1]}"
    edges = list(LINEAGE)
    versions = [m for m in list_models(lake.settings) if m.card is not None]
    if versions:
        latest = versions[-1].card
        assert latest is not None
        nodes["model"] = f"model {charts.plotly_text(latest.ref)}<br>{len(versions)} version(s)"
        edges.append((f"view:{latest.source_table}", "model"))
    links = [(a, b) for a, b in edges if a in nodes and b in nodes]
    linked = {node for link in links for node in link}  # reference tables (prices, quotas) stand apart
    section.charts["lineage"] = _sankey({i: label for i, label in nodes.items() if i in linked}, links)
    return section


def _sankey(nodes: dict[str, str], links: list[tuple[str, str]]) -> go.Figure:
    """A Sankey diagram of the lineage: every link one unit wide (the boxes carry the counts)."""
    import plotly.graph_objects as go

    ids = list(nodes)
    colours = {
        "files": charts.PALETTE[7],
        "ods": charts.PALETTE[0],
        "dwd": charts.PALETTE[2],
        "dws": charts.PALETTE[4],
        "view": charts.PALETTE[6],
        "ads": charts.PALETTE[1],
        "ops": charts.PALETTE[7],
        "model": charts.PALETTE[3],
    }
    figure = charts.blank(max(420, 40 * len(ids)))
    figure.add_trace(
        go.Sankey(
            arrangement="snap",
            node={
                # Each table in the column of its longest path from the files: the marts beside dwd.request,
                # the scores beside the model (justified, every mart stood in the last column, and the model's
                # label ran into theirs).
                "align": "left",
                "label": [nodes[i] for i in ids],
                "color": [colours[i.split(":")[0] if ":" in i else i.split(".")[0]] for i in ids],
                "pad": 24,  # the model's label between the two score tables' (the last column's, drawn to its left)
                "thickness": 14,
            },
            link={
                "source": [ids.index(a) for a, _ in links],
                "target": [ids.index(b) for _, b in links],
                "value": [1] * len(links),
                "color": "rgba(120,120,120,0.25)",
            },
        )
    )
    figure.update_layout(margin={"l": 10, "r": 10, "t": 10, "b": 10})
    return figure


#: The sections, in the order of the page.
SECTIONS: tuple[Callable[[LakeView], Section], ...] = (
    traffic,
    latency,
    stages,
    capacity,
    cold_starts,
    server_drift,
    storms,
    retry_waste,
    token_anomalies,
    workflows,
    quality,
    consistency,
    scores,
    lineage,
)
