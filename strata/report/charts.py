"""The report's chart helpers: plotly figures that start alike, names from the lake drawn as text.

Every string from the lake reaches a chart through :func:`plotly_text` (plotly reads names, labels and
hover texts as its own HTML); a long one is shortened on an axis (:func:`axis_label`) and named whole in
its hover. Charts use SVG traces only, so a browser test can count what was drawn.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: The tenants and models drawn one by one; the rest are summed as :data:`OTHERS`.
TOP = 8
#: The name of the rest, in italics: markup that no name from the lake can be, since each reaches a chart
#: through :func:`plotly_text` (a tenant named "others" is drawn as itself, not summed into them).
OTHERS = "<i>others</i>"
#: The chart colours (Plotly's "D3" qualitative palette).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


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


def short_ticks(figure: go.Figure, names: Sequence[str], axis: str, width: int = LABEL_CHARS) -> None:
    """Label the categories ``names`` of the figure's ``axis`` axes (``"x"`` or ``"y"``, every subplot's) with
    :func:`axis_label` (at most ``width`` characters); the data keep the whole names."""
    ticks = {"tickmode": "array", "tickvals": list(names), "ticktext": [axis_label(n, width) for n in names]}
    (figure.update_xaxes if axis == "x" else figure.update_yaxes)(**ticks)


#: The room a :func:`log_axis` leaves below its smallest and above its largest value, as a share of their span.
LOG_PAD = 0.12


def log_axis(values: Sequence[float | None]) -> dict[str, Any]:
    """A log axis over the positive ``values``: room above the largest (a bar never touches the top) and below
    the smallest (its bar still shows), ticks at 1, 2 and 5 × 10ⁿ (every digit where fewer than three fall in
    the range, powers of ten only where more than eight do)."""
    positive = [v for v in values if v is not None and v > 0] or [1.0]
    low, high = math.log10(min(positive)), math.log10(max(positive))
    pad = LOG_PAD * max(high - low, 0.5)
    bottom, top = low - pad, high + pad
    ticks: list[float] = []
    for mantissas in ((1, 2, 5), tuple(range(1, 10))):
        ticks = [
            m * 10.0**e
            for e in range(math.floor(bottom), math.ceil(top) + 1)
            for m in mantissas
            if bottom <= math.log10(m * 10.0**e) <= top
        ]
        if len(ticks) >= 3:
            break
    if len(ticks) > 8:
        ticks = [t for t in ticks if math.log10(t).is_integer()]
    return {"type": "log", "range": [bottom, top], "tickmode": "array", "tickvals": ticks, "tickformat": "~s"}


def fit_axis(values: Sequence[float | None], *, counts: bool = False) -> dict[str, Any]:
    """A :func:`log_axis` where the positive ``values`` span a decade or more (the small would be slivers beside
    the large on a linear axis), else a linear axis from 0, ticked at whole numbers only for ``counts``."""
    positive = [v for v in values if v is not None and v > 0]
    if positive and max(positive) >= 10 * min(positive):
        return log_axis(positive)
    whole = {"tick0": 0, "dtick": max(1, math.ceil(max(positive, default=1) / 5))} if counts else {}
    return {"type": "linear", "rangemode": "tozero"} | whole


#: A date axis's ticks: days flat as "Mar 2", as many as fit, so no label runs into the next subplot's or the legend.
DAY_TICKS = {"type": "date", "tickformat": "%b %-d", "tickangle": 0}


def days_axis(start: dt.date, end: dt.date, *, whole_days: bool = False) -> dict[str, Any]:
    """A date axis over the days ``start`` … ``end``: half a day of room either side of their middays (a day's bar
    or point stands whole), or from ``start``'s first instant to ``end``'s last for times (``whole_days``)."""
    if whole_days:
        return DAY_TICKS | {"range": [str(start), str(end + dt.timedelta(days=1))]}
    return DAY_TICKS | {"range": [f"{start - dt.timedelta(days=1)} 12:00", f"{end} 12:00"]}


def layout(height: int) -> dict[str, Any]:
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


def blank(height: int = 340) -> go.Figure:
    """An empty chart of ``height`` pixels, from :func:`layout`."""
    import plotly.graph_objects as go

    return go.Figure(layout=layout(height))


def subplots(titles: Sequence[str], height: int = 340, **kwargs: Any) -> go.Figure:
    """A row of subplots, one per title, from :func:`layout`."""
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=1, cols=len(titles), subplot_titles=list(titles), **kwargs)
    figure.update_layout(**layout(height))
    return figure


def yes(value: bool) -> str:
    """A table cell for a flag an operator must not miss: ``yes``, or ``NO`` in capitals."""
    return "yes" if value else "NO"


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


def keep_top(frame: pl.DataFrame, key: str, by: str) -> pl.DataFrame:
    """``frame`` with every ``key`` beyond the :data:`TOP` largest by ``by`` renamed :data:`OTHERS`."""
    ranked = frame.group_by(key).agg(pl.col(by).sum()).sort([by, key], descending=[True, False])
    kept = ranked.get_column(key).head(TOP).to_list()
    return frame.with_columns(pl.when(pl.col(key).is_in(kept)).then(pl.col(key)).otherwise(pl.lit(OTHERS)).alias(key))


def bars_by_day(
    figure: go.Figure, frame: pl.DataFrame, key: str, measures: Sequence[str], barmode: str = "stack"
) -> None:
    """One bar per day and measure (a subplot each), stacked or side by side (``barmode``), one trace per ``key``
    value."""
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
    figure.update_layout(barmode=barmode)
    # A date axis: days in date order (not in the order the traces first name them: a tenant new on a day came last).
    figure.update_xaxes(DAY_TICKS)


def stacked_parts(
    figure: go.Figure,
    categories: list[str],
    frame: pl.DataFrame,
    parts: Sequence[tuple[str, int]],
    *,
    across: bool = False,
    col: int | None = None,
    **trace: Any,
) -> None:
    """The ``parts`` of ``frame`` (columns, each with its :data:`PALETTE` index) stacked into one bar per
    category, upright or ``across``: one trace per part, in subplot ``col`` if given, with ``trace``'s settings
    (a hover, say)."""
    import plotly.graph_objects as go

    for part, colour in parts:
        values = frame.get_column(part).to_list()
        figure.add_trace(
            go.Bar(
                x=values if across else categories,
                y=categories if across else values,
                name=part.replace("_", " "),
                orientation="h" if across else None,
                marker_color=PALETTE[colour],
                **trace,
            ),
            **({"row": 1, "col": col} if col else {}),
        )
    figure.update_layout(barmode="stack")


def day_lines(
    figure: go.Figure,
    frame: pl.DataFrame,
    key: str,
    keys: Sequence[str],
    measure: str,
    *,
    what: str,
    col: int = 1,
    dash: str = "solid",
    legend: bool = True,
) -> None:
    """One line per ``key`` value of ``keys`` (its colour its place there) through ``frame``'s ``measure`` day by
    day (``event_date``), in subplot ``col``; its hover names the value and ``what`` the measure is."""
    import plotly.graph_objects as go

    for i, name in enumerate(keys):
        rows = frame.filter(pl.col(key) == name).sort("event_date")
        figure.add_trace(
            go.Scatter(
                x=[str(d) for d in rows.get_column("event_date")],
                y=rows.get_column(measure).to_list(),
                mode="lines+markers",
                name=name,
                legendgroup=name,
                showlegend=legend,
                line={"color": PALETTE[i % len(PALETTE)], "dash": dash},
                hovertemplate=f"%{{fullData.name}}<br>{what}: %{{y:,.2f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )


def flagged_points(
    figure: go.Figure, frame: pl.DataFrame, x: str, y: str, flag: str, names: tuple[str, str], hover: str
) -> None:
    """``frame``'s points (``x``, ``y``) as two traces named ``names``: those not ``flag``-ged, small and blue,
    then the flagged ones over them, larger and red. ``hover`` is a template over ``customdata``: the frame's
    columns other than ``x`` and ``y``, in order."""
    import plotly.graph_objects as go

    custom = [c for c in frame.columns if c not in (x, y)]
    figure.update_layout(showlegend=True)  # what red means, even where every point is flagged
    for flagged, name, colour, size in ((False, names[0], PALETTE[0], 7), (True, names[1], PALETTE[3], 11)):
        rows = frame.filter(pl.col(flag) == flagged)
        if not rows.is_empty():
            figure.add_trace(
                go.Scatter(
                    x=rows.get_column(x).to_list(),
                    y=rows.get_column(y).to_list(),
                    mode="markers",
                    name=name,
                    marker={"color": colour, "size": size, "opacity": 0.85},
                    customdata=rows.select(custom).rows(),
                    hovertemplate=hover + "<extra></extra>",
                )
            )
