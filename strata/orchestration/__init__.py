"""Strata under a scheduler: what an Airflow task runs, Airflow's environment, and DAG runs.

Nothing here imports ``airflow`` at module level, and only :mod:`strata.orchestration.dag_runs`
imports it at all — inside the child process it starts — because importing Airflow
reconfigures the process's logging (docs/design.md §8). The DAG files themselves live in ``dags/``.
"""
