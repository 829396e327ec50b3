"""The demo behind `make demo`: the real DAGs through Airflow, self-checking, apart from a real lake.

(A rerun of the same dates leaving every table equal is tested on the DAGs themselves, in
tests/integration/test_dags_run.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from strata.demo import demo_settings
from warehouse.settings import load_settings


def _demo(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_HOME": str(home), "COLUMNS": "200"}
    env.pop("STRATA_PSEUDONYM_KEY", None)
    return subprocess.run([sys.executable, "-m", "strata.cli", "demo", "--days", "1", "--requests-per-day", "800",
                           *args], env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.timeout(1800)
def test_demo_runs_the_dags_end_to_end_and_prints_the_lake(tmp_path: Path) -> None:
    first = _demo(tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    out = first.stdout
    assert "✓ strata_ingest 2026-01-01" in out and "✓ strata_daily 2026-01-01" in out
    assert "= manifest" in out and "≠ manifest" not in out and "✗" not in out.split("3/3")[0]
    for title in ("tables", "quarantined rows by rule", "the books per day: ODS rows = DWD rows"):
        assert title in out
    assert "dwd.request" in out and "ops.books" in out
    # Every section or layer not built yet says so in one line, never a made-up table.
    for line in out.splitlines():
        if "not built yet" in line or "skipped" in line:
            assert len(line) < 200
    assert "strata airflow up" in out
    assert (tmp_path / "demo" / "secrets" / "pseudonym.key").stat().st_mode & 0o077 == 0
    assert (tmp_path / "demo" / "airflow" / "airflow.db").exists()  # Airflow's metadata, in the demo's corner
    assert not (tmp_path / "lake").exists()  # the demo keeps to its own corner


def test_the_demo_starts_its_corner_afresh_when_its_parameters_change(tmp_path: Path) -> None:
    said: list[str] = []
    settings = load_settings({"STRATA_HOME": str(tmp_path)})
    corner = demo_settings(settings, {"days": 1, "seed": 7}, said.append)
    assert corner.home == tmp_path / "demo" and corner.airflow_home == tmp_path / "demo" / "airflow"
    (corner.home / "lake").mkdir()
    demo_settings(settings, {"days": 1, "seed": 7}, said.append)
    assert (corner.home / "lake").exists() and said == []
    demo_settings(settings, {"days": 1, "seed": 99}, said.append)
    assert not (corner.home / "lake").exists() and "afresh" in said[0]
