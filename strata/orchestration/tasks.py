"""What a DAG task runs: one named step of :mod:`strata.pipeline`, for its run's data interval.

A task in ``dags/`` imports this inside its body and hands over its name and context. Here,
and nowhere else, it is decided:

* where the lake is: a task refuses to run unless ``STRATA_HOME`` is set explicitly to an
  absolute path (a worker started in another folder must not quietly start a second lake);
* which step runs: looked up by name in the pipeline, so a layer whose step has not landed
  yet is *skipped* with one line saying so — never faked — and runs once it lands;
* what the step is given: the run's data interval becomes its date (the interval's first
  day; the last for a step over a week), never ``now()``;
* how a failure reads: one line naming the step, the date and what to do, marked as a
  refusal (configuration, bad or missing input: retrying cannot help) or as a failure that
  a retry may cure (storage, a lock held, a commit conflict); a step whose input is not there
  yet (:class:`~warehouse.errors.NotYet`: a week without reviews to learn from) is a skip.

It never imports ``airflow``; ``dags/steps.py`` turns the outcomes into Airflow's skip and fail.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from warehouse.errors import NotYet
from warehouse.settings import ConfigError, Settings, load_settings

#: A run's data interval, as Airflow gives it (timezone-aware).
Interval = tuple[dt.datetime, dt.datetime]


class Skip(Exception):
    """Nothing for this task to do; the message says why (the task is marked skipped)."""


class StepMissing(Skip):
    """The pipeline has no step of this name yet: its layer has not been built."""


class StepRefused(RuntimeError):
    """A retry cannot help (configuration, bad or missing input); the message says what to do."""


class StepFailed(RuntimeError):
    """The step failed in a way a retry may cure (storage, a lock held, a commit conflict)."""


#: Errors a retry cannot cure: the same input gives the same error.
_REFUSALS: tuple[type[BaseException], ...] = (ConfigError, ValueError, LookupError, TypeError, FileNotFoundError,
                                              NotADirectoryError, PermissionError)


def task_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings of a scheduled task; refuses unless ``STRATA_HOME`` is set to an absolute path."""
    env = os.environ if env is None else env
    home = env.get("STRATA_HOME", "")
    if not home:
        raise StepRefused("STRATA_HOME is not set: a scheduled task does not guess where the lake is (a worker "
                          "started elsewhere would begin a second lake); set STRATA_HOME to the same absolute "
                          "path on the scheduler and every worker")
    if not Path(home).is_absolute():
        raise StepRefused(f"STRATA_HOME={home!r} is relative, so each worker would resolve it against its own "
                          "folder; set it to an absolute path")
    try:
        return load_settings(env)
    except ConfigError as exc:
        raise StepRefused(str(exc)) from None


def interval_of(context: Mapping[str, Any]) -> Interval:
    """The run's data interval; refused for a run without one (asset-triggered, or no logical date)."""
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        raise StepRefused("this run has no data interval (a run without a logical date, such as an asset-triggered "
                          "one): trigger it with a logical date, or use `airflow backfill create`")
    return start, end


def _day(moment: dt.datetime) -> dt.date:
    return moment.astimezone(dt.timezone.utc).date()


def _arguments(name: str, settings: Settings, interval: Interval,
               options: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """How a run's interval becomes a step's arguments (the default: the interval's first day)."""
    start, end = interval
    if name == "land":
        return (settings, [settings.landing_dir]), options
    if name in _REFERENCE:
        return (settings, _new_reference(settings, name)), options
    if name == "apply_retention":  # the cutoff counts back from the interval's end, the run's "today"
        return (settings,), {"today": _day(end), **options}
    if name == "check_consistency":
        _store_not_moved_on(settings, _day(start))
    if name == "train":  # a model is trained on the whole interval, up to its last day
        _needs(name, "build_dws", "the DWS features it learns from")
        return (settings, _day(end - dt.timedelta(microseconds=1))), options
    if "shard" in options:  # a mapped task's shard comes through XCom as a list [i, n]
        options = {**options, "shard": tuple(options["shard"])}
    return (settings, _day(start)), options


#: Reference data a daily run loads from the landing zone: step → (file, table it writes).
_REFERENCE = {"load_prices": ("prices.csv", "dwd.model_price"), "load_quotas": ("quotas.csv", "dwd.tenant_quota")}


def _new_reference(settings: Settings, name: str) -> Path:
    """The landing zone's reference file (``prices.csv``, ``quotas.csv``) when it changed since its
    table was last written; else :class:`Skip` (a daily run need not rewrite unchanged reference data)."""
    from warehouse.storage import lake
    from warehouse.tables import table

    file, table_name = _REFERENCE[name]
    path = settings.landing_dir / file
    if not path.is_file():
        raise Skip(f"no {file} at {path}: nothing to load (drop one there to load it)")
    delta = lake.open_table(settings, table(table_name))
    if delta is not None:
        last = delta.history(1)[0]
        if path.stat().st_mtime * 1000 < last["timestamp"]:
            raise Skip(f"{path} has not changed since {table_name} version {last['version']} was written: "
                       "nothing to load")
    return path


def _needs(name: str, step: str, what: str) -> None:
    """Skip ``name`` while the step that makes its input does not exist yet (its layer is not built)."""
    try:
        find_step(step)
    except StepMissing:
        raise StepMissing(f"{name} needs {what}, and strata.pipeline has no step {step!r} yet: skipped until "
                          "that layer is built") from None


def _store_not_moved_on(settings: Settings, day: dt.date) -> None:
    """Skip a consistency check of a day the online store has moved on from (a rerun, a backfill)."""
    from features.consistency import moved_on

    later = moved_on(settings, day)
    if later is not None:
        raise Skip(f"the online store reflects the features up to {later:%Y-%m-%d %H:%M} UTC: the check of {day} "
                   "was made when the store reflected that day, and its rows stand")


def _registered_model(settings: Settings, name: str) -> None:
    """Skip scoring until a model is registered (the weekly training registers the first)."""
    from batch_inference.registry import BadCard, ModelError, get

    try:
        get(settings, name)
    except BadCard:
        raise  # a registered model that is unusable fails the task; it is not "not yet"
    except ModelError as exc:
        raise Skip(f"{exc}: scoring is skipped until strata_train registers one") from None


def find_step(name: str) -> Callable[..., Any]:
    """The pipeline's step called ``name``; :class:`StepMissing` when it has none yet."""
    from strata import pipeline

    step = getattr(pipeline, name, None)
    if not callable(step):
        raise StepMissing(f"strata.pipeline has no step {name!r} yet: its layer is not built, so this task is "
                          "skipped (it runs once the step exists)")
    return step


def one_line(exc: BaseException) -> str:
    """An error as one line: its message's first line, else its type's name."""
    text = " ".join(str(exc).split("\n", 1)[0].split())
    return text or type(exc).__name__


def run_step(name: str, context: Mapping[str, Any], **options: Any) -> dict[str, object]:
    """Run step ``name`` for the context's data interval; returns the step's summary (for XCom)."""
    settings = task_settings()
    interval = interval_of(context)
    step = find_step(name)
    args, kwargs = _arguments(name, settings, interval, options)
    what = f"{name} for {_day(interval[0])}"
    try:
        result = step(*args, **kwargs)
    except NotYet as exc:
        raise Skip(f"{what}: {one_line(exc)}") from None
    except _REFUSALS as exc:
        raise StepRefused(f"{what}: {one_line(exc)}") from exc
    except Exception as exc:  # noqa: BLE001 - anything else may pass on a retry
        raise StepFailed(f"{what} failed ({type(exc).__name__}): {one_line(exc)}") from exc
    return result.summary()


def shards(name: str, model: str = "user_risk") -> list[list[int]]:
    """The shards a mapped scoring step runs over, ``[i, n]`` each (``STRATA_SCORE_SHARDS`` of them);
    a skip while the step does not exist or no model is registered."""
    settings = task_settings()
    find_step(name)
    _registered_model(settings, model)
    return [[i, settings.score_shards] for i in range(settings.score_shards)]
