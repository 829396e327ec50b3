"""The batch scorer on synthetic features: exact scores, idempotent re-runs, shards, and bad input refused."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from batch_inference.features import chunk_rows
from batch_inference.registry import Feature, ModelError, get, register
from batch_inference.scoring import score
from batch_inference.session import open_session
from batch_inference.summary import summarize
from benchmarks.synthetic import feature_rows, pseudonyms, request_rows
from strata.commands.models import app as models_app
from tests.small_model import feature_names, fit_user_risk
from warehouse.settings import Settings, load_settings
from warehouse.storage.duck import lake_reader
from warehouse.storage.lake import Lake
from warehouse.storage.publish import publish
from warehouse.tables import ADS_SCORE_DAILY, ADS_USER_RISK_SCORES, DWD_REQUEST, table

DAY = dt.date(2026, 3, 2)
USERS = 400


@pytest.fixture
def scored_lake(strata_env: Path) -> tuple[Settings, list[str]]:
    """Features of 400 users on DAY, 300 of them active (one with a token sum float32 only rounds), and a
    model trained on them."""
    settings = load_settings()
    source = table("dws.user_features")
    keys = pseudonyms(USERS, seed=1)
    features = feature_rows(source, keys, DAY, seed=2).with_columns(  # a heavy user: beyond float32's exact ints
        input_tokens_sum_7d=pl.when(pl.int_range(pl.len()) == 0).then(17_701_118).otherwise("input_tokens_sum_7d")
    )
    publish(Lake(settings), source, features, partitions=[{"event_date": DAY}], expectations=False)
    active = publish(
        Lake(settings),
        DWD_REQUEST,
        request_rows(keys.head(300), DAY),
        partitions=[{"event_date": DAY}],
        expectations=False,
    )
    assert active.rows_published == 300
    names = feature_names()
    abusive = pl.col(names[0]).rank() / USERS + pl.Series(np.random.default_rng(3).random(USERS)) > 1.0
    fit_user_risk(settings, features, abusive, (DAY, DAY))
    return settings, names


def _scores(settings: Settings) -> pl.DataFrame:
    return Lake(settings).read_frame(ADS_USER_RISK_SCORES).sort("user_pseudonym")


def test_scores_equal_the_session_on_the_same_rows_and_a_rerun_replaces(
    scored_lake: tuple[Settings, list[str]],
) -> None:
    settings, names = scored_lake
    report = score(settings, "user_risk", DAY, provider="cpu", batch_rows=64)
    written = _scores(settings)
    assert report.entities == written.height == 300 and report.provider == "CPUExecutionProvider"
    model = get(settings, "user_risk")
    assert set(written.get_column("model_sha256")) == {model.card.sha256}
    assert set(written.get_column("model_version")) == {"v1"}
    features = (
        Lake(settings)
        .read_frame(table("dws.user_features"))
        .filter(pl.col("user_pseudonym").is_in(written.get_column("user_pseudonym").implode()))
        .sort("user_pseudonym")
    )
    plain = open_session(model.onnx_bytes(), "cpu").run_plain(features.select(names).to_numpy().astype(np.float32))
    assert np.max(np.abs(written.get_column("score").to_numpy() - plain)) < 1e-6  # IO binding = InferenceSession.run
    score(settings, "user_risk", DAY, provider="cpu")
    assert _scores(settings).equals(written)  # replaced, never duplicated
    row = summarize(settings, DAY, "user_risk", "v1")
    assert row["users_scored"] == 300 and row["drift_psi"] is None
    assert Lake(settings).read_frame(ADS_SCORE_DAILY).height == 1


def test_two_shards_together_equal_the_unsharded_run(scored_lake: tuple[Settings, list[str]], tmp_path: Path) -> None:
    settings, _ = scored_lake
    score(settings, "user_risk", DAY, provider="cpu")
    whole = _scores(settings)
    for shard in ((1, 2), (0, 2)):  # each replaces only its buckets
        score(settings, "user_risk", DAY, shard=shard, provider="cpu")
    assert _scores(settings).equals(whole)
    lake_root = Path(ADS_USER_RISK_SCORES.uri(settings))
    assert len({p.parent.name for p in lake_root.rglob("*.parquet")}) == 16  # one folder per entity bucket


def test_a_day_of_many_users_scores_within_a_small_reader_memory(
    scored_lake: tuple[Settings, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pressure of a million users under 512MB, small: 16,000 users under 40MB, where one query over
    every entity at once runs out of memory: read a chunk of entities per query, every score is the same."""
    settings, names = scored_lake
    more = pseudonyms(16_000, seed=5)
    source = table("dws.user_features")
    publish(
        Lake(settings), source, feature_rows(source, more, DAY, seed=6), partitions=[{"event_date": DAY}], mode="append"
    )
    publish(Lake(settings), DWD_REQUEST, request_rows(more, DAY), partitions=[{"event_date": DAY}], mode="append")
    score(settings, "user_risk", DAY, provider="cpu")
    whole = _scores(settings)
    monkeypatch.setenv("STRATA_LAKE_READER_MEMORY", "40MB")
    small = load_settings()
    assert lake_reader(small).sql("SELECT current_setting('memory_limit')").fetchone() == ("38.1 MiB",)
    assert chunk_rows(small, source, names) < whole.height // 2  # several queries
    result = CliRunner().invoke(models_app, ["score", "--date", DAY.isoformat(), "--provider", "cpu"])
    assert result.exit_code == 0, result.output
    assert "scored 16,300 user(s)" in result.output
    assert _scores(settings).equals(whole)


def _unchanged(settings: Settings, before: int | None) -> None:
    assert Lake(settings).version(ADS_USER_RISK_SCORES) == before


def test_bad_models_and_inputs_stop_before_any_write(scored_lake: tuple[Settings, list[str]]) -> None:
    settings, _ = scored_lake
    model = get(settings, "user_risk")
    card, onnx = model.card, model.onnx_bytes()

    def variant(**changes: object) -> str:
        return register(settings, type(card)(**{**card.__dict__, **changes}), onnx).card.version

    cases = {
        "missing": (
            variant(features=(*card.features[:-1], Feature("logins_per_hour_7d", "float32"))),
            "logins_per_hour_7d",
        ),
        "unsafe dtype": (variant(features=(*card.features[:-1], Feature("event_date", "float32"))), "event_date"),
    }
    nan_version = variant(extra={"accepts_missing": False})
    before = Lake(settings).version(ADS_USER_RISK_SCORES)
    for version, needle in cases.values():
        with pytest.raises(ModelError, match=needle):
            score(settings, "user_risk", DAY, version=version, provider="cpu")
        _unchanged(settings, before)
    # An active user with no feature row in the TTL gets NaN, which this version cannot take.
    publish(
        Lake(settings),
        DWD_REQUEST,
        request_rows(pseudonyms(1, seed=99), DAY).with_columns(request_id=pl.lit("x")),
        partitions=[{"event_date": DAY}],
        expectations=False,
        mode="append",
    )
    with pytest.raises(ModelError, match="cannot take a missing value"):
        score(settings, "user_risk", DAY, version=nan_version, provider="cpu")
    _unchanged(settings, before)

    tampered = get(settings, "user_risk", "v1").onnx_path
    tampered.chmod(0o644)
    tampered.write_bytes(onnx[:-10] + b"0123456789")
    with pytest.raises(ModelError, match="sha256"):
        score(settings, "user_risk", DAY, version="v1", provider="cpu")
    corrupt = register(settings, card, b"not an onnx model at all").card.version
    with pytest.raises(ModelError, match="corrupt"):
        score(settings, "user_risk", DAY, version=corrupt, provider="cpu")
    _unchanged(settings, before)


def test_cuda_is_refused_when_the_session_would_run_on_the_cpu(scored_lake: tuple[Settings, list[str]]) -> None:
    settings, _ = scored_lake
    try:
        session = open_session(get(settings, "user_risk").onnx_bytes(), "auto")
    except ModelError:
        pytest.fail("auto must always find a provider")
    if session.provider == "CUDAExecutionProvider":
        pytest.skip("this machine has a working CUDA device")
    with pytest.raises(ModelError, match="CPUExecutionProvider"):
        score(settings, "user_risk", DAY, provider="cuda")


def test_registered_versions_are_immutable_and_listed(scored_lake: tuple[Settings, list[str]]) -> None:
    settings, _ = scored_lake
    first = get(settings, "user_risk", "v1")
    assert all(p.stat().st_mode & 0o222 == 0 for p in first.path.iterdir())  # read-only files
    again = register(settings, first.card, first.onnx_bytes())
    assert again.card.version == "v2" and get(settings, "user_risk").card.version == "v2"
    assert first.card.metrics["parity_max_abs"] <= 1e-5 and "roc_auc" in first.card.metrics
