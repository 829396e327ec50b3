"""``strata_train``: every week, train and register the user-risk model on the week that ended."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DeltaDataIntervalTimetable, dag, task
from assets import USER_RISK_MODEL
from steps import DEFAULT_ARGS, run_step


@dag(
    schedule=DeltaDataIntervalTimetable(dt.timedelta(weeks=1)),
    start_date=dt.datetime(2026, 1, 5, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["strata", "models"],
)
def strata_train() -> None:
    """### Weekly training

    Trains the user-risk model from a point-in-time Feast training set up to the last day
    of the run's week, checks ONNX parity and quality, and registers a new version (a
    registered version is never changed). `strata_daily` scores with the latest version.

    A week is a fixed 7-day delta, which Airflow aligns to the Unix epoch: scheduled runs go
    Thursday 00:00 to Thursday UTC; a manual run covers the 7 days before its logical date (the
    demo's, whose dates are relative to the day it is made, rely on that).
    """

    @task(outlets=[USER_RISK_MODEL])
    def train(**context: object) -> dict[str, object]:
        return run_step("train", context)

    train()


strata_train()
