"""Every benchmark runs to the end at its smallest scale (``--scale 0``), so that none breaks unnoticed.

What is checked is that each one still takes every step and reports its measurements, not its ratios:
``make bench`` measures those, at full size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import discover
from tests.conftest import REPO
from tests.services import Redis


@pytest.mark.parametrize("name", [n.removeprefix("bench_") for n in discover(None)])
def test_the_benchmark_runs_to_the_end_at_the_smallest_scale(name: str, tmp_path: Path, redis_server: Redis) -> None:
    out = tmp_path / "results.json"
    env = {
        **os.environ,
        "STRATA_BENCH_CACHE": str(tmp_path / "cache"),  # ADS's lake: built here, not in the checkout's cache
        "STRATA_BENCH_REDIS_URL": redis_server.url,
    }
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.harness", "--scale", "0", "--out", str(out), name],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert results and {r["benchmark"] for r in results} == {f"bench_{name}"}
