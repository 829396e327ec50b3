"""The demo behind `make demo`: end to end, self-checking, and kept apart from a real lake."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _demo(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRATA_HOME": str(home), "COLUMNS": "200"}
    env.pop("STRATA_PSEUDONYM_KEY", None)
    return subprocess.run([sys.executable, "-m", "strata.cli", "demo", "--days", "1", "--requests-per-day", "800",
                           *args], env=env, capture_output=True, text=True, timeout=300)


def test_demo_runs_end_to_end_and_reruns_idempotently(tmp_path: Path) -> None:
    first = _demo(tmp_path)
    assert first.returncode == 0, first.stderr
    assert "= manifest" in first.stdout and "≠ manifest" not in first.stdout
    assert (tmp_path / "demo" / "secrets" / "pseudonym.key").stat().st_mode & 0o077 == 0
    assert not (tmp_path / "lake").exists()  # the demo keeps to its own corner
    again = _demo(tmp_path)
    assert again.returncode == 0, again.stderr
    assert "landed 0 file(s)" in again.stdout and "= manifest" in again.stdout
    changed = _demo(tmp_path, "--seed", "99")
    assert changed.returncode == 0, changed.stderr
    assert "afresh" in changed.stdout and "≠ manifest" not in changed.stdout
