"""Training: a scikit-learn pipeline fitted on a point-in-time training set, exported to ONNX,
checked, and registered.

The examples are (user, instant) pairs — each user at the end of each day they were active —
with the user's features as of that instant and a label: 1 when a ``dwd.feedback`` review
marked one of the user's requests ``abusive`` by the label time (the end of the training
window), else 0. The set is split by time: the model learns from the earlier days and is
judged (ROC AUC) on the later ones. The features come through a ``Retrieve`` function the feature
layer provides (``features.retrieval``; the pipeline hands it over, so neither package imports the
other). Before a version is registered, ONNX Runtime's scores of
the held-out rows must equal scikit-learn's within 1e-5; both figures are on its card.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import polars as pl

from batch_inference.export import PARITY_TOLERANCE, parity, to_onnx
from batch_inference.registry import Feature, ModelError, ModelVersion, NotEnoughLabels, new_card, register
from warehouse.errors import NoData
from warehouse.settings import Settings
from warehouse.storage.lake import Lake
from warehouse.tables import DWD_FEEDBACK, DWD_REQUEST

log = logging.getLogger(f"strata.{__name__}")


@dataclass(frozen=True)
class TrainingSet:
    """Examples: the entity, the instant, the features as of it, and the label."""

    frame: pl.DataFrame
    entity: str
    features: list[str]
    feature_service: str
    source_table: str
    ttl: dt.timedelta


def labels(lake: Lake, until: dt.datetime) -> pl.DataFrame:
    """``user_pseudonym`` of every user a review marked abusive by ``until``, with when it first did."""
    if lake.open_table(DWD_FEEDBACK) is None:
        return pl.DataFrame(schema={"user_pseudonym": pl.String, "labelled_at": pl.Datetime("us", "UTC")})
    reviews = lake.read_frame(DWD_FEEDBACK, columns=["request_id", "kind", "value", "ts"]).filter(
        (pl.col("kind") == "review") & (pl.col("value") == "abusive") & (pl.col("ts") <= until)
    )
    owners = lake.read_frame(
        DWD_REQUEST,
        columns=["request_id", "user_pseudonym"],
        filters=[("request_id", "in", reviews.get_column("request_id").unique().to_list())],
    )
    return (
        reviews.join(owners, on="request_id")
        .drop_nulls("user_pseudonym")
        .group_by("user_pseudonym")
        .agg(labelled_at=pl.col("ts").min())
    )


#: The feature service the user risk model is trained from (defined in the Feast repo).
FEATURE_SERVICE = "user_risk_v1"
#: Share of the window's days the model learns from; it is judged on the later rest.
TRAIN_SHARE = 0.7


class RetrievedFeatures(Protocol):
    """What a feature service gave for entity rows: the rows with its features, and how it is defined."""

    @property
    def frame(self) -> pl.DataFrame: ...
    @property
    def features(self) -> list[str]: ...
    @property
    def source_table(self) -> str: ...
    @property
    def ttl(self) -> dt.timedelta: ...


class Retrieve(Protocol):
    """Point-in-time features of entity rows from a feature service (the feature layer provides it)."""

    def __call__(self, settings: Settings, entity_rows: pl.DataFrame, service: str) -> RetrievedFeatures: ...


def training_set(
    lake: Lake, until: dt.date, days: int, retrieve: Retrieve, service: str = FEATURE_SERVICE
) -> TrainingSet:
    """Every user active on each day of the window, at the day's end, with the feature service's
    features as of that instant (point in time) and the label as of the window's end."""
    first = until - dt.timedelta(days=days - 1)
    active = (
        lake.read_frame(
            DWD_REQUEST,
            columns=["user_pseudonym", "event_date"],
            filters=[("event_date", ">=", first), ("event_date", "<=", until)],
        )
        .drop_nulls()
        .unique()
    )
    entity_rows = active.select(
        "user_pseudonym",
        event_timestamp=(pl.col("event_date").cast(pl.Datetime("us")) + pl.duration(days=1)).dt.replace_time_zone(
            "UTC"
        ),
    ).sort("event_timestamp", "user_pseudonym")
    if entity_rows.is_empty():
        raise NoData(f"no user was active between {first} and {until}: nothing to learn from")
    log.info(
        "training set %s..%s: %s (user, day) example(s), features of %s from Feast",
        first,
        until,
        f"{entity_rows.height:,}",
        service,
    )
    found = retrieve(lake.settings, entity_rows, service)
    end = dt.datetime.combine(until + dt.timedelta(days=1), dt.time(), dt.UTC)
    frame = (
        found.frame.with_columns(pl.col("event_timestamp").dt.convert_time_zone("UTC"))
        .join(labels(lake, end), on="user_pseudonym", how="left")
        .with_columns(label=pl.col("labelled_at").is_not_null().cast(pl.Int8))
    )
    return TrainingSet(
        frame.select("user_pseudonym", "event_timestamp", *found.features, "label"),
        "user_pseudonym",
        found.features,
        service,
        found.source_table,
        found.ttl,
    )


def train(settings: Settings, name: str, until: dt.date, retrieve: Retrieve, *, days: int = 7) -> ModelVersion:
    """Train ``name`` on the ``days`` ending with ``until``: the earlier days teach, the later judge."""
    data = training_set(Lake(settings), until, days, retrieve)
    first = until - dt.timedelta(days=days - 1)
    split_day = first + dt.timedelta(days=max(1, round(days * TRAIN_SHARE)))
    # The card names the days the data holds, not the window asked for (a week may start before its data).
    held = data.frame.get_column("event_timestamp").dt.date()  # each row at the end of its day
    lowest, highest = held.min(), held.max()
    assert isinstance(lowest, dt.date) and isinstance(highest, dt.date)  # training_set refuses an empty set
    window = (lowest - dt.timedelta(days=1), highest - dt.timedelta(days=1))
    return fit_and_register(
        settings, name, data, window=window, split_at=dt.datetime.combine(split_day, dt.time(), dt.UTC)
    )


def fit_and_register(
    settings: Settings, name: str, data: TrainingSet, *, split_at: dt.datetime, window: tuple[dt.date, dt.date]
) -> ModelVersion:
    """Fit on the examples before ``split_at``, judge on the rest, check parity, register."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    frame = data.frame.sort("event_timestamp")
    train = frame.filter(pl.col("event_timestamp") < split_at)
    test = frame.filter(pl.col("event_timestamp") >= split_at)
    for part, label in ((train, "training"), (test, "held-out")):
        if part.get_column("label").n_unique() < 2:
            raise NotEnoughLabels(
                f"the {label} split ({part.height} examples) lacks positives or negatives: "
                "widen the window (until) or wait for more reviews",
                argument="until",
            )
    x_train, x_test = (_matrix(part, data.features) for part in (train, test))
    pipeline = make_pipeline(
        SimpleImputer(strategy="median"), StandardScaler(), LogisticRegression(max_iter=2000, class_weight="balanced")
    )
    pipeline.fit(x_train, train.get_column("label").to_numpy())
    model = to_onnx(pipeline, len(data.features))
    gap = parity(pipeline, model, x_test)
    if gap > PARITY_TOLERANCE:
        raise ModelError(
            f"ONNX Runtime and scikit-learn disagree by {gap:.2e} on held-out rows "
            f"(tolerance {PARITY_TOLERANCE:.0e}); the model was not registered"
        )
    y_test = test.get_column("label").to_numpy()
    scores = pipeline.predict_proba(x_test)[:, 1]
    metrics = {
        "roc_auc": float(roc_auc_score(y_test, scores)),
        "parity_max_abs": gap,
        "train_examples": float(train.height),
        "test_examples": float(test.height),
        "test_positives": float(y_test.sum()),
    }
    card = new_card(
        name,
        [Feature(f, "float32") for f in data.features],
        feature_service=data.feature_service,
        entity=data.entity,
        window=window,
        metrics=metrics,
        threshold=_threshold(y_test, scores),
        source_table=data.source_table,
    )
    card = type(card)(**{**card.__dict__, "extra": {"accepts_missing": True, "ttl_seconds": data.ttl.total_seconds()}})
    registered = register(settings, card, model)
    log.info(
        "registered %s %s: %d features, ROC AUC %.3f on %d held-out example(s) (trained on %d), ONNX parity %.1e",
        name,
        registered.card.version,
        len(data.features),
        metrics["roc_auc"],
        test.height,
        train.height,
        gap,
    )
    return registered


def _matrix(frame: pl.DataFrame, features: list[str]) -> np.ndarray:
    return frame.select(pl.col(f).cast(pl.Float32) for f in features).to_numpy().astype(np.float32)


def _threshold(labels_: np.ndarray, scores: np.ndarray) -> float:
    """The alert threshold: the score that best balances precision and recall (max F1) on held-out rows."""
    from sklearn.metrics import precision_recall_curve

    precision, recall, thresholds = precision_recall_curve(labels_, scores)
    f1 = 2 * precision * recall / np.clip(precision + recall, 1e-12, None)
    return float(thresholds[int(np.argmax(f1[:-1]))]) if len(thresholds) else 0.5
