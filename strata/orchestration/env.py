"""Airflow's configuration, derived from Strata's settings: environment variables, never a file.

One function gives every Airflow process its environment — the embedded default (SQLite
metadata under ``STRATA_HOME/airflow``, LocalExecutor) and a cluster (Postgres metadata,
CeleryExecutor with a Redis broker) alike — so the DAG files, the scheduler, the API server,
the workers and ``dag.test()`` agree on where the lake is and how to reach each other.
Airflow's facts behind it were measured on this stack (docs/design.md §8).
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from strata import PROCESS_ENV
from warehouse.settings import Settings

#: Small on purpose: the embedded default shares a laptop with the work it schedules.
EMBEDDED_PARALLELISM = 4


def dags_folder() -> Path:
    """The folder of Strata's DAG files (``dags/`` beside the packages, in a checkout or an image)."""
    return Path(__file__).resolve().parents[2] / "dags"


def jwt_secret(settings: Settings) -> str:
    """The secret every Airflow component signs task tokens with, kept under the Airflow home (mode 600).

    On a cluster every component must be given the same one (``AIRFLOW__API_AUTH__JWT_SECRET``).
    """
    path = settings.airflow_home / "jwt_secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            return path.read_text().strip()
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(48))
    return path.read_text().strip()


def airflow_env(
    settings: Settings,
    *,
    port: int = 8080,
    log_port: int = 8793,
    database: str | None = None,
    celery_broker: str | None = None,
    celery_results: str | None = None,
    parallelism: int = EMBEDDED_PARALLELISM,
) -> dict[str, str]:
    """Environment variables for every Airflow process of one deployment (merge over ``os.environ``).

    ``database`` is a ``postgresql+psycopg://`` URL for Postgres metadata (default: SQLite under
    the Airflow home); ``celery_broker`` switches to the CeleryExecutor with that broker (a
    ``redis://`` URL) and ``celery_results`` as its result backend. Services bind 127.0.0.1;
    Strata's own settings travel along, so tasks find the same lake (``STRATA_HOME`` explicit), and so
    do :data:`strata.PROCESS_ENV`'s defaults (ONNX Runtime's telemetry off).
    """
    home = settings.airflow_home
    home.mkdir(parents=True, exist_ok=True)
    sql = database or f"sqlite:///{home / 'airflow.db'}"
    env = {
        **settings.to_env(),
        **{name: os.environ.get(name, value) for name, value in PROCESS_ENV.items()},  # no telemetry
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder()),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__PARALLELISM": str(parallelism),
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor" if celery_broker else "LocalExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": sql,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret(settings),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_port),
        # A task's supervisor notices its process has exited at its next heartbeat check: at the
        # default 5 s, every task (a skipped one too) ends ~5 s late (measured, Airflow 3.3).
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
        # The CLI of this venv first, for the processes `airflow standalone` starts by name.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    if database:  # psycopg 3 for both engines, else Airflow asks for asyncpg
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] = database
    if celery_broker:
        env |= {
            "AIRFLOW__CELERY__BROKER_URL": celery_broker,
            "AIRFLOW__CELERY__RESULT_BACKEND": celery_results or celery_broker,
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            # tasks start with the lake's libraries imported (strata/orchestration/celery_config.py)
            "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": "strata.orchestration.celery_config.CELERY_CONFIG",
        }
    return env
