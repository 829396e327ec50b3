"""``strata_retention``: every day, delete raw-data partitions older than the retention."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import CronDataIntervalTimetable, dag, task
from assets import DWD_QUARANTINE, ODS_FEEDBACK, ODS_REQUESTS
from steps import DEFAULT_ARGS, run_step


@dag(
    schedule=CronDataIntervalTimetable("30 3 * * *", timezone="UTC"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["strata", "privacy"],
)
def strata_retention() -> None:
    """### Raw-data retention

    Deletes the partitions of every table holding raw lines (ODS, the quarantine, any table
    with a `pii` column) older than `STRATA_ODS_RETENTION_DAYS`, counted back from the end
    of the run's data interval, then vacuums them so the bytes are gone.
    """

    @task(outlets=[ODS_REQUESTS, ODS_FEEDBACK, DWD_QUARANTINE])
    def apply_retention(**context: object) -> dict[str, object]:
        return run_step("apply_retention", context)

    apply_retention()


strata_retention()
