"""The operators' marts (capacity, cold starts, server drift, token anomalies, retry policy, trace
breakdown) against a generated week: every planted pattern is flagged with its entity and time, nothing
else is, and every numeric column equals an independent recomputation from DWD in polars."""

from __future__ import annotations

import polars as pl
import pytest

from tests.integration.test_ads import build_lake
from warehouse.settings import Settings
from warehouse.tables import DWD_REQUEST, table

#: A week at the smallest scale at which every planted pattern stands out (see docs/ads.md).
WEEK_DAYS = 7
WEEK_REQUESTS_PER_DAY = 40_000


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict]:
    """A generated week, landed, built through DWD and ADS; the settings and the generator's manifest."""
    return build_lake(
        tmp_path_factory.mktemp("home"),
        tmp_path_factory.mktemp("landing"),
        days=WEEK_DAYS,
        requests_per_day=WEEK_REQUESTS_PER_DAY,
        seed=5,
    )


def ads(settings: Settings, name: str) -> pl.DataFrame:
    return pl.read_delta(table(f"ads.{name}").uri(settings))


def dwd_requests(settings: Settings) -> pl.DataFrame:
    return pl.read_delta(DWD_REQUEST.uri(settings))
