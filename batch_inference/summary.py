"""``ads.score_daily``: each day × model version's scores in one row — count, distribution,
the share above the model's alert threshold, and the drift against the previous day."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

import numpy as np
import polars as pl

from batch_inference.registry import get
from warehouse.settings import Settings
from warehouse.storage.lake import Lake
from warehouse.storage.publish import publish
from warehouse.tables import ADS_SCORE_DAILY, ADS_USER_RISK_SCORES

#: Equal-width bins of the population stability index.
PSI_BINS = 10


def psi(today: np.ndarray, before: np.ndarray) -> float | None:
    """Population stability index of two score samples in [0, 1] (None without a previous day)."""
    if not len(today) or not len(before):
        return None
    edges = np.linspace(0.0, 1.0, PSI_BINS + 1)
    share = [np.clip(np.histogram(s, edges)[0] / len(s), 1e-6, None) for s in (today, before)]
    return float(np.sum((share[0] - share[1]) * np.log(share[0] / share[1])))


def _scores(lake: Lake, day: dt.date, name: str, version: str) -> np.ndarray:
    return cast(
        np.ndarray,
        lake.read(
            ADS_USER_RISK_SCORES,
            columns=["score"],
            filters=[("event_date", "=", day), ("model_name", "=", name), ("model_version", "=", version)],
        )
        .column(0)
        .to_numpy(),
    )


def summarize(settings: Settings, day: dt.date, name: str, version: str) -> dict[str, Any]:
    """Write (replace) the day's summary row of one model version; returns it."""
    card = get(settings, name, version).card
    lake = Lake(settings)
    today = _scores(lake, day, name, version)
    before = _scores(lake, day - dt.timedelta(days=1), name, version)
    quantiles = np.quantile(today, [0.5, 0.9, 0.99]) if len(today) else [None] * 3
    row = {
        "event_date": day,
        "model_name": name,
        "model_version": version,
        "users_scored": len(today),
        "score_mean": float(today.mean()) if len(today) else None,
        "score_p50": quantiles[0],
        "score_p90": quantiles[1],
        "score_p99": quantiles[2],
        "alert_threshold": card.threshold,
        "share_above_threshold": float((today >= card.threshold).mean()) if len(today) else None,
        "drift_psi": psi(today, before),
    }
    publish(
        lake,
        ADS_SCORE_DAILY,
        pl.DataFrame(
            [row],
            schema_overrides={
                c: pl.Float64
                for c in ("score_mean", "score_p50", "score_p90", "score_p99", "share_above_threshold", "drift_psi")
            },
        ),
        partitions=[{"event_date": day, "model_name": name, "model_version": version}],
    )
    return row
