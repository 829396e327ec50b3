"""``strata_ingest``: every hour, land the files that arrived in the landing zone into ODS."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import CronDataIntervalTimetable, dag, task
from assets import ODS_FEEDBACK, ODS_REQUESTS, OPS_LANDED_FILES
from steps import DEFAULT_ARGS, run_step


@dag(
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["strata", "ods"],
)
def strata_ingest() -> None:
    """### Land new files into ODS

    Lands every file in `STRATA_LANDING_DIR` that was not landed before (same content hash:
    skipped, even after retention or `forget` removed its lines), byte-exact, into
    `ods.request_log_raw` / `ods.feedback_raw`, and records it in `ops.landed_files`.
    Idempotent: a rerun of any hour lands nothing twice. Builds of the days the files hold
    run in `strata_daily`.
    """

    @task(outlets=[ODS_REQUESTS, ODS_FEEDBACK, OPS_LANDED_FILES])
    def land(**context: object) -> dict[str, object]:
        return run_step("land", context)

    land()


strata_ingest()
