"""The Celery configuration of Strata's Airflow workers (``[celery] celery_config_options``).

Airflow's own, read after the worker process has imported the lake's libraries (polars, pyarrow,
deltalake, DuckDB): every task runs in a process forked from the worker, which then starts with
them instead of spending ~1 s importing them (a daily run is nine tasks). Importing them starts no
thread, so forking afterwards is safe — but *using* polars starts its thread pool, which a forked
child does not have: its first parallel query then waits forever (docs/design.md §8). So
nothing here computes: the contracts, whose loading compiles patterns with polars, are loaded by
each task (~0.5 s); ``tests/unit/test_dags.py`` forks after this import and runs polars. Only Airflow's own
processes read this module (the scheduler's Celery executor imports it too). Importing it imports
the ``strata`` package first, so the tasks inherit :data:`strata.PROCESS_ENV` (ONNX Runtime's
telemetry off) whatever environment the worker was started with.
"""

from __future__ import annotations

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

import warehouse.storage.lake  # polars, pyarrow, deltalake
import warehouse.storage.publish  # noqa: F401 - the write–audit–publish path of every writing step

CELERY_CONFIG = DEFAULT_CELERY_CONFIG
