"""The demo's summary: a section per layer that exists, read generically from its table; one line otherwise."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console

from batch_inference.registry import register
from strata import lake_report
from strata.console import FitTable
from tests.small_model import STAND_IN_CARD
from warehouse.settings import load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import Table

DAY = dt.date(2026, 1, 7)


def _render(items: list[Any], width: int = 200) -> str:
    console = Console(width=width, record=True)
    for item in items:
        console.print(item)
    return console.export_text()


def test_sections_of_layers_not_built_yet_are_one_line_each(strata_env: Path) -> None:
    settings = load_settings()
    said: list[Any] = []
    lake_report.ads_section(Lake(settings), said.append, DAY)
    lake_report.features_section(settings, said.append, "u_1")
    lake_report.model_section(Lake(settings), said.append, DAY)
    assert all(isinstance(line, str) and "— skipped" in line for line in said) and len(said) == 6


def test_ads_answers_and_the_model_are_read_from_whatever_columns_their_tables_have(strata_env: Path) -> None:
    settings = load_settings()
    tenants = pl.DataFrame(
        {
            "event_date": [DAY, DAY, DAY - dt.timedelta(days=1)],
            "tenant_id": ["t1", "t2", "t1"],
            "requests": [10, 20, 5],
            "cost_usd": [1.5, 9.25, 0.1],
            "unrelated": ["x", "y", "z"],
        }
    )
    tenants.write_delta(Table("ads.tenant_daily").uri(settings))
    scores = pl.DataFrame(
        {
            "event_date": [DAY] * 3,
            "user_pseudonym": ["a", "b", "c"],
            "score": [0.2, 0.97, 0.5],
            "model_version": ["v3"] * 3,
        }
    )
    scores.write_delta(Table("ads.user_risk_scores").uri(settings))
    register(
        settings,
        dataclasses.replace(STAND_IN_CARD, metrics={"roc_auc": 0.93, "parity_max_abs": 1e-7}),
        b"not a real model",
    )

    said: list[Any] = []
    lake_report.ads_section(Lake(settings), said.append, DAY)
    lake_report.model_section(Lake(settings), said.append, DAY, planted=frozenset({"b"}))
    tables = [s for s in said if isinstance(s, FitTable)]
    assert [t.title for t in tables] == [
        "cost per tenant (ads.tenant_daily, 2026-01-07)",
        "model user_risk@v1, trained on 2026-01-01 … 2026-01-06",
        "riskiest users (ads.user_risk_scores, 2026-01-07)",
    ]
    text = _render(tables)
    assert text.index("t2") < text.index("t1")  # the costliest tenant first, the day's rows only
    assert "unrelated" not in text and "0.1" not in text
    assert "roc_auc" in text and "0.93" in text
    assert text.index("0.97") < text.index("0.5") and "✓" in text  # b, the planted abuser, comes first


def test_the_analyst_answers_read_at_80_columns_in_plain_units(strata_env: Path) -> None:
    settings = load_settings()
    models = pl.DataFrame(
        {
            "event_date": [DAY, DAY],
            "model": ["aurora-chat-70b", "gpt-4o-mini"],
            "model_version": ["v3.2", "2024-07-18"],
            "requests": [538, 439],
            "successes": [504, 402],
            "latency_p50_ms": [7841.2, 950.0],
            "latency_p95_ms": [32850.5, 623.3],
            "ttft_p95_ms": [713.26, None],
            "errors": [34, 37],
            "cost_usd": [0.8093538, 0.2407],
            "positive_feedback_share": [0.7083, None],
        }
    )
    models.write_delta(Table("ads.model_daily").uri(settings))
    said: list[Any] = []
    lake_report.ads_section(Lake(settings), said.append, DAY)
    text = _render([s for s in said if isinstance(s, FitTable)], width=80)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in text, text
    for whole in ("aurora-chat-70b", "gpt-4o-mini", "2024-07-18", "latency_p95_ms", "ttft_p95_ms"):
        assert whole in text  # names, dates and the chosen columns' headers whole, never cut to "aur…"
    assert "32.85 s" in text and "623 ms" in text and "e+" not in text  # was 3.285e+04
    # the columns that do not fit are named, not squeezed
    assert "not shown at 80 columns: errors, cost_usd" in " ".join(text.split())
    wide = _render([s for s in said if isinstance(s, FitTable)], width=200)
    assert "$0.8094" in wide and "not shown" not in wide


def test_an_answer_without_rows_on_the_day_says_whose_rows_it_shows(strata_env: Path) -> None:
    """The demo's last day may hold no retry storm: the week's storms show, titled as such, not as the day's."""
    settings = load_settings()
    storms = pl.DataFrame(
        {
            "event_date": [DAY - dt.timedelta(days=6), DAY - dt.timedelta(days=4)],
            "tenant_id": ["t1", "t2"],
            "model": ["m", "m"],
            "retries": [74, 35],
        }
    )
    storms.write_delta(Table("ads.retry_storms").uri(settings))
    said: list[Any] = []
    lake_report.ads_section(Lake(settings), said.append, DAY)
    tables = [s for s in said if isinstance(s, FitTable)]
    assert [t.title for t in tables] == ["retry storms (ads.retry_storms, every day: none on 2026-01-07)"]
    assert "t1" in _render(tables) and "t2" in _render(tables)
