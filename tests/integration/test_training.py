"""Training from Feast on generator data: the model finds the abusers the generator planted.

The generator plants ~1.5% of its users as abusers and has reviewers mark some of their
requests ``abusive`` (late, like real feedback). The model learns only from those reviews,
through Feast's point-in-time training set; the manifest's list of planted users is used
to check the scores of the day after training, never to train. The scores reach the online
store beside the features, and `forget` removes them from both.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from batch_inference.registry import get, list_models
from strata import pipeline
from synthetic_workload import generate
from warehouse.errors import NoData
from warehouse.privacy import pseudonym
from warehouse.settings import load_settings
from warehouse.storage.lake import Lake
from warehouse.tables import ADS_USER_RISK_SCORES

START = dt.date(2026, 2, 2)
DAYS = 4  # three to train on, the fourth to score
#: Enough traffic for the population to hold at least ten planted abusers (one user per 40 requests, 1.5%).
REQUESTS_PER_DAY = 28_000


def test_a_model_trained_on_three_days_ranks_the_planted_abusers_of_the_fourth_online_too(
    strata_env: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manifest = generate(tmp_path / "generated", days=DAYS, requests_per_day=REQUESTS_PER_DAY, seed=21, start=START)
    settings = load_settings()
    pipeline.land(settings, [tmp_path / "generated"])
    days = [START + dt.timedelta(days=i) for i in range(DAYS)]
    for day in days:
        pipeline.build_dwd(settings, day)
        pipeline.build_dws(settings, day)

    # A window asked from the day before the data: the card names the data's days.
    with caplog.at_level(logging.INFO, logger="strata"):
        trained = pipeline.train(settings, days[2], days=4).detail
    card = trained.card
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("strata.")]
    assert f"train {days[2]}: started (days=4)" in logged
    assert any(
        m.startswith(f"registered user_risk {card.version}: {len(card.features)} features, ROC AUC ") for m in logged
    )
    assert any(m.startswith(f"train {days[2]}: done in ") and f"features={len(card.features)}" in m for m in logged)
    assert card.metrics["parity_max_abs"] <= 1e-5
    assert card.feature_service == "user_risk_v1" and card.training_window == (str(days[0]), str(days[2]))
    pipeline.score(settings, days[3], provider="cpu")

    scores = Lake(settings).read_frame(ADS_USER_RISK_SCORES, filters=[("event_date", "=", days[3])])
    # A day without requests is refused (a scheduled task skips it), not published empty.
    version = Lake(settings).version(ADS_USER_RISK_SCORES)
    with pytest.raises(NoData, match="no user_pseudonym was active on 2026-02-06: nothing to score"):
        pipeline.score(settings, days[3] + dt.timedelta(days=1), provider="cpu")
    assert Lake(settings).version(ADS_USER_RISK_SCORES) == version
    key = settings.require_pseudonym_key()
    planted = {pseudonym(key, user) for user in manifest["abusive_user_ids"]}
    assert len(planted) >= 10
    truth = scores.get_column("user_pseudonym").is_in(list(planted)).to_numpy()
    assert truth.sum() >= 5 and scores.height > 300
    auc = roc_auc_score(truth, scores.get_column("score").to_numpy())
    assert auc >= 0.9, f"ROC AUC {auc:.3f} over {scores.height} users ({int(truth.sum())} planted abusers)"
    assert np.isfinite(scores.get_column("score").to_numpy()).all()

    # The scores are online beside the user's features; forget removes them from the table and the store.
    user = next(u for u in manifest["abusive_user_ids"] if pseudonym(key, u) in set(scores["user_pseudonym"]))
    online = pipeline.get_online_features(settings, "user", user)
    mine = scores.filter(scores["user_pseudonym"] == pseudonym(key, user))
    assert online["score"] == pytest.approx(mine["score"][0]) and online["model_version"] == card.version
    assert online["request_count_7d"] is not None
    pipeline.forget(settings, user)
    assert (
        Lake(settings)
        .read_frame(ADS_USER_RISK_SCORES)
        .filter(Lake(settings).read_frame(ADS_USER_RISK_SCORES)["user_pseudonym"] == pseudonym(key, user))
        .is_empty()
    )
    assert all(v is None for v in pipeline.get_online_features(settings, "user", user).values())

    again = pipeline.train(settings, days[2], days=3).detail  # a re-train registers a new version
    assert again.card.version != card.version and get(settings, "user_risk", card.version).card == card
    assert [c.version for c in list_models(settings)] == [card.version, again.card.version]
