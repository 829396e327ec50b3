"""The one bridge from a DAG task to the pipeline: run a named step, and speak Airflow's language.

``strata.orchestration.tasks`` does the work and never imports Airflow; this module turns its
outcomes into what Airflow understands: a step with nothing to do is a skip, a refusal (an
unknown step among them) fails at once with its one-line message (retrying cannot help), and
any other failure propagates, so the retries of :data:`DEFAULT_ARGS` apply: a fault that may pass
as one line, a bug (an exception outside Strata's error family) with its traceback.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

#: Every DAG's ``default_args``, so every task has one retry policy. What reaches a retry may pass
#: on one (storage, a lock another writer holds, a commit conflict): two more tries, the first 1-2
#: minutes later, the second 2-4 (exponential backoff; Airflow's jitter keeps tasks that failed
#: together from retrying together; never more than 10): contention of a few minutes passes, and
#: an outage fails the task within minutes. A skip upstream (nothing to do) does not stop the
#: tasks after it; a failure does.
DEFAULT_ARGS: dict[str, Any] = {
    "retries": 2,
    "retry_delay": dt.timedelta(minutes=1),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": dt.timedelta(minutes=10),
    "trigger_rule": "none_failed",
}


def run_step(name: str, context: Mapping[str, Any], **options: Any) -> dict[str, object]:
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
    """The shards a mapped step runs over (skipped while no model is registered)."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from strata.orchestration import tasks

    try:
        return tasks.shards(name)
    except tasks.Skip as exc:
        raise AirflowSkipException(str(exc)) from None
    except tasks.StepRefused as exc:
        raise AirflowFailException(str(exc)) from exc
