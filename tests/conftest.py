"""Shared fixtures: every test runs against its own temporary STRATA_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest

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
