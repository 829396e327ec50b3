"""Build ADS for event dates: ``dbt build`` the marts, then publish each as a Delta table.

dbt-duckdb computes the marts (and runs the project's data and unit tests) into the run's
DuckDB file; it cannot write Delta. Each mart is then streamed out of that file as Arrow
record batches into :func:`~warehouse.storage.publish.publish` — its contract's row checks,
its audit, one atomic commit replacing exactly the built days' partitions. Nothing is
published unless the whole ``dbt build`` passed (an enforced-contract error, a failed data
test or unit test stops everything), and a mart row that breaks its contract stops that
mart's publication instead of being set aside.

The audit of a mart is that build, the row checks of every row against the contract, the
row-count bounds and the rule that every row keeps its contract. The Great Expectations
suite joins it only for a contract with a rule the row checks cannot enforce (a tolerance:
a share of rows allowed to break a rule): on a mart — a few hundred rows, every one of them
checked — it would check again, on the same rows, rules already enforced, and it is what
would make publishing cost more than computing (``benchmarks/bench_ads.py``).

A day DWD was built for can be built (a day with feedback only has empty request marts
and its data-quality rows). The marts read ``dwd.request`` (and the quotas, the quarantine's
rule ids, the audit log and the books) as they are when the build runs. Late feedback
changes earlier days' ``dwd.request`` (its labels are merged in), so the daily build of a
day also rebuilds the days of the week before it whose ``dwd.request`` changed after their
marts were published (:func:`stale_days`): label-based quality catches up on its own, and a
rerun, finding nothing changed, rebuilds only its day. ``ads.data_quality`` lists the ADS
tables' own writes of a day from its next build on.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from contracts.errors import InputError
from warehouse.ads.project import PROJECT_DIR, DbtRun, RunDir, invoke, new_run
from warehouse.errors import NoData
from warehouse.progress import Progress
from warehouse.storage import boundaries
from warehouse.storage.lake import Lake
from warehouse.storage.publish import keeps_every_row, publish
from warehouse.tables import (
    ADS_CAPACITY,
    ADS_COLD_STARTS,
    ADS_DATA_QUALITY,
    ADS_LATENCY_BREAKDOWN,
    ADS_MODEL_DAILY,
    ADS_RETRY_POLICY,
    ADS_RETRY_STORMS,
    ADS_SERVER_DRIFT,
    ADS_TENANT_DAILY,
    ADS_TOKEN_ANOMALIES,
    ADS_TRACE_BREAKDOWN,
    ADS_VERSION_MIX,
    DWD_QUARANTINE,
    DWD_REQUEST,
    DWD_SPAN,
    DWD_TENANT_QUOTA,
    OPS_AUDIT_LOG,
    OPS_BOOKS,
    Table,
    all_tables,
)

log = logging.getLogger(f"strata.{__name__}")
#: The marts, in the order they are published (the tables others point to first).
MARTS: tuple[Table, ...] = (
    ADS_MODEL_DAILY,
    ADS_TENANT_DAILY,
    ADS_LATENCY_BREAKDOWN,
    ADS_RETRY_STORMS,
    ADS_VERSION_MIX,
    ADS_CAPACITY,
    ADS_COLD_STARTS,
    ADS_SERVER_DRIFT,
    ADS_TOKEN_ANOMALIES,
    ADS_RETRY_POLICY,
    ADS_TRACE_BREAKDOWN,
    ADS_DATA_QUALITY,
)
#: Lake tables the staging models read; a missing one but dwd.request reads as empty.
SOURCES: tuple[Table, ...] = (DWD_REQUEST, DWD_SPAN, DWD_TENANT_QUOTA, DWD_QUARANTINE, OPS_AUDIT_LOG, OPS_BOOKS)
#: Rows per record batch streamed from DuckDB into publish.
BATCH_ROWS = 128 * 1024


@dataclass(frozen=True)
class Published:
    """One mart's publication: its new Delta version, rows, and seconds spent publishing it."""

    table: Table
    version: int | None
    rows: int
    seconds: float


@dataclass(frozen=True)
class AdsBuild:
    """What a build did: the dbt run (with its per-model timings) and each mart's publication."""

    days: tuple[dt.date, ...]
    dbt: DbtRun
    published: list[Published]

    @property
    def publish_s(self) -> float:
        return sum(p.seconds for p in self.published)


def build(
    lake: Lake,
    days: Sequence[dt.date],
    *,
    progress: Progress | None = None,
    storm_multiple: float | None = None,
    project_dir: Path = PROJECT_DIR,
) -> AdsBuild:
    """Build and publish every mart for ``days`` (one dbt run, one commit per mart).

    ``storm_multiple`` overrides the project's retry-storm threshold (retries must exceed
    that multiple of first attempts). Refuses days DWD was never built for, and a project
    whose marts' properties drifted from their contracts. The marts are published in the
    order of :data:`MARTS`, each atomically: if one fails its checks, those before it stay
    published (a re-run publishes them again, identical) and the run folder is kept.
    """
    from contracts import check_dbt_models
    from contracts.audit_worker import warm_up

    built = tuple(sorted(set(days)))
    if not built:
        raise InputError("no event date to build", argument="days")
    if storm_multiple is not None and not storm_multiple > 0:
        raise InputError(f"storm_multiple must be a positive number, not {storm_multiple!r}", argument="storm_multiple")
    drift = check_dbt_models(project_dir / "models" / "marts" / "_marts__models.yml")
    if drift:
        raise RuntimeError(
            "the marts' dbt properties differ from their contracts (regenerate them with "
            "`python -m warehouse.ads.models_yml`):\n  " + "\n  ".join(drift)
        )
    # The days' partitions of every mart, and the tables dbt reads, from the first read to the last commit.
    with lake.hold(write=[(mart, {"event_date": d}) for mart in MARTS for d in built], read=SOURCES):
        if lake.open_table(DWD_REQUEST) is None:
            raise InputError(f"{DWD_REQUEST} does not exist: build DWD first", step="build_dwd")
        missing = sorted(set(built) - _dwd_days(lake, built))
        if missing:
            raise NoData(f"DWD was never built for {', '.join(map(str, missing))}: build it first", step="build_dwd")
        if any(needs_expectations(mart) for mart in MARTS):
            warm_up()  # the audit worker imports Great Expectations while dbt runs
        run = new_run(lake.settings, f"build-{built[0]}" + (f"-{built[-1]}" if len(built) > 1 else ""))
        shapes = read_sources(lake)
        sources = shapes.present
        variables: dict[str, object] = {
            "days": [d.isoformat() for d in built],
            "freshness_sla_hours": freshness_sla_hours(),
            **shapes.variables(),
        }
        if storm_multiple is not None:
            variables["storm_multiple"] = float(storm_multiple)
        log.info(
            "dbt build of the marts for %s (reading %s)", ", ".join(map(str, built)), ", ".join(t.name for t in sources)
        )
        dbt_run = invoke(
            lake.settings,
            ["build", "--no-write-json"],
            run,
            variables,
            sources=sources,
            versions=shapes.versions,
            project_dir=project_dir,
            progress=progress,
        )
        boundaries.first_read("build ads")
        published = [_publish(lake, run, mart, built, progress, i, shapes.versions) for i, mart in enumerate(MARTS)]
        run.remove()
        return AdsBuild(built, dbt_run, published)


#: How many days before a build's day it catches up with DWD: feedback arrives days late.
CATCH_UP_DAYS = 7


def stale_days(lake: Lake, day: dt.date, lookback: int = CATCH_UP_DAYS) -> list[dt.date]:
    """The days of the ``lookback`` before ``day`` whose ``dwd.request`` partition was written
    after their marts were (late labels merged in, a day rebuilt): they need building again."""
    first = day - dt.timedelta(days=lookback)
    changed = _written_at(lake, DWD_REQUEST, first, day)
    built: dict[dt.date, int] = {}
    for mart in MARTS:  # a mart with no rows on a day has no files there
        for d, at in _written_at(lake, mart, first, day).items():
            built[d] = min(at, built.get(d, at))
    stale = sorted(d for d, at in changed.items() if d in built and at > built[d])
    if stale:
        log.info(
            "%s changed since their marts were built (late labels): built again with %s",
            ", ".join(map(str, stale)),
            day,
        )
    return stale


def _written_at(lake: Lake, table: Table, first: dt.date, last: dt.date) -> dict[dt.date, int]:
    """Per event date in [first, last): when its newest file was written (ms since the epoch)."""
    import pyarrow.compute as pc

    delta = lake.open_table(table)
    if delta is None:
        return {}
    files = pa.table(delta.get_add_actions(flatten=True)).select(["partition.event_date", "modification_time"])
    days = files.column(0)
    files = files.filter(pc.and_(pc.greater_equal(days, first), pc.less(days, last)))
    newest = files.group_by("partition.event_date").aggregate([("modification_time", "max")])
    return dict(zip(newest.column(0).to_pylist(), newest.column(1).to_pylist()))


def _dwd_days(lake: Lake, days: Sequence[dt.date]) -> set[dt.date]:
    """Those of ``days`` that a DWD build has kept the books of (requests, feedback, or both)."""
    if lake.open_table(OPS_BOOKS) is None:
        return set()
    kept = lake.read(OPS_BOOKS, filters=[("event_date", "in", list(days))], columns=["event_date"])
    return set(kept.column("event_date").to_pylist())


def freshness_sla_hours() -> dict[str, float]:
    """Every table contract's latency SLA, in hours, by table (for ``ads.data_quality``)."""
    return {
        t.name: t.contract.freshness.max_latency.total_seconds() / 3600
        for t in all_tables()
        if t.contract.freshness is not None
    }


@dataclass(frozen=True)
class Sources:
    """The lake's tables dbt reads, and how their shapes differ from their contracts."""

    #: The tables that exist (attached to dbt's connection).
    present: list[Table]
    #: Optional tables that do not exist yet: their contract's columns and DuckDB types (read as empty relations).
    empty: dict[str, dict[str, str]]
    #: Columns a table written under an older contract lacks (read as nulls of the contract's type).
    missing: dict[str, dict[str, str]]
    #: The Delta version of each present table, by name: the one dbt attaches (and the build records with
    #: each mart's write in ``ops.audit_log``: ``strata explain`` shows what a row was built from).
    versions: dict[str, int]

    def variables(self) -> dict[str, object]:
        """The ``--vars`` that tell ``lake_source`` the shapes."""
        return {"empty_sources": self.empty, "missing_columns": self.missing}


def read_sources(lake: Lake) -> Sources:
    """The sources dbt reads (:class:`Sources`): a lake from before a contract added columns still builds.

    Under the build's read locks ``lake`` opens each table once, so the versions are those it reads throughout.
    """
    from contracts import dbt_columns

    present, empty, missing, versions = [], {}, {}, {}
    for t in SOURCES:
        columns = {c["name"]: c["data_type"] for c in dbt_columns(t.contract)}
        delta = lake.open_table(t)
        if delta is not None:
            present.append(t)
            versions[t.name] = delta.version()
            have = {f.name for f in delta.schema().fields}
            if lacking := {n: kind for n, kind in columns.items() if n not in have}:
                missing[t.name] = lacking
        elif t != DWD_REQUEST:
            empty[t.name] = columns
    return Sources(present, empty, missing, versions)


def needs_expectations(mart: Table) -> bool:
    """Whether a mart's contract has a rule only the expectation suite checks: a tolerance."""
    return any(c.tolerances for c in mart.contract.columns)


def _publish(
    lake: Lake,
    run: RunDir,
    mart: Table,
    days: tuple[dt.date, ...],
    progress: Progress | None,
    index: int,
    reads: dict[str, int],
) -> Published:
    """Stream one mart from the run's DuckDB file into its Delta table, replacing ``days``; its audit-log row
    records the sources' versions the dbt run read (``reads``)."""
    import duckdb

    started = time.perf_counter()
    con = duckdb.connect(str(run.duckdb_path), read_only=True)
    try:
        con.execute("SET TimeZone = 'UTC'")  # timestamps come out as timestamp[us, tz=UTC]
        reader = con.execute(f"select * from ads.{mart.name.split('.', 1)[1]}").to_arrow_reader(BATCH_ROWS)

        def batches() -> Iterator[pa.RecordBatch]:
            yield from reader

        result = publish(
            lake,
            mart,
            batches(),
            partitions=[{"event_date": d} for d in days],
            invariants=[keeps_every_row(f"{mart.name}.rows_keep_their_contract")],
            expectations=needs_expectations(mart),
            reads=reads,
        )
    finally:
        con.close()
    seconds = time.perf_counter() - started
    log.debug(
        "%s version %s: %s row(s) published in %.1f s", mart.name, result.version, f"{result.rows_published:,}", seconds
    )
    if progress is not None:
        progress("publish", index + 1, len(MARTS))
    return Published(mart, result.version, result.rows_published, seconds)
