"""Run Strata's DAGs through Airflow's ``dag.test()``, in a child process, and report each run.

``dag.test()`` runs a DAG's real tasks in order on the metadata database (the embedded SQLite
under ``STRATA_HOME/airflow``), without a scheduler: the demo and the tests use it to run the
DAG files exactly as a scheduler would, interval by interval. Importing Airflow reconfigures
a process's logging (docs/design.md §8), so the parent — the CLI, a test — never does: it starts
``python -m strata.orchestration.dag_runs``, hands it one run at a time on stdin, and reads
one JSON report per finished run back through a pipe; Airflow's own output goes to a log file.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from warehouse.settings import Settings


@dataclasses.dataclass(frozen=True)
class Run:
    """One DAG run: the run due at ``at``, whose data interval ends there.

    (The daily run at 2026-01-02 00:00 builds 2026-01-01.) ``tasks`` limits it to the tasks
    whose id matches that regular expression, without their upstream. Without ``at``: the run a
    scheduler started now makes by the DAG's timetable (catchup off), after ``later`` others (0: its
    first, the latest complete interval; 1: the one after it).
    """

    dag_id: str
    at: dt.datetime | None = None
    tasks: str | None = None
    later: int = 0


@dataclasses.dataclass(frozen=True)
class RunReport:
    """What one run did: its state, each task's state, the assets it wrote, the steps' results."""

    dag_id: str
    at: str
    state: str
    interval: tuple[str, str]
    seconds: float
    #: task id (``[i]`` appended for a mapped task) → final state
    tasks: dict[str, str]
    #: task id → the assets it recorded an event for (every outlet of a task that succeeded)
    events: dict[str, list[str]]
    #: task id → the step's summary it returned (XCom)
    results: dict[str, Any]
    #: task id → the one-line error of a failed task
    errors: dict[str, str]

    @property
    def ok(self) -> bool:
        return self.state == "success"


def run_dags(
    settings: Settings,
    runs: list[Run],
    *,
    log: Path,
    retries: bool = False,
    before: Callable[[Run], None] | None = None,
    on_run: Callable[[RunReport], None] | None = None,
    nice: int = 0,
) -> list[RunReport]:
    """Run ``runs`` in order in one child process; returns one report per run that finished.

    ``before(run)`` is called before each run starts (to drop the files that arrive then),
    ``on_run(report)`` as each finishes. Stops at the first run that does not succeed.
    Without ``retries`` a failing task fails at once (the DAGs' retry delays are for a
    scheduler, not for someone watching). Airflow's own output goes to ``log``. ``nice``
    lowers the child's CPU priority (``os.nice``), for runs that should yield to other work.
    """
    from strata.orchestration.env import airflow_env

    env = {**os.environ, **airflow_env(settings)}
    log.parent.mkdir(parents=True, exist_ok=True)
    read_fd, write_fd = os.pipe()
    reports: list[RunReport] = []
    with open(log, "ab") as log_file:
        child = subprocess.Popen(
            [sys.executable, "-m", "strata.orchestration.dag_runs", str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=log_file,
            stderr=log_file,
            env=env,
            pass_fds=(write_fd,),
            text=True,
        )
    os.close(write_fd)
    assert child.stdin is not None
    try:
        with os.fdopen(read_fd) as answers:
            child.stdin.write(json.dumps({"retries": retries, "nice": nice}) + "\n")
            for run in runs:
                if before is not None:
                    before(run)
                child.stdin.write(
                    json.dumps(
                        {
                            "dag_id": run.dag_id,
                            "at": run.at and run.at.isoformat(),
                            "tasks": run.tasks,
                            "later": run.later,
                        }
                    )
                    + "\n"
                )
                child.stdin.flush()
                line = answers.readline()
                if not line:
                    break
                fields = json.loads(line)
                report = RunReport(**{**fields, "interval": tuple(fields["interval"])})
                reports.append(report)
                if on_run is not None:
                    on_run(report)
                if not report.ok:
                    break
    finally:  # the child ends when its input does, whatever happened here
        child.stdin.close()
        code = child.wait()
    if code != 0 and (not reports or reports[-1].ok):
        raise RuntimeError(f"the Airflow child process exited with code {code} before finishing its runs: see {log}")
    return reports


# ---- the child: everything below runs with Airflow imported ------------------------------------


def _report(dag_id: str, at: str, dag_run: Any, seconds: float) -> dict[str, Any]:
    """Read back what the run did from the metadata database."""
    from airflow.models.asset import AssetEvent
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=dag_run.run_id).all()
        tasks = {(ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"): str(ti.state) for ti in tis}
        events: dict[str, list[str]] = {}
        for event in session.query(AssetEvent).filter_by(source_dag_id=dag_id, source_run_id=dag_run.run_id):
            events.setdefault(event.source_task_id, []).append(event.asset.name)
        results = {}
        for x in session.query(XComModel).filter_by(dag_id=dag_id, run_id=dag_run.run_id, key="return_value"):
            name = x.task_id if x.map_index < 0 else f"{x.task_id}[{x.map_index}]"
            results[name] = XComModel.deserialize_value(x)
    return {
        "dag_id": dag_id,
        "at": at,
        "state": str(dag_run.state),
        "seconds": round(seconds, 2),
        "interval": [dag_run.data_interval_start.isoformat(), dag_run.data_interval_end.isoformat()],
        "tasks": tasks,
        "events": {task: sorted(names) for task, names in events.items()},
        "results": results,
        "errors": _ERRORS.pop_all(),
    }


class _Errors:
    """The one-line error of each failed task, recorded by a failure callback (tasks run in this process)."""

    def __init__(self) -> None:
        self.lines: dict[str, str] = {}

    def record(self, context: dict[str, Any]) -> None:
        ti, exc = context.get("ti"), context.get("exception")
        name, index = str(getattr(ti, "task_id", "?")), getattr(ti, "map_index", -1)
        if index >= 0:
            name += f"[{index}]"
        self.lines[name] = (" ".join(str(exc).split()) or type(exc).__name__) if exc else "failed"

    def pop_all(self) -> dict[str, str]:
        lines, self.lines = self.lines, {}
        return lines


_ERRORS = _Errors()


def _scheduled(dag: Any, later: int) -> dt.datetime:
    """When the run a scheduler started now makes ``later`` runs from now is due (its data interval's
    end: ``dag.test()`` infers the same interval from it, for a cron or a delta timetable alike)."""
    from airflow.serialization.encoders import coerce_to_core_timetable
    from airflow.timetables.base import TimeRestriction

    timetable = coerce_to_core_timetable(dag.timetable)  # the scheduler's, as it reads the DAG's
    restriction = TimeRestriction(earliest=dag.start_date, latest=dag.end_date, catchup=False)
    last = None
    for _ in range(later + 1):
        info = timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
        if info is None:
            raise RuntimeError(f"{dag.dag_id} schedules no run after {last}")
        last = info.data_interval
    assert last is not None
    return last.end


def _child(results_fd: int) -> int:
    options = json.loads(sys.stdin.readline())
    os.nice(options["nice"])
    from airflow.dag_processing.dagbag import BundleDagBag
    from airflow.utils import db

    from strata.orchestration.env import dags_folder

    db.upgradedb()
    # As Airflow's own processes do: the bundle's folder goes on sys.path (for dags/assets.py).
    bag = BundleDagBag(dag_folder=str(dags_folder()), bundle_path=dags_folder(), bundle_name="dags-folder")
    if bag.import_errors:
        raise RuntimeError(f"DAG files failed to import: {bag.import_errors}")
    with os.fdopen(results_fd, "w") as out:
        for line in sys.stdin:  # one run at a time: the parent may prepare each one (files arriving)
            run = json.loads(line)
            dag = bag.get_dag(run["dag_id"])
            if dag is None:
                raise RuntimeError(f"no DAG {run['dag_id']!r} in {dags_folder()}")
            if run["tasks"]:
                dag = dag.partial_subset(
                    [t.task_id for t in dag.tasks if re.search(run["tasks"], t.task_id)], include_upstream=False
                )
            if not options["retries"]:
                for task in dag.tasks:
                    task.retries = 0
            for task in dag.tasks:
                task.on_failure_callback = [_ERRORS.record]
            at = dt.datetime.fromisoformat(run["at"]) if run["at"] else _scheduled(dag, run["later"])
            started = time.monotonic()
            dag_run = dag.test(logical_date=at)
            report = _report(run["dag_id"], at.isoformat(), dag_run, time.monotonic() - started)
            out.write(json.dumps(report, default=str) + "\n")
            out.flush()
            if report["state"] != "success":
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(_child(int(sys.argv[1])))
