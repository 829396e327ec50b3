"""Shared fixtures: every test runs against its own temporary STRATA_HOME; the Postgres and Redis
servers (the machine's, or from the wheels) are shared by the whole run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import services

#: The repository root, and the test data shipped with the tests.
REPO = Path(__file__).resolve().parents[1]
TEST_DATA = REPO / "tests" / "data"
#: The full Azure LLM trace sample, when the shared data folder is beside the checkout.
AZURE_FULL = REPO.parent / "shared" / "data" / "azure_llm_2023_conv.csv"
AZURE_SAMPLE = TEST_DATA / "azure_llm_2023_conv_sample.csv"
SHIPPED_AZURE_MAPPING = REPO / "warehouse" / "sources" / "mappings" / "azure_llm_2023_conv.yaml"


@pytest.fixture
def strata_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh STRATA_HOME under tmp_path, with a test pseudonym key; returns the home."""
    home = tmp_path / "strata-home"
    monkeypatch.setenv("STRATA_HOME", str(home))
    monkeypatch.delenv("STRATA_LAKE_URI", raising=False)
    monkeypatch.delenv("STRATA_LANDING_DIR", raising=False)
    monkeypatch.delenv("AIRFLOW_HOME", raising=False)
    monkeypatch.setenv("STRATA_PSEUDONYM_KEY", "test-key-not-a-secret-0123456789")
    return home


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[services.Postgres]:
    """The run's Postgres: see ``tests.services.postgres_server``."""
    with services.postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[services.Redis]:
    """The run's Redis: see ``tests.services.redis_server``."""
    with services.redis_server() as server:
        yield server
