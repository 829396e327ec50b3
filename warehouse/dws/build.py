"""DWS: hourly rolling-window features per user, tenant and model version, per feature date.

A build of date D publishes, for each of ``dws.user_features``, ``dws.tenant_features`` and
``dws.model_features``, the rows whose ``feature_ts`` falls on D, replacing D's partition
(idempotent). It reads ``dwd.request`` from D-8 23:00 to D 23:00: the 7-day windows of D's
rows, and the requests whose leaving a window makes a row of D. Windows and the exactness
rule: :mod:`warehouse.dws.transform`.

A request of day D counts in rows from D 01:00 (or D+1 00:00, from D's last hour) until it
leaves the 7-day window, at D+8 00:00 at the latest: a late change of D's DWD is picked
up by rebuilding D..D+8.
"""

from __future__ import annotations

import datetime as dt
from typing import Iterator

import polars as pl

from contracts import split_rows
from warehouse.dws.transform import ENTITIES, SOURCE_COLUMNS, Entity, day_bounds, features, prepare
from warehouse.progress import Progress
from warehouse.runner import Batch, Counts, RunResult, claim, run
from warehouse.settings import Settings
from warehouse.storage import lake
from warehouse.tables import DWD_REQUEST

#: Requests per transform batch (whole entities per batch): bounds the transform's memory.
BATCH_REQUESTS = 1_000_000
#: Days after D whose DWS partitions count D's requests (D's own partition included: D..D+8).
AFFECTED_DAYS = 8


class DwsTransform:
    """One batch of requests (every request of its entities, as :func:`prepare` makes them)
    → the entities' feature rows of the day, checked against the target's contract."""

    def __init__(self, entity: Entity, day: dt.date) -> None:
        self.entity, self.day = entity, day

    def __call__(self, requests: pl.DataFrame) -> Batch:
        rows = features(requests, self.entity, self.day)
        split = split_rows(rows, self.entity.target.contract)
        if split.rejected.height:  # the transform's rows break their own contract: a bug, never data
            rules = sorted(set(split.rejected.get_column("rules").explode().to_list()))
            raise AssertionError(f"{self.entity.target}: {split.rejected.height} feature row(s) broke {rules}, "
                                 f"e.g. {split.rejected.head(1).to_dicts()}")
        return Batch(split.valid, counts=Counts(records=requests.height))


def affected_days(day: dt.date) -> list[dt.date]:
    """The feature dates to rebuild after ``day``'s DWD changed: D..D+8."""
    return [day + dt.timedelta(days=i) for i in range(AFFECTED_DAYS + 1)]


def build(settings: Settings, day: dt.date, progress: Progress | None = None) -> dict[str, RunResult]:
    """Publish D's partition of the three DWS tables from ``dwd.request`` (idempotent)."""
    if lake.open_table(settings, DWD_REQUEST) is None:
        raise FileNotFoundError(f"{DWD_REQUEST} does not exist: build DWD first (`strata build dwd --date …`)")
    return {entity.target.name: build_entity(settings, entity, day, progress) for entity in ENTITIES}


def build_entity(settings: Settings, entity: Entity, day: dt.date, progress: Progress | None = None) -> RunResult:
    """Publish D's partition of one DWS table: read its requests, then stream batches of whole entities."""
    with claim(settings, entity.target, day, reads=[DWD_REQUEST], books=False, quarantine=False):
        requests = prepare(read_requests(settings, day, entity), entity, day)
        return run(settings, entity.target, DwsTransform(entity, day), _batches(requests), day=day,
                   total=requests.height, progress=progress, books=False, quarantine=False)


def read_requests(settings: Settings, day: dt.date, entity: Entity) -> pl.LazyFrame:
    """The ``dwd.request`` rows a build of ``day`` reads (only the columns ``entity`` needs)."""
    lo, hi = day_bounds(day)
    others = {e.key for e in ENTITIES} - {entity.key, "model_key"}
    columns = [c for c in SOURCE_COLUMNS if c not in others or c == "model"]
    table = lake.read(settings, DWD_REQUEST, columns=columns,
                      filters=[("event_date", ">=", lo.date()), ("event_date", "<=", hi.date())])
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame.lazy()


def _batches(requests: pl.DataFrame) -> Iterator[pl.DataFrame]:
    """Slices of about :data:`BATCH_REQUESTS` rows that never split an entity's requests."""
    if requests.is_empty():
        yield requests
        return
    starts = requests.select(pl.arg_where(pl.col("k") != pl.col("k").shift())).to_series().to_list()
    bounds = [0]
    for start in starts:
        if start - bounds[-1] >= BATCH_REQUESTS:
            bounds.append(start)
    bounds.append(requests.height)
    for lo, hi in zip(bounds, bounds[1:]):
        yield requests.slice(lo, hi - lo)
