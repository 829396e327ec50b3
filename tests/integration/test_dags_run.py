"""Strata's DAGs run for real, on a tiny generated dataset: embedded, and unchanged on a cluster.

* Embedded: every DAG through Airflow's ``dag.test()`` (SQLite metadata), one run per day as
  the scheduler would, the files of each day arriving before that day's runs. Checked: the
  tables and the books against the generator's manifest, the asset event of every writing
  task, and that running the same dates again leaves every table equal.
* Cluster: the same DAG files with Postgres metadata (a database created and dropped here, which
  also holds the writers' advisory locks), the CeleryExecutor with a real Celery worker process
  and Redis as broker (databases 12 and 13), and the lake on S3 (a moto server speaking the S3
  protocol). A backfill of three days
  (``airflow backfill create``) must leave the same tables as the three single runs above.

The two deployments run side by side, each landing the same files from a landing zone of its
own (lakes are compared with landed paths relative to it): the cluster boots, lands and backfills
in the background while the embedded runs go day by day.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from contracts.audit_worker import warm_up
from strata.demo import arrive
from strata.orchestration.dag_runs import Run, RunReport, run_dags
from strata.orchestration.env import airflow_env
from synthetic_workload import generate
from tests.lake_rows import assert_same_lake, lake_rows
from tests.services import S3_KEYS, Postgres, Redis, create_bucket, free_port, s3_server, stop_tree
from warehouse.ops.reports import report_uri
from warehouse.settings import Settings, load_settings
from warehouse.storage.lake import Lake
from warehouse.storage.objectstore import filesystem
from warehouse.tables import (
    ADS_SCORE_DAILY,
    ADS_USER_RISK_SCORES,
    DWD_QUARANTINE,
    DWD_REQUEST,
    OPS_AUDIT_LOG,
    OPS_BOOKS,
)

UTC = dt.UTC
#: How long a cluster may take, at most, before the test calls it hung: a guard, not a target. On a
#: slow day of this 2-core machine one daily run took 140 s on the Celery worker (each task a fresh
#: process, the lake behind moto), so the guards leave several times that.
PARSE_S, INGEST_S, BACKFILL_S = 600, 600, 2400
START = dt.date(2026, 1, 1)
#: The first run of the weekly training (its start date, a Monday): a run before it has no task.
TRAIN_AT = dt.datetime(2026, 1, 5, tzinfo=UTC)
KEY = "test-key-not-a-secret-0123456789"
#: What each writing task must record an asset event for when it succeeds.
OUTLETS = {
    "land": ["ods.feedback_raw", "ods.request_log_raw", "ops.landed_files"],
    "dwd.load_prices": ["dwd.model_price"],
    "dwd.load_quotas": ["dwd.tenant_quota"],
    "dwd.build_dwd": ["dwd.feedback", "dwd.quarantine", "dwd.request", "dwd.span", "ops.books"],
    "dws.build_dws": ["dws.model_features", "dws.tenant_features", "dws.user_features"],
    "features.materialize": ["features.online_store"],
    "features.check_consistency": ["ads.feature_consistency"],
    "ads.build_ads": [
        f"ads.{mart}"
        for mart in (
            "capacity",
            "cold_starts",
            "data_quality",
            "latency_breakdown",
            "model_daily",
            "retry_policy",
            "retry_storms",
            "server_drift",
            "tenant_daily",
            "token_anomalies",
            "trace_breakdown",
            "version_mix",
        )
    ],
    "apply_retention": ["dwd.quarantine", "ods.feedback_raw", "ods.request_log_raw"],
    "train": ["models.user_risk"],
    "scores.score": ["ads.user_risk_scores"],  # each shard's
    "scores.summarize_scores": ["ads.score_daily", "features.online_store"],
    "report.write_report": ["reports.strata_report"],
}


@dataclasses.dataclass
class SingleRuns:
    """The embedded runs: their reports, and the lake after the first pass and after the rerun."""

    settings: Settings
    manifest: dict[str, Any]
    days: list[str]
    plan: list[Run]
    rerun: list[Run]
    reports: list[RunReport]
    after_first_pass: dict[str, pl.DataFrame]
    attempts_after_first_pass: int
    after_rerun: dict[str, pl.DataFrame]
    log: Path


def _midnight_after(day: str) -> dt.datetime:
    return dt.datetime.combine(dt.date.fromisoformat(day) + dt.timedelta(days=1), dt.time(), UTC)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("generated")
    return folder, generate(folder, days=3, requests_per_day=300, seed=11, start=START, fault_rate=0.02)


def _landing(tmp_path_factory: pytest.TempPathFactory, generated: tuple[Path, dict[str, Any]], name: str) -> Path:
    """A landing zone holding the reference data (prices, quotas); the day's files arrive later."""
    folder = tmp_path_factory.mktemp(name)
    for reference in ("prices.csv", "quotas.csv"):
        (folder / reference).write_bytes((generated[0] / reference).read_bytes())
    return folder


@pytest.fixture(scope="module")
def single_runs(
    tmp_path_factory: pytest.TempPathFactory, generated: tuple[Path, dict[str, Any]], cluster: ClusterRun
) -> SingleRuns:
    """The embedded runs, while the cluster works (its test compares its lake with this one)."""
    folder, manifest = generated
    home = tmp_path_factory.mktemp("embedded")
    landing = _landing(tmp_path_factory, generated, "landing")
    settings = load_settings(
        {"STRATA_HOME": str(home), "STRATA_LANDING_DIR": str(landing), "STRATA_PSEUDONYM_KEY": KEY}
    )
    days = sorted(manifest["days"])
    plan: list[Run] = []
    for day in days:
        plan += [Run("strata_ingest", _midnight_after(day)), Run("strata_daily", _midnight_after(day))]
    plan.append(Run("strata_retention", plan[-1].at + dt.timedelta(hours=4)))
    # The same dates again, with the first weekly training (its week holds the three days) before the
    # last day: that day's rerun also scores its users, one mapped task per shard.
    rerun = [run for run in plan if run.dag_id in ("strata_ingest", "strata_daily")]
    rerun.insert(-2, Run("strata_train", TRAIN_AT))
    snapshots: list[tuple[dict[str, pl.DataFrame], int]] = []

    def before(run: Run) -> None:
        if run.dag_id == "strata_ingest":  # the day's files arrive, as the AI service drops them
            arrive(folder, settings.landing_dir, (run.at - dt.timedelta(days=1)).date().isoformat())

    def on_run(report: RunReport) -> None:
        reports.append(report)
        if len(reports) in (len(plan), len(plan) + len(rerun)):  # what a rerun and a backfill must equal
            snapshots.append((lake_rows(settings), Lake(settings).read_frame(OPS_AUDIT_LOG).height))

    log = home / "airflow.log"
    # The same dates twice, in one Airflow child process. It yields the CPU to the cluster, whose
    # path (fresh processes for every task, S3 requests) is the longer one; the shared GX worker is
    # started here first, so the child's priority is not its own.
    reports: list[RunReport] = []
    runs = plan + rerun
    warm_up()
    run_dags(settings, runs, log=log, before=before, on_run=on_run, nice=10)
    failed = [(r.dag_id, r.at, r.errors) for r in reports if not r.ok]
    assert not failed and len(reports) == len(runs), f"{failed}; see {log}"
    return SingleRuns(settings, manifest, days, plan, rerun, reports, *snapshots[0], snapshots[1][0], log)


@pytest.mark.timeout(2400)  # its fixture runs 14 DAG runs
def test_every_dag_runs_through_airflow_and_a_rerun_leaves_every_table_equal(single_runs: SingleRuns) -> None:
    settings, manifest, days = single_runs.settings, single_runs.manifest, single_runs.days
    first, again = single_runs.reports[: len(single_runs.plan)], single_runs.reports[len(single_runs.plan) :]
    assert [r.dag_id for r in again].count("strata_daily") == len(days)  # the reruns: each day's ingest and daily
    for report in single_runs.reports:
        succeeded = [task.split("[")[0] for task, state in report.tasks.items() if state == "success"]
        for task in set(succeeded) | set(report.events):  # a mapped task records one event per map index
            expected = OUTLETS.get(task, []) * succeeded.count(task)
            assert sorted(report.events.get(task, [])) == sorted(expected), f"{report.dag_id} {report.at} {task}"
        # A task with nothing to do is skipped, never faked.
        assert all(state in ("success", "skipped") for state in report.tasks.values()), report.tasks
    daily = {r.interval[0][:10]: r for r in first if r.dag_id == "strata_daily"}
    assert list(daily) == days  # each run built its interval's first day
    for day, truth in manifest["days"].items():
        counts = daily[day].results["dwd.build_dwd"]["counts"]
        assert (counts["request_published"], counts["request_duplicates"]) == (truth["requests"], truth["duplicates"])
    requests = Lake(settings).read_frame(DWD_REQUEST).group_by("event_date").len()
    assert {str(d): n for d, n in requests.iter_rows()} == {d: m["requests"] for d, m in manifest["days"].items()}
    books = Lake(settings).read_frame(OPS_BOOKS)
    assert books.height >= len(days) and books.get_column("balanced").all()
    assert Lake(settings).read_frame(DWD_QUARANTINE).height > 0  # the faults went to quarantine, not away

    # Later days' feedback labelled earlier days' requests, and their ADS caught up in the same pass.
    assert sum(daily[day].results["ads.build_ads"]["counts"]["days_caught_up"] for day in days) >= len(days) - 1
    assert all(r.results["land"]["counts"]["files_landed"] == 0 for r in again if r.dag_id == "strata_ingest")
    # Running the same dates again changes no table; the last day's scores are new.
    scored_tables = {ADS_USER_RISK_SCORES.name, ADS_SCORE_DAILY.name}
    assert set(single_runs.after_rerun) - set(single_runs.after_first_pass) == scored_tables
    assert_same_lake(
        single_runs.after_first_pass,
        {name: rows for name, rows in single_runs.after_rerun.items() if name not in scored_tables},
    )

    # The weekly training registered a model, and the last day's rerun scored its users shard by shard.
    trained, scored = (next(r for r in again if r.dag_id == "strata_train"), again[-1])
    assert trained.tasks == {"train": "success"} and trained.results["train"]["counts"]["features"] > 0
    shards = sorted(task for task, state in scored.tasks.items() if task.startswith("scores.score["))
    assert shards == ["scores.score[0]", "scores.score[1]"] and scored.tasks["scores.summarize_scores"] == "success"
    scores = Lake(settings).read_frame(ADS_USER_RISK_SCORES)
    users = Lake(settings).read_frame(DWD_REQUEST, filters=[("event_date", "=", dt.date.fromisoformat(days[-1]))])
    assert scores.get_column("event_date").unique().to_list() == [dt.date.fromisoformat(days[-1])]
    assert scores.height == users.get_column("user_pseudonym").drop_nulls().n_unique()
    assert sum(scored.results[shard]["counts"]["entities"] for shard in shards) == scores.height
    assert Lake(settings).read_frame(ADS_SCORE_DAILY).height == 1
    # Each daily run wrote the report of the week ending with its day into the lake.
    for day in days:
        _assert_report(settings, dt.date.fromisoformat(day))
    # Every attempt is still on the record.
    assert Lake(settings).read_frame(OPS_AUDIT_LOG).height > single_runs.attempts_after_first_pass


def _assert_report(settings: Settings, day: dt.date) -> None:
    """The lake holds the report of the week ending with ``day``, a whole page with its charts."""
    uri = report_uri(settings, day - dt.timedelta(days=6), day)
    fs, path = filesystem(settings, uri)
    with fs.open_input_stream(path) as stream:
        page = stream.read()
    assert page.startswith(b"<!DOCTYPE html>") and page.endswith(b"</html>") and b'data-chart="books"' in page


# ---- the same DAGs on a cluster -------------------------------------------------------------------


class Cluster:
    """Airflow's API server, scheduler, DAG processor and one Celery worker, each its own process."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.url = f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}/api/v2"
        self.processes: list[subprocess.Popen[bytes]] = []
        self._booting: threading.Thread | None = None
        self._boot_error: BaseException | None = None

    def airflow(self, *args: str, timeout: float = 600) -> str:
        done = subprocess.run([self._bin(), *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"airflow {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        return done.stdout

    def _bin(self) -> str:
        return str(Path(sys.executable).parent / "airflow")

    def boot(self) -> None:
        """Migrate the metadata database and start every component, in the background."""

        def run() -> None:
            try:
                self.airflow("db", "migrate")
                for component in (["api-server"], ["scheduler"], ["dag-processor"], ["celery", "worker"]):
                    with open(self.logs / f"{'-'.join(component)}.log", "ab") as out:
                        self.processes.append(
                            subprocess.Popen(
                                [self._bin(), *component],
                                env=self.env,
                                stdout=out,
                                stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                            )
                        )
            except BaseException as exc:  # reported by ready()
                self._boot_error = exc

        self._booting = threading.Thread(target=run, daemon=True)
        self._booting.start()

    def ready(self) -> None:
        """Wait until the components run and the DAG processor has parsed the four DAGs."""
        assert self._booting is not None
        self._booting.join()
        if self._boot_error is not None:
            raise self._boot_error
        self.wait(lambda: len(self.get("/dags").get("dags", [])) == 4, "the DAGs to be parsed", PARSE_S)

    def stop(self) -> None:
        if self._booting is not None:
            self._booting.join()
        stop_tree(*self.processes)

    def get(self, path: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as response:
                return json.load(response)
        except OSError:
            return {}

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def wait(self, ready: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [p.args for p in self.processes if p.poll() is not None]
            assert not dead, f"Airflow component(s) died: {dead}; logs in {self.logs}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}; logs in {self.logs}"
            time.sleep(1)

    def runs(self, dag_id: str, run_type: str) -> list[dict[str, Any]]:
        return self.get(f"/dags/{dag_id}/dagRuns?run_type={run_type}&limit=100").get("dag_runs", [])

    def wait_runs(self, dag_id: str, run_type: str, count: int, timeout: float) -> list[dict[str, Any]]:
        def finished() -> bool:
            runs = self.runs(dag_id, run_type)
            return len(runs) == count and all(r["state"] in ("success", "failed") for r in runs)

        self.wait(finished, f"{count} {run_type} run(s) of {dag_id}", timeout)
        runs = self.runs(dag_id, run_type)
        failed = {r["dag_run_id"]: self.task_states(dag_id, r["dag_run_id"]) for r in runs if r["state"] != "success"}
        assert not failed, f"{dag_id}: runs failed: {failed}; logs in {self.logs}"
        return runs

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        tis = self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances").get("task_instances", [])
        return {t["task_id"]: t["state"] for t in tis}


@dataclasses.dataclass
class ClusterRun:
    """The cluster's part, run in the background: land every day's files (all there from the start),
    then backfill the days; what it found, or the error that stopped it."""

    node: Cluster
    settings: Settings
    days: list[str]
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    error: BaseException | None = None

    def __call__(self) -> None:
        try:
            self.node.ready()
            self.node.post("/dags/strata_ingest/dagRuns", {"logical_date": _midnight_after(self.days[-1]).isoformat()})
            self.node.wait_runs("strata_ingest", "manual", 1, INGEST_S)
            self.node.airflow(
                "backfill",
                "create",
                "--dag-id",
                "strata_daily",
                "--from-date",
                self.days[0],
                "--to-date",
                self.days[-1],
                "--max-active-runs",
                "1",
            )
            self.runs = self.node.wait_runs("strata_daily", "backfill", len(self.days), BACKFILL_S)
        except BaseException as exc:  # raised again by the test
            self.error = exc


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
    generated: tuple[Path, dict[str, Any]],
    postgres_server: Postgres,
    redis_server: Redis,
) -> Iterator[ClusterRun]:
    """A cluster on fresh services, booting and then working in the background from the moment it is
    asked for; everything is stopped, dropped and flushed afterwards."""
    logs = tmp_path_factory.mktemp("cluster")
    landing = _landing(tmp_path_factory, generated, "cluster-landing")
    days = sorted(generated[1]["days"])
    for day in days:  # every day's files, as the embedded runs see them arrive one day at a time
        arrive(generated[0], landing, day)
    with (
        s3_server(logs / "moto.log") as endpoint,
        postgres_server.database("strata_af_") as database,
        redis_server.databases(12, 13) as (broker, results),
    ):
        create_bucket(endpoint, "strata-lake")
        settings = load_settings(
            {
                "STRATA_HOME": str(logs / "home"),
                "STRATA_LAKE_URI": "s3://strata-lake/lake",
                "STRATA_LANDING_DIR": str(landing),
                "STRATA_S3_ENDPOINT_URL": endpoint,
                "STRATA_S3_REGION": "us-east-1",
                # the writers' locks every worker sees: advisory locks in Postgres
                "STRATA_LOCK_URL": postgres_server.url(database),
                "STRATA_PSEUDONYM_KEY": KEY,
                **S3_KEYS,
            }
        )
        env = {
            **os.environ,
            **airflow_env(
                settings,
                port=free_port(),
                log_port=free_port(),
                database=postgres_server.url(database, scheme="postgresql+psycopg"),
                celery_broker=broker,
                celery_results=results,
            ),
        }
        # Runs here are triggered or backfilled, never scheduled by the clock; the scheduler looks for
        # work five times a second, not once (ten task transitions a day), and the DAG files, which
        # do not change here, are parsed once.
        env["AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE"] = "False"
        env["AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"] = "0.2"
        env["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] = "3600"
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = "True"
        node = Cluster(env, logs)
        node.boot()
        job = ClusterRun(node, settings, days)
        worker = threading.Thread(target=job, name="cluster", daemon=True)
        worker.start()
        try:
            yield job
        finally:
            node.stop()
            worker.join(timeout=30)


@pytest.mark.timeout(PARSE_S + INGEST_S + BACKFILL_S)
def test_the_same_dags_on_postgres_celery_and_s3_where_a_backfill_of_three_days_equals_three_single_runs(
    cluster: ClusterRun, single_runs: SingleRuns, generated: tuple[Path, dict[str, Any]]
) -> None:
    node, settings = cluster.node, cluster.settings
    manifest = generated[1]
    assert node.env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert node.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg://")
    assert cluster.days == single_runs.days
    deadline = time.monotonic() + PARSE_S + INGEST_S + BACKFILL_S
    while not cluster.runs and cluster.error is None:  # the job's own waits end it within the deadline
        assert time.monotonic() < deadline, f"the cluster's job hung; logs in {node.logs}"
        time.sleep(1)
    if cluster.error is not None:
        raise cluster.error
    runs = cluster.runs
    assert sorted(r["data_interval_start"][:10] for r in runs) == single_runs.days
    for run in runs:  # on the Celery worker, every layer as in the embedded runs
        states = node.task_states("strata_daily", run["dag_run_id"])
        assert states["dwd.build_dwd"] == "success" and set(states.values()) <= {"success", "skipped"}, states
    events = node.get("/assets/events?source_dag_id=strata_daily&limit=200").get("asset_events", [])
    built = sorted(e["source_run_id"] for e in events if e["source_task_id"] == "dwd.build_dwd")
    assert built == sorted(r["dag_run_id"] for r in runs for _ in OUTLETS["dwd.build_dwd"])
    # The lake is on S3 and equals, table by table, the lake the three single runs left.
    assert DWD_REQUEST.uri(settings).startswith("s3://")
    requests = Lake(settings).read_frame(DWD_REQUEST).group_by("event_date").len()
    assert {str(d): n for d, n in requests.iter_rows()} == {d: m["requests"] for d, m in manifest["days"].items()}
    assert_same_lake(single_runs.after_first_pass, lake_rows(settings))
    # Each run wrote the week ending with its day into the lake on S3, where every worker finds it.
    for day in cluster.days:
        _assert_report(settings, dt.date.fromisoformat(day))
