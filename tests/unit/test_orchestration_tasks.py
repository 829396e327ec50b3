"""What a DAG task runs: the home check, the step registry, interval → arguments, and one-line errors."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batch_inference.registry import register
from contracts.errors import ConflictError, InputError, StrataError, TransientError
from strata import pipeline
from strata.orchestration import tasks
from strata.pipeline import StepResult
from tests.small_model import STAND_IN_CARD

UTC = dt.UTC
DAY = {
    "data_interval_start": dt.datetime(2026, 1, 4, tzinfo=UTC),
    "data_interval_end": dt.datetime(2026, 1, 5, tzinfo=UTC),
}
WEEK = {
    "data_interval_start": dt.datetime(2026, 1, 5, tzinfo=UTC),
    "data_interval_end": dt.datetime(2026, 1, 12, tzinfo=UTC),
}


def stand_in(monkeypatch: pytest.MonkeyPatch, name: str, function: Any) -> None:
    """Run ``function`` in place of the registered step ``name``, taking what the step takes."""
    monkeypatch.setitem(tasks.STEPS, name, dataclasses.replace(tasks.STEPS[name], function=function))


def raising(error: Exception) -> Callable[..., StepResult]:
    """A step that raises ``error``."""

    def step(*_: Any, **__: Any) -> StepResult:
        raise error

    return step


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, strata_env: Path) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Record what pipeline steps are given, standing in for the real ones."""
    seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def step(*args: Any, **kwargs: Any) -> StepResult:
        seen.append((args[1:], kwargs))
        return StepResult("recorded", {"rows": 3}, {"dwd.request": 7}, None)

    for name in ("train", "score", "build_dws", "apply_retention", "land"):
        stand_in(monkeypatch, name, step)
    return seen


@pytest.mark.parametrize(("home", "message"), [(None, "STRATA_HOME is not set"), ("rel/home", "is relative")])
def test_a_task_refuses_to_run_without_an_explicit_absolute_home(
    monkeypatch: pytest.MonkeyPatch, home: str | None, message: str
) -> None:
    if home is None:
        monkeypatch.delenv("STRATA_HOME", raising=False)
    else:
        monkeypatch.setenv("STRATA_HOME", home)
    with pytest.raises(tasks.StepRefused, match=message):
        tasks.run_step("build_dwd", DAY)


def test_a_task_naming_an_unknown_step_fails_saying_which_steps_there_are(strata_env: Path) -> None:
    """A renamed step fails its task at once (a refusal: no retry), never a silent skip."""
    known = re.escape(f"(known: {', '.join(tasks.STEPS)})")  # every declared step, in the registry's order
    with pytest.raises(tasks.UnknownStep, match=rf"^no step 'build_dwd_v2': .*{known}"):
        tasks.run_step("build_dwd_v2", DAY)
    with pytest.raises(tasks.UnknownStep, match=rf"^no step 'build_dwd_v2': .*{known}"):
        tasks.shards("build_dwd_v2")
    assert issubclass(tasks.UnknownStep, tasks.StepRefused)
    with pytest.raises(tasks.StepRefused, match="build_dwd is not a sharded step: a mapped task runs one of score"):
        tasks.shards("build_dwd")


def test_the_registry_declares_the_pipelines_steps_under_their_own_names() -> None:
    assert {name: step.function for name, step in tasks.STEPS.items()} == {
        name: getattr(pipeline, name) for name in tasks.STEPS
    }
    assert [name for name, step in tasks.STEPS.items() if step.sharded] == ["score"]


def test_a_run_without_a_data_interval_is_refused(strata_env: Path) -> None:
    with pytest.raises(tasks.StepRefused, match="no data interval"):
        tasks.run_step("build_dwd", {"data_interval_start": None, "data_interval_end": None})


def test_the_interval_becomes_each_steps_date(
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]], strata_env: Path
) -> None:
    assert tasks.run_step("build_dws", DAY) == {
        "step": "recorded",
        "counts": {"rows": 3},
        "versions": {"dwd.request": 7},
    }
    tasks.run_step("train", WEEK)
    tasks.run_step("apply_retention", DAY)
    tasks.run_step("score", DAY, shard=[1, 2])
    tasks.run_step("land", DAY)
    assert calls == [
        ((dt.date(2026, 1, 4),), {}),  # a day's layer: the interval's first day
        ((dt.date(2026, 1, 11),), {}),  # training: up to the week's last day
        ((), {"today": dt.date(2026, 1, 5)}),  # retention counts back from the interval's end
        ((dt.date(2026, 1, 4),), {"shard": (1, 2)}),
        (([strata_env / "landing"],), {}),
    ]


def test_prices_load_only_when_a_price_list_is_there_and_changed(
    strata_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = strata_env / "landing" / "prices.csv"
    with pytest.raises(tasks.Skip, match=r"no prices\.csv at"):
        tasks.run_step("load_prices", DAY)
    prices.parent.mkdir(parents=True)
    prices.write_text("model,effective_from,input_price_per_1k,output_price_per_1k\nm1,2026-01-01,0.5,1.5\n")
    assert tasks.run_step("load_prices", DAY)["versions"] == {"dwd.model_price": 0}
    with pytest.raises(tasks.Skip, match=r"has not changed since dwd\.model_price version 0"):
        tasks.run_step("load_prices", DAY)
    prices.write_text("model,effective_from,input_price_per_1k,output_price_per_1k\nm1,2026-01-01,0.6,1.5\n")
    assert tasks.run_step("load_prices", DAY)["versions"] == {"dwd.model_price": 1}


def test_scoring_waits_for_a_registered_model_then_shards_come_from_the_settings(
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]], strata_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(
        tasks.Skip, match=r"no model 'user_risk' is registered: scoring is skipped until strata_train registers one"
    ):
        tasks.shards("score")
    settings = tasks.task_settings()
    register(
        settings,
        STAND_IN_CARD,
        b"onnx bytes",
    )
    monkeypatch.setenv("STRATA_SCORE_SHARDS", "3")
    assert tasks.shards("score") == [[0, 3], [1, 3], [2, 3]]


def test_a_bad_input_is_a_one_line_refusal_a_fault_of_the_store_may_be_retried_and_a_bug_is_a_bug(
    monkeypatch: pytest.MonkeyPatch, strata_env: Path
) -> None:
    def refuses(*_: Any) -> StepResult:
        raise InputError("no ODS rows with event_date 2026-01-04: nothing to build\n(check the date)")

    def unreachable(*_: Any) -> StepResult:
        raise TransientError("the object store could not be reached: connection reset by peer")

    def bug(*_: Any) -> StepResult:
        return {"rows": 3}["event_date"]  # type: ignore[return-value]

    stand_in(monkeypatch, "build_dws", refuses)
    with pytest.raises(tasks.StepRefused) as refused:
        tasks.run_step("build_dws", DAY)
    assert str(refused.value) == "build_dws for 2026-01-04: no ODS rows with event_date 2026-01-04: nothing to build"
    stand_in(monkeypatch, "build_dws", unreachable)
    with pytest.raises(
        tasks.StepFailed, match=r"^build_dws for 2026-01-04 failed \(TransientError\): the object store"
    ):
        tasks.run_step("build_dws", DAY)
    # A KeyError is no refusal: it is a bug, and its traceback is the cause the task's log shows.
    stand_in(monkeypatch, "build_dws", bug)
    with pytest.raises(
        tasks.StepBug, match=r"^build_dws for 2026-01-04 failed on a bug \(KeyError\): 'event_date'$"
    ) as raised:
        tasks.run_step("build_dws", DAY)
    assert not isinstance(raised.value, StrataError) and isinstance(raised.value.__cause__, KeyError)


HOLDER = """
import sys
from warehouse.settings import load_settings
from warehouse.storage import locks
from warehouse.tables import DWD_REQUEST

with locks.hold(load_settings(), write=[(DWD_REQUEST, {"event_date": "2026-01-04"})]):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_through_the_dag_bridge_a_refusal_fails_at_once_and_a_real_lock_conflict_or_a_bug_is_retried(
    monkeypatch: pytest.MonkeyPatch, strata_env: Path
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from dags import steps

    stand_in(monkeypatch, "build_dws", raising(InputError("bad input")))
    with pytest.raises(AirflowFailException, match="bad input"):  # failed now: no retry
        steps.run_step("build_dws", DAY)
    stand_in(monkeypatch, "build_dws", raising(KeyError("event_date")))
    with pytest.raises(tasks.StepBug):  # not AirflowFailException: DEFAULT_ARGS' retries apply
        steps.run_step("build_dws", DAY)
    # The real DWD step, while another process writes its partition: the lock it cannot take is a conflict.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], env=os.environ.copy(), text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(
            tasks.StepFailed, match=r"^build_dwd for 2026-01-04 failed \(LockHeld\): dwd\.request"
        ) as failed:
            steps.run_step("build_dwd", DAY)
        assert isinstance(failed.value.__cause__, ConflictError) and failed.value.retry
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert steps.DEFAULT_ARGS["retries"] == 2


def test_a_step_whose_input_is_not_there_yet_is_a_skip(monkeypatch: pytest.MonkeyPatch, strata_env: Path) -> None:
    from batch_inference.registry import NotEnoughLabels

    def unlabelled(*_: Any) -> StepResult:
        raise NotEnoughLabels("the training split (12 examples) lacks positives or negatives: wait for more reviews")

    stand_in(monkeypatch, "train", unlabelled)
    with pytest.raises(tasks.Skip, match=r"^train for 2026-01-05: the training split .* wait for more reviews$"):
        tasks.run_step("train", WEEK)


def test_the_real_dwd_step_of_a_date_without_data_is_a_skip_saying_so(strata_env: Path) -> None:
    # A scheduler meets such days (today, before its files arrive); the CLI refuses them instead.
    with pytest.raises(
        tasks.Skip,
        match=r"^build_dwd for 2026-01-04: no ODS rows with event_date 2026-01-04: "
        r"nothing to build .*ingest that day's files first",
    ):
        tasks.run_step("build_dwd", DAY)
