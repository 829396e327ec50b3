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
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from contracts import split_rows
from contracts.errors import InputError
from warehouse.dws.transform import ENTITIES, SOURCE_COLUMNS, Entity, day_bounds, features, reduce
from warehouse.errors import NoData
from warehouse.progress import Progress
from warehouse.runner import Batch, Counts, RunResult, claim, run
from warehouse.storage import boundaries
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_REQUEST

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(f"strata.{__name__}")
#: Requests per transform batch (whole entities per batch, a bucket of the key's hash): bounds memory.
BATCH_REQUESTS = 500_000
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
            raise AssertionError(
                f"{self.entity.target}: {split.rejected.height} feature row(s) broke {rules}, "
                f"e.g. {split.rejected.head(1).to_dicts()}"
            )
        return Batch(split.valid, counts=Counts(records=requests.height))


def affected_days(day: dt.date) -> list[dt.date]:
    """The feature dates to rebuild after ``day``'s DWD changed: D..D+8."""
    return [day + dt.timedelta(days=i) for i in range(AFFECTED_DAYS + 1)]


def build(lake: Lake, day: dt.date, progress: Progress | None = None) -> dict[str, RunResult]:
    """Publish D's partition of the three DWS tables from ``dwd.request`` (idempotent), on one
    handle of the lake.

    A day without requests in its windows (D-8 to D) is refused (:class:`NoData`), as DWD and
    ADS refuse a day without data, rather than published empty. A day with none of its own but
    some in the days before is built: its rows are those requests leaving the windows."""
    import pyarrow.compute as pc

    delta = lake.open_table(DWD_REQUEST)
    if delta is None:
        raise InputError(f"{DWD_REQUEST} does not exist: build DWD first", step="build_dwd")
    first = day - dt.timedelta(days=AFFECTED_DAYS)
    if not lake.dataset(delta).count_rows(filter=pc.field("event_date").isin(affected_days(first))):
        raise NoData(
            f"no {DWD_REQUEST} rows from {first} to {day} (the windows of {day}'s features): nothing "
            "to build (check the date, or build those days' DWD first)"
        )
    return {entity.target.name: build_entity(lake, entity, day, progress) for entity in ENTITIES}


def build_entity(lake: Lake, entity: Entity, day: dt.date, progress: Progress | None = None) -> RunResult:
    """Publish D's partition of one DWS table: read its requests, then stream batches of whole entities."""
    with (
        claim(lake, entity.target, day, reads=[DWD_REQUEST], books=False, quarantine=False),
        _Buckets(lake, entity, day) as buckets,
    ):
        boundaries.first_read("build dws")
        return run(
            lake,
            entity.target,
            DwsTransform(entity, day),
            buckets,
            day=day,
            total=buckets.rows,
            progress=progress,
            books=False,
            quarantine=False,
        )


class _Buckets:
    """The requests of a build, reduced and split by a hash of the entity key into buckets of
    about :data:`BATCH_REQUESTS`, each sorted by key and time when it is read.

    One pass over DWD: each Arrow batch is reduced as it comes and, when there is more than
    one bucket, appended to its bucket's file in the scratch folder (which holds pseudonyms:
    it lives under ``STRATA_HOME`` and is removed on exit). Memory: one batch and one bucket.
    """

    def __init__(self, lake: Lake, entity: Entity, day: dt.date) -> None:
        self.lake, self.settings, self.entity, self.day = lake, lake.settings, entity, day
        #: Requests read (after reduction), and the number of buckets.
        self.rows, self.count = 0, 1
        self.folder: Path | None = None
        self.whole: pl.DataFrame | None = None

    def __enter__(self) -> _Buckets:
        import math

        import pyarrow.compute as pc

        lo, hi = day_bounds(self.day)
        delta = self.lake.open_table(DWD_REQUEST)
        assert delta is not None
        dataset = self.lake.dataset(delta)
        where = (pc.field("event_date") >= lo.date()) & (pc.field("event_date") <= hi.date())
        self.count = math.ceil(dataset.count_rows(filter=where) / BATCH_REQUESTS) or 1
        batches = dataset.to_batches(
            columns=_columns(self.entity), filter=where, batch_size=256 * 1024, batch_readahead=2, fragment_readahead=1
        )
        if self.count == 1:
            parts = [reduce(pl.from_arrow(b), self.entity, self.day).collect() for b in batches]  # type: ignore[arg-type]
            self.whole = (
                pl.concat(parts)
                if parts
                else reduce(
                    pl.from_arrow(dataset.schema.empty_table().select(_columns(self.entity))),  # type: ignore[arg-type]
                    self.entity,
                    self.day,
                ).collect()
            )
            self.rows = self.whole.height
            return self
        try:
            self._spill(batches)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _spill(self, batches: Iterator[pa.RecordBatch]) -> None:
        import uuid

        import pyarrow.ipc as ipc

        from warehouse.storage.scratch import scratch_dir

        self.folder = scratch_dir(self.settings) / f"dws-{uuid.uuid4().hex}"
        self.folder.mkdir()
        writers: dict[int, ipc.RecordBatchFileWriter] = {}
        try:
            for batch in batches:
                reduced = (
                    reduce(pl.from_arrow(batch), self.entity, self.day)  # type: ignore[arg-type]
                    .with_columns(_bucket=(pl.col("k").hash() % self.count).cast(pl.Int32))
                    .collect()
                )
                self.rows += reduced.height
                for (bucket,), part in reduced.partition_by("_bucket", as_dict=True, include_key=False).items():
                    table = part.to_arrow()
                    if bucket not in writers:
                        writers[bucket] = ipc.new_file(str(self.folder / f"{bucket}.arrow"), table.schema)
                    writers[bucket].write_table(table)
        finally:
            for writer in writers.values():
                writer.close()

    def __iter__(self) -> Iterator[pl.DataFrame]:
        log.info(
            "%s %s: %s row(s) of dwd.request (reduced) to aggregate, in %d batch(es)",
            self.entity.target.name,
            self.day,
            f"{self.rows:,}",
            self.count,
        )
        if self.whole is not None:
            yield self.whole.sort("k", "t")
            return
        assert self.folder is not None
        for path in sorted(self.folder.glob("*.arrow"), key=lambda p: int(p.stem)):
            yield pl.read_ipc(path).sort("k", "t")
            path.unlink()

    def __exit__(self, *exc: object) -> None:
        import shutil

        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def _columns(entity: Entity) -> list[str]:
    """The dwd.request columns ``entity`` reads (not the other entities' keys)."""
    others = {e.key for e in ENTITIES} - {entity.key, "model_key"}
    return [c for c in SOURCE_COLUMNS if c not in others or c == "model"]
