"""The report's sections for the operators' marts: capacity, cold starts, server drift, token anomalies,
retry waste and workflows, each read from its ADS mart (see docs/ads.md)."""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Callable, Mapping
from typing import Any

import polars as pl

from strata.report import charts
from strata.report.section import Section
from strata.report.view import LakeView

#: The header of the column naming the command that opens a row (``strata explain``, ``strata trace``).
OPEN_WITH = "open with"


def explain_command(mart: str, row: Mapping[str, Any]) -> str:
    """The ``strata explain`` command that opens one row of ``mart``: its primary key's values, shell-quoted (a log
    writer chose them: a tenant named ``$(…)`` stays text when the command is pasted)."""
    from warehouse.tables import table

    def value(v: Any) -> str:
        return v.isoformat() if isinstance(v, dt.date) else str(v)

    return shlex.join(["strata", "explain", mart, *(f"{c}={value(row[c])}" for c in table(mart).contract.primary_key)])


def _with_command(frame: pl.DataFrame, mart: str) -> pl.DataFrame:
    """``frame`` with the :func:`explain_command` of each row last (``open_with``)."""
    commands = [explain_command(mart, row) for row in frame.iter_rows(named=True)]
    return frame.with_columns(pl.Series("open_with", commands, dtype=pl.String))


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
        f"is_recovered, event_date FROM {lake.scan('ads.server_drift')} WHERE {serving} AND is_drifting "
        "ORDER BY predicted_increase DESC, server_instance"
    )
    if frame.is_empty():
        return '<p class="note">No instance drifted beyond the threshold.</p>'
    frame = _with_command(frame, "ads.server_drift").drop("event_date")
    headers = ["server", "instance", "first request", "last request", "predicted rise", "next instance", "recovered"]
    headers.append(OPEN_WITH)
    stamp = "{:%Y-%m-%d %H:%M}".format
    formats: dict[str, Callable[[Any], str]] = {
        "first_seen_at": stamp,
        "last_seen_at": stamp,
        "predicted_increase": "{:+.0%}".format,
        "is_recovered": charts.yes,
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
    frame = _with_command(frame, "ads.token_anomalies")
    headers = ["day", "tenant", "requests", "median", "tokens per request", "median", "token ratio", "request ratio"]
    headers.append(OPEN_WITH)
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
    section.tables.append(_flagged_pairs(lake))
    return section


def _flagged_pairs(lake: LakeView) -> str:
    """The flagged tenant × model days of ``ads.retry_policy`` in the range, each with the command opening it."""
    frame = lake.frame(
        f"SELECT event_date, tenant_id, model, non_retryable_retries, long_chains, longest_chain, retry_tokens "
        f"FROM {lake.scan('ads.retry_policy')} WHERE {lake.days} AND is_flagged ORDER BY event_date, tenant_id, model"
    )
    frame = _with_command(frame, "ads.retry_policy")
    headers = ["day", "tenant", "model", "non-retryable retries", "long chains", "longest", "retry tokens", OPEN_WITH]
    whole = "{:,}".format
    formats: dict[str, Callable[[Any], str]] = {"non_retryable_retries": whole, "long_chains": whole}
    formats |= {"retry_tokens": whole}
    return "<h3>flagged tenant × model days</h3>" + charts.table_html(frame, headers, formats)


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
        .join(_slowest_traces(lake), on="shape", how="left")
    )
    headers = ["shape", "slowest step", "its share", "mean", "worst day's p95", "critical path", "in sequence", "cost"]
    headers.append(f"{OPEN_WITH} (its slowest trace)")
    whole = "{:,.0f} ms".format
    formats: dict[str, Callable[[Any], str]] = {
        "slowest_step_share": "{:.0%}".format,
        "duration_ms": whole,
        "worst_p95_ms": whole,
    }
    formats |= {"sequential_traces": "{:,}".format, "sequential_cost_usd": "${:,.4f}".format}
    return "<h3>the slowest workflow steps</h3>" + charts.table_html(frame, headers, formats)


def _slowest_traces(lake: LakeView) -> pl.DataFrame:
    """Per shape, the ``strata trace`` command of its longest trace in the range (``shape``, ``open_with``)."""
    from warehouse.ads.explain import shapes_sql

    spans = None if lake.missing("dwd.span") else lake.scan("dwd.span")
    traces = shapes_sql(lake.scan("dwd.request"), spans, lake.days)
    return lake.frame(
        f"SELECT shape, 'strata trace ' || arg_max(trace_id, duration_ms) AS open_with FROM ({traces}) GROUP BY shape"
    )
