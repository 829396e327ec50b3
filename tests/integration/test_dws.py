"""DWS features against a brute-force recomputation from dwd.request, row by row and at random instants."""

from __future__ import annotations

import bisect
import datetime as dt
import math
from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from strata import pipeline
from synthetic_workload import generate
from warehouse.dws import build as dws_build
from warehouse.dws.build import affected_days, build_entity
from warehouse.dws.transform import USER
from warehouse.settings import Settings, load_settings
from warehouse.storage.lake import Lake as Handle
from warehouse.storage.publish import republish
from warehouse.tables import DWD_REQUEST, table

START = dt.date(2026, 3, 2)
GENERATED = 2
#: Feature dates built: the generated days and the two after (requests enter, leave the 1h and 24h
#: windows), then the days their requests leave the 7-day window. The days between hold no change
#: (the test checks it), so the as-of row before them still holds.
BUILT = [START + dt.timedelta(days=i) for i in (0, 1, 2, 3, 7, 8, 9)]
SKIPPED = [START + dt.timedelta(days=i) for i in (4, 5, 6)]
HOUR = dt.timedelta(hours=1)
WINDOWS = {"1h": HOUR, "24h": 24 * HOUR, "7d": 7 * 24 * HOUR}
KEYS = {"dws.user_features": "user_pseudonym", "dws.tenant_features": "tenant_id", "dws.model_features": "model_key"}


@dataclass
class Lake:
    settings: Settings
    #: table name → entity key → its requests (dicts), sorted by ts.
    requests: dict[str, dict[str, list[dict]]]


def _requests_by_entity(settings: Settings) -> dict[str, dict[str, list[dict]]]:
    rows = (
        pl.read_delta(DWD_REQUEST.uri(settings))
        .filter(pl.col("model").is_not_null())  # features describe model calls, not an agent's tool steps
        .sort("ts")
        .with_columns(model_key=pl.col("model") + "@" + pl.col("model_version").fill_null("unknown"))
        .to_dicts()
    )
    out: dict[str, dict[str, list[dict]]] = {name: {} for name in KEYS}
    for row in rows:
        for name, key in KEYS.items():
            if row[key] is not None:
                out[name].setdefault(row[key], []).append(row)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Lake:
    home, landing = tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("landing")
    settings = load_settings({"STRATA_HOME": str(home), "STRATA_PSEUDONYM_KEY": "test-key-0123456789abcdef"})
    manifest = generate(landing, days=GENERATED, requests_per_day=600, seed=11, start=START, fault_rate=0.0)
    pipeline.land(settings, [landing / "requests", landing / "feedback"])
    pipeline.load_prices(settings, landing / "prices.csv")
    for day in manifest["days"]:
        pipeline.build_dwd(settings, dt.date.fromisoformat(day))
    for day in BUILT:
        pipeline.build_dws(settings, day)
    return Lake(settings, _requests_by_entity(settings))


# --- the brute force: plain Python over each window's requests ---------------------------------------------


def _span(requests: list[dict], start: dt.datetime, end: dt.datetime) -> tuple[int, int]:
    times = [r["ts"] for r in requests]
    return bisect.bisect_left(times, start), bisect.bisect_left(times, end)


def _quantile(values: list[float], q: float) -> float | None:
    return float(np.quantile(np.array(values), q)) if values else None  # numpy's default: linear


def direct(requests: list[dict], feature_ts: dt.datetime, window: str, distinct: bool) -> dict[str, object]:
    """The features of the requests with ts in [feature_ts - w, feature_ts)."""
    inside = [r for r in requests if feature_ts - WINDOWS[window] <= r["ts"] < feature_ts]
    n = len(inside)

    def share(flag: list[bool]) -> float | None:
        return sum(flag) / len(flag) if flag else None

    def mean(values: list) -> float | None:
        return sum(values) / len(values) if values else None

    known = lambda column: [r[column] for r in inside if r[column] is not None]  # noqa: E731
    out: dict[str, object] = {
        "request_count": n,
        "error_rate": share([r["is_error"] for r in inside]),
        "retry_rate": share([r["is_retry"] for r in inside]),
        "timeout_share": share([r["error_type"] == "timeout" or r["status_code"] in (408, 504) for r in inside]),
        "rate_limited_share": share([r["error_type"] == "rate_limited" or r["status_code"] == 429 for r in inside]),
        "latency_p50_ms": _quantile(known("duration_ms"), 0.5),
        "latency_p95_ms": _quantile(known("duration_ms"), 0.95),
        "ttft_p95_ms": _quantile(
            [r["ttft_ms"] for r in inside if r["operation"] == "chat" and r["ttft_ms"] is not None], 0.95
        ),
        "input_tokens_mean": mean(known("input_tokens")),
        "output_tokens_mean": mean(known("output_tokens")),
        "input_tokens_sum": sum(known("input_tokens")),
        "output_tokens_sum": sum(known("output_tokens")),
        "cost_usd_sum": sum(known("cost_usd")),
        "cache_hit_rate": share(known("cache_hit")),
        "night_share": share([r["ts"].hour >= 22 or r["ts"].hour < 6 for r in inside]),
    }
    if distinct:
        out["distinct_models"] = len({r["model"] for r in inside})
    return {f"{k}_{window}": v for k, v in out.items()}


def expected_row(requests: list[dict], feature_ts: dt.datetime, distinct: bool) -> dict[str, object]:
    row: dict[str, object] = {}
    for window in WINDOWS:
        row |= direct(requests, feature_ts, window, distinct)
    return row


def changed(requests: list[dict], feature_ts: dt.datetime) -> bool:
    """Whether any window ending at feature_ts holds other requests than the one ending an hour before."""
    return any(
        _span(requests, feature_ts - w, feature_ts) != _span(requests, feature_ts - HOUR - w, feature_ts - HOUR)
        for w in WINDOWS.values()
    )


def assert_same(found: dict[str, object], expected: dict[str, object], where: object) -> None:
    for column, want in expected.items():
        got = found[column]
        if want is None or got is None:
            assert got is None and want is None, (where, column, got, want)
        elif isinstance(want, float):
            assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9), (where, column, got, want)  # type: ignore[arg-type]
        else:
            assert got == want, (where, column, got, want)


def dws(settings: Settings, name: str) -> pl.DataFrame:
    return pl.read_delta(table(name).uri(settings))


def _hours(day: dt.date) -> list[dt.datetime]:
    start = dt.datetime.combine(day, dt.time(), dt.UTC)
    return [start + i * HOUR for i in range(24)]


def check_every_row(lake_: Lake, name: str, only: str | None = None) -> int:
    """Every row of ``name`` equals the brute force, and rows exist exactly where a window changed."""
    rows = dws(lake_.settings, name)
    key = KEYS[name]
    distinct = "distinct_models_1h" in rows.columns
    requests = lake_.requests[name]
    found = {(r[key], r["feature_ts"]): r for r in rows.to_dicts()}
    checked = 0
    for entity, mine in requests.items():
        if only is not None and entity != only:
            continue
        for day in BUILT + SKIPPED:
            for feature_ts in _hours(day):
                row = found.get((entity, feature_ts))
                if day in SKIPPED:
                    assert not changed(mine, feature_ts), (name, entity, feature_ts, "a change on a day not built")
                    continue
                assert (row is not None) == changed(mine, feature_ts), (name, entity, feature_ts)
                if row is not None:
                    assert row["event_date"] == feature_ts.date()
                    assert_same(row, expected_row(mine, feature_ts, distinct), (name, entity, feature_ts))
                    checked += 1
    if only is None:
        assert checked == rows.height  # no row of an entity without requests
    return checked


@pytest.mark.parametrize("name", list(KEYS))
def test_every_row_equals_the_brute_force(built: Lake, name: str) -> None:
    assert check_every_row(built, name) > 0


def test_the_model_key_joins_model_and_version(built: Lake) -> None:
    rows = dws(built.settings, "dws.model_features")
    # One key per model and version of dwd.request (a request without a version: "unknown").
    assert sorted(set(rows["model_key"])) == sorted(built.requests["dws.model_features"])
    assert len(built.requests["dws.model_features"]) > 1
    assert (rows["model"] + "@" + rows["model_version"]).to_list() == rows["model_key"].to_list()


def test_a_row_is_written_where_every_window_became_empty(built: Lake) -> None:
    rows = dws(built.settings, "dws.user_features")
    empty = rows.filter(pl.col("request_count_7d") == 0)
    assert empty.height and empty["error_rate_7d"].null_count() == empty.height
    assert (empty["cost_usd_sum_7d"] == 0).all() and (empty["distinct_models_7d"] == 0).all()
    # after its last row, no user keeps a stale 7-day count
    last = rows.sort("feature_ts").group_by("user_pseudonym").last()
    assert (last["request_count_7d"] == 0).all()


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_as_of_row_holds_the_windows_at_that_instant(built: Lake, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(list(KEYS)))
    key = KEYS[name]
    entities = sorted(built.requests[name])
    entity = data.draw(st.sampled_from(entities))
    start = dt.datetime.combine(START, dt.time(), dt.UTC)
    offset = data.draw(st.integers(0, 10 * 24 * 3600 * 10**6 - 1))
    instant = start + dt.timedelta(microseconds=offset)
    rows = _rows_of(built.settings, name, key, entity)
    before = rows.filter(pl.col("feature_ts") <= instant)
    hour = instant.replace(minute=0, second=0, microsecond=0)
    expected = expected_row(built.requests[name][entity], hour, "distinct_models_1h" in rows.columns)
    if before.is_empty():
        assert all(expected[f"request_count_{w}"] == 0 for w in WINDOWS), (entity, instant)
        return
    assert_same(before.sort("feature_ts").row(-1, named=True), expected, (name, entity, instant))


_CACHE: dict[tuple[str, str], pl.DataFrame] = {}


def _rows_of(settings: Settings, name: str, key: str, entity: str) -> pl.DataFrame:
    if (name, "all") not in _CACHE:
        _CACHE[(name, "all")] = dws(settings, name)
    return _CACHE[(name, "all")].filter(pl.col(key) == entity)


def test_a_rebuild_is_idempotent_and_picks_up_a_dwd_change(built: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    settings, day = built.settings, START + dt.timedelta(days=1)
    monkeypatch.setattr(dws_build, "BATCH_REQUESTS", 400)  # rebuilt in hash buckets, spilled to scratch files
    users = table("dws.user_features")
    before = dws(settings, users.name).filter(pl.col("event_date") == day).sort("user_pseudonym", "feature_ts")
    lake = Handle(settings)
    version = lake.version(users)
    build_entity(lake, USER, day)
    assert lake.version(users) == version + 1  # type: ignore[operator]
    again = dws(settings, users.name).filter(pl.col("event_date") == day).sort("user_pseudonym", "feature_ts")
    assert again.equals(before)

    # A late change of one user's requests of `day` (slower, and one fewer): rebuild day..day+8.
    user = before.sort("request_count_1h")["user_pseudonym"][-1]
    gone = next(r["request_id"] for r in built.requests[users.name][user] if r["ts"].date() == day)
    republish(
        lake,
        DWD_REQUEST,
        lambda f: f.filter(pl.col("request_id") != gone).with_columns(
            duration_ms=pl.when(pl.col("user_pseudonym") == user)
            .then(pl.col("duration_ms") * 3)
            .otherwise(pl.col("duration_ms"))
        ),
        partitions=[{"event_date": day}],
    )
    for d in affected_days(day):
        if d in BUILT:
            build_entity(lake, USER, d)
    built.requests = _requests_by_entity(settings)
    _CACHE.clear()
    after = dws(settings, users.name).filter(pl.col("user_pseudonym") == user)
    assert not after.filter(pl.col("event_date") == day).equals(before.filter(pl.col("user_pseudonym") == user))
    assert check_every_row(built, users.name, only=user) > 0
    assert not list((settings.home / "tmp").rglob("dws-*"))  # the scratch buckets are gone
