"""The one bridge from a DAG task to the pipeline: run a named step, and speak Airflow's language.

``strata.orchestration.tasks`` does the work and never imports Airflow; this module turns its
outcomes into what Airflow understands: a step with nothing to do (or not built yet) is a
skip, a refusal fails at once with its one-line message (retrying cannot help), and any
other failure propagates, so the task's bounded retries apply.
"""

from __future__ import annotations

from typing import Any


def run_step(name: str, context: dict[str, Any], **options: Any) -> dict[str, object]:
    """Run pipeline step ``name`` for this task's data interval; its summary goes to XCom."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from strata.orchestration import tasks

    try:
        return tasks.run_step(name, context, **options)
    except tasks.Skip as exc:
        raise AirflowSkipException(str(exc)) from None
    except tasks.StepRefused as exc:
        raise AirflowFailException(str(exc)) from exc


def shards(name: str) -> list[list[int]]:
    """The shards a mapped step runs over (skipped while the step does not exist)."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from strata.orchestration import tasks

    try:
        return tasks.shards(name)
    except tasks.Skip as exc:
        raise AirflowSkipException(str(exc)) from None
    except tasks.StepRefused as exc:
        raise AirflowFailException(str(exc)) from exc
