"""``strata trace TRACE_ID``: one trace across the layers, drawn as a waterfall, with where each row came from."""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING

import typer
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from strata.console import Clauses, FitTable, cell, out

if TYPE_CHECKING:
    from warehouse.dwd.trace import Step, Trace

app = typer.Typer()

#: How each part of a step's bar is drawn: a call's stages, and a step's whole duration where it logged none
#: (or the part of it no stage covers). Distinct characters, so that the bar reads without colour too.
BARS = {
    "queue": ("░", "yellow"),
    "preprocess": ("▒", "cyan"),
    "inference": ("█", "green"),
    "postprocess": ("▓", "magenta"),
    "other": ("━", "blue"),
}
#: The widest the step names' column gets (a longer name folds onto the next line).
NAME_WIDTH = 30
#: The bytes of a raw line printed (a long line is an export batch of many traces' spans).
RAW_BYTES = 2048


@app.command("trace")
def trace_cmd(
    trace_id: str = typer.Argument(..., help="The trace's id: 32 hex digits (W3C trace context)."),
    raw: bool = typer.Option(
        False,
        "--raw",
        help="Also print the raw lines (ODS's and the quarantine's): they may hold personal data, prompts and "
        "responses.",
    ),
) -> None:
    """Show every call and span of one trace: a waterfall of their stages, the ODS file and line of each,
    its quarantined lines with their rules, and its feedback.

    Reads dwd.request and dwd.span (the trace's rows, found through the Bloom filters of their files),
    dwd.quarantine (lines holding the trace's id, with the rules they broke) and dwd.feedback (by request
    id). Raw lines print only with --raw.
    """
    from warehouse.dwd.trace import trace
    from warehouse.settings import load_settings
    from warehouse.storage.lake import Lake

    found = trace(Lake(load_settings()), trace_id, raw=raw)
    out.print(_headline(found))
    out.print(Waterfall(found))
    out.print(_legend(found))
    out.print(_lineage(found))
    if found.quarantined:
        out.print(_quarantine(found))
    if found.feedback:
        out.print(_feedback(found))
    if raw:
        _print_raw(found)
    else:
        out.print(Text("raw lines (they may hold prompts): strata trace --raw", style="dim"))


def _headline(found: Trace) -> Clauses:
    """What the trace is, in clauses broken only between them: its calls and spans, start and duration."""
    calls = sum(1 for s in found.steps if s.table == "dwd.request")
    if not found.steps:
        return Clauses(
            [f"trace {found.trace_id}:", " no call or span in DWD,", f" {len(found.quarantined)} quarantined"]
        )
    took = (found.end - found.start).total_seconds() * 1000
    return Clauses(
        [
            f"trace {found.trace_id}:",
            f" {calls} call(s),",
            f" {len(found.steps) - calls} other span(s);",
            f" started {cell(found.start)} UTC,",
            f" took {cell(took, 'duration_ms')}",
        ]
    )


class Waterfall:
    """The steps as rows of a waterfall: number, name (indented by depth), a bar placed on the trace's time
    axis and split into stages, and the duration; as wide as the console."""

    def __init__(self, found: Trace) -> None:
        self.found = found

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        steps = self.found.steps
        if not steps:
            return
        names = [_name(s) for s in steps]
        durations = [cell(s.duration_ms, "duration_ms") if s.duration_ms is not None else "?" for s in steps]
        number_width = len(str(len(steps)))
        name_width = min(NAME_WIDTH, max(len(n) for n in names))
        duration_width = max(len(d) for d in durations)
        # the columns' own widths and the one space between each two
        bar_width = max(10, options.max_width - number_width - name_width - duration_width - 3)
        start = self.found.start
        total_ms = max((self.found.end - start).total_seconds() * 1000, 1e-3)
        grid = Table.grid(padding=(0, 1))
        grid.add_column(justify="right", width=number_width)
        grid.add_column(width=name_width, overflow="fold")
        grid.add_column(width=bar_width, no_wrap=True)
        grid.add_column(justify="right", width=duration_width)
        for number, (step, name, duration) in enumerate(zip(steps, names, durations), 1):
            grid.add_row(str(number), Text(name), _bar(step, start, total_ms, bar_width), duration)
        yield grid


def _name(step: Step) -> str:
    mark = "↳ " if step.depth else ""
    attempt = f" (attempt {step.attempt})" if step.attempt and step.attempt > 1 else ""
    orphan = " (parent not found)" if step.orphan else ""
    return "  " * max(step.depth - 1, 0) + mark + shown(step.name) + attempt + orphan


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    """``text`` with its control characters written as ``\\xNN``: a log's names and raw lines are the log
    writer's text, and an escape sequence printed as is would drive the reader's terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _bar(step: Step, start: dt.datetime, total_ms: float, width: int) -> Text:
    """``step``'s bar: blank up to its start, then its stages (the rest of its duration, or all of it when it
    logged none, as "other"), each at least one cell when it lasted at all, in ``width`` cells."""
    scale = width / total_ms
    offset = min(int((step.ts - start).total_seconds() * 1000 * scale), width - 1)
    duration = step.duration_ms or 0.0
    parts = list(step.stages)
    rest = duration - sum(ms for _, ms in parts)
    if not parts or rest > duration * 0.01:
        parts.append(("other", max(rest, 0.0)))
    bar = Text(" " * offset)
    room = width - offset
    for stage, ms in parts:
        cells = min(max(round(ms * scale), 1 if ms > 0 or stage == "other" else 0), room)
        char, style = BARS[stage]
        bar.append(char * cells, style=style)
        room -= cells
    return bar


def _legend(found: Trace) -> Text:
    """The characters of the bars drawn: the stages logged, and the rest of a duration."""
    used = {stage for s in found.steps for stage, _ in s.stages} | {"other"}
    legend = Text("", style="dim")
    for stage in (s for s in BARS if s in used):
        char, style = BARS[stage]
        legend.append(char, style=style)
        legend.append(" no stage logged" if stage == "other" else f" {stage}  ")
    return legend


def _lineage(found: Trace) -> FitTable:
    rows = [
        [
            str(number),
            step.id,
            step.table.removeprefix("dwd."),
            shown(step.status),
            f"{cell(step.tokens[0])}/{cell(step.tokens[1])}" if step.table == "dwd.request" else "",
            cell(step.ts),
            step.source_file,
            f"{step.line_no:,}",
        ]
        for number, step in enumerate(found.steps, 1)
    ]
    columns = ["#", "request or span", "table", "status", "tokens in/out", "started (UTC)", "ODS file", "line"]
    return FitTable(
        columns,
        rows,
        title="where each row came from",
        drop=["started (UTC)", "tokens in/out", "table", "status"],
        keep=["#", "ODS file", "line"],
        path="ODS file",
    )


def _quarantine(found: Trace) -> FitTable:
    rows = [
        [", ".join(q.rules), q.request_id or "", q.target_table, str(q.event_date), q.source_file, f"{q.line_no:,}"]
        for q in found.quarantined
    ]
    columns = ["rules", "request", "meant for", "date", "ODS file", "line"]
    return FitTable(
        columns,
        rows,
        title="quarantined lines holding the trace's id",
        drop=["date", "meant for", "request"],
        keep=["rules", "ODS file", "line"],
        path="ODS file",
    )


def _feedback(found: Trace) -> FitTable:
    numbers = {s.id: str(n) for n, s in enumerate(found.steps, 1)}
    rows = [[numbers.get(f.request_id, ""), cell(f.ts), f.kind, f.value or "", f.source or ""] for f in found.feedback]
    return FitTable(["#", "given (UTC)", "kind", "value", "source"], rows, title="feedback", drop=["source"])


def _print_raw(found: Trace) -> None:
    """Each raw line once, after the rows it holds (an export line holds many spans), cut at :data:`RAW_BYTES`."""
    holders: dict[tuple[str, int], list[str]] = {}
    for number, step in enumerate(found.steps, 1):
        holders.setdefault((step.source_file, step.line_no), []).append(f"#{number}")
    blocks = [
        (f"{file}:{line} ({', '.join(rows)})", found.raw_lines.get((file, line)))
        for (file, line), rows in holders.items()
    ]
    blocks += [
        (f"{q.source_file}:{q.line_no} (quarantined: {', '.join(q.rules)})", q.raw_line) for q in found.quarantined
    ]
    for title, line in blocks:
        print_raw_line(title, line)


def print_raw_line(title: str, line: bytes | None) -> None:
    """One raw line under its title (file, line, what it holds), cut at :data:`RAW_BYTES`; a line that
    retention or ``forget`` removed is said to be gone."""
    out.print(Text(title, style="bold"), soft_wrap=True)
    if line is None:
        out.print(Text("  not in ODS any more (retention or forget removed it)", style="dim"))
        return
    text = shown(line[:RAW_BYTES].decode("utf-8", errors="replace").rstrip("\n"))
    more = f" … {len(line) - RAW_BYTES:,} more bytes" if len(line) > RAW_BYTES else ""
    out.print(Text(text + more), overflow="fold")
