"""Every benchmark runs to the end at its smallest scale (``--scale 0``), so that none breaks unnoticed.

What is checked is that each one still takes every step and reports its measurements, not its ratios:
``make bench`` measures those, at full size. The runs are mostly start-up (imports, servers, child
processes), so they run two at a time, the longest first: 60 s instead of 108 s on two cores. ADS, trace and
explain read one week's lake, built once (72 s for the module alone, 2026-12-08, against 88 s when each built its
own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks.harness import discover
from tests.conftest import REPO
from tests.services import Redis

NAMES = [n.removeprefix("bench_") for n in discover(None)]
#: The longest smoke runs, started first so that the rest fill the other core meanwhile.
LONGEST = ("features", "ods_dwd", "collect", "ads")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, redis_server: Redis) -> Iterator[dict[str, tuple[int, str, Path]]]:
    """Each benchmark's (exit code, the end of its output, its results file), run two at a time."""

    def run(name: str) -> tuple[str, tuple[int, str, Path]]:
        folder = folders[name]
        out = folder / "results.json"
        env = {
            **os.environ,
            # the week's lake of ADS, trace and explain: built once, here, not in the checkout's cache
            "STRATA_BENCH_CACHE": str(week_cache),
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
        return name, (done.returncode, done.stdout[-3000:] + done.stderr[-3000:], out)

    ordered = sorted(NAMES, key=lambda n: LONGEST.index(n) if n in LONGEST else len(LONGEST))
    # Made here, in one thread: the factory's first call creates this worker's base folder, and two
    # threads making it at once collide (FileExistsError on CI).
    folders = {name: tmp_path_factory.mktemp(f"bench-{name}") for name in ordered}
    week_cache = tmp_path_factory.mktemp("bench-week")
    with ThreadPoolExecutor(2) as pool:
        yield dict(pool.map(run, ordered))


@pytest.mark.parametrize("name", NAMES)
def test_the_benchmark_runs_to_the_end_at_the_smallest_scale(name: str, runs: dict[str, tuple[int, str, Path]]) -> None:
    code, said, out = runs[name]
    assert code == 0, said
    results = json.loads(out.read_text())["results"]
    assert results and {r["benchmark"] for r in results} == {f"bench_{name}"}
