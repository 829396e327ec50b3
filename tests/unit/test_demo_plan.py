"""The demo's plan of DAG runs: each day's layers in order, then training, then a whole day with scores."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from strata.demo import BEFORE_SCORES, DWD_ONLY, REPORT_ONLY, _echo_run, daily_plan
from strata.orchestration.dag_runs import RunReport


def test_the_plan_builds_each_day_then_trains_then_runs_the_last_day_whole() -> None:
    days = ["2026-01-01", "2026-01-02", "2026-01-03"]  # the last one has feedback only
    plan = daily_plan(days, "2026-01-02", trained=True)
    assert [(r.dag_id, r.at.date().isoformat(), r.tasks) for r in plan] == [
        ("strata_ingest", "2026-01-02", None),
        ("strata_daily", "2026-01-02", BEFORE_SCORES),
        ("strata_ingest", "2026-01-03", None),
        ("strata_daily", "2026-01-03", BEFORE_SCORES),
        ("strata_ingest", "2026-01-04", None),
        ("strata_daily", "2026-01-04", DWD_ONLY),
        ("strata_train", "2026-01-02", None),  # trained up to the day before the last day of traffic
        ("strata_daily", "2026-01-03", None),  # that last day again, whole, now with its scores
    ]
    assert all(r.at.tzinfo == dt.UTC for r in plan)
    assert [r.dag_id for r in daily_plan(days, "2026-01-02", trained=False)].count("strata_train") == 0


def test_a_day_whose_files_hold_no_event_is_landed_and_not_built() -> None:
    days = ["2026-01-01", "2026-01-02", "2026-01-03"]  # 2026-01-02: an empty feedback file, nothing else
    plan = daily_plan(days, "2026-01-01", trained=False, empty={"2026-01-02"})
    assert [(r.dag_id, r.at.date().isoformat()) for r in plan] == [
        ("strata_ingest", "2026-01-02"),
        ("strata_daily", "2026-01-02"),
        ("strata_ingest", "2026-01-03"),
        ("strata_ingest", "2026-01-04"),
        ("strata_daily", "2026-01-04"),
        ("strata_daily", "2026-01-02"),  # no model: the last run writes the report of the week up to 2026-01-01
    ]
    assert plan[-1].tasks == REPORT_ONLY


def test_a_failed_run_is_printed_with_its_error_and_fails_the_demo() -> None:
    said: list[str] = []
    failed = RunReport(
        "strata_daily",
        "2026-01-03T00:00:00+00:00",
        "failed",
        ("2026-01-02T00:00:00+00:00", "2026-01-03T00:00:00+00:00"),
        0.9,
        {"dwd.build_dwd": "failed"},
        {},
        {},
        {"dwd.build_dwd": "build_dwd for 2026-01-02: no ODS rows"},
    )
    assert _echo_run(failed, {"days": {}}, said.append) is False
    assert "✗[/] strata_daily 2026-01-02" in str(said[0])
    assert "dwd.build_dwd: build_dwd for 2026-01-02: no ODS rows" in said[1]


def test_the_next_commands_stay_one_line_each_at_80_columns(tmp_path: Path) -> None:
    """Copied from a narrow terminal, a command the demo suggests must run as printed: rich must not
    break it with real line breaks (it did: `... ORDER` / `BY 2 DESC"`)."""
    import io

    from rich.console import Console

    from strata.console import say
    from strata.demo import _next_commands
    from warehouse.settings import load_settings

    console = Console(width=80, file=io.StringIO(), record=True)
    opens = [
        "strata explain ads.retry_policy event_date=2026-12-03 tenant_id=tenant-007 model=gpt-4o-mini-2024-07-18",
        "strata trace 71381c43f5b3cef1c917e4b695f41c3a",
    ]
    settings = load_settings({"STRATA_HOME": str(tmp_path / "home")})
    _next_commands(settings, lambda x: say(x, console), "u_13cae536e2", opens)
    lines = [line.strip() for line in console.export_text().splitlines()]
    assert all(command in lines for command in opens)
    assert 'strata sql "SELECT tenant_id, sum(cost_usd) FROM dwd.request GROUP BY 1 ORDER BY 2 DESC"' in lines
    assert "strata airflow up   # the same DAGs on a schedule, on this lake: http://127.0.0.1:8080" in lines
    [env] = [line for line in lines if line.startswith("eval ")]
    assert env.endswith('demo env)"')
