"""CLI start-up: ``strata --help`` against a bare ``python -c pass``, same interpreter, same run;
and the DAG files' parse: each file's import after ``airflow.sdk``'s, which every parse pays.

Every command a person or a scheduler runs pays the start-up first, so the library's heavy
imports (Feast, GX, dbt, Airflow, ONNX Runtime) must stay out of it. Each command runs
once to warm the bytecode cache, then alternately, and the median of each is compared.
Target: start-up within 25× the bare interpreter's (importing polars alone would break it).
The scheduler parses every DAG file in a loop: the slowest file's import stays under 0.3 s.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import Measurement, scaled

RUNS = scaled(9, 1)
#: Child processes that each import the DAG files once (Airflow's own import takes seconds).
DAG_RUNS = scaled(3, 1)
#: A child that imports ``airflow.sdk`` (its lazy definitions loaded), then each DAG file: the seconds of each.
_DAG_IMPORTS = r"""
import importlib, json, sys, time
started = time.perf_counter()
import airflow.sdk as sdk
sdk.dag, sdk.task, sdk.task_group, sdk.Asset, sdk.CronDataIntervalTimetable, sdk.DeltaDataIntervalTimetable
sdk_seconds = time.perf_counter() - started
sys.path.insert(0, sys.argv[1])
files = {}
for name in sys.argv[2:]:
    started = time.perf_counter()
    importlib.import_module(name[:-3])
    files[name] = time.perf_counter() - started
print(json.dumps({"sdk": sdk_seconds, "files": files}))
"""


def _seconds(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True)
    return time.perf_counter() - started


def run(workdir: Path) -> list[Measurement]:
    help_cmd = [sys.executable, "-m", "strata.cli", "--help"]
    bare = [sys.executable, "-c", "pass"]
    _seconds(help_cmd), _seconds(bare)  # warm-up
    ours, base = [], []
    for _ in range(RUNS):
        ours.append(_seconds(help_cmd))
        base.append(_seconds(bare))
    return [
        Measurement(
            "strata --help, wall seconds (median)",
            statistics.median(ours),
            "s",
            "python -c pass",
            statistics.median(base),
            higher_is_better=False,
            target_ratio=0.04,
        ),
        _dag_parse(),
    ]


def _dag_parse() -> Measurement:
    """The slowest DAG file's import (median over child processes) against ``airflow.sdk``'s own."""
    from strata.orchestration.env import dags_folder

    folder = dags_folder()
    files = sorted(p.name for p in folder.glob("strata_*.py"))
    slowest, sdk = [], []
    for _ in range(DAG_RUNS):
        done = subprocess.run(
            [sys.executable, "-c", _DAG_IMPORTS, str(folder), *files], check=True, capture_output=True, text=True
        )
        answer = json.loads(done.stdout.splitlines()[-1])
        assert set(answer["files"]) == set(files), answer
        slowest.append(max(answer["files"].values()))
        sdk.append(answer["sdk"])
    return Measurement(
        "slowest DAG file import at parse time (target < 0.3 s)",
        statistics.median(slowest),
        "s",
        "import airflow.sdk",
        statistics.median(sdk),
        higher_is_better=False,
    )
