"""The DWS transform on hand-written requests: windows, the rows written, every feature's definition."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

from warehouse.dws.transform import LARGE_WINDOW, MODEL, TENANT, USER, features, prepare, window_quantiles

DAY = dt.date(2026, 3, 10)
UTC = dt.UTC


def at(day: dt.date, hour: int, minute: int = 0, second: int = 0) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(hour, minute, second), UTC)


def requests(*rows: dict) -> pl.DataFrame:
    base = {
        "user_pseudonym": "u1",
        "tenant_id": "t1",
        "model": "m1",
        "model_version": "v1",
        "operation": "chat",
        "duration_ms": 100.0,
        "ttft_ms": 10.0,
        "input_tokens": 5,
        "output_tokens": 7,
        "cost_usd": 0.5,
        "cache_hit": False,
        "status_code": 200,
        "error_type": None,
        "is_error": False,
        "is_retry": False,
    }
    frame = pl.DataFrame(
        [base | r for r in rows],
        schema_overrides={
            "ts": pl.Datetime("us", "UTC"),
            "status_code": pl.Int32,
            "error_type": pl.String,
            "model_version": pl.String,
            "duration_ms": pl.Float64,
            "ttft_ms": pl.Float64,
            "input_tokens": pl.Int64,
            "output_tokens": pl.Int64,
            "cost_usd": pl.Float64,
            "cache_hit": pl.Boolean,
            "user_pseudonym": pl.String,
        },
    )
    return frame


def rows_of(frame: pl.DataFrame, entity=USER, days: tuple[dt.date, ...] = (DAY,)) -> pl.DataFrame:
    return pl.concat([features(prepare(frame, entity, d), entity, d) for d in days])


def test_a_request_enters_at_the_end_of_its_hour_and_leaves_each_window_in_turn() -> None:
    frame = requests({"ts": at(DAY, 10, 30)})
    days = tuple(DAY + dt.timedelta(days=i) for i in range(9))
    rows = rows_of(frame, days=days).select(
        "feature_ts", "request_count_1h", "request_count_24h", "request_count_7d", "error_rate_1h", "error_rate_7d"
    )
    assert rows.rows() == [
        (at(DAY, 11), 1, 1, 1, 0.0, 0.0),
        (at(DAY, 12), 0, 1, 1, None, 0.0),  # left the 1h window: its rates are null
        (at(DAY + dt.timedelta(days=1), 11), 0, 0, 1, None, 0.0),
        (at(DAY + dt.timedelta(days=7), 11), 0, 0, 0, None, None),  # every window empty: still a row
    ]


def test_windows_are_half_open_on_the_hour() -> None:
    frame = requests({"ts": at(DAY, 11)}, {"ts": at(DAY, 11, 59, 59)})
    rows = rows_of(frame)
    assert rows["feature_ts"].to_list() == [at(DAY, 12), at(DAY, 13)]
    assert rows["request_count_1h"].to_list() == [2, 0]


def test_a_window_never_looks_past_its_feature_ts() -> None:
    frame = requests({"ts": at(DAY, 10, 59, 59)}, {"ts": at(DAY, 11, 0, 0)})
    first = rows_of(frame).row(0, named=True)
    assert (first["feature_ts"], first["request_count_1h"]) == (at(DAY, 11), 1)


def test_a_request_of_the_day_before_last_hour_marks_the_first_row_of_the_day() -> None:
    frame = requests({"ts": at(DAY - dt.timedelta(days=8), 23, 30)})
    rows = rows_of(frame)
    assert rows.select("feature_ts", "request_count_7d").rows() == [(at(DAY, 0), 0)]


def test_shares_rates_and_sums() -> None:
    frame = requests(
        {"ts": at(DAY, 22, 0), "status_code": 504, "error_type": "timeout", "is_error": True, "cache_hit": True},
        {
            "ts": at(DAY, 22, 10),
            "status_code": 429,
            "error_type": "rate_limited",
            "is_error": True,
            "is_retry": True,
            "cache_hit": None,
            "input_tokens": None,
            "cost_usd": None,
        },
        {"ts": at(DAY, 22, 20), "status_code": 408, "is_error": True, "operation": "embeddings", "ttft_ms": 999.0},
        {"ts": at(DAY, 22, 30), "model": "m2", "duration_ms": None},
    )
    row = rows_of(frame, days=(DAY + dt.timedelta(days=1),)).row(0, named=True)
    assert row["feature_ts"] == at(DAY + dt.timedelta(days=1), 0)  # hour 23 of DAY enters at 00:00
    assert row["request_count_1h"] == 0 and row["request_count_24h"] == 4
    assert row["error_rate_24h"] == 0.75 and row["retry_rate_24h"] == 0.25
    assert row["timeout_share_24h"] == 0.5 and row["rate_limited_share_24h"] == 0.25
    assert row["cache_hit_rate_24h"] == pytest.approx(1 / 3)  # of the 3 requests that know
    assert row["input_tokens_mean_24h"] == 5.0 and row["input_tokens_sum_24h"] == 15
    assert row["cost_usd_sum_24h"] == pytest.approx(1.5)
    assert row["night_share_24h"] == 1.0 and row["distinct_models_24h"] == 2
    assert row["latency_p50_ms_24h"] == 100.0 and row["ttft_p95_ms_24h"] == 10.0  # chat only


def test_night_is_22_to_6_utc() -> None:
    frame = requests({"ts": at(DAY, 5, 59, 59)}, {"ts": at(DAY, 6, 0)}, {"ts": at(DAY, 21, 59)}, {"ts": at(DAY, 22)})
    row = rows_of(frame, days=(DAY + dt.timedelta(days=1),)).row(0, named=True)
    assert row["night_share_24h"] == 0.5


def test_model_key_and_entities() -> None:
    frame = requests(
        {"ts": at(DAY, 1), "model_version": None}, {"ts": at(DAY, 1), "user_pseudonym": None, "tenant_id": "t2"}
    )
    models = rows_of(frame, MODEL)
    assert set(models["model_key"]) == {"m1@unknown", "m1@v1"}
    assert set(models["model_version"]) == {"unknown", "v1"}
    assert rows_of(frame, USER)["request_count_1h"].to_list() == [1, 0]  # the request without a user is left out
    assert set(rows_of(frame, TENANT)["tenant_id"]) == {"t1", "t2"}


@pytest.mark.parametrize("size", [1, 2, 7, LARGE_WINDOW + 50])
def test_window_quantiles_equal_numpy(size: int) -> None:
    rng = np.random.default_rng(size)
    values = np.round(rng.lognormal(5, 1, 4 * size), 0)  # rounded: equal values are common
    a = np.array([0, size // 2, size, 2 * size, 3 * size, 4 * size])
    b = np.array([size, 2 * size, 3 * size, 3 * size + size // 2 + 1, 4 * size, 4 * size])
    qs = (0.5, 0.95)
    found = window_quantiles(values, a, b, qs)
    for i in range(len(a)):
        for q, got in zip(qs, found):
            window = values[a[i] : b[i]]
            if len(window):
                assert got[i] == pytest.approx(np.quantile(window, q), rel=1e-12)
            else:
                assert np.isnan(got[i])


def test_an_empty_input_gives_the_contract_columns() -> None:
    frame = requests({"ts": at(DAY - dt.timedelta(days=20), 1)})
    rows = rows_of(frame)
    assert rows.is_empty() and rows.columns == USER.target.contract.column_names
