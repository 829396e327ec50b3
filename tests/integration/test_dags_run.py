"""Every DAG run for real through Airflow's dag.test() on a tiny generated dataset (SQLite metadata).

The files of each day arrive before that day's runs, as the AI service would drop them.
Checked: the tables and the books against the generator's manifest, the asset event of every
writing task, and that running the same dates again leaves every table equal.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl

from strata.demo import arrive
from strata.orchestration.dag_runs import Run, RunReport, run_dags
from tests.lake_rows import assert_same_lake, lake_rows
from warehouse.settings import load_settings
from warehouse.sources.generator import generate
from warehouse.storage import lake
from warehouse.tables import DWD_QUARANTINE, DWD_REQUEST, OPS_AUDIT_LOG, OPS_BOOKS

UTC = dt.timezone.utc
START = dt.date(2026, 1, 1)
#: What each writing task must record an asset event for when it succeeds.
OUTLETS = {
    "land": ["ods.feedback_raw", "ods.request_log_raw", "ops.landed_files"],
    "dwd.load_prices": ["dwd.model_price"],
    "dwd.build_dwd": ["dwd.feedback", "dwd.quarantine", "dwd.request", "ops.books"],
    "apply_retention": ["dwd.quarantine", "ods.feedback_raw", "ods.request_log_raw"],
}


def _plan(days: list[str]) -> list[Run]:
    runs = []
    for day in days:
        midnight = dt.datetime.combine(dt.date.fromisoformat(day) + dt.timedelta(days=1), dt.time(), UTC)
        runs += [Run("strata_ingest", midnight), Run("strata_daily", midnight)]
    end = runs[-1].at
    return runs + [Run("strata_retention", end + dt.timedelta(hours=4)), Run("strata_train", end)]


def test_every_dag_runs_through_airflow_and_a_rerun_leaves_every_table_equal(strata_env: Path,
                                                                              tmp_path: Path) -> None:
    settings = load_settings()
    generated = tmp_path / "generated"
    manifest = generate(generated, days=3, requests_per_day=300, seed=11, start=START, fault_rate=0.02)
    settings.landing_dir.mkdir(parents=True)
    (settings.landing_dir / "prices.csv").write_bytes((generated / "prices.csv").read_bytes())
    days = sorted(manifest["days"])
    plan = _plan(days)
    snapshots: list[tuple[dict[str, pl.DataFrame], int]] = []

    def before(run: Run) -> None:
        if run is plan[0] and snapshots == [] and len(reports_so_far) == len(plan):
            snapshots.append((lake_rows(settings), lake.read_frame(settings, OPS_AUDIT_LOG).height))
        if run.dag_id == "strata_ingest":  # the day's files arrive, as the AI service drops them
            arrive(generated, settings.landing_dir, (run.at - dt.timedelta(days=1)).date().isoformat())

    reports_so_far: list[RunReport] = []
    # The same dates twice, in one Airflow process (the second pass is the rerun).
    reports = run_dags(settings, plan + plan, log=tmp_path / "airflow.log", before=before,
                       on_run=reports_so_far.append)
    failed = [(r.dag_id, r.at, r.errors) for r in reports if not r.ok]
    assert not failed and len(reports) == 2 * len(plan), f"{failed}; see {tmp_path / 'airflow.log'}"
    first, again = reports[:len(plan)], reports[len(plan):]

    for report in reports:
        for task, state in report.tasks.items():
            expected = OUTLETS.get(task, []) if state == "success" else []
            assert report.events.get(task, []) == expected, f"{report.dag_id} {report.at} {task} ({state})"
        # Layers whose pipeline step has not landed yet are skipped, never faked.
        assert all(state in ("success", "skipped") for state in report.tasks.values()), report.tasks
    daily = {r.interval[0][:10]: r for r in first if r.dag_id == "strata_daily"}
    assert list(daily) == days  # each run built its interval's first day
    for day, truth in manifest["days"].items():
        counts = daily[day].results["dwd.build_dwd"]["counts"]
        assert (counts["request_published"], counts["request_duplicates"]) == (truth["requests"], truth["duplicates"])
    requests = lake.read_frame(settings, DWD_REQUEST).group_by("event_date").len()
    assert {str(d): n for d, n in requests.iter_rows()} == {d: m["requests"] for d, m in manifest["days"].items()}
    books = lake.read_frame(settings, OPS_BOOKS)
    assert books.height >= len(days) and books.get_column("balanced").all()
    assert lake.read_frame(settings, DWD_QUARANTINE).height > 0  # the faults went to quarantine, not away

    assert all(r.results["land"]["counts"]["files_landed"] == 0 for r in again if r.dag_id == "strata_ingest")
    (rows, attempts), = snapshots
    assert_same_lake(rows, lake_rows(settings))
    assert lake.read_frame(settings, OPS_AUDIT_LOG).height > attempts  # every attempt is still on the record
