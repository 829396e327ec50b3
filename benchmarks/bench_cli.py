"""CLI start-up: ``strata --help`` against a bare ``python -c pass``, same interpreter, same run.

Every command a person or a scheduler runs pays the start-up first, so the library's heavy
imports (Feast, GX, dbt, Airflow, ONNX Runtime) must stay out of it. Each command runs
once to warm the bytecode cache, then alternately, and the median of each is compared.
Target: start-up within 25× the bare interpreter's (importing polars alone would break it).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import Measurement, scaled

RUNS = scaled(9, 1)


def _seconds(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True)
    return time.perf_counter() - started


def run(workdir: Path) -> list[Measurement]:
    help_cmd = [sys.executable, "-m", "strata.cli", "--help"]
    bare = [sys.executable, "-c", "pass"]
    _seconds(help_cmd), _seconds(bare)  # warm-up
    ours, base = [], []
    for _ in range(RUNS):
        ours.append(_seconds(help_cmd))
        base.append(_seconds(bare))
    return [
        Measurement(
            "strata --help, wall seconds (median)",
            statistics.median(ours),
            "s",
            "python -c pass",
            statistics.median(base),
            higher_is_better=False,
            target_ratio=0.04,
        )
    ]
