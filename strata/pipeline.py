"""The pipeline, written once: the named steps the CLI, the demo and every DAG task call.

Each step takes the settings, what it works on (files, a logical date) and options, and
returns a :class:`StepResult` whose counts are small enough for a scheduler's XCom. The
order of a day's layers is :data:`DAILY`, here and nowhere else.

Every step logs to ``strata.pipeline`` at INFO when it starts, as it progresses (the
progress it reports, whether or not the caller shows it) and when it is done, with its counts:
a scheduler's task log follows the step as it runs.

Importing this module is light: each step imports the library it needs when it runs.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar

from contracts.errors import InputError
from warehouse.progress import Progress, logged
from warehouse.settings import Settings
from warehouse.sources.formats import Format

if TYPE_CHECKING:  # the library's reports, named in the steps' types; imported when a step runs
    from batch_inference.registry import ModelVersion
    from batch_inference.scoring import ScoreReport
    from features.consistency import ConsistencyReport
    from features.materialize import MaterializeReport
    from warehouse.ads.build import AdsBuild
    from warehouse.dwd.clean import CleanReport
    from warehouse.ods.ingest import IngestReport
    from warehouse.ods.unland import UnlandReport
    from warehouse.ops.forget import ForgetReport
    from warehouse.runner import RunResult
    from warehouse.sources.canonical import Kind

log = logging.getLogger(__name__)
_P = ParamSpec("_P")
#: The library's own report of a step (:attr:`StepResult.detail`).
D = TypeVar("D")


@dataclass(frozen=True)
class StepResult(Generic[D]):
    """What one step did: counts and the table versions it committed, and the library's report of it."""

    step: str
    counts: dict[str, int]
    #: Table name → the Delta version this step committed.
    versions: dict[str, int | None]
    #: The library's own report, for a caller that prints details (not for XCom).
    detail: D = field(compare=False, repr=False)

    def summary(self) -> dict[str, object]:
        """The result as plain values (what a DAG task returns)."""
        return {"step": self.step, "counts": dict(self.counts), "versions": dict(self.versions)}

    def line(self) -> str:
        """The counts and versions, for a log line: ``request_published=300, …; dwd.request v4``."""
        counts = ", ".join(f"{name}={n:,}" for name, n in self.counts.items())
        versions = ", ".join(f"{name} v{v}" for name, v in self.versions.items() if v is not None)
        return "; ".join(part for part in (counts, versions) if part) or "nothing to report"


def _described(name: str, arguments: dict[str, Any]) -> tuple[str, str]:
    """A step's label for its log lines, its name and the dates it works on (``score 2026-01-05 shard 1/2``),
    and its other arguments for its first line: numbers, flags, paths. Never a string argument: one
    may be a user id (``forget``)."""
    label, options = [name], []
    for key, value in arguments.items():
        if isinstance(value, bool):
            options += [key] if value else []
        elif isinstance(value, dt.date):
            label.append(value.isoformat())
        elif key == "shard":
            label.append(f"shard {value[0]}/{value[1]}")
        elif isinstance(value, (int, float, Path)):
            options.append(f"{key}={value}")
        elif isinstance(value, list) and all(isinstance(v, Path) for v in value):
            options.append(f"{key}={', '.join(map(str, value))}" if len(value) <= 3 else f"{len(value)} {key}")
    return " ".join(label), " ".join(options)


def _logged(step: Callable[_P, StepResult[D]]) -> Callable[_P, StepResult[D]]:
    """Log the step's start, its progress (passed on to the caller's callback) and its counts."""
    signature = inspect.signature(step)

    @functools.wraps(step)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> StepResult[D]:
        bound = signature.bind(*args, **kwargs)
        given = {name: value for name, value in bound.arguments.items() if name not in ("settings", "progress")}
        label, options = _described(step.__name__, given)
        if "progress" in signature.parameters:
            bound.arguments["progress"] = logged(log, label, bound.arguments.get("progress"))
        log.info("%s: started%s", label, f" ({options})" if options else "")
        started = time.monotonic()
        result = step(*bound.args, **bound.kwargs)
        log.info("%s: done in %.1f s: %s", label, time.monotonic() - started, result.line())
        return result

    return run


@_logged
def land(
    settings: Settings,
    paths: list[Path],
    *,
    fmt: Format = Format.auto,
    mapping: Path | None = None,
    reland: bool = False,
    progress: Progress | None = None,
    tenant: str | None = None,
) -> StepResult[IngestReport]:
    """Land files (or folders of them) into ODS; files landed before are skipped."""
    from warehouse.ods.ingest import ingest

    report = ingest(settings, paths, fmt=fmt, mapping_file=mapping, progress=progress, reland=reland, tenant=tenant)
    versions = {f.table.name: f.version for f in report.landed}
    counts = {
        "files_landed": len(report.landed),
        "files_skipped": len(report.skipped),
        "files_failed": len(report.failed),
        "lines": sum(f.lines for f in report.landed),
        "malformed": sum(f.malformed for f in report.landed),
        "trace_only": sum(f.trace_only for f in report.landed),
        "suppressed": report.suppressed,
    }
    return StepResult("land", counts, versions, report)


@_logged
def unland(settings: Settings, files: list[Path], *, batch: str | None = None) -> StepResult[UnlandReport]:
    """Remove the ODS lines of files landed by mistake (or of every file of ``batch``)."""
    from warehouse.ods.unland import unland as remove

    report = remove(settings, files, batch=batch)
    return StepResult(
        "unland", {"files": report.files, **{f"{t}_removed": n for t, n in report.rows.items()}}, {}, report
    )


@_logged
def load_prices(settings: Settings, csv_path: Path) -> StepResult[None]:
    """Load a model price list as a new version of ``dwd.model_price``."""
    from warehouse.dwd.prices import load_prices as load
    from warehouse.tables import DWD_MODEL_PRICE

    return StepResult("load_prices", {}, {DWD_MODEL_PRICE.name: load(settings, csv_path)}, None)


@_logged
def load_quotas(settings: Settings, csv_path: Path) -> StepResult[None]:
    """Load tenant quotas as a new version of ``dwd.tenant_quota``."""
    from warehouse.dwd.quotas import load_quotas as load
    from warehouse.tables import DWD_TENANT_QUOTA

    return StepResult("load_quotas", {}, {DWD_TENANT_QUOTA.name: load(settings, csv_path)}, None)


@_logged
def build_dwd(
    settings: Settings, day: dt.date, *, progress: Progress | None = None
) -> StepResult[dict[Kind, RunResult]]:
    """Publish the day's ``dwd.feedback`` (merging its labels), ``dwd.request`` and ``dwd.span`` from ODS."""
    from warehouse.dwd.build import build_day
    from warehouse.storage.lake import Lake

    runs = build_day(Lake(settings), day, progress)
    counts: dict[str, int] = {}
    published = [*runs.values(), *(run.spans for run in runs.values() if run.spans is not None)]
    for run in published:
        short = run.table.name.split(".", 1)[1]
        counts |= {
            f"{short}_published": run.published,
            f"{short}_quarantined": run.counts.quarantined,
            f"{short}_duplicates": run.counts.duplicates,
            f"{short}_malformed": run.counts.malformed,
            f"{short}_trace_only": run.counts.trace_only,
        }
    return StepResult("build_dwd", counts, {run.table.name: run.version for run in published}, runs)


@_logged
def build_dws(
    settings: Settings, day: dt.date, *, progress: Progress | None = None
) -> StepResult[dict[str, RunResult]]:
    """Publish the day's DWS feature rows (user, tenant, model version) from ``dwd.request``.

    D's rows read DWD from D-8 23:00 to D 23:00; after a late change of D's DWD, rebuild D..D+8.
    """
    from warehouse.dws.build import build
    from warehouse.storage.lake import Lake

    runs = build(Lake(settings), day, progress)
    counts = {f"{name.split('.', 1)[1]}_rows": run.published for name, run in runs.items()}
    return StepResult("build_dws", counts, {name: run.version for name, run in runs.items()}, runs)


@_logged
def build_ads(
    settings: Settings, day: dt.date, *, progress: Progress | None = None, storm_multiple: float | None = None
) -> StepResult[AdsBuild]:
    """Publish the day's ADS marts: ``dbt build`` in-process, then each mart through the publish path.

    The days of the week before whose ``dwd.request`` changed since their marts were built (late
    labels merged in) are built again in the same run (``counts["days_caught_up"]``).
    """
    from warehouse.ads.build import build, stale_days
    from warehouse.storage.lake import Lake

    lake = Lake(settings)
    caught_up = stale_days(lake, day)
    report = build(lake, [*caught_up, day], progress=progress, storm_multiple=storm_multiple)
    counts = {f"{p.table.name.split('.', 1)[1]}_rows": p.rows for p in report.published}
    counts["days_caught_up"] = len(caught_up)
    return StepResult("build_ads", counts, {p.table.name: p.version for p in report.published}, report)


@_logged
def generate_docs(settings: Settings, *, progress: Progress | None = None) -> StepResult[Path]:
    """Generate the ADS dbt project's documentation site (``detail``: the path of its page)."""
    from warehouse.ads.docs import generate

    return StepResult("generate_docs", {}, {}, generate(settings, progress=progress))


@_logged
def write_report(
    settings: Settings, end: dt.date, *, start: dt.date | None = None, out: Path | None = None
) -> StepResult[str]:
    """Render the HTML report of ``start`` … ``end`` (by default the week ending with ``end``) and write it
    into the lake (``<lake>/reports/``, where every worker and reader finds it), or to ``out`` (a local
    copy). ``detail``: where it was written."""
    from strata.report import WEEK
    from strata.report.page import render
    from warehouse.ops.reports import write_report as keep
    from warehouse.storage import boundaries, locks
    from warehouse.tables import ADS_USER_RISK_SCORES

    start = start or end - dt.timedelta(days=WEEK - 1)
    if start > end:
        raise InputError(f"the report's start ({start}) is after its end ({end})", argument="start")
    # The page names the riskiest users' pseudonyms: from its first read of the scores to the page written, a
    # forget waits (then deletes the page), or has already removed the user from the scores.
    with locks.hold(settings, read=[ADS_USER_RISK_SCORES]):
        page = render(settings, start, end)
        boundaries.first_read("report")
        if out is None:
            where = keep(settings, start, end, page)
        else:
            staged = out.with_name(f".{out.name}.tmp")
            staged.write_bytes(page)
            staged.replace(out)  # a reader never sees half a page
            where = str(out)
    return StepResult("write_report", {"bytes": len(page)}, {}, where)


@_logged
def apply_retention(
    settings: Settings, *, days: int | None = None, today: dt.date | None = None
) -> StepResult[dict[str, int]]:
    """Delete raw-data partitions older than the retention, then vacuum."""
    from warehouse.ops.retention import apply_retention as apply

    deleted = apply(settings, days=days, today=today)
    return StepResult("apply_retention", {f"{table}_deleted": rows for table, rows in deleted.items()}, {}, deleted)


@_logged
def forget(settings: Settings, user_id: str) -> StepResult[ForgetReport]:
    """Remove one user from every table that can hold them (then vacuum), from the landing zone's files,
    and from every online store ever materialized to."""
    from features.forget import forget_user as forget_online
    from warehouse.ops.forget import forget_user
    from warehouse.privacy import pseudonym

    report = forget_user(settings, user_id)
    online = forget_online(settings, pseudonym(settings.require_pseudonym_key(), user_id))
    counts = (
        {f"{table}_removed": rows for table, rows in report.rows.items()}
        | {f"{table}_redacted": rows for table, rows in report.redacted.items()}
        | {"landing_files_rewritten": report.files, "reports_deleted": report.reports}
        | {"unlanded_files": report.unlanded.files, "unlanded_segments": report.unlanded.segments}
    )
    return StepResult("forget", counts | {f"{store}_removed": n for store, n in online.items()}, {}, report)


@_logged
def clean(settings: Settings, *, progress: Progress | None = None) -> StepResult[CleanReport]:
    """Clean a lake built before its attribute policy: every DWD date rebuilt and the old versions of
    ``dwd.request`` vacuumed (:func:`warehouse.dwd.clean.clean_dwd`), then the DWS and ADS dates the
    lake holds rebuilt from it, and the online store (when one was materialized) brought up to DWS."""
    from features.materialize import watermarks
    from warehouse.ads.build import MARTS
    from warehouse.ads.build import build as build_marts
    from warehouse.dwd.clean import clean_dwd, partition_dates
    from warehouse.storage.lake import Lake
    from warehouse.tables import all_tables

    lake = Lake(settings)
    report = clean_dwd(lake, progress)
    built = set(report.rebuilt) | set(report.filtered)
    dws_days = sorted({d for t in all_tables() if t.layer == "dws" for d in partition_dates(lake, t)})
    for day in dws_days:
        build_dws(settings, day, progress=progress)
    ads_days = sorted({d for t in MARTS for d in partition_dates(lake, t)} & built)
    if ads_days:
        build_marts(lake, ads_days, progress=progress)
    online = materialize(settings).counts["values_written"] if watermarks(settings) else 0
    counts = {
        "dwd_days_rebuilt": len(report.rebuilt),
        "dwd_days_filtered": len(report.filtered),
        **{f"{table}_files_vacuumed": n for table, n in report.vacuumed.items()},
        "dws_days_rebuilt": len(dws_days),
        "ads_days_rebuilt": len(ads_days),
        "online_values_written": online,
    }
    return StepResult("clean", counts, {}, report)


@_logged
def materialize(
    settings: Settings,
    day: dt.date | None = None,
    *,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    full: bool = False,
    progress: Progress | None = None,
) -> StepResult[MaterializeReport]:
    """Bring the online store up to the DWS tables: incremental (by their Delta versions) unless a
    ``start``/``end`` range or ``full`` is given. ``day`` is the run's date; the watermark decides what is read."""
    from features.materialize import materialize as run

    report = run(settings, start=start, end=end, full=full, progress=progress)
    counts = {f"{v.view}_entities": v.entities for v in report.views} | {
        "values_written": sum(v.values_written for v in report.views)
    }
    return StepResult("materialize", counts, {v.table: v.version for v in report.views}, report)


@_logged
def check_consistency(
    settings: Settings, day: dt.date | None = None, *, sample: int = 1_000, progress: Progress | None = None
) -> StepResult[ConsistencyReport]:
    """Compare sampled online values with Feast's offline point-in-time values; publish the rates to
    ``ads.feature_consistency``."""
    from features.consistency import TABLE
    from features.consistency import check_consistency as check

    report = check(settings, day, sample=sample, progress=progress)
    counts = {
        "entities_sampled": sum(v.sampled for v in report.views),
        "mismatches": report.mismatches,
        "missing": report.missing,
    }
    return StepResult("check_consistency", counts, {TABLE: report.version}, report)


def get_online_features(settings: Settings, entity: str, raw_id: str) -> dict[str, object]:
    """One entity's online features (``user``: a raw user id, pseudonymized with the configured key)."""
    from features.online import get_online_features as lookup

    return lookup(settings, entity, raw_id)


@_logged
def train(settings: Settings, until: dt.date, *, name: str = "user_risk", days: int = 7) -> StepResult[ModelVersion]:
    """Train a model on the ``days`` ending with ``until`` and register a new version."""
    from batch_inference.training import train as fit
    from features.retrieval import historical_features

    model = fit(settings, name, until, historical_features, days=days)
    return StepResult("train", {"features": len(model.card.features)}, {}, model)


@_logged
def score(
    settings: Settings,
    day: dt.date,
    *,
    name: str = "user_risk",
    version: str | None = None,
    shard: tuple[int, int] = (0, 1),
    batch_rows: int = 65_536,
    provider: Literal["auto", "cuda", "cpu"] = "auto",
    progress: Progress | None = None,
) -> StepResult[ScoreReport]:
    """Score the entities active on ``day`` (one shard of them) with a registered model; an
    unsharded run also writes the day's ``ads.score_daily`` row and brings the scores to the online
    store (sharded runs: :func:`summarize_scores`, once every shard is done)."""
    from batch_inference.scoring import score as run

    report = run(
        settings, name, day, version=version, shard=shard, batch_rows=batch_rows, provider=provider, progress=progress
    )
    if shard[1] == 1:
        summarize_scores(settings, day, name=name, version=report.version)
    return StepResult("score", {"entities": report.entities}, {"ads.user_risk_scores": report.version_written}, report)


@_logged
def summarize_scores(
    settings: Settings, day: dt.date, *, name: str = "user_risk", version: str | None = None
) -> StepResult[dict[str, Any]]:
    """Write the day's ``ads.score_daily`` row of a model version (the latest by default), and
    materialize the scores to the online store (the ``user_risk_scores`` view, beside the features)."""
    from batch_inference.registry import get
    from batch_inference.summary import summarize

    row = summarize(settings, day, name, version or get(settings, name).card.version)
    online = materialize(settings, day)
    return StepResult(
        "summarize_scores",
        {"users_scored": int(row["users_scored"]), "values_written": online.counts["values_written"]},
        {},
        row,
    )


Step = Callable[..., StepResult[Any]]
#: The layers of one day, in the order they are built: each step takes (settings, day, progress=…).
DAILY: tuple[Step, ...] = (build_dwd, build_dws, materialize, check_consistency, build_ads)
