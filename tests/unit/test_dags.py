"""The DAG files: they load, import nothing heavy, and follow the house's rules.

Airflow is imported in a child process (importing it reconfigures logging), which reports
what it found as JSON; the assertions run here.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from typing import Any

import pytest

from strata import pipeline
from strata.orchestration import tasks as task_steps
from strata.orchestration.env import dags_folder
from warehouse.tables import all_tables

DAGS = dags_folder()
DAG_FILES = sorted(p.name for p in DAGS.glob("strata_*.py"))
#: Imported by a DAG file at parse time, these would slow every parse of every scheduler loop.
HEAVY = (
    "polars",
    "pyarrow",
    "deltalake",
    "duckdb",
    "pandas",
    "feast",
    "great_expectations",
    "dbt",
    "onnxruntime",
    "sklearn",
    "strata",
    "warehouse",
    "contracts",
    "features",
    "batch_inference",
)

_PROBE = r"""
import importlib, json, sys
from pathlib import Path
dags = sys.argv[1]
import airflow.sdk as sdk
# Airflow's own definitions load lazily on first use: load them first, so only what the files import is counted.
sdk.dag, sdk.task, sdk.task_group, sdk.Asset, sdk.CronDataIntervalTimetable, sdk.DeltaDataIntervalTimetable
before = set(sys.modules)
sys.path.insert(0, dags)
for name in sys.argv[2:]:
    importlib.import_module(name[:-3])
imported = sorted(set(sys.modules) - before)
from airflow.dag_processing.dagbag import BundleDagBag
from airflow.sdk.definitions.mappedoperator import MappedOperator
from airflow.serialization.encoders import coerce_to_core_timetable
bag = BundleDagBag(dag_folder=dags, bundle_path=Path(dags), bundle_name="dags-folder")
facts = {}
for dag_id, dag in bag.dags.items():
    facts[dag_id] = {
        "fileloc": Path(dag.fileloc).name, "timetable": type(dag.timetable).__name__,
        "periodic": coerce_to_core_timetable(dag.timetable).periodic, "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "tags": sorted(dag.tags), "doc": dag.doc_md or "", "start_date": str(dag.start_date),
        "tasks": {t.task_id: {"outlets": [a.name for a in t.outlets], "retries": t.retries,
                              "retry_delay": t.retry_delay.total_seconds(),
                              "backoff": t.retry_exponential_backoff, "max_retry_delay": str(t.max_retry_delay),
                              "mapped": isinstance(t, MappedOperator),
                              "upstream": sorted(t.upstream_task_ids),
                              "trigger_rule": getattr(t.trigger_rule, "value", t.trigger_rule)}
                  for t in dag.tasks},
    }
print("FACTS " + json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "imported": imported,
                             "dags": facts}))
"""


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(DAGS), *DAG_FILES], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("FACTS "))
    return json.loads(line.removeprefix("FACTS "))


def test_the_dagbag_loads_every_dag_with_no_import_errors(probe: dict[str, Any]) -> None:
    assert probe["errors"] == {}
    assert set(probe["dags"]) == {"strata_ingest", "strata_daily", "strata_train", "strata_retention"}
    assert {d["fileloc"] for d in probe["dags"].values()} == set(DAG_FILES)  # one DAG per file, named for it


def test_no_dag_file_imports_anything_heavy_at_parse_time(probe: dict[str, Any]) -> None:
    """What keeps a parse fast (its time is measured by ``make bench BENCH=cli``: under 0.3 s a file)."""
    heavy = [m for m in probe["imported"] if m.split(".")[0] in HEAVY]
    assert not heavy, f"DAG files imported heavy or project modules at parse time: {heavy[:10]}"


def test_every_dag_is_periodic_backfillable_and_bounded(probe: dict[str, Any]) -> None:
    for dag_id, dag in probe["dags"].items():
        assert dag["periodic"] and dag["timetable"] in ("CronDataIntervalTimetable", "DeltaDataIntervalTimetable"), (
            f"{dag_id}: needs a data-interval timetable (an asset-triggered run has no interval, no backfill)"
        )
        assert dag["catchup"] is False and dag["max_active_runs"] == 1, dag_id
        assert "strata" in dag["tags"] and dag["doc"].strip(), dag_id
        assert "+00:00" in dag["start_date"], f"{dag_id}: start_date must be a fixed UTC date"
        for task_id, task in dag["tasks"].items():
            assert 1 <= task["retries"] <= 3 and task["retry_delay"] >= 30, f"{dag_id}.{task_id}: bounded retries"
    # One retry policy, from one place (dags/steps.py's DEFAULT_ARGS).
    policies = {
        (t["retries"], t["retry_delay"], t["backoff"], t["max_retry_delay"])
        for dag in probe["dags"].values()
        for t in dag["tasks"].values()
    }
    assert len(policies) == 1, policies


def test_the_daily_dag_has_a_group_per_layer_in_order_and_maps_scores_over_shards(probe: dict[str, Any]) -> None:
    tasks = dict(probe["dags"]["strata_daily"]["tasks"])  # a copy: the pop below leaves the shared probe whole
    assert tasks["dws.build_dws"]["upstream"] == ["dwd.build_dwd"]
    assert tasks["features.materialize"]["upstream"] == ["dws.build_dws"]
    assert tasks["ads.build_ads"]["upstream"] == ["features.check_consistency"]
    assert tasks["scores.score_shards"]["upstream"] == ["ads.build_ads"]
    assert tasks["scores.score"]["mapped"] and tasks["scores.score"]["upstream"] == ["scores.score_shards"]
    assert tasks["scores.summarize_scores"]["upstream"] == ["scores.score"]
    # A task with nothing to do is skipped; the tasks after it still run, a failure stops them. The day's
    # score summary needs every shard (skipped with them until a model is registered).
    assert tasks.pop("scores.summarize_scores")["trigger_rule"] == "all_success"
    assert all(t["trigger_rule"] == "none_failed" for t in tasks.values())
    # The pipeline's order of a day's layers is the DAG's order.
    order = [task_id.split(".")[-1] for task_id in tasks]
    daily = [step.__name__ for step in pipeline.DAILY]
    assert [s for s in order if s in daily] == daily


def test_the_dags_run_every_declared_step_and_no_other(probe: dict[str, Any]) -> None:
    """The registry declares what the DAG files run: no step left out of every DAG, none a DAG names undeclared."""
    run = {task_id.split(".")[-1] for dag in probe["dags"].values() for task_id in dag["tasks"]}
    run.discard("score_shards")  # the mapped scores' shard list (tasks.shards("score"))
    assert run == set(task_steps.STEPS)


def test_every_writing_task_declares_its_tables_as_outlets(probe: dict[str, Any]) -> None:
    registered = {t.name for t in all_tables()}
    non_tables = {"features.online_store", "models.user_risk", "reports.strata_report"}
    for dag_id, dag in probe["dags"].items():
        for task_id, task in dag["tasks"].items():
            if task_id.endswith("score_shards"):
                assert task["outlets"] == []
                continue
            assert task["outlets"], f"{dag_id}.{task_id} writes but declares no outlet"
            for name in task["outlets"]:
                layer = name.split(".")[0]
                assert name in registered or name in non_tables or layer == "ads", f"{name}: not a known table"
    assert {"dwd.request", "dwd.feedback", "dwd.quarantine", "ops.books"} <= set(
        probe["dags"]["strata_daily"]["tasks"]["dwd.build_dwd"]["outlets"]
    )


def test_library_code_and_the_cli_never_import_airflow() -> None:
    """Importing Airflow reconfigures a process's logging: only the dag.test() child and the Celery
    configuration Airflow's workers read may (docs/design.md §8)."""
    root = DAGS.parent
    orchestration = root / "strata" / "orchestration"
    allowed = {orchestration / "dag_runs.py", orchestration / "celery_config.py"}
    found = []
    for package in ("strata", "features", "batch_inference", "warehouse", "contracts"):
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and not node.level
                    else []
                )
                if any(n == "airflow" or n.startswith("airflow.") for n in names) and path not in allowed:
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not found, f"airflow imported outside the dag.test() child: {found}"


@pytest.mark.parametrize("name", DAG_FILES)
def test_dag_files_are_thin_airflow_sdk_at_top_level_and_a_task_runs_the_step_it_is_named_for(name: str) -> None:
    tree = ast.parse((DAGS / name).read_text())
    top_imports = {
        (n.module if isinstance(n, ast.ImportFrom) else n.names[0].name)
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom))
    }
    assert top_imports <= {"__future__", "datetime", "airflow.sdk", "assets", "steps"}, top_imports
    tasks = [
        f
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef)
        and any("task" in ast.unparse(d) and "task_group" not in ast.unparse(d) for d in f.decorator_list)
    ]
    assert tasks
    for function in tasks:
        calls = [
            c
            for stmt in function.body
            for c in ast.walk(stmt)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
        ]
        assert len(calls) == 1 and calls[0].func.id in ("run_step", "shards"), ast.unparse(function)
        step = ast.literal_eval(calls[0].args[0])
        assert step == function.name or (function.name == "score_shards" and step == "score")
        assert step in task_steps.STEPS, f"{name}: task {function.name} runs {step!r}, which no step is declared as"


_FORKED = """
import os, sys, time
import strata.orchestration.celery_config  # what a Celery worker imports before it forks its tasks
pid = os.fork()
if pid == 0:  # a task: parallel polars work, as an ingest's ledger read does
    import polars as pl
    pl.DataFrame({"a": list(range(300_000)) * 2}).unique()
    from warehouse.tables import all_tables
    all_tables()
    os._exit(0)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    if os.waitpid(pid, os.WNOHANG)[0]:
        sys.exit(0)
    time.sleep(0.05)
os.kill(pid, 9)
sys.exit("the forked task hung")
"""


def test_a_task_forked_from_the_celery_worker_can_run_polars() -> None:
    """Polars' thread pool does not survive fork(): had the worker used polars (loading the contracts
    compiles their patterns with it) before forking, a task's first parallel query would wait forever."""
    done = subprocess.run([sys.executable, "-c", _FORKED], capture_output=True, text=True, timeout=120, cwd=DAGS.parent)
    assert done.returncode == 0, done.stderr[-2000:]
