"""Running the ADS dbt project in-process (``dbtRunner``), each run in its own folder under STRATA_HOME.

The project (this package's folder) holds only sources: its profile reads every value from
``--vars``, which :func:`invoke` fills — the DuckDB file of the run, the days to build — and the
lake tables it reads are attached to dbt's connection by name (:mod:`warehouse.ads.lake_access`).
dbt's ``target/``, ``logs/`` and the DuckDB file go to ``$STRATA_HOME/ads/runs/<run>/``, a folder
per run, so two builds (two dates scheduled at once) never share a DuckDB file (one writer per
file) and nothing is written into the source tree. A run's folder is removed when the run
succeeded and kept for a week when it failed (its ``logs/dbt.log`` says what happened, beside the
compiled SQL; builds write no JSON artifacts, their results are read in memory). The project is
parsed once, not per run: dbt's
partial parsing keeps its manifest in ``$STRATA_CACHE_DIR/dbt-parse/`` and each command is handed
a fresh copy (:func:`_parsed`).

dbt takes seconds to import: it is imported inside :func:`invoke`. dbt keeps global state, so
one process runs one dbt command at a time (a lock); separate processes (Airflow tasks) run
side by side.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.errors import InputError
from warehouse.progress import Progress
from warehouse.settings import Settings
from warehouse.tables import Table

#: The dbt project: dbt_project.yml, profiles.yml, models/, macros/, tests/.
PROJECT_DIR = Path(__file__).resolve().parent
#: Named so DuckDB's catalog (named after the file) differs from every schema of the project.
DUCKDB_FILE = "build.duckdb"
#: Failed runs' folders are kept this long for a person to read their logs.
KEEP_FAILED = dt.timedelta(days=7)
_lock = threading.Lock()
log = logging.getLogger(f"strata.{__name__}")


class DbtFailed(InputError):
    """A dbt command failed: which nodes, with dbt's own messages, and where its logs are."""

    def __init__(self, command: str, failures: Sequence[str], run_dir: Path):
        self.failures = list(failures)
        self.run_dir = run_dir
        detail = "\n".join(f"  {f}" for f in self.failures) or "  (no node failed: see the log)"
        super().__init__(f"dbt {command} failed, nothing published:\n{detail}\n(dbt's log and compiled SQL: {run_dir})")


@dataclass(frozen=True)
class RunDir:
    """One dbt run's own folder: ``target/``, ``logs/`` and its DuckDB file."""

    path: Path

    @property
    def duckdb_path(self) -> Path:
        return self.path / DUCKDB_FILE

    @property
    def target_path(self) -> Path:
        return self.path / "target"

    @property
    def log_path(self) -> Path:
        return self.path / "logs"

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def new_run(settings: Settings, label: str) -> RunDir:
    """A fresh run folder under ``$STRATA_HOME/ads/runs`` (old failed runs are cleared first)."""
    root = settings.home / "ads" / "runs"
    root.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - KEEP_FAILED.total_seconds()
    for old in root.iterdir():
        if old.is_dir() and old.stat().st_mtime < cutoff:
            shutil.rmtree(old, ignore_errors=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    path = root / f"{label}-{stamp}-{os.getpid()}-{secrets.token_hex(3)}"
    path.mkdir()
    return RunDir(path)


@dataclass(frozen=True)
class NodeTiming:
    """One node of a dbt run: its kind (model, test, unit_test), status and execution time."""

    name: str
    resource_type: str
    status: str
    seconds: float


@dataclass(frozen=True)
class DbtRun:
    """What one dbt command did, and where the time went."""

    run_dir: RunDir
    #: Seconds from the call to the first node: importing dbt, parsing the project, connecting.
    startup_s: float
    #: Seconds of the whole call.
    total_s: float
    nodes: list[NodeTiming] = field(default_factory=list)

    def seconds(self, resource_type: str) -> float:
        """Execution time summed over the nodes of one kind (``model``, ``test``, ``unit_test``)."""
        return sum(n.seconds for n in self.nodes if n.resource_type == resource_type)


def invoke(
    settings: Settings,
    command: Sequence[str],
    run: RunDir,
    variables: Mapping[str, Any],
    *,
    sources: Sequence[Table] = (),
    versions: Mapping[str, int] | None = None,
    project_dir: Path = PROJECT_DIR,
    progress: Progress | None = None,
) -> DbtRun:
    """Run ``dbt <command>`` on the project in-process; :class:`DbtFailed` when any node failed.

    ``variables`` join the one every run gets (the run's DuckDB file); ``sources`` are the lake
    tables the command reads, attached at their current version, or at the one ``versions`` names (by table
    name: what the caller records as read). dbt prints nothing: its log goes
    to the run folder, node progress to ``progress``.
    """
    started = time.perf_counter()
    first_node: list[float] = []

    def on_event(event: Any) -> None:
        # An exception here would fail the node that logged the event: only read what is there.
        name = event.info.name
        if name == "LogStartLine" and not first_node:
            first_node.append(time.perf_counter())
        if progress is not None and name in ("LogModelResult", "LogTestResult"):
            total = getattr(event.data, "total", 0) or getattr(event.data, "num_models", 0)
            progress(f"dbt {command[0]}", int(event.data.index), int(total))

    all_vars = {"duckdb_path": str(run.duckdb_path), **variables}
    args = [*command, *_arguments(project_dir, run.target_path, run.log_path, all_vars)]
    with _lock:
        from dbt.adapters.duckdb.connections import DuckDBConnectionManager
        from dbt.cli.main import dbtRunner

        from warehouse.ads.lake_access import using

        manifest = _parsed(settings.cache_dir / "dbt-parse", project_dir)
        try:
            with using(settings, sources, versions):
                outcome = dbtRunner(manifest=manifest, callbacks=[on_event]).invoke(args)
        finally:
            # dbt-duckdb keeps its DuckDB instance open after the command; close it so the build
            # can read the run's file (DuckDB refuses a second configuration of an open file).
            DuckDBConnectionManager.close_all_connections()
    total = time.perf_counter() - started
    nodes = [
        NodeTiming(r.node.name, str(r.node.resource_type), str(r.status), float(r.execution_time or 0.0))
        for r in getattr(outcome.result, "results", None) or []
    ]
    if not outcome.success:
        failures = [
            f"{r.node.resource_type} {r.node.name}: {(r.message or '').strip()}"
            for r in getattr(outcome.result, "results", None) or []
            if str(r.status) in ("error", "fail", "runtime error")
        ]
        if outcome.exception is not None:
            failures.append(f"{type(outcome.exception).__name__}: {outcome.exception}")
        raise DbtFailed(command[0], failures, run.path)
    startup = (first_node[0] if first_node else time.perf_counter()) - started
    log.info("dbt %s passed: %d node(s) in %.1f s (%.1f s to start)", command[0], len(nodes), total, startup)
    return DbtRun(run, startup, total, nodes)


#: The run's own values, as placeholders while parsing: a parse records refs, sources and configs,
#: which none of them changes (they are read when the models compile, in the run).
_PARSE_VARS = {"days": ["1970-01-01"], "freshness_sla_hours": {}, "empty_sources": {}, "missing_columns": {}}


def _parsed(parses: Path, project_dir: Path) -> Any:
    """The project's manifest from dbt's partial parsing, in a folder of its own under ``parses``.

    There the vars a parse sees never change (a DuckDB file named like every run's, so the
    manifest's catalog is theirs), so an unchanged project parses in 0.1–0.2 s, not 1.5 s (3–4 s
    in a new process). The project names no lake, so one parse serves every home (the folder is
    in the user's cache). Parsed afresh for every command: a build changes the manifest it is
    given. Processes take turns on the folder.
    """
    from dbt.cli.main import dbtRunner

    folder = parses / hashlib.sha256(str(project_dir.resolve()).encode()).hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    variables = {"duckdb_path": str(folder / DUCKDB_FILE), **_PARSE_VARS}
    with open(folder / "parse.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        outcome = dbtRunner().invoke(
            ["parse", "--no-write-json", *_arguments(project_dir, folder / "target", folder / "logs", variables)]
        )
    if not outcome.success:
        raise DbtFailed("parse", [f"{type(outcome.exception).__name__}: {outcome.exception}"], folder)
    return outcome.result


def _arguments(project_dir: Path, target: Path, logs: Path, variables: Mapping[str, Any]) -> list[str]:
    return [
        "--project-dir",
        str(project_dir),
        "--profiles-dir",
        str(project_dir),
        "--target-path",
        str(target),
        "--log-path",
        str(logs),
        "--vars",
        json.dumps(variables),
        "--log-level",
        "none",
        "--log-level-file",
        "debug",
        "--no-use-colors",
        "--no-send-anonymous-usage-stats",
    ]
