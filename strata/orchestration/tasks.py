"""What a DAG task runs: one step of :data:`STEPS`, for its run's data interval.

A task in ``dags/`` imports this inside its body and hands over its step's name and its
context. Here, and nowhere else, it is decided:

* where the lake is: a task refuses to run unless ``STRATA_HOME`` is set explicitly to an
  absolute path (a worker started in another folder must not quietly start a second lake);
* which step runs: :data:`STEPS` declares every step a task may name; a task naming any
  other fails at once, saying which steps there are;
* what the step is given: the run's data interval becomes its date (the interval's first
  day; the last for a step over a week), never ``now()``;
* how a failure reads, from Strata's error family (:mod:`contracts.errors`), never from built-in
  types: one line naming the step, the date and what to do, marked as a refusal (an
  :class:`~contracts.errors.InputError`: configuration, bad or missing input; retrying cannot help)
  or as a failure that a retry may cure (a :class:`~contracts.errors.TransientError` or
  :class:`~contracts.errors.ConflictError`: storage, a lock held, a commit conflict); an exception
  outside the family is a bug (:class:`StepBug`), its traceback kept for the task's log;
* when there is nothing to do, which is a *skip*: reference data that has not changed, a
  consistency check the online store has moved on from, scoring before a model is registered,
  a step whose input is not there yet (:class:`~warehouse.errors.NotYet`: a week without
  reviews to learn from), and a date that holds no data (:class:`~warehouse.errors.NoData`: today
  before its files arrive, a quiet day; the CLI refuses such a date instead).

It never imports ``airflow``; ``dags/steps.py`` turns the outcomes into Airflow's skip and fail.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

from contracts.errors import InputError, StrataError, TransientError
from strata import pipeline
from strata.pipeline import StepResult
from warehouse.errors import NoData, NotYet
from warehouse.settings import ConfigError, Settings, load_settings

#: A run's data interval, as Airflow gives it (timezone-aware).
Interval: TypeAlias = tuple[dt.datetime, dt.datetime]
#: A step's arguments after the settings: positional, then keyword.
Arguments: TypeAlias = tuple[tuple[Any, ...], dict[str, Any]]
#: What a step takes from its run: its arguments, from the settings and the run's data interval.
Given: TypeAlias = Callable[[Settings, Interval], Arguments]


class Skip(Exception):
    """Nothing for this task to do; the message says why (the task is marked skipped)."""


class StepRefused(InputError):
    """A retry cannot help (configuration, bad or missing input); the message says what to do."""


class UnknownStep(StepRefused):
    """A task names a step :data:`STEPS` does not declare: the DAG file and the registry disagree."""


class StepFailed(TransientError):
    """The step failed in a way a retry may cure (storage, a lock held, a commit conflict)."""


class StepBug(Exception):
    """The step raised an exception outside Strata's error family: a bug, neither bad input nor a
    fault of the store; its traceback is the cause, for the task's log."""


def _day(moment: dt.datetime) -> dt.date:
    return moment.astimezone(dt.UTC).date()


# ---- what a step takes from its run ---------------------------------------------------------------


def first_day(settings: Settings, interval: Interval) -> Arguments:
    """The interval's first day: the day a daily layer builds."""
    return (_day(interval[0]),), {}


def last_day(settings: Settings, interval: Interval) -> Arguments:
    """The interval's last day: a model is trained on the whole week, up to it."""
    return (_day(interval[1] - dt.timedelta(microseconds=1)),), {}


def end_as_today(settings: Settings, interval: Interval) -> Arguments:
    """The interval's end as ``today``: retention counts its cutoff back from the run's "today"."""
    return (), {"today": _day(interval[1])}


def landing_zone(settings: Settings, interval: Interval) -> Arguments:
    """The landing zone: ingest lands whatever new files are there, whatever the interval."""
    return ([settings.landing_dir],), {}


def changed_reference(file: str, table_name: str) -> Given:
    """The landing zone's reference ``file`` when it changed since ``table_name`` was last written;
    else :class:`Skip` (a daily run need not rewrite unchanged reference data)."""

    def given(settings: Settings, interval: Interval) -> Arguments:
        from warehouse.storage.lake import Lake
        from warehouse.tables import table

        path = settings.landing_dir / file
        if not path.is_file():
            raise Skip(f"no {file} at {path}: nothing to load (drop one there to load it)")
        delta = Lake(settings).open_table(table(table_name))
        if delta is not None:
            last = delta.history(1)[0]
            if path.stat().st_mtime * 1000 < last["timestamp"]:
                raise Skip(
                    f"{path} has not changed since {table_name} version {last['version']} was written: nothing to load"
                )
        return (path,), {}

    return given


def first_day_unless_moved_on(settings: Settings, interval: Interval) -> Arguments:
    """The interval's first day, unless the online store has moved on from it (a rerun, a backfill):
    then :class:`Skip`, since the check of that day was made when the store reflected it."""
    from features.consistency import moved_on

    day = _day(interval[0])
    later = moved_on(settings, day)
    if later is not None:
        raise Skip(
            f"the online store reflects the features up to {later:%Y-%m-%d %H:%M} UTC: the check of {day} "
            "was made when the store reflected that day, and its rows stand"
        )
    return (day,), {}


@dataclasses.dataclass(frozen=True)
class TaskStep:
    """A pipeline step a DAG task may run, and what it takes from the run."""

    function: Callable[..., StepResult[Any]]
    #: The step's arguments after the settings, from the run's data interval; raises :class:`Skip`
    #: when the run holds nothing for the step to do.
    given: Given = first_day
    #: Run as one mapped task per shard: each is given ``shard=(i, n)`` (``[i, n]`` through XCom),
    #: and the shards are there once a model is registered (:func:`shards`).
    sharded: bool = False


#: Every step a DAG task may run, by the name the task gives (its own name): here and nowhere else.
STEPS: dict[str, TaskStep] = {
    "land": TaskStep(pipeline.land, landing_zone),
    "load_prices": TaskStep(pipeline.load_prices, changed_reference("prices.csv", "dwd.model_price")),
    "load_quotas": TaskStep(pipeline.load_quotas, changed_reference("quotas.csv", "dwd.tenant_quota")),
    "build_dwd": TaskStep(pipeline.build_dwd),
    "build_dws": TaskStep(pipeline.build_dws),
    "materialize": TaskStep(pipeline.materialize),
    "check_consistency": TaskStep(pipeline.check_consistency, first_day_unless_moved_on),
    "build_ads": TaskStep(pipeline.build_ads),
    "score": TaskStep(pipeline.score, sharded=True),
    "summarize_scores": TaskStep(pipeline.summarize_scores),
    "write_report": TaskStep(pipeline.write_report),
    "train": TaskStep(pipeline.train, last_day),
    "apply_retention": TaskStep(pipeline.apply_retention, end_as_today),
}


def find_step(name: str) -> TaskStep:
    """The step a task named ``name`` runs; :class:`UnknownStep` (a refusal) for a name not in :data:`STEPS`."""
    try:
        return STEPS[name]
    except KeyError:
        raise UnknownStep(
            f"no step {name!r}: a DAG task names a step strata.orchestration.tasks.STEPS does not "
            f"declare (known: {', '.join(STEPS)}); fix the task's name or declare the step"
        ) from None


# ---- running a step -------------------------------------------------------------------------------


def task_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings of a scheduled task; refuses unless ``STRATA_HOME`` is set to an absolute path."""
    env = os.environ if env is None else env
    home = env.get("STRATA_HOME", "")
    if not home:
        raise StepRefused(
            "STRATA_HOME is not set: a scheduled task does not guess where the lake is (a worker "
            "started elsewhere would begin a second lake); set STRATA_HOME to the same absolute "
            "path on the scheduler and every worker"
        )
    if not Path(home).is_absolute():
        raise StepRefused(
            f"STRATA_HOME={home!r} is relative, so each worker would resolve it against its own "
            "folder; set it to an absolute path"
        )
    try:
        return load_settings(env)
    except ConfigError as exc:
        raise StepRefused(str(exc)) from None


def interval_of(context: Mapping[str, Any]) -> Interval:
    """The run's data interval; refused for a run without one (asset-triggered, or no logical date)."""
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        raise StepRefused(
            "this run has no data interval (a run without a logical date, such as an asset-triggered "
            "one): trigger it with a logical date, or use `airflow backfill create`"
        )
    return start, end


def _registered_model(settings: Settings, name: str) -> None:
    """Skip scoring until a model is registered (the weekly training registers the first)."""
    from batch_inference.registry import BadCard, ModelError, get

    try:
        get(settings, name)
    except BadCard:
        raise  # a registered model that is unusable fails the task; it is not "not yet"
    except ModelError as exc:
        raise Skip(f"{exc}: scoring is skipped until strata_train registers one") from None


def one_line(exc: BaseException) -> str:
    """An error as one line: its message's first line, else its type's name."""
    text = " ".join(str(exc).split("\n", 1)[0].split())
    return text or type(exc).__name__


def run_step(name: str, context: Mapping[str, Any], **options: Any) -> dict[str, object]:
    """Run step ``name`` for the context's data interval; returns the step's summary (for XCom)."""
    step = find_step(name)
    settings = task_settings()
    interval = interval_of(context)
    args, given = step.given(settings, interval)
    if step.sharded and "shard" in options:  # a mapped task's shard comes through XCom as a list [i, n]
        options = {**options, "shard": tuple(options["shard"])}
    what = f"{name} for {_day(interval[0])}"
    try:
        result = step.function(settings, *args, **{**given, **options})
    except (NotYet, NoData) as exc:
        raise Skip(f"{what}: {one_line(exc)}") from None
    except StrataError as exc:
        if not exc.retry:
            raise StepRefused(f"{what}: {one_line(exc)}") from exc
        raise StepFailed(f"{what} failed ({type(exc).__name__}): {one_line(exc)}") from exc
    except Exception as exc:
        raise StepBug(f"{what} failed on a bug ({type(exc).__name__}): {one_line(exc)}") from exc
    return result.summary()


def shards(name: str, model: str = "user_risk") -> list[list[int]]:
    """The shards a mapped step runs over, ``[i, n]`` each (``STRATA_SCORE_SHARDS`` of them);
    a skip while no model is registered."""
    step = find_step(name)
    if not step.sharded:
        raise StepRefused(
            f"{name} is not a sharded step: a mapped task runs one of "
            f"{', '.join(n for n, s in STEPS.items() if s.sharded)}"
        )
    settings = task_settings()
    _registered_model(settings, model)
    return [[i, settings.score_shards] for i in range(settings.score_shards)]
