"""`strata airflow up|down`: Airflow standalone with Strata's DAGs, on 127.0.0.1, as a user starts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.services import free_port


def _strata(home: Path, *args: str, key: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_HOME": str(home), "COLUMNS": "200"}
    env.pop("AIRFLOW_HOME", None)
    if key:
        env["STRATA_PSEUDONYM_KEY"] = "test-key-not-a-secret-0123456789"
    else:
        env.pop("STRATA_PSEUDONYM_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "strata.cli", "airflow", *args], env=env, capture_output=True, text=True, timeout=300
    )


def test_up_refuses_without_the_key_the_dags_need(tmp_path: Path) -> None:
    refused = _strata(tmp_path, "up", key=False)
    assert refused.returncode == 1 and "STRATA_PSEUDONYM_KEY" in refused.stderr
    assert not (tmp_path / "airflow" / "standalone.pid").exists()


@pytest.mark.slow
def test_up_starts_airflow_with_the_dags_unpaused_and_down_stops_every_process(tmp_path: Path) -> None:
    port = free_port()
    up = _strata(tmp_path, "up", "--port", str(port))
    pid = int((tmp_path / "airflow" / "standalone.pid").read_text())
    tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"http://127.0.0.1:{port}" in up.stdout and "password" in up.stdout
        passwords = json.loads((tmp_path / "airflow" / "simple_auth_manager_passwords.json.generated").read_text())
        assert passwords["admin"] in up.stdout  # printed once
        token_request = urllib.request.Request(
            f"http://127.0.0.1:{port}/auth/token",
            method="POST",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"username": "admin", "password": passwords["admin"]}).encode(),
        )
        with urllib.request.urlopen(token_request, timeout=30) as response:
            token = json.load(response)["access_token"]
        dags_request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v2/dags", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(dags_request, timeout=30) as response:
            dags = {d["dag_id"]: d["is_paused"] for d in json.load(response)["dags"]}
        assert dags == dict.fromkeys(["strata_daily", "strata_ingest", "strata_retention", "strata_train"], False)
        again = _strata(tmp_path, "up", "--port", str(port))
        assert "already running" in again.stdout and passwords["admin"] not in again.stdout
        tree += [c for c in psutil.Process(pid).children(recursive=True) if c not in tree]
    finally:
        down = _strata(tmp_path, "down")
    assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert "not running" in _strata(tmp_path, "down").stdout
