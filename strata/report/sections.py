"""The report's sections: each reads its numbers from the lake (DuckDB over the Delta tables) and draws them.

A section is a title, a line saying what it shows, its charts (plotly figures: SVG traces only, so a
browser test can count what was drawn) and its tables (small HTML). A section whose tables do not exist
yet says so in its line and draws nothing. Users appear only as the pseudonyms the lake holds.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from warehouse.settings import Settings
from warehouse.tables import Table, all_tables

if TYPE_CHECKING:
    import duckdb
    import plotly.graph_objects as go

    from warehouse.storage.lake import Lake

#: The tenants and models drawn one by one; the rest are summed as :data:`OTHERS`.
TOP = 8
#: The name of the rest, in italics: markup that no name from the lake can be, since each reaches a chart
#: through :func:`plotly_text` (a tenant named "others" is drawn as itself, not summed into them).
OTHERS = "<i>others</i>"
#: Bins of the score histogram, equal-width over [0, 1].
SCORE_BINS = 20
#: The riskiest users listed.
RISKIEST = 10
#: The chart colours (Plotly's "D3" qualitative palette).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


@dataclasses.dataclass
class Section:
    """One part of the page: what it shows, its charts (id → figure) and its HTML tables."""

    id: str
    title: str
    note: str
    charts: dict[str, go.Figure] = dataclasses.field(default_factory=dict)
    tables: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class LakeView:
    """What the sections read through: one DuckDB cursor on the lake, the range, the tables there are
    (a reader of the report's, not the writers' lake handle ``warehouse.storage.lake.Lake``)."""

    settings: Settings
    con: duckdb.DuckDBPyConnection
    start: dt.date
    end: dt.date
    present: frozenset[str]
    handle: Lake

    @classmethod
    def open(cls, settings: Settings, start: dt.date, end: dt.date) -> LakeView:
        """The lake's reader and the names of the tables that exist in it."""
        from warehouse.storage.duck import lake_reader
        from warehouse.storage.lake import Lake

        handle = Lake(settings)
        present = frozenset(t.name for t in all_tables() if handle.exists(t))
        return cls(settings, lake_reader(settings), start, end, present, handle)

    def rows(self, name: str) -> int:
        """How many rows the table holds now: the sum of its files' row counts in its Delta log, so no data
        file is read (a lake of billions of rows on S3 costs what its log costs). Counted by DuckDB when a
        file's count is missing (a writer that kept no statistics) or may be too high (deletion vectors)."""
        delta = self.handle.open_table(Table(name))
        if delta is None:
            return 0
        files = pl.DataFrame(delta.get_add_actions(flatten=True))
        counts = files.get_column("num_records") if "num_records" in files.columns else None
        if counts is None or counts.null_count() or "deletionVectors" in (delta.protocol().writer_features or ()):
            row = self.con.sql(f"SELECT count(*) FROM {self.scan(name)}").fetchone()
            return int(row[0]) if row else 0
        return int(counts.sum())

    def scan(self, name: str) -> str:
        """The table as a DuckDB relation, read through its Delta log."""
        return f"delta_scan('{Table(name).uri(self.settings)}')"

    @property
    def days(self) -> str:
        """A SQL predicate: ``event_date`` within the report's range."""
        return f"event_date BETWEEN DATE '{self.start}' AND DATE '{self.end}'"

    def frame(self, sql: str) -> pl.DataFrame:
        """The rows of ``sql``, as the lake holds them (for :func:`table_html`, which escapes them itself)."""
        return self.con.sql(sql).pl()

    def chart_frame(self, sql: str) -> pl.DataFrame:
        """The rows of ``sql`` for a chart: every string through :func:`plotly_text`, so a name from the
        logs (a tenant, a model, a version) is drawn as the text it is."""
        frame = self.frame(sql)
        return frame.with_columns(pl.col(pl.String).map_elements(plotly_text, return_dtype=pl.String))

    def missing(self, *names: str) -> str | None:
        """A line saying which of ``names`` are not built yet, or None when all exist."""
        absent = [n for n in names if n not in self.present]
        return f"Not built yet ({', '.join(absent)} does not exist in the lake)." if absent else None


def plotly_text(value: str) -> str:
    """``value`` as plotly shows it literally. Plotly reads every title, name, label, category and hover text
    as its own HTML (``<b>``, ``<br>``, ``<span style>``, ``<a href>`` links, entities): a tenant named
    ``<a href="https://…">tenant-001</a>`` would be drawn as a link named tenant-001. Escaping ``&``, ``<`` and
    ``>`` leaves plotly nothing to read as markup."""
    return html.escape(value, quote=False)


#: The most characters a category's label shows on an axis; the hover names it whole.
LABEL_CHARS = 28


def axis_label(name: str, width: int = LABEL_CHARS) -> str:
    """``name`` (escaped by :func:`plotly_text`) in at most ``width`` characters, its middle left out: a long
    version name, or whatever a service logged, cannot crowd a chart's bars out."""
    text = html.unescape(name)
    if len(text) <= width:
        return name
    keep = width - 1
    return plotly_text(text[: keep - keep // 2] + "…" + text[len(text) - keep // 2 :])


def _short_ticks(figure: go.Figure, names: Sequence[str], axis: str) -> None:
    """Label the categories ``names`` of the figure's ``axis`` axes (``"x"`` or ``"y"``, every subplot's) with
    :func:`axis_label`; the data keep the whole names."""
    ticks = {"tickmode": "array", "tickvals": list(names), "ticktext": [axis_label(n) for n in names]}
    (figure.update_xaxes if axis == "x" else figure.update_yaxes)(**ticks)


def _layout(height: int) -> dict[str, Any]:
    """The layout every chart starts from. Given as settings, not copied from a built figure: a built
    layout carries its template expanded, and updating a figure with it costs plotly ~0.3–1 s of checks."""
    return {
        "template": "plotly_white",
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
        "legend": {"orientation": "h", "y": -0.18, "x": 0},
        "colorway": list(PALETTE),
    }


def _figure(height: int = 340) -> go.Figure:
    import plotly.graph_objects as go

    return go.Figure(layout=_layout(height))


def _subplots(titles: Sequence[str], height: int = 340, **kwargs: Any) -> go.Figure:
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=1, cols=len(titles), subplot_titles=list(titles), **kwargs)
    figure.update_layout(**_layout(height))
    return figure


def table_html(frame: pl.DataFrame, headers: Sequence[str], formats: dict[str, Callable[[Any], str]]) -> str:
    """A small HTML table of ``frame`` (headers as given; cells through their column's format, else str)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in frame.iter_rows(named=True):
        cells = []
        for name, value in row.items():
            text = "—" if value is None else formats.get(name, str)(value)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            cells.append(f"<td{' class=num' if numeric else ''}>{html.escape(text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _top(frame: pl.DataFrame, key: str, by: str) -> pl.DataFrame:
    """``frame`` with every ``key`` beyond the :data:`TOP` largest by ``by`` renamed :data:`OTHERS`."""
    ranked = frame.group_by(key).agg(pl.col(by).sum()).sort([by, key], descending=[True, False])
    kept = ranked.get_column(key).head(TOP).to_list()
    return frame.with_columns(pl.when(pl.col(key).is_in(kept)).then(pl.col(key)).otherwise(pl.lit(OTHERS)).alias(key))


def _stacked_by_day(figure: go.Figure, frame: pl.DataFrame, key: str, measures: Sequence[str]) -> None:
    """One stacked bar per day and measure (a subplot each), one trace per ``key`` value."""
    import plotly.graph_objects as go

    summed = frame.group_by("event_date", key).agg(pl.col(m).sum() for m in measures).sort("event_date", key)
    order = summed.group_by(key).agg(pl.col(measures[-1]).sum()).sort(measures[-1], descending=True)
    keys = [k for k in order.get_column(key).to_list() if k != OTHERS]
    keys += [OTHERS] if OTHERS in order.get_column(key).to_list() else []
    for i, name in enumerate(keys):
        rows = summed.filter(pl.col(key) == name)
        for col, measure in enumerate(measures, start=1):
            figure.add_trace(
                go.Bar(
                    x=[str(d) for d in rows.get_column("event_date")],
                    y=rows.get_column(measure).to_list(),
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    marker_color=PALETTE[i % len(PALETTE)],
                ),
                row=1,
                col=col,
            )
    figure.update_layout(barmode="stack")
    # Days in date order, not in the order the traces first name them (a tenant new on a day came last).
    figure.update_xaxes(type="category", categoryorder="category ascending")


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
        figure = _subplots([f"{t} by {key.removesuffix('_id')}" for t in titles], height=380)
        _stacked_by_day(figure, _top(frame, key, "cost_usd"), key, measures)
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
        FROM {lake.scan("dwd.request")} WHERE {lake.days} GROUP BY 1 ORDER BY 1"""
    )
    figure = _subplots(["end-to-end latency, ms", "time to first token, ms"], height=420, column_widths=[0.6, 0.4])
    for col, measures in ((1, ("p50", "p95", "p99")), (2, ("ttft_p50", "ttft_p95"))):
        rows = frame.filter(pl.col(measures[0]).is_not_null())
        for i, measure in enumerate(measures):
            figure.add_trace(
                go.Bar(
                    x=rows.get_column("version").to_list(),
                    y=rows.get_column(measure).to_list(),
                    name=measure.replace("ttft_", "TTFT "),
                    marker_color=PALETTE[i + 3 * (col - 1)],
                    customdata=rows.get_column("version").to_list(),  # the whole name; the axis shortens it
                    hovertemplate="%{customdata}: %{y:,.1f} ms",
                ),
                row=1,
                col=col,
            )
    figure.update_layout(barmode="group", margin={"b": 150}, legend={"y": -0.55})
    figure.update_yaxes(type="log", dtick=1)  # a label per power of ten
    figure.update_xaxes(tickangle=-35)
    _short_ticks(figure, frame.get_column("version").to_list(), "x")
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
    figure = _figure(max(260, 60 + 34 * frame.height))
    for i, stage in enumerate(STAGES):
        figure.add_trace(
            go.Bar(
                y=frame.get_column("model").to_list(),
                x=frame.get_column(stage).to_list(),
                name=stage,
                orientation="h",
                marker_color=PALETTE[i],
                customdata=frame.get_column("model").to_list(),
                hovertemplate="%{customdata}: %{x:,.1f} ms",
            )
        )
    figure.update_layout(barmode="stack", margin={"l": 170}, legend_traceorder="normal")
    _short_ticks(figure, frame.get_column("model").to_list(), "y")
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
    figure = _figure(max(240, 90 + 28 * frame.get_column("who").n_unique()))
    for row in frame.iter_rows(named=True):
        figure.add_trace(
            go.Scatter(
                x=[row["window_start"], row["window_end"]],
                y=[row["who"], row["who"]],
                mode="lines+markers",
                line={"width": 8, "color": PALETTE[3]},
                marker={"size": 9, "color": PALETTE[3]},
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
    _short_ticks(figure, frame.get_column("who").unique(maintain_order=True).to_list(), "y")
    section.charts["storms"] = figure
    section.note = f"{frame.height} storm window(s), {int(frame.get_column('retries').sum()):,} retries in them."
    return section


def quality(lake: LakeView) -> Section:
    """Data quality per layer: the books of DWD per day, the quarantine by rule, freshness and failed
    writes per table (``ops.books``, ``dwd.quarantine``, ``ads.data_quality``)."""
    import plotly.graph_objects as go

    section = Section(
        "quality",
        "Data quality",
        "The books (ODS records = DWD rows + duplicates + quarantined + malformed), the quarantine by rule, "
        "freshness per table.",
    )
    if note := lake.missing("ops.books"):
        section.note = note
        return section
    books = lake.chart_frame(
        f"SELECT event_date, dwd_rows, duplicates, quarantined, malformed, ods_rows, balanced "
        f"FROM {lake.scan('ops.books')} WHERE {lake.days} AND table_name = 'dwd.request' ORDER BY event_date"
    )
    figure = _figure()
    days = [str(d) for d in books.get_column("event_date")]
    for i, part in enumerate(("dwd_rows", "duplicates", "quarantined", "malformed")):
        figure.add_trace(
            go.Bar(
                x=days,
                y=books.get_column(part).to_list(),
                name=part.replace("_", " "),
                marker_color=PALETTE[(2, 7, 1, 3)[i]],
            )
        )
    figure.update_layout(barmode="stack", yaxis_title="dwd.request records", title="the books of dwd.request")
    figure.update_xaxes(type="category")
    section.charts["books"] = figure
    if "dwd.quarantine" in lake.present:
        rules = lake.chart_frame(
            f"SELECT rule, count(*) AS rows FROM (SELECT unnest(rules) AS rule FROM {lake.scan('dwd.quarantine')} "
            f"WHERE {lake.days}) GROUP BY rule ORDER BY rows, rule DESC"
        )
        chart = _figure(max(240, 80 + 26 * rules.height))
        chart.add_trace(
            go.Bar(
                y=rules.get_column("rule").to_list(),
                x=rules.get_column("rows").to_list(),
                orientation="h",
                marker_color=PALETTE[1],
                name="quarantined rows",
            )
        )
        chart.update_layout(title="quarantined rows by rule (a row may break several)", margin={"l": 190})
        section.charts["quarantine"] = chart
    if "ads.data_quality" in lake.present:
        fresh = lake.frame(
            f"""SELECT split_part(table_name, '.', 1) AS layer, table_name, count(*) AS partitions,
                   sum(failed_attempts)::BIGINT AS failed_attempts,
                   count(*) FILTER (WHERE is_fresh) AS fresh, count(is_fresh) AS with_sla,
                   max(publish_lag_hours) AS max_lag_hours, max(freshness_sla_hours) AS sla_hours,
                   bool_and(coalesce(books_balanced, true)) AS books_balanced
            FROM {lake.scan("ads.data_quality")} WHERE {lake.days} GROUP BY ALL ORDER BY layer DESC, table_name"""
        )
        hours = "{:,.1f} h".format
        section.tables.append(
            table_html(
                fresh,
                [
                    "layer",
                    "table",
                    "partitions",
                    "failed writes",
                    "fresh",
                    "with an SLA",
                    "latest publish lag",
                    "SLA",
                    "books balance",
                ],
                {"max_lag_hours": hours, "sla_hours": hours, "books_balanced": lambda b: "yes" if b else "NO"},
            )
        )
    return section


def consistency(lake: LakeView) -> Section:
    """Online against offline: the sampled entities per feature view and day that agree, differ or are
    missing online (``ads.feature_consistency``)."""
    import plotly.graph_objects as go

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
    figure = _figure(max(260, 90 + 22 * frame.height))
    for i, part in enumerate(("agree", "mismatches", "missing")):
        figure.add_trace(
            go.Bar(
                y=frame.get_column("checked").to_list(),
                x=frame.get_column(part).to_list(),
                name=part,
                orientation="h",
                marker_color=PALETTE[(2, 3, 7)[i]],
            )
        )
    figure.update_layout(barmode="stack", xaxis_title="entities sampled", margin={"l": 200})
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
    figure = _figure()
    figure.add_trace(
        go.Bar(
            x=[(b + 0.5) / SCORE_BINS for b in range(SCORE_BINS)],
            y=[counts.get(b, 0) for b in range(SCORE_BINS)],
            width=1 / SCORE_BINS * 0.95,
            marker_color=PALETTE[4],
            name="users scored",
        )
    )
    figure.update_layout(xaxis_title="score", yaxis_title="user-days scored", title="score distribution")
    figure.update_xaxes(range=[0, 1])
    section.charts["scores"] = figure
    if "ads.score_daily" in lake.present:
        daily = lake.frame(
            f"SELECT event_date, model_name || ' ' || model_version AS model, users_scored, score_mean, score_p90, "
            f"share_above_threshold, drift_psi FROM {lake.scan('ads.score_daily')} WHERE {lake.days} "
            "ORDER BY event_date, model"
        )
        number = "{:.3f}".format
        section.tables.append(
            table_html(
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
        + table_html(riskiest, ["user (pseudonym)", "score", "day", "model"], {"score": "{:.4f}".format})
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
    *(("dwd.request", f"ads.{t}") for t in ("model_daily", "tenant_daily", "latency_breakdown", "retry_storms")),
    ("dwd.request", "ads.version_mix"),
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
                nodes[f"view:{name}"] = f"Feast view {name.split('.', 1)[1]}"
    edges = list(LINEAGE)
    versions = [m for m in list_models(lake.settings) if m.card is not None]
    if versions:
        latest = versions[-1].card
        assert latest is not None
        nodes["model"] = f"model {plotly_text(latest.ref)}<br>{len(versions)} version(s)"
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
        "files": PALETTE[7],
        "ods": PALETTE[0],
        "dwd": PALETTE[2],
        "dws": PALETTE[4],
        "view": PALETTE[6],
        "ads": PALETTE[1],
        "ops": PALETTE[7],
        "model": PALETTE[3],
    }
    figure = _figure(max(420, 34 * len(ids)))
    figure.add_trace(
        go.Sankey(
            arrangement="snap",
            node={
                "label": [nodes[i] for i in ids],
                "color": [colours[i.split(":")[0] if ":" in i else i.split(".")[0]] for i in ids],
                "pad": 14,
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
    storms,
    quality,
    consistency,
    scores,
    lineage,
)
