"""Numbers, paths and tables in the CLI's output read as a person reads them, at 80 columns."""

from __future__ import annotations

import datetime as dt
import decimal
import io

import pytest
from rich.console import Console

from strata.console import FitTable, cell, plain, short_path


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (32850.5, "32,850"),  # was 3.285e+04 in the demo's tables
        (1_234_567.0, "1,234,567"),
        (99.456, "99.46"),
        (1.0, "1"),
        (0.9997, "0.9997"),
        (0.25, "0.25"),
        (1.19e-07, "0.000000119"),
        (0.0, "0"),
        (-0.0123, "-0.0123"),
        (float("nan"), "nan"),
    ],
)
def test_a_number_is_plain_digits_never_an_exponent(value: float, shown: str) -> None:
    assert plain(value) == shown
    assert "e" not in plain(value).replace("nan", "")


@pytest.mark.parametrize(
    ("value", "name", "shown"),
    [
        (32850.5, "latency_p95_ms", "32.85 s"),
        (623.26, "ttft_p95_ms_1h", "623 ms"),
        (decimal.Decimal("0.592120590"), "cost_usd", "$0.5921"),
        (-0.5, "cost_usd_sum_7d", "-$0.5"),
        (3_280_233, "total_tokens", "3,280,233"),
        (0.1125, "error_rate", "0.1125"),
        (True, "", "✓"),
        (None, "cost_usd", ""),
        (dt.datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=dt.UTC), "", "2026-01-02 03:04:05"),
    ],
)
def test_a_cell_is_in_plain_units(value: object, name: str, shown: str) -> None:
    assert cell(value, name) == shown


PATH = "/tmp/strata/demo/landing/feedback/date=2026-12-01/feedback-20261201.jsonl.gz"


@pytest.mark.parametrize(
    ("width", "shown"),
    [
        (100, PATH),
        (60, "/tmp/…/feedback/date=2026-12-01/feedback-20261201.jsonl.gz"),
        (45, "/tmp/…/feedback-20261201.jsonl.gz"),
        (30, "…/feedback-20261201.jsonl.gz"),
        (20, "…/feedback-20261201.jsonl.gz"),  # the name is never cut: a table folds it
        (0, "…/feedback-20261201.jsonl.gz"),
    ],
)
def test_a_path_is_shortened_from_the_middle(width: int, shown: str) -> None:
    assert short_path(PATH, width) == shown and (len(shown) <= width or shown == "…/feedback-20261201.jsonl.gz")
    assert short_path("feedback-20261201.jsonl.gz", 10) == "feedback-20261201.jsonl.gz"  # no folder to leave out


def _lines(renderable: object, width: int) -> list[str]:
    console = Console(width=width, record=True)
    console.print(renderable)
    return console.export_text().splitlines()


def test_a_fit_table_leaves_columns_out_and_shortens_paths_rather_than_cropping_cells() -> None:
    rows = [
        [f"2026-12-0{i} 05:02:4{i}", PATH.replace("01.", f"0{i}."), "ods.feedback_raw", "jsonl", "18", "0"]
        for i in (1, 2)
    ]
    table = FitTable(
        ["landed at", "file", "table", "read as", "lines", "malformed"], rows, drop=["read as", "table"], path="file"
    )
    narrow = _lines(table, 80)
    assert max(map(len, narrow)) <= 80 and len(narrow) == 7  # one line per file, no cell wrapped
    assert "2026-12-01 05:02:41" in narrow[3] and "/tmp/…/" in narrow[3] and "feedback-20261201.jsonl.gz" in narrow[3]
    assert narrow[-1] == "not shown at 80 columns: table, read as"  # those named in drop go first
    wide = "\n".join(_lines(table, 200))
    assert PATH in wide and "not shown" not in wide and "…" not in wide


@pytest.mark.parametrize("one_terminal", [True, False])
def test_stdout_lines_print_above_a_progress_bar_on_one_terminal(
    monkeypatch: pytest.MonkeyPatch, one_terminal: bool
) -> None:
    """The demo's run lines (stdout) under its bar (stderr): on one terminal the bar is erased first and drawn
    again below, not left on screen with the line following it; a stdout that is no terminal gets no bar."""
    from strata import console as consoles

    screen, piped = io.StringIO(), io.StringIO()
    monkeypatch.setattr(consoles, "console", Console(file=screen, force_terminal=True, width=80, highlight=False))
    stdout = Console(file=screen, force_terminal=True, width=80, highlight=False)  # the same screen
    monkeypatch.setattr(consoles, "out", stdout if one_terminal else Console(file=piped, highlight=False))
    with consoles.progress("DAG runs") as step:
        step("starting", 0, 2)
        consoles.out.print("✓ strata_daily 2026-11-27")
        step("strata_daily 2026-11-27", 1, 2)
    if one_terminal:
        before, after = screen.getvalue().split("✓ strata_daily 2026-11-27", 1)
        assert before.endswith("\r\x1b[2K") and "DAG runs: starting" in before  # erased, then the line
        assert "DAG runs" in after.split("\n", 1)[1]  # and the bar again beneath it
    else:
        assert piped.getvalue() == "✓ strata_daily 2026-11-27\n"
