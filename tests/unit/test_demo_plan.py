"""The demo's plan of DAG runs: each day's layers in order, then training, then a whole day with scores."""

from __future__ import annotations

import datetime as dt

from strata.demo import BEFORE_SCORES, DWD_ONLY, daily_plan


def test_the_plan_builds_each_day_then_trains_then_runs_the_last_day_whole() -> None:
    days = ["2026-01-01", "2026-01-02", "2026-01-03"]  # the last one has feedback only
    plan = daily_plan(days, "2026-01-02", trained=True)
    assert [(r.dag_id, r.at.date().isoformat(), r.tasks) for r in plan] == [
        ("strata_ingest", "2026-01-02", None), ("strata_daily", "2026-01-02", BEFORE_SCORES),
        ("strata_ingest", "2026-01-03", None), ("strata_daily", "2026-01-03", BEFORE_SCORES),
        ("strata_ingest", "2026-01-04", None), ("strata_daily", "2026-01-04", DWD_ONLY),
        ("strata_train", "2026-01-02", None),  # trained up to the day before the last day of traffic
        ("strata_daily", "2026-01-03", None),  # that last day again, whole, now with its scores
    ]
    assert all(r.at.tzinfo == dt.timezone.utc for r in plan)
    assert [r.dag_id for r in daily_plan(days, "2026-01-02", trained=False)].count("strata_train") == 0
