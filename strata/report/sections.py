"""The report's sections: each reads its numbers from the lake (DuckDB over the Delta tables) and draws them.

A section is a title, a line saying what it shows, its charts (plotly figures: SVG traces only, so a
browser test can count what was drawn) and its tables (small HTML). A section whose tables do not exist
yet says so in its line and draws nothing. Users appear only as the pseudonyms the lake holds.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from strata.report import charts
from strata.report.view import LakeView
from warehouse.tables import OPS_BOOKS

if TYPE_CHECKING:
    import plotly.graph_objects as go
#: Bins of the score histogram, equal-width over [0, 1].
SCORE_BINS = 20
#: The riskiest users listed.
RISKIEST = 10


@dataclasses.dataclass
class Section:
    """One part of the page: what it shows, its charts (id → figure) and its HTML tables."""

    id: str
    title: str
    note: str
    charts: dict[str, go.Figure] = dataclasses.field(default_factory=dict)
    tables: list[str] = dataclasses.field(default_factory=list)


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


#: The models the capacity section draws: the busiest by peak concurrency.
CAPACITY_MODELS = 4


def capacity(lake: LakeView) -> Section:
    """Per day, for the models of the highest peak concurrency: the measured peak beside Little's law, and the
    replicas they need (``ads.capacity``)."""
    section = Section("capacity", "Capacity", "")
    if note := _absent(lake, "ads.capacity", "No model traffic"):
        section.note = note
        return section
    frame = lake.chart_frame(
        f"""WITH days AS (SELECT * FROM {lake.scan("ads.capacity")} WHERE {lake.days}),
                top AS (SELECT model FROM days GROUP BY model
                        ORDER BY max(peak_concurrency) DESC NULLS LAST, model LIMIT {CAPACITY_MODELS})
            SELECT event_date, model, peak_concurrency, littles_law_concurrency, replicas_needed,
                   instance_concurrency, headroom
            FROM days JOIN top USING (model) ORDER BY event_date, model"""
    )
    models = frame.group_by("model").agg(pl.col("peak_concurrency").max()).sort("peak_concurrency", "model")
    keys = models.get_column("model").reverse().to_list()
    figure = charts.subplots(
        ["peak concurrency: measured (solid), Little's law (dotted)", "replicas needed"],
        height=380,
        column_widths=[0.6, 0.4],
    )
    charts.day_lines(figure, frame, "model", keys, "peak_concurrency", what="measured peak concurrency")
    charts.day_lines(
        figure, frame, "model", keys, "littles_law_concurrency", what="Little's law", dash="dot", legend=False
    )
    charts.day_lines(figure, frame, "model", keys, "replicas_needed", what="replicas needed", col=2, legend=False)
    peaks = frame.select("peak_concurrency", "littles_law_concurrency").to_numpy().ravel().tolist()
    figure.update_yaxes(charts.fit_axis(peaks), row=1, col=1)
    figure.update_yaxes(
        charts.fit_axis(frame.get_column("replicas_needed").to_list()), rangemode="tozero", row=1, col=2
    )
    figure.update_xaxes(charts.days_axis(lake.start, lake.end))
    section.charts["capacity"] = figure
    settings = frame.select("instance_concurrency", "headroom").unique().sort("instance_concurrency", "headroom")
    planned = " or ".join(f"{c} requests per instance and {h:.0%} headroom" for c, h in settings.iter_rows())
    section.note = (
        f"Per day, the {len(keys)} models of the highest peak concurrency: the most requests in flight at once beside "
        f"Little's law (peak 1-minute QPS × mean latency), and the replicas that peak needs at {planned}."
    )
    return section


def _absent(lake: LakeView, name: str, nothing: str, where: str = "") -> str | None:
    """The line of a section of mart ``name`` with nothing to draw: not built yet, or no row in the range
    (``nothing`` from … to …); None when it has rows in the range (``where`` further narrows them)."""
    if note := lake.missing(name):
        return note
    row = lake.con.sql(f"SELECT count(*) FROM {lake.scan(name)} WHERE {lake.days} {where}").fetchone()
    return None if row and row[0] else f"{nothing} from {lake.start} to {lake.end}."


def cold_starts(lake: LakeView) -> Section:
    """The instances started in the range on a timeline, one row per server, the slow starts marked with their
    warm-up ratio (``ads.cold_starts``)."""
    section = Section("cold-starts", "Cold starts", "")
    if note := _absent(lake, "ads.cold_starts", "No instance started", "AND is_cold_start"):
        section.note = note
        return section
    frame = lake.chart_frame(
        f"SELECT first_seen_at, server, is_slow_start, server_instance, warmup_latency_ratio, warmup_latency_ms, "
        f"warmup_requests, threshold_ratio, cold_start_requests FROM {lake.scan('ads.cold_starts')} "
        f"WHERE {lake.days} AND is_cold_start ORDER BY server DESC, first_seen_at"
    )
    servers = frame.get_column("server").unique(maintain_order=True).to_list()
    figure = charts.blank(max(220, 110 + 24 * len(servers)))
    charts.flagged_points(
        figure,
        frame.drop("threshold_ratio", "cold_start_requests"),
        "first_seen_at",
        "server",
        "is_slow_start",
        ("started", "slow start"),
        "%{customdata[1]} at %{x}<br>warm-up: %{customdata[2]:.1f}× steady latency "
        "(median %{customdata[3]:,.0f} ms of %{customdata[4]} requests)",
    )
    figure.update_xaxes(charts.days_axis(lake.start, lake.end, whole_days=True))
    figure.update_yaxes(type="category", categoryorder="array", categoryarray=servers)
    figure.update_layout(margin={"l": 190})
    charts.short_ticks(figure, servers, "y")
    section.charts["cold-starts"] = figure
    first = frame.row(0, named=True)
    section.note = (
        f"{frame.height} instance(s) started (first request more than the lookback after the lake's first), "
        f"{int(frame.get_column('is_slow_start').sum())} slow: the median latency of their first "
        f"{first['cold_start_requests']} requests above {first['threshold_ratio']:g}× their models' steady latency "
        "(in the hover)."
    )
    return section


#: The instances the drift section draws: the largest predicted rises (every drifting one among them).
DRIFT_SHOWN = 12
#: How a drifting instance ended, each with its :data:`charts.PALETTE` index: what the drift chart's bars say.
DRIFT_KINDS = (
    ("drifting, next instance recovered", 2),
    ("drifting, next instance did not recover", 3),
    ("drifting, no next instance yet", 1),
    ("not drifting", 7),
)


def server_drift(lake: LakeView) -> Section:
    """The rise in relative latency each instance serving in the range is predicted to have had over its life,
    the drifting ones coloured by whether their server's next instance recovered (``ads.server_drift``)."""
    section = Section("drift", "Server drift", "")
    serving = f"event_date <= DATE '{lake.end}' AND last_seen_at >= TIMESTAMPTZ '{lake.start} 00:00:00+00'"
    if note := lake.missing("ads.server_drift"):
        section.note = note
        return section
    frame = lake.chart_frame(
        f"""SELECT server_instance, predicted_increase, is_drifting, is_recovered, next_instance, server,
                   first_seen_at, last_seen_at, steady_requests, threshold_increase
            FROM {lake.scan("ads.server_drift")} WHERE {serving} AND predicted_increase IS NOT NULL
            ORDER BY is_drifting DESC, predicted_increase DESC, server_instance LIMIT {DRIFT_SHOWN}"""
    ).reverse()  # the largest rise on top
    if frame.is_empty():
        section.note = f"No instance with a fitted drift served from {lake.start} to {lake.end}."
        return section
    kind = (
        pl.when(~pl.col("is_drifting"))
        .then(pl.lit(DRIFT_KINDS[3][0]))
        .when(pl.col("is_recovered"))
        .then(pl.lit(DRIFT_KINDS[0][0]))
        .when(pl.col("is_recovered").not_())
        .then(pl.lit(DRIFT_KINDS[1][0]))
        .otherwise(pl.lit(DRIFT_KINDS[2][0]))
    )
    frame = frame.with_columns(kind.alias("kind"))
    bars = frame.with_columns(
        pl.when(pl.col("kind") == name).then(pl.col("predicted_increase")).alias(name) for name, _ in DRIFT_KINDS
    )
    instances = frame.get_column("server_instance").to_list()
    figure = charts.blank(max(240, 110 + 24 * len(instances)))
    charts.stacked_parts(
        figure,
        instances,
        bars,
        [(name, colour) for name, colour in DRIFT_KINDS if name in frame.get_column("kind").to_list()],
        across=True,
        customdata=frame.select("server_instance", "next_instance", "steady_requests").rows(),
        hovertemplate="%{customdata[0]}: %{x:+.0%} over its life (%{customdata[2]:,} steady requests)"
        "<br>next instance: %{customdata[1]}<extra></extra>",
    )
    for threshold in frame.get_column("threshold_increase").unique().to_list():
        figure.add_vline(x=threshold, line={"dash": "dash", "color": charts.PALETTE[3], "width": 1})
    figure.update_xaxes(tickformat="+.0%", title="predicted rise of relative latency over the instance's life")
    figure.update_layout(margin={"l": 190})
    charts.short_ticks(figure, instances, "y")
    section.charts["drift"] = figure
    drifting = frame.filter(pl.col("is_drifting")).height
    section.note = (
        f"The {frame.height} instance(s) serving from {lake.start} to {lake.end} with the largest predicted rise "
        f"(least-squares fit of latency against tokens processed); {drifting} drifting: above the dashed line."
    )
    section.tables.append(_drifting(lake, serving))
    return section


def _drifting(lake: LakeView, serving: str) -> str:
    """The drifting instances serving in the range, each with its server's next instance and whether it recovered."""
    frame = lake.frame(
        f"SELECT server, server_instance, first_seen_at, last_seen_at, predicted_increase, next_instance, "
        f"is_recovered FROM {lake.scan('ads.server_drift')} WHERE {serving} AND is_drifting "
        "ORDER BY predicted_increase DESC, server_instance"
    )
    if frame.is_empty():
        return '<p class="note">No instance drifted beyond the threshold.</p>'
    headers = ["server", "instance", "first request", "last request", "predicted rise", "next instance", "recovered"]
    stamp = "{:%Y-%m-%d %H:%M}".format
    formats: dict[str, Callable[[Any], str]] = {
        "first_seen_at": stamp,
        "last_seen_at": stamp,
        "predicted_increase": "{:+.0%}".format,
        "is_recovered": _yes,
    }
    return "<h3>drifting instances</h3>" + charts.table_html(frame, headers, formats)


def token_anomalies(lake: LakeView) -> Section:
    """Every tenant-day with a baseline, tokens per request against requests (each over its trailing median), the
    flagged ones marked and listed (``ads.token_anomalies``)."""
    section = Section("tokens", "Token anomalies", "")
    if note := _absent(lake, "ads.token_anomalies", "No tenant-day with a baseline", "AND token_ratio IS NOT NULL"):
        section.note = note
        return section
    frame = lake.chart_frame(
        f"SELECT request_ratio, token_ratio, is_flagged, tenant_id, event_date::VARCHAR AS day, requests, "
        f"median_requests, tokens_per_request, median_tokens_per_request FROM {lake.scan('ads.token_anomalies')} "
        f"WHERE {lake.days} AND token_ratio IS NOT NULL AND request_ratio IS NOT NULL ORDER BY event_date, tenant_id"
    )
    figure = charts.blank(380)
    charts.flagged_points(
        figure,
        frame,
        "request_ratio",
        "token_ratio",
        "is_flagged",
        ("tenant-day", "flagged"),
        "%{customdata[1]} on %{customdata[2]}<br>%{customdata[3]:,} requests (median %{customdata[4]:,.0f})"
        "<br>%{customdata[5]:,.0f} tokens per request (median %{customdata[6]:,.0f})",
    )
    figure.update_xaxes(title="requests ÷ their trailing median", tickformat=".2f")
    figure.update_yaxes(charts.fit_axis(frame.get_column("token_ratio").to_list()), title="tokens per request ÷ median")
    section.charts["tokens"] = figure
    flagged = frame.filter(pl.col("is_flagged")).height
    section.note = (
        f"{frame.height} tenant-day(s) against the tenant's previous 7 days; {flagged} flagged: tokens per request "
        "jumped while requests held."
    )
    section.tables.append(_flagged_tenants(lake))
    return section


def _flagged_tenants(lake: LakeView) -> str:
    """The flagged tenant-days of ``ads.token_anomalies`` in the range."""
    frame = lake.frame(
        f"SELECT event_date, tenant_id, requests, median_requests, tokens_per_request, median_tokens_per_request, "
        f"token_ratio, request_ratio FROM {lake.scan('ads.token_anomalies')} WHERE {lake.days} AND is_flagged "
        "ORDER BY event_date, token_ratio DESC, tenant_id"
    )
    if frame.is_empty():
        return '<p class="note">No tenant-day flagged.</p>'
    headers = ["day", "tenant", "requests", "median", "tokens per request", "median", "token ratio", "request ratio"]
    whole, ratio = "{:,.0f}".format, "{:.2f}".format
    formats: dict[str, Callable[[Any], str]] = {
        "requests": "{:,}".format,
        "median_requests": whole,
        "tokens_per_request": whole,
    }
    formats |= {"median_tokens_per_request": whole, "token_ratio": ratio, "request_ratio": ratio}
    return "<h3>flagged tenant-days</h3>" + charts.table_html(frame, headers, formats)


def retry_waste(lake: LakeView) -> Section:
    """Per day, for the flagged tenant × model pairs: retries of non-retryable answers, chains beyond the limit,
    and the tokens and cost their retries took (``ads.retry_policy``)."""
    section = Section("retry-waste", "Retry waste", "")
    if note := _absent(lake, "ads.retry_policy", "No client retried against the policy", "AND is_flagged"):
        section.note = note
        return section
    frame = lake.chart_frame(
        f"SELECT event_date, tenant_id || ' → ' || model AS who, non_retryable_retries, long_chains, retry_tokens, "
        f"coalesce(retry_cost_usd, 0)::DOUBLE AS retry_cost_usd, chain_limit FROM {lake.scan('ads.retry_policy')} "
        f"WHERE {lake.days} AND is_flagged ORDER BY event_date, who"
    )
    measures = ("non_retryable_retries", "long_chains", "retry_tokens", "retry_cost_usd")
    limit = " or ".join(map(str, frame.get_column("chain_limit").unique().sort()))
    titles = ["retries of non-retryable answers", f"chains of over {limit} attempts", "tokens of retries", "cost, USD"]
    figure = charts.subplots(titles, height=360)
    charts.bars_by_day(figure, frame, "who", measures, barmode="group")
    for col, measure in enumerate(measures, start=1):
        axis = charts.fit_axis(frame.get_column(measure).to_list(), counts=col < 3)
        figure.update_yaxes(axis | ({"tickformat": "$~g"} if col == 4 else {}), row=1, col=col)
    figure.update_xaxes(charts.days_axis(lake.start, lake.end))
    section.charts["retry-waste"] = figure
    sums = frame.select(pl.col(m).sum() for m in measures).row(0)
    section.note = (
        f"{frame.height} flagged tenant × model day(s): {sums[0]:,} retries of a 4xx answer (not 408 or 429), "
        f"{sums[1]:,} chains of over {limit} attempts; {sums[2]:,} tokens and ${sums[3]:,.4f} spent on their retries."
    )
    return section


def workflows(lake: LakeView) -> Section:
    """Per workflow shape over the range: its mean duration with the share its slowest step takes, its traces
    and those that ran strictly in sequence; then the slowest steps as a table (``ads.trace_breakdown``)."""
    section = Section("workflows", "Workflows", "")
    if note := _absent(lake, "ads.trace_breakdown", "No multi-call trace"):
        section.note = note
        return section
    frame = lake.chart_frame(_WORKFLOWS.format(scan=lake.scan("ads.trace_breakdown"), days=lake.days))
    shapes = frame.get_column("shape").to_list()
    parts = frame.with_columns(
        its_slowest_step=pl.col("duration_ms") * pl.col("slowest_step_share").fill_null(0),
        rest_of_the_trace=pl.col("duration_ms") * (1 - pl.col("slowest_step_share").fill_null(0)),
        in_sequence=pl.col("sequential_traces"),
        not_in_sequence=pl.col("traces") - pl.col("sequential_traces"),
    )
    figure = charts.subplots(
        ["mean duration, ms", "traces"], height=max(260, 130 + 40 * len(shapes)), shared_yaxes=True
    )
    hover = {"customdata": frame.select("shape", "slowest_step", "slowest_step_share").rows()}
    step = "%{customdata[0]}<br>slowest step: %{customdata[1]}, %{customdata[2]:.0%} of the duration"
    charts.stacked_parts(
        figure,
        shapes,
        parts,
        (("its_slowest_step", 3), ("rest_of_the_trace", 7)),
        across=True,
        col=1,
        hovertemplate=step + "<br>%{fullData.name}: %{x:,.0f} ms<extra></extra>",
        **hover,
    )
    charts.stacked_parts(
        figure,
        shapes,
        parts,
        (("in_sequence", 1), ("not_in_sequence", 0)),
        across=True,
        col=2,
        hovertemplate="%{customdata[0]}<br>%{fullData.name}: %{x:,} traces<extra></extra>",
        **hover,
    )
    figure.update_traces(  # the slowest step named on its part of the bar
        selector={"name": "its slowest step"},
        text=[f"{step} {share:.0%}" if step else "" for _, step, share in hover["customdata"]],
        textposition="inside",
        insidetextanchor="start",
    )
    figure.update_layout(margin={"l": 300}, legend_traceorder="normal")
    figure.update_yaxes(autorange="reversed")
    charts.short_ticks(figure, shapes, "y", width=WORKFLOW_CHARS)
    section.charts["workflows"] = figure
    section.note = (
        f"{frame.get_column('traces').sum():,} multi-call traces of {len(shapes)} shape(s): each shape's mean duration "
        "with its slowest step's mean share of it, its traces and those that ran strictly in sequence."
    )
    section.tables.append(_slowest_steps(lake))
    return section


#: The most characters of a workflow's shape on the chart's axis (the table names it whole).
WORKFLOW_CHARS = 44
#: Each shape over the range: its traces, their mean duration and worst day's p95, the step most often slowest and
#: the critical path most often taken (summed over the days, ties by name), and its sequential traces and their cost.
_WORKFLOWS = """
    WITH days AS (SELECT * FROM {scan} WHERE {days}),
         steps AS (SELECT shape, slowest_step,
                          sum(slowest_step_share * slowest_step_traces) / sum(slowest_step_traces) AS slowest_step_share
                   FROM days WHERE slowest_step IS NOT NULL GROUP BY shape, slowest_step
                   QUALIFY row_number() OVER (
                       PARTITION BY shape ORDER BY sum(slowest_step_traces) DESC, slowest_step) = 1),
         paths AS (SELECT shape, critical_path FROM days GROUP BY shape, critical_path
                   QUALIFY row_number() OVER (
                       PARTITION BY shape ORDER BY sum(critical_path_traces) DESC, critical_path) = 1),
         shapes AS (SELECT shape, sum(traces)::BIGINT AS traces,
                           sum(duration_mean_ms * traces) / sum(traces) AS duration_ms,
                           max(duration_p95_ms) AS worst_p95_ms, sum(sequential_traces)::BIGINT AS sequential_traces,
                           sum(sequential_cost_usd)::DOUBLE AS sequential_cost_usd
                    FROM days GROUP BY shape)
    SELECT shape, slowest_step, slowest_step_share, traces, duration_ms, worst_p95_ms, critical_path,
           sequential_traces, sequential_cost_usd
    FROM shapes LEFT JOIN steps USING (shape) LEFT JOIN paths USING (shape) ORDER BY traces DESC, shape"""


def _slowest_steps(lake: LakeView) -> str:
    """Per shape over the range: its slowest step and its share, its duration, critical path and sequential
    traces with their cost, the longest time in a slowest step first."""
    frame = (
        lake.frame(_WORKFLOWS.format(scan=lake.scan("ads.trace_breakdown"), days=lake.days))
        .sort(pl.col("duration_ms") * pl.col("slowest_step_share").fill_null(0), "shape", descending=[True, False])
        .drop("traces")
    )
    headers = ["shape", "slowest step", "its share", "mean", "worst day's p95", "critical path", "in sequence", "cost"]
    whole = "{:,.0f} ms".format
    formats: dict[str, Callable[[Any], str]] = {
        "slowest_step_share": "{:.0%}".format,
        "duration_ms": whole,
        "worst_p95_ms": whole,
    }
    formats |= {"sequential_traces": "{:,}".format, "sequential_cost_usd": "${:,.4f}".format}
    return "<h3>the slowest workflow steps</h3>" + charts.table_html(frame, headers, formats)


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
        "fresh": _yes,
        "books_balanced": _yes,
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


def _yes(value: bool) -> str:
    return "yes" if value else "NO"


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
