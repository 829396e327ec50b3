"""A registered model of a lake's user features, for tests that need one without weeks of reviews to learn
from (training proper: tests/integration/test_training.py), and the card of a stand-in model."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

from batch_inference.registry import ModelCard
from batch_inference.training import TrainingSet, fit_and_register
from warehouse.settings import Settings
from warehouse.storage.lake import Lake
from warehouse.tables import table

#: The card of a model that is registered but never scored (its bytes need not be ONNX): for tests that need a
#: registered version, not its scores.
STAND_IN_CARD = ModelCard(
    name="user_risk",
    version="",
    features=(),
    feature_service="user_risk_v1",
    entity="user_pseudonym",
    training_window=("2026-01-01", "2026-01-06"),
    metrics={},
    sha256="",
    libraries={},
    threshold=0.5,
    created_at="2026-01-07T00:00:00Z",
)


def feature_names() -> list[str]:
    """The windowed features of ``dws.user_features``: what the models of these tests learn from."""
    return [c.name for c in table("dws.user_features").contract.columns if c.name.endswith(("_1h", "_24h", "_7d"))]


def fit_user_risk(
    settings: Settings, frame: pl.DataFrame, abusive: pl.Expr | pl.Series, window: tuple[dt.date, dt.date]
) -> None:
    """Fit ``user_risk`` on rows of ``dws.user_features`` labelled ``abusive``, split at their middle feature
    time, and register it as trained on ``window``."""
    frame = frame.with_columns(event_timestamp=pl.col("feature_ts"), label=abusive.cast(pl.Int8))
    split = frame.get_column("event_timestamp").sort()[frame.height // 2]
    fit_and_register(
        settings,
        "user_risk",
        TrainingSet(
            frame, "user_pseudonym", feature_names(), "user_risk_v1", "dws.user_features", dt.timedelta(days=8)
        ),
        split_at=split,
        window=window,
    )


def register_a_model(settings: Settings, first: dt.date, last: dt.date) -> None:
    """Fit ``user_risk`` on ``dws.user_features`` with every third row labelled abusive, and register it."""
    frame = Lake(settings).read_frame(table("dws.user_features"))
    fit_user_risk(settings, frame, pl.Series(np.arange(frame.height) % 3 == 0), (first, last))
