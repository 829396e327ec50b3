"""A registered model of a lake's user features, for tests that need one without weeks of reviews to learn
from (training proper: tests/integration/test_training.py)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl

from batch_inference.training import TrainingSet, fit_and_register
from warehouse.settings import Settings
from warehouse.storage.lake import Lake
from warehouse.tables import table


def register_a_model(settings: Settings, first: dt.date, last: dt.date) -> None:
    """Fit ``user_risk`` on ``dws.user_features`` with every third row labelled abusive, and register it."""
    source = table("dws.user_features")
    frame = Lake(settings).read_frame(source)
    names = [c.name for c in source.contract.columns if c.name.endswith(("_1h", "_24h", "_7d"))]
    frame = frame.with_columns(
        event_timestamp=pl.col("feature_ts"), label=pl.Series(np.arange(frame.height) % 3 == 0).cast(pl.Int8)
    )
    split = frame.get_column("event_timestamp").sort()[frame.height // 2]
    fit_and_register(
        settings,
        "user_risk",
        TrainingSet(frame, "user_pseudonym", names, "user_risk_v1", source.name, dt.timedelta(days=8)),
        split_at=split,
        window=(first, last),
    )
