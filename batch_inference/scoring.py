"""The batch scorer: every entity active on a day, scored by one registered model version.

Features are read as of the end of the day (the offline store's point-in-time rule) and
streamed as Arrow record batches through one ONNX Runtime session; the next batch is read
and converted while the current one runs. Scores go to ``ads.user_risk_scores`` through the
publish path, each row stamped with the model's name, version and sha256, replacing exactly
(day, model, version) — or, for shard ``i/n``, that shard's entity buckets, so shards run in
parallel without touching each other. Everything that can be wrong with the model or its
inputs is checked before anything is written.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from batch_inference.features import active_entities, read_as_of, shard_buckets
from batch_inference.registry import ModelCard, ModelError, get
from batch_inference.session import Provider, Session, open_session
from warehouse.errors import NoData
from warehouse.progress import Progress
from warehouse.settings import Settings
from warehouse.storage import boundaries, locks
from warehouse.storage.lake import Lake
from warehouse.storage.publish import prefetch, publish
from warehouse.tables import ADS_USER_RISK_SCORES, DWD_REQUEST, table

log = logging.getLogger(f"strata.{__name__}")
#: Rows per batch through the session by default.
BATCH_ROWS = 65_536
#: How far back a feature row may lie and still be used (the feature view's TTL).
DEFAULT_TTL = dt.timedelta(days=8)


@dataclass(frozen=True)
class ScoreReport:
    """What a scoring run did."""

    model: str
    version: str
    day: dt.date
    shard: tuple[int, int]
    provider: str
    entities: int
    version_written: int | None


def _check_inputs(card: ModelCard) -> None:
    """Refuse a model whose declared features its source cannot give, as they are."""
    source = table(card.source_table)
    missing = [f.name for f in card.features if f.name not in source.contract]
    if missing:
        raise ModelError(
            f"{card.ref} needs feature(s) {missing} that {source} does not have "
            f"(its columns: {', '.join(source.contract.column_names)})"
        )
    for feature in card.features:
        kind = source.contract.column(feature.name).arrow_type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
            raise ModelError(
                f"{card.ref} takes {feature.name} as {feature.dtype}, but {source} holds it as "
                f"{kind}, which does not cast to a number safely"
            )


def _matrix(batch: pa.RecordBatch, card: ModelCard) -> np.ndarray:
    """The batch's features as the model's float32 input (nulls as NaN). Large integers (token sums
    beyond 2**24) round to the nearest float32, as they did in training."""
    columns = [
        pc.cast(batch.column(f.name), pa.float32(), safe=False).to_numpy(zero_copy_only=False) for f in card.features
    ]
    rows = np.column_stack(columns).astype(np.float32, copy=False) if columns else np.empty((batch.num_rows, 0))
    if not card.extra.get("accepts_missing", False) and np.isnan(rows).any():
        bad = card.features[int(np.argwhere(np.isnan(rows))[0][1])].name
        raise ModelError(
            f"{card.ref} cannot take a missing value, and {bad} is missing for some entities "
            "(no feature row within the TTL); nothing was written"
        )
    return rows


def score(
    settings: Settings,
    name: str,
    day: dt.date,
    *,
    version: str | None = None,
    shard: tuple[int, int] = (0, 1),
    batch_rows: int = BATCH_ROWS,
    provider: Provider = "auto",
    progress: Progress | None = None,
) -> ScoreReport:
    """Score every entity active on ``day`` (in ``shard``) with ``name`` (``version``, else the latest)."""
    model = get(settings, name, version)
    card = model.card
    buckets = shard_buckets(shard)
    session = open_session(model.onnx_bytes(), provider)
    _check_inputs(card)
    log.info("scoring %s on %s (%s)", card.ref, session.provider, day)
    session.warm_up()
    at = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), dt.UTC)
    ttl = dt.timedelta(seconds=float(str(card.extra.get("ttl_seconds", DEFAULT_TTL.total_seconds()))))
    source = table(card.source_table)
    partitions = [
        {"event_date": day, "model_name": card.name, "model_version": card.version, "entity_bucket": b} for b in buckets
    ]
    lake = Lake(settings)
    # From the first read to the commit: a forget meanwhile waits, so no user it removes is scored back.
    with locks.hold(settings, write=[(ADS_USER_RISK_SCORES, p) for p in partitions], read=[DWD_REQUEST, source]):
        entities = active_entities(lake, day, card.entity, buckets)
        if not len(entities) and not len(active_entities(lake, day, card.entity, shard_buckets((0, 1)))):
            raise NoData(
                f"no {card.entity} was active on {day}: nothing to score (check the date, or build its DWD first)"
            )
        boundaries.first_read("score")
        reader = read_as_of(lake, source, card.entity, [f.name for f in card.features], entities, at, ttl, batch_rows)
        result = publish(
            lake,
            ADS_USER_RISK_SCORES,
            _scored(reader, card, session, day, at, progress, len(entities)),
            partitions=partitions,
        )
    return ScoreReport(card.name, card.version, day, shard, session.provider, len(entities), result.version)


def _scored(
    reader: pa.RecordBatchReader,
    card: ModelCard,
    session: Session,
    day: dt.date,
    at: dt.datetime,
    progress: Progress | None,
    total: int,
) -> Iterator[pl.DataFrame]:
    """Score rows, batch by batch; the next batch is read and converted while this one runs."""

    def inputs() -> Iterator[tuple[pa.Array, np.ndarray]]:
        for batch in reader:
            yield batch.column(card.entity), _matrix(batch, card)

    done = 0
    for keys, rows in prefetch(inputs(), depth=2):
        scores = session.run(rows)
        n = len(keys)
        done += n
        if progress:
            progress(ADS_USER_RISK_SCORES.name, done, total)
        yield pl.DataFrame({card.entity: pl.Series(keys), "score": scores.astype(np.float64)}).with_columns(
            event_date=pl.lit(day),
            model_name=pl.lit(card.name),
            model_version=pl.lit(card.version),
            entity_bucket=pl.col(card.entity).str.slice(0, 1).str.to_integer(base=16).cast(pl.Int32),
            model_sha256=pl.lit(card.sha256),
            scored_at=pl.lit(at).dt.cast_time_unit("us"),
            provider=pl.lit(session.provider),
        )
