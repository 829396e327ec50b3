"""Online/offline consistency, measured: the online values against Feast's point-in-time values.

For each materialized view: sample entities with a row within the view's TTL before the
materialization time (``as_of``, the latest ``feature_ts`` the online store reflects), read
their online values (the store Feast serves from), recompute their offline values at
``as_of`` with Feast's ``get_historical_features`` (the ``duckdb`` offline store over the Delta
log), and count per feature the entities whose values differ and those the online store
lacks. The rates go to ``ads.feature_consistency`` through the one publish path.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from contracts.errors import InputError
from features.materialize import watermarks
from features.online import View, reader
from features.repo.definitions import SERVED, TTL, feature_names, feature_tables, join_key, timestamp_column, view_name
from features.store import applied_store
from warehouse.progress import Progress
from warehouse.settings import Settings
from warehouse.storage.duck import lake_reader
from warehouse.storage.objectstore import is_object_store
from warehouse.tables import table as registry_table

log = logging.getLogger(f"strata.{__name__}")
TABLE = "ads.feature_consistency"
#: Entities sampled per view by default.
SAMPLE = 1_000


@dataclass
class ViewCheck:
    """One view's comparison: sampled entities, and per feature the entities that differ."""

    view: str
    as_of: dt.datetime
    sampled: int
    missing: int
    mismatches: dict[str, int]
    #: Feature → a few (entity, online value, offline value) that differ, for a person to look at.
    examples: dict[str, list[tuple[str, Any, Any]]] = field(default_factory=dict)
    entities_mismatched: int = 0


@dataclass
class ConsistencyReport:
    day: dt.date
    views: list[ViewCheck]
    version: int | None = None

    @property
    def mismatches(self) -> int:
        return sum(sum(v.mismatches.values()) for v in self.views)

    @property
    def missing(self) -> int:
        return sum(v.missing for v in self.views)

    def skewed(self) -> list[tuple[str, str, int]]:
        """(view, feature, mismatches) of every feature that differs anywhere."""
        return [(v.view, f, n) for v in self.views for f, n in sorted(v.mismatches.items()) if n]


def _same(online: Any, offline: Any) -> bool:
    absent_on = online is None or (isinstance(online, float) and math.isnan(online))
    absent_off = offline is None or (isinstance(offline, float) and math.isnan(offline))
    if absent_on or absent_off:
        return absent_on and absent_off
    return bool(online == offline)


def sample_entities(settings: Settings, source: Any, as_of: dt.datetime, n: int, seed: int) -> list[str]:
    """Up to ``n`` entities with a row in ``(as_of - TTL, as_of]``, chosen by a hash of their key (the
    same lake gives the same sample, so a re-run writes the same rows), sorted."""
    key, ts = join_key(source), timestamp_column(source)
    con = lake_reader(settings, ordered=False)
    rows = con.execute(
        f"""  -- a hash order, not a reservoir sample: the same data gives the same sample
        SELECT k FROM (SELECT DISTINCT "{key}" AS k FROM delta_scan('{source.uri(settings)}')
                       WHERE "{ts}" > ? AND "{ts}" <= ? AND event_date >= ? AND event_date <= ?)
        ORDER BY hash(k, {int(seed)}) LIMIT {int(n)}""",
        [as_of - TTL, as_of, (as_of - TTL).date(), as_of.date()],
    ).fetchall()
    return sorted(r[0] for r in rows)


def check_view(settings: Settings, store: Any, source: Any, as_of: dt.datetime, n: int, seed: int) -> ViewCheck:
    """Compare one view's online and offline values for a sample of its entities at ``as_of``."""
    import pandas as pd

    name, key, features = view_name(source), join_key(source), feature_names(source)
    keys = sample_entities(settings, source, as_of, n, seed)
    check = ViewCheck(name, as_of, len(keys), 0, dict.fromkeys(features, 0))
    if not keys:
        return check
    online, times = reader(settings).read(View(name, key, tuple(features)), keys)
    offline: pl.DataFrame | pl.Series
    if is_object_store(settings.lake_uri):
        offline = _offline_as_of(settings, source, keys, as_of)
    else:
        entity_df = pd.DataFrame({key: keys, "event_timestamp": pd.Timestamp(as_of)})
        offline = pl.from_arrow(
            store.get_historical_features(entity_df=entity_df, features=[f"{name}:{f}" for f in features]).to_arrow()
        )
    assert isinstance(offline, pl.DataFrame)
    by_key = {row[key]: row for row in offline.iter_rows(named=True)}
    for i, entity in enumerate(keys):
        if times[i] is None:
            check.missing += 1
            continue
        want = by_key.get(entity, {})
        differs = False
        for feature in features:
            if not _same(online[feature][i], want.get(feature)):
                check.mismatches[feature] += 1
                differs = True
                shown = check.examples.setdefault(feature, [])
                if len(shown) < 3:
                    shown.append((entity, online[feature][i], want.get(feature)))
        check.entities_mismatched += differs
    return check


def _offline_as_of(settings: Settings, source: Any, keys: list[str], as_of: dt.datetime) -> pl.DataFrame:
    """Feast's point-in-time rule computed by DuckDB over the Delta log, for a lake on ``s3://``:
    there Feast's ``duckdb`` offline store fails (ibis hands ``storage_options`` to ``delta_scan``,
    which takes none). The latest row per entity with ``as_of - TTL < feature_ts <= as_of``."""
    key, ts = join_key(source), timestamp_column(source)
    con = lake_reader(settings, ordered=False)
    con.register("wanted", pl.DataFrame({"k": keys}).to_arrow())
    columns = ", ".join(f'"{c}"' for c in feature_names(source))
    frame = pl.from_arrow(
        con.execute(
            f"""
        SELECT "{key}", {columns} FROM delta_scan('{source.uri(settings)}')
        WHERE "{ts}" <= ? AND "{ts}" > ? AND event_date BETWEEN ? AND ?
          AND "{key}" IN (SELECT k FROM wanted)
        QUALIFY row_number() OVER (PARTITION BY "{key}" ORDER BY "{ts}" DESC) = 1""",
            [as_of, as_of - TTL, (as_of - TTL).date(), as_of.date()],
        ).to_arrow_table()
    )
    assert isinstance(frame, pl.DataFrame)
    return frame


def moved_on(settings: Settings, day: dt.date) -> dt.datetime | None:
    """The time the online store's feature views reflect, when it lies after ``day``; else None.

    A check measures the store as it is: once a later day is materialized, the check of
    ``day`` can no longer be made (the row it recorded then stands). Served views (the
    scores) are left out: their times are when a run wrote them, not the data's.
    """
    marks = watermarks(settings)
    times = [
        dt.datetime.fromisoformat(mark["as_of"])
        for t in feature_tables()
        if t.name not in SERVED
        if (mark := marks.get(view_name(t))) and mark.get("as_of")
    ]
    latest = max(times, default=None)
    return latest if latest is not None and latest.astimezone(dt.UTC).date() > day else None


def check_consistency(
    settings: Settings,
    day: dt.date | None = None,
    *,
    sample: int = SAMPLE,
    seed: int = 0,
    publish_rows: bool = True,
    progress: Progress | None = None,
) -> ConsistencyReport:
    """Check every materialized view and (unless told not to) publish the day's rates; ``progress``
    counts the views checked.

    ``day`` (default: the day the store reflects) names the partition written; a day the
    store has moved on from is refused (:func:`moved_on`).
    """
    if day is not None and (later := moved_on(settings, day)) is not None:
        raise InputError(
            f"the online store reflects the features up to {later:%Y-%m-%d %H:%M} UTC, after {day}: "
            f"the check of {day} measured the store as it was then and cannot be made again (its rows "
            f"in {TABLE} stand); check a later day, or leave the day out",
            argument="day",
        )
    marks = watermarks(settings)
    if not any(mark.get("as_of") for mark in marks.values()):  # nothing materialized yet: nothing to compare
        log.info("nothing materialized yet: nothing to check")
        return ConsistencyReport(day or dt.datetime.now(dt.UTC).date(), [])
    store, _ = applied_store(settings)
    sources = [t for t in feature_tables() if (marks.get(view_name(t)) or {}).get("as_of")]
    checks = []
    for source in sources:
        as_of = dt.datetime.fromisoformat(marks[view_name(source)]["as_of"])
        check = check_view(settings, store, source, as_of, sample, seed)
        log.info(
            "%s as of %s: %d entities sampled, %d differ, %d missing online",
            check.view,
            f"{as_of:%Y-%m-%d %H:%M}",
            check.sampled,
            check.entities_mismatched,
            check.missing,
        )
        checks.append(check)
        if progress is not None:
            progress("views", len(checks), len(sources))
    day = day or max((c.as_of.date() for c in checks), default=dt.datetime.now(dt.UTC).date())
    report = ConsistencyReport(day, checks)
    if publish_rows and checks:
        report.version = _publish(settings, report)
    return report


def rows(settings: Settings, report: ConsistencyReport) -> pl.DataFrame:
    """The report as ``ads.feature_consistency`` rows."""
    now = dt.datetime.now(dt.UTC)
    out = []
    for check in report.views:
        counts = [*check.mismatches.items(), ("*", check.entities_mismatched)]
        for feature, mismatches in counts:
            n = check.sampled
            out.append(
                {
                    "event_date": report.day,
                    "feature_view": check.view,
                    "feature": feature,
                    "as_of": check.as_of,
                    "checked_at": now,
                    "online_store": settings.online_store,
                    "entities_sampled": n,
                    "mismatches": mismatches,
                    "missing": check.missing,
                    "mismatch_rate": mismatches / n if n else None,
                    "missing_rate": check.missing / n if n else None,
                }
            )
    return pl.DataFrame(
        out,
        schema_overrides={
            "as_of": pl.Datetime("us", "UTC"),
            "checked_at": pl.Datetime("us", "UTC"),
            "mismatch_rate": pl.Float64,
            "missing_rate": pl.Float64,
        },
    )


def _publish(settings: Settings, report: ConsistencyReport) -> int | None:
    from warehouse.storage.lake import Lake
    from warehouse.storage.publish import publish

    result = publish(
        Lake(settings), registry_table(TABLE), rows(settings, report), partitions=[{"event_date": report.day}]
    )
    return result.version
