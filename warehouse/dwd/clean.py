"""Cleaning a lake built before its attribute policy: no old DWD version keeps what the policy drops.

A lake whose DWD was built before ``dwd.request.attributes`` passed its attribute policy
(:mod:`contracts.policy`) holds prompts, user ids and headers in that column, in the current
version and in every older one a reader can still pin (``strata sql --as-of``). :func:`clean_dwd`
rebuilds every DWD date from ODS with today's code (a date whose ODS lines retention has
already deleted has its rows passed through the policy instead), then vacuums the old files and
log entries of each table holding a column with a policy, as ``forget`` does. The layers built
from DWD are rebuilt by the caller (:func:`strata.pipeline.clean`).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.dwd.build import build_day
from warehouse.dwd.transform import TARGETS
from warehouse.errors import NoData
from warehouse.ops.retention import vacuum_now
from warehouse.privacy import without_private
from warehouse.progress import Progress
from warehouse.storage.lake import Lake
from warehouse.storage.publish import republish
from warehouse.tables import Table, all_tables

log = logging.getLogger(f"strata.{__name__}")


@dataclass
class CleanReport:
    """What :func:`clean_dwd` did."""

    #: DWD dates rebuilt from ODS.
    rebuilt: list[dt.date] = field(default_factory=list)
    #: Dates whose ODS lines are gone (retention): their rows passed through the policy in place.
    filtered: list[dt.date] = field(default_factory=list)
    #: Table → old files vacuumed.
    vacuumed: dict[str, int] = field(default_factory=dict)


def with_policy() -> list[Table]:
    """The tables holding a column that names an attribute policy (``dwd.request``)."""
    return [t for t in all_tables() if any(c.attribute_policy for c in t.contract.columns)]


def partition_dates(lake: Lake, table: Table) -> list[dt.date]:
    """The ``event_date`` partitions ``table`` holds now, in order (none when it does not exist)."""
    delta = lake.open_table(table)
    if delta is None or "event_date" not in table.partition_columns:
        return []
    files = pa.table(delta.get_add_actions(flatten=True))
    return sorted(pc.unique(files.column("partition.event_date")).drop_null().to_pylist())


def _passed(table: Table, rows: pl.DataFrame) -> pl.DataFrame:
    return without_private(rows, table.contract)


def clean_dwd(lake: Lake, progress: Progress | None = None) -> CleanReport:
    """Rebuild every date of the DWD tables from ODS and vacuum the old versions of those whose
    columns name an attribute policy: afterwards no version of them holds what the policy drops.

    The DWD tables are locked exclusively from the first rebuild to the last vacuum, so no build
    writes between (a vacuum with no retention would delete a write in flight).
    """
    lake.settings.require_pseudonym_key()
    targets = list(TARGETS.values())
    cleaned = with_policy()
    report = CleanReport()
    with lake.hold(write=[(t, None) for t in dict.fromkeys([*targets, *cleaned])]):
        days = sorted({d for t in targets for d in partition_dates(lake, t)})
        log.info("rebuilding %d DWD date(s) with the attribute policy", len(days))
        for day in days:
            try:
                built = {run.table for run in build_day(lake, day, progress).values()}
            except NoData:
                built = set()
            if built:
                report.rebuilt.append(day)
            stale = [t for t in cleaned if t not in built and day in partition_dates(lake, t)]
            for table in stale:  # no ODS lines left to build it from: the rows it holds pass the policy
                republish(lake, table, functools.partial(_passed, table), [{"event_date": day}])
            if stale:
                report.filtered.append(day)
        for table in cleaned:
            report.vacuumed[table.name] = vacuum_now(lake, table, purge_log=True)
    return report
