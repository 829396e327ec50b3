"""``strata_daily``: every day, the layers of the previous day's data, one task group per layer."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import CronDataIntervalTimetable, dag, task, task_group
from assets import (
    ADS_FEATURE_CONSISTENCY,
    ADS_MARTS,
    ADS_SCORE_DAILY,
    ADS_USER_RISK_SCORES,
    DWD_FEEDBACK,
    DWD_MODEL_PRICE,
    DWD_QUARANTINE,
    DWD_REQUEST,
    DWD_SPAN,
    DWD_TENANT_QUOTA,
    DWS_MODEL,
    DWS_TENANT,
    DWS_USER,
    ONLINE_FEATURES,
    OPS_BOOKS,
    REPORT,
)
from steps import DEFAULT_ARGS, run_step, shards


@dag(
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    tags=["strata"],
)
def strata_daily() -> None:
    """### The day's layers: DWD → DWS → features → ADS → scores → the week's report

    Each run builds the event date of its data interval (the run at midnight builds the day
    that just ended; a backfill builds each day of its range, one at a time, in order). Every
    task replaces exactly its date's partitions, so reruns and backfills are idempotent.

    A task with nothing to do (reference data unchanged, a check the online store has moved on
    from, scores before a model is registered) is skipped with a line saying why, and the tasks
    after it still run (`none_failed`); a failure stops everything downstream.
    """

    dwd() >> dws() >> features() >> ads() >> scores() >> report()


@task_group
def dwd() -> None:
    """Reference data (prices, quotas), then one clean row per request and feedback event,
    quarantine and books."""

    @task(outlets=[DWD_MODEL_PRICE])
    def load_prices(**context: object) -> dict[str, object]:
        return run_step("load_prices", context)

    @task(outlets=[DWD_TENANT_QUOTA])
    def load_quotas(**context: object) -> dict[str, object]:
        return run_step("load_quotas", context)

    @task(outlets=[DWD_FEEDBACK, DWD_REQUEST, DWD_SPAN, DWD_QUARANTINE, OPS_BOOKS])
    def build_dwd(**context: object) -> dict[str, object]:
        return run_step("build_dwd", context)

    [load_prices(), load_quotas()] >> build_dwd()


@task_group
def dws() -> None:
    """Point-in-time feature rows per user, tenant and model version."""

    @task(outlets=[DWS_USER, DWS_TENANT, DWS_MODEL])
    def build_dws(**context: object) -> dict[str, object]:
        return run_step("build_dws", context)

    build_dws()


@task_group
def features() -> None:
    """The new feature rows into the online store, then online and offline compared."""

    @task(outlets=[ONLINE_FEATURES])
    def materialize(**context: object) -> dict[str, object]:
        return run_step("materialize", context)

    @task(outlets=[ADS_FEATURE_CONSISTENCY])
    def check_consistency(**context: object) -> dict[str, object]:
        return run_step("check_consistency", context)

    materialize() >> check_consistency()


@task_group
def ads() -> None:
    """The analyst tables (dbt), published as Delta."""

    @task(outlets=ADS_MARTS)
    def build_ads(**context: object) -> dict[str, object]:
        return run_step("build_ads", context)

    build_ads()


@task_group
def scores() -> None:
    """Every active user scored by the latest registered model, one mapped task per shard, then
    the day's summary and the scores online (skipped, with its shards, until a model is registered)."""

    @task
    def score_shards() -> list[list[int]]:
        return shards("score")

    @task(outlets=[ADS_USER_RISK_SCORES], map_index_template="{{ shard }}")
    def score(shard: list[int], **context: object) -> dict[str, object]:
        return run_step("score", context, shard=shard)

    @task(outlets=[ADS_SCORE_DAILY, ONLINE_FEATURES], trigger_rule="all_success")
    def summarize_scores(**context: object) -> dict[str, object]:
        return run_step("summarize_scores", context)

    score.expand(shard=score_shards()) >> summarize_scores()


@task_group
def report() -> None:
    """The week ending with the run's date as one HTML page, written into the lake (``reports/``)."""

    @task(outlets=[REPORT])
    def write_report(**context: object) -> dict[str, object]:
        return run_step("write_report", context)

    write_report()


strata_daily()
