"""Shared fixtures: every test runs against its own temporary STRATA_HOME; the Postgres server (the
machine's, or from the wheel) is shared by the whole run, Redis by each pytest-xdist worker's tests.

``make test`` runs the tests in pytest-xdist workers (``-n``, with ``--dist loadscope`` from
pyproject.toml): a module's tests stay on one worker, so its module-scoped fixtures are built once
(docs/design.md, "The test suite").
"""

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


#: The modules that take longest, the longest first: a worker starts them first, so the rest of the
#: suite fills the other worker meanwhile instead of waiting for them at the end.
FIRST = (
    "test_dags_run.py",
    "test_benchmarks.py",
    "test_ads.py",
    "test_ads_operators.py",
    "test_demo.py",
    "test_forget_races.py",
    "test_races.py",
    "test_privacy.py",
    "test_crashes.py",
    "test_report.py",
    "test_sql_cli.py",
    "test_hostile_input.py",
    "test_features.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker, the modules of :data:`FIRST` first: the order the workers are handed
    their modules in (``--dist loadscope --no-loadscope-reorder``)."""
    if hasattr(config, "workerinput"):
        rank = {name: i for i, name in enumerate(FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))


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
def redis_server(worker_id: str) -> Iterator[services.Redis]:
    """The run's Redis (see ``tests.services.redis_server``); under pytest-xdist the first worker
    uses it and every other worker starts its own, since the tests pick fixed database numbers."""
    with services.redis_server(own=worker_id not in ("master", "gw0")) as server:
        yield server
